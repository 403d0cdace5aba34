package understudy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// Config is what Start needs to run one member. Exactly one way to start
// applies, chosen by what the data dir holds (as etcd does):
//
//   - the data dir holds a member: it restarts as that member, and
//     InitialMembers and Join are ignored (ID must match, and ClusterID if
//     set; ForceNewCluster turns it into a new one-member cluster first);
//   - it is empty and InitialMembers is set: a new cluster, every initial
//     member a voter;
//   - it is empty and Join is set: it joins the cluster reachable at those
//     addresses, which must have added it first (Host.AddLearner on any
//     member).
type Config struct {
	// ID is this member's ID: non-zero, unique in the cluster, never reused.
	ID uint64
	// DataDir is where the member keeps its log, snapshots and identity.
	DataDir string
	// ListenPeer is the host:port the member listens on for its peers
	// (raft messages, snapshots, member-to-member requests).
	ListenPeer string
	// Listener, if set, is used instead of listening on ListenPeer (its
	// address is then the default AdvertisePeer).
	Listener net.Listener
	// AdvertisePeer is the address this member is recorded with and the
	// other members dial, when it differs from where it listens (a proxy, a
	// NAT, a DNS name, a container). Default: the address the cluster
	// already knows this member by — its entry in InitialMembers, the
	// address it was added with (Join), its stored record (a restart) —
	// and only for a member with none the listen address. An unspecified
	// address (0.0.0.0, [::]) is never advertised: with ListenPeer
	// "0.0.0.0:7001" and no record, Start refuses and says to set this.
	// A restarted member given another AdvertisePeer than its record
	// updates its record through the log (moving a member).
	AdvertisePeer string
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
	// answer (0: as long as Start's context allows); while it waits it logs
	// every few seconds what it waits for and through which addresses.
	JoinTimeout time.Duration
	// NotListedGrace is how long a joiner keeps asking while the members
	// that answer do not list it yet (its add may still be on its way)
	// before Start gives up with raft.ErrNotMember. Default 5s; negative:
	// until JoinTimeout or the context ends (for an orchestrator that starts
	// members before adding them).
	NotListedGrace time.Duration
	// ClusterID, if set, is the only cluster this member accepts: a data
	// dir or a peer of another cluster is refused (ErrIdentityMismatch,
	// raft.ErrClusterMismatch).
	ClusterID uint64
	// ForceNewCluster turns the member in DataDir into the only voter of a
	// new cluster, keeping every entry of its log: the last resort after
	// the permanent loss of a quorum (see ForceNewCluster). Only with a
	// data dir that holds a member.
	ForceNewCluster bool

	// TLS secures every peer connection (transport.NewMutualTLS); nil: plain TCP.
	TLS *tls.Config
	// Logger receives the member's logs; nil discards them.
	Logger *slog.Logger

	// Raft tunes the node; Start sets its ID, InitialMembers, ClusterID and
	// Logger.
	Raft raft.Config
	// Storage tunes the storage (Logger defaults to Logger).
	Storage storage.Options
	// Transport tunes the transport; Start sets its ID, ClusterID,
	// addresses, TLS, Handler, Snapshots and Logger.
	Transport transport.Config
}

// Errors of Start beyond the parts' own.
var (
	// ErrNoBootstrap: the data dir is empty and neither InitialMembers nor
	// Join says how to start.
	ErrNoBootstrap = errors.New("understudy: empty data dir: set InitialMembers (a new cluster) or Join (an existing one)")
	// ErrRemoved: the data dir belongs to a member that was removed from its
	// cluster; it cannot start again (add a new member with a new ID).
	ErrRemoved = raft.ErrRemoved
	// ErrIdentityMismatch: the data dir holds another member or cluster.
	ErrIdentityMismatch = raft.ErrIdentityMismatch
)

// Host is one running member: its storage, transport and node, started
// together by Start and closed in order by Close. Every raft.Node method
// (Propose, Read, AddLearner, Membership, …) is available on it directly.
type Host struct {
	*raft.Node
	store  *storage.Store
	tr     *transport.Transport
	log    *slog.Logger
	advert string

	closeOnce sync.Once
	closeErr  error
	stopPub   context.CancelFunc
	pubDone   chan struct{}
}

// Start opens the data dir, builds the transport and the node, and starts
// the member: it restarts, bootstraps or joins as the data dir says (see
// Config). Joining waits, within ctx, until a member at one of the Join
// addresses lists this member. A restarted member returns once it has
// replayed its log up to the commit index it had persisted, so that its
// stale reads never show less than that. On error nothing stays open.
//
// Errors: ErrRemoved; an error matching ErrIdentityMismatch (a
// *storage.IdentityError names both); raft.ErrNotMember and
// raft.ErrClusterMismatch when joining; ErrNoBootstrap; raft.ErrInvalidConfig
// and transport.ErrInvalidConfig; the storage's errors (storage.ErrLocked,
// storage.ErrCorrupt); ctx's error.
func Start(ctx context.Context, cfg Config, sm raft.StateMachine) (h *Host, err error) {
	if cfg.ID == 0 {
		return nil, fmt.Errorf("%w: ID must be non-zero", raft.ErrInvalidConfig)
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: DataDir is required", raft.ErrInvalidConfig)
	}
	if cfg.Listener == nil && cfg.ListenPeer == "" {
		return nil, fmt.Errorf("%w: ListenPeer (or Listener) is required", raft.ErrInvalidConfig)
	}
	if cfg.AdvertisePeer != "" {
		if err := confchange.CheckPeerAddr(cfg.AdvertisePeer); err != nil {
			return nil, fmt.Errorf("%w: AdvertisePeer: %v", raft.ErrInvalidConfig, refusalDetail(err))
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sopts := cfg.Storage
	if sopts.Logger == nil {
		sopts.Logger = logger
	}
	store, err := storage.Open(cfg.DataDir, sopts)
	if err != nil {
		if errors.Is(err, storage.ErrRemoved) {
			return nil, fmt.Errorf("%w: data dir %s: %w", ErrRemoved, cfg.DataDir, err)
		}
		return nil, err
	}
	var (
		tr    *transport.Transport
		ln    = cfg.Listener
		ownLn bool
	)
	defer func() {
		if err != nil {
			if tr != nil {
				_ = tr.Close()
			} else if ownLn {
				_ = ln.Close()
			}
			_ = store.Close()
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
	if cfg.ForceNewCluster {
		if !has {
			return nil, fmt.Errorf("%w: ForceNewCluster needs a data dir that holds a member; %s holds none", raft.ErrInvalidConfig, cfg.DataDir)
		}
		if err := forceNewCluster(store, cfg, logger); err != nil {
			return nil, err
		}
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.ListenPeer); err != nil {
			return nil, fmt.Errorf("understudy: listening for peers: %w", err)
		}
		ownLn = true
	}

	rcfg := cfg.Raft
	rcfg.ID, rcfg.Logger, rcfg.ClusterID = cfg.ID, logger, cfg.ClusterID
	if rcfg.ClusterID == 0 {
		rcfg.ClusterID = stored.ClusterID // 0 for an empty data dir
	}
	rcfg.InitialMembers = nil
	mode := "restart"
	var peers map[uint64]string // restart: the peers the storage knows
	var removed []uint64
	switch {
	case has:
		if len(cfg.InitialMembers) > 0 || len(cfg.Join) > 0 {
			logger.Info("the data dir holds a member: ignoring InitialMembers and Join", slog.String("dir", cfg.DataDir))
		}
		if peers, removed, err = raft.StoredPeers(store); err != nil {
			return nil, err
		}
	case len(cfg.InitialMembers) > 0:
		mode = "bootstrap"
		cfg.InitialMembers = pickedPort(cfg.InitialMembers, cfg.ID, ln)
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
			ErrNoBootstrap, cfg.DataDir, cfg.ID, rcfg.ClusterID)
	}

	// The transport listens before the node exists (a joiner discovers the
	// cluster through it first); until the node is made, what arrives is
	// dropped, as a lossy network would. A restarted member's peers (and
	// the members removed, refused as such) are known before the first
	// connection is accepted.
	hd := &lateHandler{}
	tcfg := cfg.Transport
	tcfg.ID, tcfg.ClusterID, tcfg.Listener, tcfg.ListenAddr = cfg.ID, rcfg.ClusterID, ln, ""
	tcfg.TLS, tcfg.Handler, tcfg.Snapshots = cfg.TLS, hd, store
	tcfg.Peers, tcfg.Removed = peers, removed
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
				ErrIdentityMismatch, cfg.DataDir, rcfg.ClusterID, cfg.Join, derr)
		}
	}
	var joinPeers []raft.Member
	if mode == "join" || rejoin {
		jctx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.JoinTimeout > 0 {
			jctx, cancel = context.WithTimeout(ctx, cfg.JoinTimeout)
		}
		info, err := raft.DiscoverWith(jctx, tr, raft.DiscoverOptions{
			Addrs: cfg.Join, ID: cfg.ID, ClusterID: rcfg.ClusterID,
			NotListedGrace: cfg.NotListedGrace, Logger: logger,
		})
		cancel()
		if err != nil {
			if errors.Is(err, raft.ErrClusterMismatch) && stored.ClusterID != 0 {
				return nil, fmt.Errorf("%w: data dir %s holds cluster %x, but the cluster at %v is another one: %w",
					ErrIdentityMismatch, cfg.DataDir, stored.ClusterID, cfg.Join, err)
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
	advert, err := advertisedPeer(cfg, ln, mode, peers, joinPeers)
	if err != nil {
		return nil, err
	}
	node, err := raft.NewNode(rcfg, sm, store)
	if err != nil {
		return nil, err
	}
	hd.set(node.PeerHandler())
	for _, m := range joinPeers {
		if m.ID != cfg.ID {
			tr.AddPeer(m.ID, m.PeerAddr)
		}
	}
	hs, _, err := store.InitialState()
	if err != nil {
		return nil, err
	}
	if err := node.Start(tr); err != nil {
		return nil, err
	}
	if err := replayed(ctx, node, hs.GetCommit()); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Stop(sctx)
		<-node.Done()
		return nil, err
	}
	logger.Info("member started", slog.Uint64("id", cfg.ID), slog.String("mode", mode),
		slog.String("peer_addr", advert), slog.String("cluster", fmt.Sprintf("%x", node.ClusterID())))
	h = &Host{Node: node, store: store, tr: tr, log: logger, advert: advert, pubDone: make(chan struct{})}
	pctx, cancel := context.WithCancel(context.Background())
	h.stopPub = cancel
	go h.publish(pctx, raft.Member{ID: cfg.ID, PeerAddr: advert, Metadata: maps.Clone(cfg.Metadata)})
	return h, nil
}

// advertisedPeer is the address this member is recorded with and the others
// dial (Config.AdvertisePeer): the one given, else the one the cluster
// already knows it by — its entry in InitialMembers, the record it was
// added with (a joiner), or its stored record (a restart) — and only when
// none exists the listen address, unless that is unspecified (0.0.0.0, ::):
// a member that recorded one would be dialed by every other member at its
// own address. Where a member listens and where it is reached differ behind
// a proxy, a NAT or a DNS name, and in a container.
func advertisedPeer(cfg Config, ln net.Listener, mode string, stored map[uint64]string, joined []raft.Member) (string, error) {
	if cfg.AdvertisePeer != "" {
		return cfg.AdvertisePeer, nil
	}
	switch mode {
	case "bootstrap":
		for _, m := range cfg.InitialMembers {
			if m.ID == cfg.ID {
				return m.PeerAddr, nil
			}
		}
	case "join":
		for _, m := range joined {
			if m.ID == cfg.ID && m.PeerAddr != "" {
				return m.PeerAddr, nil
			}
		}
	}
	if addr, ok := stored[cfg.ID]; ok && confchange.CheckPeerAddr(addr) == nil {
		return addr, nil // (an unspecified one, recorded by older code, is replaced)
	}
	for _, m := range joined { // a restart that joined again
		if m.ID == cfg.ID && m.PeerAddr != "" {
			return m.PeerAddr, nil
		}
	}
	addr := cfg.ListenPeer
	if _, port, _ := net.SplitHostPort(addr); addr == "" || cfg.Listener != nil || port == "0" {
		addr = ln.Addr().String() // the port the system picked
	}
	if err := confchange.CheckPeerAddr(addr); err != nil {
		return "", fmt.Errorf("%w: no peer address to advertise: the listen address %s is unspecified: set AdvertisePeer to the address the other members reach this one at",
			raft.ErrInvalidConfig, addr)
	}
	return addr, nil
}

// pickedPort returns members with this member's port 0 ("any port", for a
// one-member cluster started on a free port) replaced by the port ln was
// given, so that the member is recorded with an address it is reached at.
func pickedPort(members []raft.Member, id uint64, ln net.Listener) []raft.Member {
	for i, m := range members {
		host, port, err := net.SplitHostPort(m.PeerAddr)
		if m.ID != id || err != nil || port != "0" {
			continue
		}
		_, lport, err := net.SplitHostPort(ln.Addr().String())
		if err != nil {
			return members
		}
		out := slices.Clone(members)
		out[i].PeerAddr = net.JoinHostPort(host, lport)
		return out
	}
	return members
}

// refusalDetail is a confchange refusal's detail without the sentinel's text.
func refusalDetail(err error) string {
	var r *confchange.Refusal
	if errors.As(err, &r) {
		return r.Detail
	}
	return err.Error()
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

// lateHandler is the transport's Handler until the node exists.
type lateHandler struct {
	mu sync.RWMutex
	h  raft.PeerHandler
}

func (l *lateHandler) set(h raft.PeerHandler) {
	l.mu.Lock()
	l.h = h
	l.mu.Unlock()
}

func (l *lateHandler) get() raft.PeerHandler {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.h
}

func (l *lateHandler) Process(m *raftpb.Message) {
	if h := l.get(); h != nil {
		h.Process(m)
	}
}

func (l *lateHandler) ReportUnreachable(id uint64) {
	if h := l.get(); h != nil {
		h.ReportUnreachable(id)
	}
}

func (l *lateHandler) ReportSnapshot(id uint64, st etcdraft.SnapshotStatus) {
	if h := l.get(); h != nil {
		h.ReportSnapshot(id, st)
	}
}

func (l *lateHandler) ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	if h := l.get(); h != nil {
		return h.ServeRequest(ctx, from, req)
	}
	return nil, errors.New("understudy: member starting")
}

func (l *lateHandler) ReportRefused(id uint64, err error) {
	if h := l.get(); h != nil {
		h.ReportRefused(id, err)
	}
}

// publish makes this member's record in the log match its advertised
// address and metadata, once the member has applied its own record (a
// joiner learns it as it catches up), retrying until it succeeds or the
// host closes.
func (h *Host) publish(ctx context.Context, want raft.Member) {
	defer close(h.pubDone)
	wait := 200 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.Done():
			return
		case <-time.After(wait):
		}
		cur, ok := h.Member(h.ID())
		if !ok {
			continue // not applied here yet
		}
		if cur.PeerAddr == want.PeerAddr && maps.Equal(cur.Metadata, want.Metadata) {
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
		h.log.Debug("publishing this member's record failed; retrying", slog.Any("err", err))
		wait = min(2*wait, 5*time.Second)
	}
}

// Close stops the member and releases everything in order: the node
// (a leader hands leadership over first, bounded by ctx), then the transport,
// then the storage once the node's goroutines have exited. It returns the
// node's fatal error, if any. If ctx ends before the node stopped, Close
// returns an error matching raft.ErrStopTimeout and the storage is closed in
// the background once the node is done. Close is idempotent.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.stopPub()
		err := h.Stop(ctx)
		<-h.pubDone
		_ = h.tr.Close()
		if errors.Is(err, raft.ErrStopTimeout) {
			go func() { <-h.Done(); _ = h.store.Close() }()
			h.closeErr = err
			return
		}
		h.closeErr = errors.Join(err, h.store.Close())
	})
	return h.closeErr
}

// Storage returns the member's storage (for metrics and backups).
func (h *Host) Storage() *storage.Store { return h.store }

// Transport returns the member's transport (for metrics).
func (h *Host) Transport() *transport.Transport { return h.tr }

// PeerAddr returns the address the other members dial to reach this one.
func (h *Host) PeerAddr() string { return h.advert }
