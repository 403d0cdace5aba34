package raft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/understudy-raft/understudy/raft/raftio"
	"log/slog"
	"slices"
	"time"

	"github.com/understudy-raft/understudy/confchange"
)

// IdentityStore is the part of a Storage that keeps the identity of the
// member it belongs to (storage.Store implements it). When the node's
// Storage implements it, Start checks and records the identity.
type IdentityStore interface {
	Identity() (Identity, error)
	SetIdentity(Identity) error
}

// checkIdentity refuses a storage of another member or cluster, and records
// this member's identity in one that has none yet.
func (n *Node) checkIdentity() error {
	configured, _ := n.cfg.bootConfig()
	is, ok := n.store.(IdentityStore)
	if !ok {
		n.clusterID.Store(configured)
		return nil
	}
	stored, err := is.Identity()
	if err != nil {
		return fmt.Errorf("raft: reading the stored identity: %w", err)
	}
	want := Identity{ClusterID: configured, MemberID: n.cfg.ID, Incarnation: stored.Incarnation}
	if want.ClusterID == 0 {
		want.ClusterID = stored.ClusterID
	}
	if (stored.MemberID != 0 && stored.MemberID != want.MemberID) ||
		(stored.ClusterID != 0 && stored.ClusterID != want.ClusterID) {
		return &IdentityError{Stored: stored, Requested: want}
	}
	if want.Incarnation == 0 {
		// This copy of the member's data gets its incarnation: a new one,
		// or one written before incarnations existed.
		want.Incarnation = NewIncarnation()
	}
	if stored != want {
		if err := is.SetIdentity(want); err != nil {
			return fmt.Errorf("raft: recording the identity: %w", err)
		}
	}
	n.clusterID.Store(want.ClusterID)
	n.inc.Store(want.Incarnation)
	if s, ok := n.tr.(interface{ SetIncarnation(uint64) }); ok {
		s.SetIncarnation(want.Incarnation)
	}
	return nil
}

// NewIncarnation returns a random non-zero incarnation
// (Identity.Incarnation).
func NewIncarnation() uint64 {
	for {
		if inc := randomUint64(); inc != 0 {
			return inc
		}
	}
}

// Incarnation returns this replica's incarnation (Identity's), 0
// before Start or with a Storage that keeps no identity. The host
// publishes it through the log (UpdateMember) once the member runs.
func (n *Node) Incarnation() uint64 { return n.inc.Load() }

// ClusterID returns the cluster ID this member knows (Config.ClusterID, or
// the one its storage recorded), 0 if none.
func (n *Node) ClusterID() uint64 { return n.clusterID.Load() }

// ClusterInfo is what any member tells a joiner about its cluster
// (Discover): the cluster ID and the membership as that member applied it.
type ClusterInfo struct {
	// ClusterID is the cluster's ID.
	ClusterID uint64 `json:"cluster_id"`
	// From is the member that answered and Leader the leader it knows (0:
	// none).
	From   uint64 `json:"from"`
	Leader uint64 `json:"leader"`
	// Index is the log index the membership is current at.
	Index uint64 `json:"index"`
	// Config is the configuration (voters, learners).
	Config confchange.Config `json:"config"`
	// Members are the member records (peer address, metadata), by ID.
	Members []Member `json:"members"`
	// Removed are the IDs removed from the cluster (never reused).
	Removed []uint64 `json:"removed,omitempty"`
}

// Member returns the record of member id, if the configuration lists it.
func (ci ClusterInfo) Member(id uint64) (Member, bool) {
	if !ci.Config.Contains(id) {
		return Member{}, false
	}
	for _, m := range ci.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{ID: id}, true
}

// clusterInfo answers a joiner from the applied member table.
func (n *Node) clusterInfo() ClusterInfo {
	t := n.members.Load()
	return ClusterInfo{
		ClusterID: n.clusterID.Load(),
		From:      n.cfg.ID,
		Leader:    n.state.get().leader,
		Index:     t.index,
		Config:    confchange.ConfigFromConfState(t.confState),
		Members:   t.sorted(),
		Removed:   t.removedIDs(),
	}
}

// AddrCaller sends a member-to-member request to an address:
// transport.Transport's CallAddr.
type AddrCaller interface {
	CallAddr(ctx context.Context, addr string, req []byte) (*Reply, error)
}

// Discover asks the members at addrs (any member: leader, follower or
// learner) about their cluster, for member id that is about to join it
// with empty storage: DiscoverWith with the default options.
func Discover(ctx context.Context, tr AddrCaller, addrs []string, id, clusterID uint64) (ClusterInfo, error) {
	return DiscoverWith(ctx, tr, DiscoverOptions{Addrs: addrs, ID: id, ClusterID: clusterID})
}

// DiscoverOptions says whom DiscoverWith asks, for whom, and how long it
// waits out a cluster that does not list the joiner yet.
type DiscoverOptions struct {
	// Addrs are peer addresses of the cluster (any member).
	Addrs []string
	// ID is the joining member's ID.
	ID uint64
	// ClusterID is the cluster the joiner expects (0: any); the caller's
	// transport must have the same cluster ID (or 0).
	ClusterID uint64
	// Incarnation is the joiner's data's (Identity.Incarnation; 0: none
	// yet). A cluster that recorded another one for ID knows a copy of the
	// member that ran already: its data was lost, and DiscoverWith refuses
	// it (ErrAlreadyBootstrapped). A first join never published one.
	Incarnation uint64
	// NotListedGrace is how long members may answer that the cluster does
	// not list ID before DiscoverWith gives up with ErrNotMember: the add
	// may still be on its way to the member asked. Default 5s; negative:
	// until ctx ends (an orchestrator that starts members before adding
	// them).
	NotListedGrace time.Duration
	// Logger, if set, hears every LogEvery (default 5s) what the joiner
	// still waits for and through which addresses.
	Logger   *slog.Logger
	LogEvery time.Duration
}

// DefaultNotListedGrace is DiscoverOptions.NotListedGrace's default.
const DefaultNotListedGrace = 5 * time.Second

// DiscoverWith asks the members at o.Addrs about their cluster, for member
// o.ID that is about to join it with empty storage: the cluster ID and
// every member's record, so that the joiner can record its identity, reach
// its peers and start. It tries each address in turn, again and again
// within ctx, until one answers with a cluster that lists o.ID. The joiner
// must have been added first (Node.AddLearner): a cluster that does not
// list it is waited out for o.NotListedGrace, then refused.
//
// Errors: ErrNotMember when the cluster does not list o.ID (it was not
// added; answered for NotListedGrace, or until ctx ended); ErrRemoved when
// it was removed; ErrAlreadyBootstrapped when a member knows another copy
// of o.ID (it refuses o.Incarnation as wiped, or its record of o.ID holds
// another incarnation): the data of a member that ran was lost, and it
// must not join again under its ID; an error matching ErrClusterMismatch
// when the cluster is another one; ctx's error, with the last failure,
// when no address answered.
func DiscoverWith(ctx context.Context, tr AddrCaller, o DiscoverOptions) (ClusterInfo, error) {
	if len(o.Addrs) == 0 {
		return ClusterInfo{}, fmt.Errorf("%w: no peer address to join through", ErrInvalidRequest)
	}
	if o.NotListedGrace == 0 {
		o.NotListedGrace = DefaultNotListedGrace
	}
	if o.LogEvery <= 0 {
		o.LogEvery = 5 * time.Second
	}
	req, err := json.Marshal(rpcRequest{V: peerRPCVersion, Op: rpcDiscover})
	if err != nil {
		return ClusterInfo{}, err
	}
	var (
		last        error
		notListed   time.Time // when an answer first said the cluster does not list o.ID
		start       = time.Now()
		nextLog     = start.Add(o.LogEvery)
		attemptsNow int
	)
	for attempt := 0; ; attempt++ {
		for _, addr := range o.Addrs {
			info, err := discoverAt(ctx, tr, addr, req, o.ID, o.ClusterID, o.Incarnation)
			if err == nil {
				return info, nil
			}
			if errors.Is(err, ErrRemoved) || errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrAlreadyBootstrapped) {
				return ClusterInfo{}, err
			}
			if errors.Is(err, ErrNotMember) && notListed.IsZero() {
				notListed = time.Now()
			}
			last = err
			attemptsNow++
		}
		now := time.Now()
		if errors.Is(last, ErrNotMember) && o.NotListedGrace > 0 && now.Sub(notListed) >= o.NotListedGrace {
			return ClusterInfo{}, fmt.Errorf("%w (still not listed after %s)", last, o.NotListedGrace.Round(time.Millisecond))
		}
		if o.Logger != nil && !now.Before(nextLog) {
			what := "no member answered yet"
			if errors.Is(last, ErrNotMember) {
				what = "the cluster does not list this member yet (add it first, on any member)"
			}
			o.Logger.Warn("still waiting to join", slog.Uint64("id", o.ID), slog.String("waiting_for", what),
				slog.Any("through", o.Addrs), slog.Duration("for", now.Sub(start).Round(time.Second)),
				slog.Int("attempts", attemptsNow), slog.String("last", fmt.Sprint(last)))
			nextLog = now.Add(o.LogEvery)
		}
		t := time.NewTimer(min(100*time.Millisecond<<min(attempt, 4), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(last, ErrNotMember) {
				return ClusterInfo{}, fmt.Errorf("%w (still not listed when %w)", last, ctx.Err())
			}
			return ClusterInfo{}, fmt.Errorf("raft: joining through %v: %w (last: %v)", o.Addrs, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func discoverAt(ctx context.Context, tr AddrCaller, addr string, req []byte, id, clusterID, inc uint64) (ClusterInfo, error) {
	rep, err := tr.CallAddr(ctx, addr, req)
	switch {
	case errors.Is(err, raftio.ErrWiped):
		return ClusterInfo{}, alreadyBootstrapped(fmt.Sprintf("the member at %s", addr), "knows another copy of it", id, err)
	case errors.Is(err, ErrClusterMismatch):
		return ClusterInfo{}, fmt.Errorf("%w: the member at %s: %w", ErrClusterMismatch, addr, err)
	case errors.Is(err, raftio.ErrRemoved):
		return ClusterInfo{}, fmt.Errorf("%w: the member at %s knows member %d as removed", ErrRemoved, addr, id)
	case errors.Is(err, raftio.ErrUnknownSender):
		return ClusterInfo{}, fmt.Errorf("%w: the member at %s does not know member %d", ErrNotMember, addr, id)
	case err != nil:
		return ClusterInfo{}, fmt.Errorf("raft: asking %s: %w", addr, err)
	}
	if clusterID != 0 && rep.ClusterID != clusterID {
		return ClusterInfo{}, fmt.Errorf("%w: the member at %s belongs to cluster %x, not %x", ErrClusterMismatch, addr, rep.ClusterID, clusterID)
	}
	var resp rpcResponse
	if err := json.Unmarshal(rep.Payload, &resp); err != nil || resp.V != peerRPCVersion || resp.Cluster == nil {
		return ClusterInfo{}, fmt.Errorf("raft: malformed discovery answer from %s", addr)
	}
	info := *resp.Cluster
	if info.ClusterID == 0 {
		info.ClusterID = rep.ClusterID
	}
	if info.ClusterID == 0 || info.ClusterID != rep.ClusterID {
		return ClusterInfo{}, fmt.Errorf("raft: the member at %s has no cluster ID yet", addr)
	}
	if slices.Contains(info.Removed, id) {
		return ClusterInfo{}, fmt.Errorf("%w: cluster %x removed member %d", ErrRemoved, info.ClusterID, id)
	}
	rec, ok := info.Member(id)
	if !ok {
		return ClusterInfo{}, fmt.Errorf("%w: cluster %x (as member %d at %s applied it, index %d) does not list member %d",
			ErrNotMember, info.ClusterID, info.From, addr, info.Index, id)
	}
	if rec.Incarnation != 0 && rec.Incarnation != inc {
		return ClusterInfo{}, alreadyBootstrapped(fmt.Sprintf("member %d (at %s)", info.From, addr),
			fmt.Sprintf("knows it as a member that ran already (incarnation %x, as of index %d)", rec.Incarnation, info.Index), id, nil)
	}
	return info, nil
}

// alreadyBootstrapped is ErrAlreadyBootstrapped for member id: who knows
// it, why, and what to do instead; cause, if any, is wrapped too.
func alreadyBootstrapped(who, why string, id uint64, cause error) error {
	err := fmt.Errorf("%w: %s %s: member %d's data was lost (a replaced disk, a deleted group). Do not start it again under its ID: "+
		"remove member %d from the group and add a new member under a new ID as a learner, with an empty data dir and Join (it catches up, then is promoted)",
		ErrAlreadyBootstrapped, who, why, id, id)
	if cause != nil {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// CheckBootstrap asks the initial members at their addresses, all at once
// and each within timeout, whether they know member id, about to
// bootstrap from empty storage with incarnation inc (0: none yet), as a
// member that ran already — as etcd asks its peers before it bootstraps
// (isMemberBootstrapped). A member that ran published its incarnation
// through the log; one that knows another incarnation for id (or refuses
// id as wiped or removed) proves that id's data was lost, and
// bootstrapping it afresh would make an empty voter whose vote can elect a
// member that lacks acknowledged writes. It is best effort: a member that
// does not answer within timeout (down, unreachable, starting) is skipped
// — the incarnation check refuses such a replica's messages once its
// peers run (ErrReplicaWiped).
//
// Errors: ErrAlreadyBootstrapped, naming the member that knows and what to
// do instead.
func CheckBootstrap(ctx context.Context, tr AddrCaller, members []Member, id, clusterID, inc uint64, timeout time.Duration) error {
	req, err := json.Marshal(rpcRequest{V: peerRPCVersion, Op: rpcDiscover})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	found := make(chan error, len(members))
	asked := 0
	for _, m := range members {
		if m.ID == id || m.PeerAddr == "" {
			continue
		}
		asked++
		go func() { found <- bootstrappedAt(cctx, tr, m, req, id, clusterID, inc) }()
	}
	var errs []error
	for range asked {
		if err := <-found; err != nil {
			errs = append(errs, err)
			cancel() // one is enough
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// bootstrappedAt asks member m whether it knows member id as one that
// ran already (see CheckBootstrap); nil when it does not, or did not
// answer.
func bootstrappedAt(ctx context.Context, tr AddrCaller, m Member, req []byte, id, clusterID, inc uint64) error {
	refuse := func(why string) error {
		return alreadyBootstrapped(fmt.Sprintf("member %d (at %s)", m.ID, m.PeerAddr), why, id, nil)
	}
	rep, err := tr.CallAddr(ctx, m.PeerAddr, req)
	switch {
	case errors.Is(err, raftio.ErrWiped):
		return refuse("knows another copy of it")
	case errors.Is(err, raftio.ErrRemoved):
		return refuse("knows it as removed")
	case err != nil:
		return nil // not answering: best effort
	}
	if clusterID != 0 && rep.ClusterID != clusterID {
		return nil // another cluster at that address: not this check's business
	}
	var resp rpcResponse
	if err := json.Unmarshal(rep.Payload, &resp); err != nil || resp.V != peerRPCVersion || resp.Cluster == nil {
		return nil
	}
	info := *resp.Cluster
	if slices.Contains(info.Removed, id) {
		return refuse("knows it as removed")
	}
	if rec, ok := info.Member(id); ok && rec.Incarnation != 0 && rec.Incarnation != inc {
		return refuse(fmt.Sprintf("knows it as a member that ran already (incarnation %x, as of index %d)", rec.Incarnation, info.Index))
	}
	return nil
}
