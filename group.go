package understudy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// GroupConfig is what Host.StartGroup needs to run this host's replica of
// one raft group. Exactly one way to start applies, chosen by what the
// host's storage holds for the group (as etcd does):
//
//   - it holds a member: it restarts as that member, and InitialMembers and
//     Join are ignored (ID must match, and ClusterID if set;
//     ForceNewCluster turns it into a new one-member cluster first);
//   - it holds none and InitialMembers is set: a new cluster, every initial
//     member a voter;
//   - it holds none and Join is set: it joins the cluster reachable at
//     those addresses, which must have added it first (AddLearner on any
//     member).
//
// StartGroup checks the configuration before it opens the group's
// storage, and refuses one that contradicts itself with
// raft.ErrInvalidConfig naming every problem: InitialMembers and Join
// both set, a negative size or duration, a bad address; and when the
// storage holds no member yet (a bootstrap), an initial member ID or
// PeerAddr listed twice, a list without ID, a ClusterID other than the one
// ClusterIDFor derives from InitialMembers and ClusterToken.
type GroupConfig struct {
	// GroupID is the raft group: the same on every host that runs a
	// replica of it. Default 1.
	GroupID uint64
	// ID is this host's replica (member) ID in the group: non-zero, unique
	// in the group, never reused.
	ID uint64
	// Metadata is this member's application metadata (e.g. its client
	// address), published through the log once it runs, so that every
	// member's Membership shows it.
	Metadata map[string]string

	// InitialMembers bootstraps a new cluster (see above). It must list ID.
	InitialMembers []raft.Member
	// ClusterToken distinguishes clusters with the same InitialMembers:
	// the cluster ID of a new cluster is derived from both (ClusterIDFor).
	ClusterToken string
	// Join lists peer addresses of an existing cluster (any member: leader,
	// follower or learner); the member learns the cluster ID and every
	// member's address from the first that answers.
	Join []string
	// JoinTimeout bounds how long a joiner waits for the cluster at Join to
	// answer (0: as long as the context allows); while it waits it logs
	// every few seconds what it waits for and through which addresses.
	JoinTimeout time.Duration
	// NotListedGrace is how long a joiner keeps asking while the members
	// that answer do not list it yet (its add may still be on its way)
	// before it gives up with raft.ErrNotMember. Default 5s; negative:
	// until JoinTimeout or the context ends (for an orchestrator that starts
	// members before adding them).
	NotListedGrace time.Duration
	// ClusterID, if set, is the only cluster this member accepts: a data
	// dir or a peer of another cluster is refused (ErrIdentityMismatch,
	// raft.ErrClusterMismatch).
	ClusterID uint64
	// ForceNewCluster turns the member in the data dir into the only voter
	// of a new cluster, keeping every entry of its log: the last resort
	// after the permanent loss of a quorum (see Config.ForceNewCluster).
	// Only with a data dir that holds a member.
	ForceNewCluster bool

	// Raft tunes the node; StartGroup sets its ID, InitialMembers,
	// ClusterID and Logger, and turns Quiesce on unless DisableQuiescence
	// is set, Relay on unless DisableRelay is set, and RelayAnswers on
	// with it unless DisableRelayAnswers is set.
	Raft raft.Config
	// DisableQuiescence keeps the group ticking and heartbeating while it
	// is idle. A host's groups quiesce by default (raft.Config.Quiesce; see
	// "Quiescence" in docs/architecture.md): an idle group stops ticking
	// and sending, and its host link's liveness vouches for its members,
	// so a host's idle cost does not grow with its groups. This is
	// CockroachDB's choice (its ranges always quiesce) rather than
	// dragonboat's (Config.Quiesce, off by default): a Host is the shape
	// with many groups, where idle cost matters, and every Host has the
	// host liveness quiescence reads. Quiescence needs raft's PreVote and
	// CheckQuorum: a Raft config that disables either must set this too
	// (StartGroup refuses it otherwise, raft.ErrInvalidConfig). Setting
	// both this and Raft.Quiesce is refused as a contradiction.
	DisableQuiescence bool
	// DisableRelay makes the leader send every standby (learner) its
	// appends and heartbeats itself. A host's groups relay by default
	// (raft.Config.Relay; see "Relayed standbys" in docs/architecture.md):
	// the leader sends each entry once per relay — a follower voter, or a
	// caught-up standby — which hands the leader's own appends on to its
	// standbys, so the leader's bytes per write do not grow with the
	// standbys; a standby whose relay is dead, cut off or slow is fed
	// directly again within about an election timeout. With no standbys it
	// changes nothing. Setting both this and Raft.Relay is refused as a
	// contradiction.
	DisableRelay bool
	// DisableRelayAnswers makes relayed standbys answer the leader
	// directly. A host's relaying groups take their standbys' answers
	// through the relay by default (raft.Config.RelayAnswers): the relay
	// gathers them for a few milliseconds and hands them on together, so
	// the leader reads about one frame a relay instead of one a standby
	// (with 24 standby processes, the leader's CPU a write 1.32x of none
	// against 1.56x answering directly, the same bytes:
	// benchmarks/README.md, "Session 18 figures"). Setting both this and
	// Raft.RelayAnswers is refused as a contradiction.
	DisableRelayAnswers bool
	// Storage tunes the group's view of the storage (its tail cache: a
	// host of many groups wants a smaller one per group).
	Storage storage.GroupOptions
	// Transport tunes the group's transport; StartGroup sets its ID,
	// ClusterID, GroupID, Mux, TLS, Handler, Snapshots and Logger.
	Transport transport.Config

	// advertise is the single-group Config's AdvertisePeer (Start): a
	// HostConfig.AdvertisePeer of its own.
	advertise string
	// single: the group of Start's one-group host.
	single bool
}

// Group is a running replica of a raft group on a host: its storage view,
// transport and node, started together by Host.StartGroup (or Start) and
// closed in order by Close. Every raft.Node method (Propose, Read,
// AddLearner, Membership, …) is available on it directly.
type Group struct {
	*raft.Node
	host   *Host
	ownsH  bool // Start's single-group host: Close closes it too
	gid    uint64
	store  *storage.Store
	tr     *transport.Transport
	log    *slog.Logger
	advert string

	closeOnce sync.Once
	closeErr  error
	// stopPub cancels publish; it is dropped once publish returns (nil:
	// nothing to stop), so that an idle group keeps nothing of it.
	stopPub atomic.Pointer[context.CancelFunc]
	pubDone sync.WaitGroup // publish running
}

// StartGroup opens the group's storage, builds its transport and node, and
// starts this host's replica: it restarts, bootstraps or joins as the
// storage says (see GroupConfig). Joining waits, within ctx, until a
// member at one of the Join addresses lists this member. A restarted member
// returns once it has replayed its log up to the commit index it had
// persisted, so that its stale reads never show less than that; when ctx
// ends first (a replay stuck in the state machine's Apply), StartGroup
// returns ctx's error at once and the node finishes stopping in the
// background (the group's storage stays open until it has). Host.Close
// makes a StartGroup under way return ErrHostClosed. On error nothing of
// the group stays open, and a group that recorded nothing (a refused
// configuration, a join nobody answered) leaves nothing in the data dir
// (Host.StoredGroups); the host runs on.
//
// Errors: ErrGroupRunning; ErrHostClosed; ErrRemoved; an error matching
// ErrIdentityMismatch (a *storage.IdentityError names both);
// raft.ErrNotMember and raft.ErrClusterMismatch when joining;
// ErrNoBootstrap; raft.ErrInvalidConfig and transport.ErrInvalidConfig; the
// storage's errors (storage.ErrCorrupt, storage.ErrFailed); ctx's error.
func (h *Host) StartGroup(ctx context.Context, cfg GroupConfig, sm raft.StateMachine) (g *Group, err error) {
	if cfg.GroupID == 0 {
		cfg.GroupID = 1
	}
	if cfg.advertise == "" {
		cfg.advertise = h.cfg.AdvertisePeer
	}
	if err := cfg.validate(h); err != nil {
		return nil, err
	}
	if sm == nil {
		return nil, fmt.Errorf("%w: nil StateMachine", raft.ErrInvalidConfig)
	}
	// Host.Close cancels the start (cause ErrHostClosed) and waits for it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := h.reserveStart(cfg.GroupID, cancel); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.release(cfg.GroupID, nil)
			if errors.Is(context.Cause(ctx), ErrHostClosed) && !errors.Is(err, ErrHostClosed) {
				err = fmt.Errorf("%w: %w", ErrHostClosed, err)
			}
		}
		h.endStart(cfg.GroupID) // last: Close waits for everything above
	}()
	logger := h.log
	if !cfg.single { // Start's one group logs as a single member always did
		logger = logger.With("group", cfg.GroupID)
	}
	dir := h.cfg.DataDir
	info, ierr := h.engine.GroupInfo(cfg.GroupID)
	existed := !errors.Is(ierr, storage.ErrNoGroup)
	if ierr == nil && !info.HasState && !info.Removed || !existed {
		// A bootstrap, if InitialMembers is set (a restart ignores them).
		if err := cfg.validateBootstrap(h); err != nil {
			return nil, err
		}
	}
	store, err := h.engine.Group(cfg.GroupID, cfg.Storage)
	if err != nil {
		if errors.Is(err, storage.ErrRemoved) {
			return nil, fmt.Errorf("%w: data dir %s: %w", ErrRemoved, dir, err)
		}
		return nil, err
	}
	var (
		tr   *transport.Transport
		node *raft.Node // started: the store stays open until it is done
	)
	defer func() {
		if err == nil || store == nil {
			return
		}
		if tr != nil {
			_ = tr.Close()
		}
		if node != nil {
			select {
			case <-node.Done():
			default:
				// A state machine that does not return holds the node:
				// it finishes stopping in the background.
				go func() { <-node.Done(); _ = store.Close() }()
				return
			}
		}
		_ = store.Close()
		if !existed {
			h.dropUnstarted(cfg.GroupID, logger)
		}
	}()
	stored, err := store.Identity()
	if err != nil {
		return nil, err
	}
	if stored.MemberID != 0 && (stored.MemberID != cfg.ID || (cfg.ClusterID != 0 && stored.ClusterID != 0 && stored.ClusterID != cfg.ClusterID)) {
		// Checked whatever else the data dir holds: a member's vote and log
		// must never start under another ID or in another cluster.
		want := storage.Identity{ClusterID: cfg.ClusterID, MemberID: cfg.ID}
		if want.ClusterID == 0 {
			want.ClusterID = stored.ClusterID
		}
		return nil, &storage.IdentityError{Stored: stored, Requested: want}
	}
	has, err := holdsMember(store)
	if err != nil {
		return nil, err
	}
	if stored.Incarnation == 0 {
		// This copy of the group's data gets its incarnation before it
		// presents itself to anyone: a new data dir (the node records the
		// rest of the identity), or one written before incarnations.
		stored.Incarnation = raft.NewIncarnation()
		if err := store.SetIdentity(stored); err != nil {
			return nil, err
		}
	}
	if cfg.ForceNewCluster {
		if !has {
			return nil, fmt.Errorf("%w: ForceNewCluster needs a data dir that holds a member; %s holds none", raft.ErrInvalidConfig, dir)
		}
		if err := forceNewCluster(store, cfg, h.listenAddr, logger); err != nil {
			return nil, err
		}
	}

	rcfg := cfg.raftConfig()
	rcfg.ID, rcfg.Logger, rcfg.ClusterID = cfg.ID, logger, cfg.ClusterID
	if rcfg.Scheduler == nil {
		rcfg.Scheduler = h.sched
	}
	if rcfg.ClusterID == 0 {
		rcfg.ClusterID = stored.ClusterID // 0 for an empty data dir
	}
	rcfg.InitialMembers = nil
	mode := "restart"
	var peers map[uint64]string // restart: the peers the storage knows
	var incs map[uint64]uint64  // and their incarnations
	var removed []uint64
	switch {
	case has:
		if len(cfg.InitialMembers) > 0 || len(cfg.Join) > 0 {
			logger.Info("the data dir holds a member: ignoring InitialMembers and Join", slog.String("dir", dir))
		}
		var ms map[uint64]raft.Member
		if ms, removed, err = raft.StoredMembers(store); err != nil {
			return nil, err
		}
		peers, incs = make(map[uint64]string, len(ms)), make(map[uint64]uint64, len(ms))
		for id, m := range ms {
			peers[id], incs[id] = m.PeerAddr, m.Incarnation
		}
	case len(cfg.InitialMembers) > 0:
		mode = "bootstrap"
		cfg.InitialMembers = pickedPort(cfg.InitialMembers, cfg.ID, h.mux.Addr())
		// Every initial member writes the same bootstrap entries: the list
		// as given (this member's metadata is published once it runs).
		// A data dir with only an identity is a bootstrap that stopped
		// before its first write: the node checks the derived cluster ID
		// against it.
		rcfg.InitialMembers = cfg.InitialMembers
		if cfg.ClusterID == 0 {
			rcfg.ClusterID = ClusterIDFor(cfg.InitialMembers, cfg.ClusterToken)
		}
	case len(cfg.Join) > 0:
		// Also a join that stopped after recording its identity but before
		// anything else: it joins again, in the cluster it recorded.
		mode = "join"
	default:
		return nil, ErrNoBootstrap
	}
	// A member whose storage knows no member at all, not even itself, is a
	// joiner that stopped before its first snapshot arrived (it may have
	// recorded a term or a vote): it learns its peers again from Join.
	rejoin := mode == "restart" && len(peers) == 0
	if rejoin && len(cfg.Join) == 0 {
		return nil, fmt.Errorf("%w: data dir %s holds member %d of cluster %x, whose join did not finish (it never received the cluster's state): start it again with Join",
			ErrNoBootstrap, dir, cfg.ID, rcfg.ClusterID)
	}

	// The transport listens before the node exists (a joiner discovers the
	// cluster through it first); until the node is made, what arrives is
	// dropped, as a lossy network would. A restarted member's peers (and
	// the members removed, refused as such) are known before the first
	// connection is accepted.
	hd := &lateHandler{}
	tcfg := cfg.Transport
	tcfg.ID, tcfg.ClusterID, tcfg.GroupID, tcfg.Mux = cfg.ID, rcfg.ClusterID, cfg.GroupID, h.mux
	tcfg.Listener, tcfg.ListenAddr = nil, ""
	tcfg.TLS, tcfg.Handler, tcfg.Snapshots = h.cfg.TLS, hd, store
	tcfg.Peers, tcfg.Removed, tcfg.PeerIncarnations = peers, removed, incs
	tcfg.Incarnation = stored.Incarnation
	if tcfg.Logger == nil {
		tcfg.Logger = logger
	}
	if tr, err = transport.New(tcfg); err != nil {
		return nil, err
	}
	if mode == "restart" && len(cfg.Join) > 0 && !rejoin {
		// The data dir holds a member and the host says which cluster it
		// means to be in: refuse a data dir of another one (the peers
		// there refuse this cluster ID). Unreachable peers prove nothing.
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, derr := raft.Discover(dctx, tr, cfg.Join, cfg.ID, rcfg.ClusterID)
		cancel()
		if errors.Is(derr, raft.ErrClusterMismatch) {
			return nil, fmt.Errorf("%w: data dir %s holds cluster %x, but the cluster at %v is another one: %w",
				ErrIdentityMismatch, dir, rcfg.ClusterID, cfg.Join, derr)
		}
	}
	if mode == "bootstrap" {
		// A replica whose data was lost must not bootstrap afresh: an
		// empty voter under its old ID would vote. Ask the initial
		// members first whether they know it as one that ran.
		if err := raft.CheckBootstrap(ctx, tr, cfg.InitialMembers, cfg.ID, rcfg.ClusterID, stored.Incarnation, bootstrapCheckTimeout); err != nil {
			return nil, fmt.Errorf("understudy: group %d, member %d, data dir %s: %w", cfg.GroupID, cfg.ID, dir, err)
		}
	}
	var joinPeers []raft.Member
	if mode == "join" || rejoin {
		jctx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.JoinTimeout > 0 {
			jctx, cancel = context.WithTimeout(ctx, cfg.JoinTimeout)
		}
		// A wiped replica that first joined restarts with its usual Join:
		// the members that know its published incarnation refuse it
		// (ErrAlreadyBootstrapped), the one asked and then every member
		// it lists — the one asked may not know it (yet).
		info, err := raft.DiscoverWith(jctx, tr, raft.DiscoverOptions{
			Addrs: cfg.Join, ID: cfg.ID, ClusterID: rcfg.ClusterID, Incarnation: stored.Incarnation,
			NotListedGrace: cfg.NotListedGrace, Logger: logger,
		})
		if err == nil {
			tr.SetClusterID(info.ClusterID)
			err = raft.CheckBootstrap(jctx, tr, info.Members, cfg.ID, info.ClusterID, stored.Incarnation, bootstrapCheckTimeout)
		}
		cancel()
		if err != nil {
			if errors.Is(err, raft.ErrClusterMismatch) && stored.ClusterID != 0 {
				return nil, fmt.Errorf("%w: data dir %s holds cluster %x, but the cluster at %v is another one: %w",
					ErrIdentityMismatch, dir, stored.ClusterID, cfg.Join, err)
			}
			return nil, fmt.Errorf("understudy: joining as member %d: %w", cfg.ID, err)
		}
		logger.Info("joining cluster", slog.String("cluster", fmt.Sprintf("%x", info.ClusterID)),
			slog.Uint64("answered_by", info.From), slog.Int("members", len(info.Members)), slog.Bool("again", rejoin || stored.MemberID != 0))
		rcfg.ClusterID = info.ClusterID
		tr.SetClusterID(info.ClusterID)
		joinPeers = info.Members
		for _, id := range info.Removed {
			tr.RemovePeer(id)
		}
	}
	advert, err := advertisedPeer(cfg, h.listenAddr, mode, peers, joinPeers)
	if err != nil {
		return nil, err
	}
	tr.SetAdvertiseAddr(advert) // peer hosts learn from it where this one is now
	// A replica that stops on its own (its state machine failed, it was
	// removed or wiped) leaves the host's links at once: its peers see the
	// group gone, not a member that never answers (a quiesced group's
	// followers wake on that refusal and elect another leader).
	userStopped := rcfg.OnStopped
	rcfg.OnStopped = func(err error) {
		if err != nil {
			_ = tr.Close()
		}
		if userStopped != nil {
			userStopped(err)
		}
	}
	n, err := raft.NewNode(rcfg, sm, store)
	if err != nil {
		return nil, err
	}
	hd.set(n)
	for _, m := range joinPeers {
		if m.ID != cfg.ID {
			tr.AddPeer(m.ID, m.PeerAddr)
		}
	}
	hs, _, err := store.InitialState()
	if err != nil {
		return nil, err
	}
	if err := n.Start(tr); err != nil {
		return nil, err
	}
	node = n
	if err := replayed(ctx, node, hs.GetCommit()); err != nil {
		// Stopped within what is left of ctx; a replay stuck in the state
		// machine is not waited for (the store is closed once it is done).
		_ = node.Stop(ctx)
		return nil, err
	}
	logger.Info("member started", slog.Uint64("id", cfg.ID), slog.String("mode", mode),
		slog.String("peer_addr", advert), slog.String("cluster", fmt.Sprintf("%x", node.ClusterID())))
	g = &Group{Node: node, host: h, gid: cfg.GroupID, store: store, tr: tr, log: logger, advert: advert}
	pctx, stopPub := context.WithCancel(context.Background())
	g.stopPub.Store(&stopPub)
	want := raft.Member{ID: cfg.ID, PeerAddr: advert, Metadata: maps.Clone(cfg.Metadata), Incarnation: node.Incarnation()}
	g.pubDone.Go(func() {
		defer g.endPublish()
		g.publish(pctx, want)
	})
	if !h.started(cfg.GroupID, g) {
		// Host.Close ran while the group started: g.close closes it all.
		_ = g.close(ctx, false)
		tr, node, store = nil, nil, nil
		return nil, ErrHostClosed
	}
	return g, nil
}

// bootstrapCheckTimeout bounds how long a bootstrap waits for its initial
// members' answers (raft.CheckBootstrap): those that do not answer in time
// are skipped.
const bootstrapCheckTimeout = 2 * time.Second

// dropUnstarted deletes the records of group id when they hold nothing
// (no member or cluster identity, no raft state): a start refused before
// it recorded anything — an invalid configuration, a bootstrap refused by
// its peers — leaves no group behind (Host.StoredGroups). An incarnation
// alone is nothing: the next start of an empty data dir makes a new one.
func (h *Host) dropUnstarted(id uint64, logger *slog.Logger) {
	info, err := h.engine.GroupInfo(id)
	if err != nil || info.HasState || info.Removed || info.Identity.MemberID != 0 || info.Identity.ClusterID != 0 {
		return
	}
	if err := h.engine.DeleteGroup(id); err != nil {
		logger.Warn("deleting the records of a group that did not start", slog.Any("err", err))
	}
}

// replayed waits, within ctx, until node has applied its log up to commit,
// the commit index it persisted before it stopped: a host serves its state
// (stale reads) only once it is at least what it had last recorded, not
// the empty or older state the replay starts from.
func replayed(ctx context.Context, node *raft.Node, commit uint64) error {
	if node.AppliedIndex() >= commit {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for node.AppliedIndex() < commit {
		select {
		case <-ctx.Done():
			return fmt.Errorf("replaying the log to index %d (applied %d): %w", commit, node.AppliedIndex(), ctx.Err())
		case <-node.Done():
			if err := node.Err(); err != nil {
				return err
			}
			return raft.ErrStopped
		case <-t.C:
		}
	}
	return nil
}

// publish makes this member's record in the log match its advertised
// address, metadata and incarnation, once the member has applied its own
// record (a joiner learns it as it catches up), retrying until it succeeds
// or the host closes. The incarnation, once recorded, is how every member
// tells this copy of the replica's data from another (a replica that lost
// its data and started afresh): see docs/architecture.md, "Wiped replicas".
func (h *Group) publish(ctx context.Context, want raft.Member) {
	wait := 200 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		cur, ok := h.Member(h.ID())
		if !ok {
			select {
			case <-h.Done():
				return // stopped before its record was applied
			default:
			}
			continue // not applied here yet
		}
		if cur.Incarnation != 0 && cur.Incarnation != want.Incarnation {
			return // another copy of this member: the node stops (raft.ErrReplicaWiped)
		}
		if cur.PeerAddr == want.PeerAddr && maps.Equal(cur.Metadata, want.Metadata) && cur.Incarnation == want.Incarnation {
			return
		}
		want.ReadOnly = cur.ReadOnly
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := h.UpdateMember(cctx, want)
		cancel()
		if err == nil {
			h.log.Info("published this member's address and metadata", slog.String("peer_addr", want.PeerAddr))
			return
		}
		if errors.Is(err, raft.ErrStopped) {
			// Stopped (Close also ends ctx). publish does not wait on Done:
			// each of a host's groups would make its channel for it.
			return
		}
		h.log.Debug("publishing this member's record failed; retrying", slog.Any("err", err))
		wait = min(2*wait, 5*time.Second)
	}
}

// endPublish stops publish, if it runs, and lets go of its context.
func (g *Group) endPublish() {
	if stop := g.stopPub.Swap(nil); stop != nil {
		(*stop)()
	}
}

// Close stops the replica and releases everything in order: the node (a
// leader hands leadership over first, bounded by ctx), then the transport
// (the host refuses the group's connections from then on), then the
// storage view once the node's goroutines have exited; the host runs on
// (Start's single-group host is closed too). It returns the node's fatal
// error, if any. If ctx ends before the node stopped, Close returns an
// error matching raft.ErrStopTimeout and the storage is closed in the
// background once the node is done. Close is idempotent.
func (g *Group) Close(ctx context.Context) error { return g.close(ctx, g.ownsH) }

func (g *Group) close(ctx context.Context, closeHost bool) error {
	g.closeOnce.Do(func() {
		g.endPublish()
		err := g.Stop(ctx)
		g.pubDone.Wait()
		_ = g.tr.Close()
		if errors.Is(err, raft.ErrStopTimeout) {
			go func() { <-g.Done(); _ = g.store.Close() }()
			g.closeErr = err
		} else {
			g.closeErr = errors.Join(err, g.store.Close())
		}
		g.host.release(g.gid, g)
	})
	if closeHost {
		if err := g.host.Close(ctx); err != nil && g.closeErr == nil {
			return err
		}
	}
	return g.closeErr
}

// GroupID returns the raft group this replica belongs to.
func (g *Group) GroupID() uint64 { return g.gid }

// Host returns the host the group runs on.
func (g *Group) Host() *Host { return g.host }

// Storage returns the group's storage (for metrics and backups).
func (g *Group) Storage() *storage.Store { return g.store }

// Transport returns the group's transport (for metrics).
func (g *Group) Transport() *transport.Transport { return g.tr }

// PeerAddr returns the address the other members dial to reach this one.
func (g *Group) PeerAddr() string { return g.advert }
