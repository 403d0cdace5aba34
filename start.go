package understudy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

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
	// Logger, and turns Quiesce on unless DisableQuiescence is set and Relay
	// on unless DisableRelay is set.
	Raft raft.Config
	// DisableQuiescence keeps the group ticking and heartbeating while it
	// is idle (GroupConfig.DisableQuiescence). Start's group quiesces by
	// default, as every group a Host runs: Start is a Host with one group,
	// its host link carries the same liveness as a host of many, and one
	// default for both keeps a group's behaviour from depending on how its
	// process was started (moving from Start to a Host of many groups
	// changes nothing). One idle group costs little, but many small
	// clusters on shared machines add up, and an idle cluster that sends
	// nothing is easier to read. Quiescence needs raft's PreVote and
	// CheckQuorum: a Raft config that disables either must set this too
	// (Start refuses it otherwise, raft.ErrInvalidConfig).
	DisableQuiescence bool
	// DisableRelay makes the leader feed every standby itself
	// (GroupConfig.DisableRelay). Start's group relays by default, as every
	// group a Host runs.
	DisableRelay bool
	// DisableRelayAnswers makes relayed standbys answer the leader
	// directly (GroupConfig.DisableRelayAnswers).
	DisableRelayAnswers bool
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

// Start runs one member of one raft group: a Host with one group (NewHost,
// then StartGroup with GroupID storage.Options.GroupID, default 1), whose
// Close closes the host too. Its group quiesces while idle unless
// Config.DisableQuiescence, as a Host's groups do (see there why). It
// restarts, bootstraps or joins as the data dir says (see Config).
// Joining waits, within ctx, until a member at one of the Join addresses
// lists this member. A restarted member returns once
// it has replayed its log up to the commit index it had persisted, so that
// its stale reads never show less than that. On error nothing stays open,
// Config.Listener included.
//
// Errors: ErrRemoved; an error matching ErrIdentityMismatch (a
// *storage.IdentityError names both); raft.ErrNotMember and
// raft.ErrClusterMismatch when joining; ErrNoBootstrap; raft.ErrInvalidConfig
// and transport.ErrInvalidConfig; the storage's errors (storage.ErrLocked,
// storage.ErrCorrupt); ctx's error.
func Start(ctx context.Context, cfg Config, sm raft.StateMachine) (*Group, error) {
	if cfg.ID == 0 {
		return nil, fmt.Errorf("%w: ID must be non-zero", raft.ErrInvalidConfig)
	}
	so := cfg.Storage
	h, err := NewHost(HostConfig{
		DataDir: cfg.DataDir, ListenPeer: cfg.ListenPeer, Listener: cfg.Listener,
		TLS: cfg.TLS, Logger: cfg.Logger, LeaderBalance: LeaderBalance{Disabled: true}, // one group: nothing to spread
		MaxConcurrentSnapshots: cfg.Transport.MaxConcurrentSnapshots, SnapshotBytesPerSec: cfg.Transport.SnapshotBytesPerSec,
		Storage: storage.EngineOptions{NoSync: so.NoSync, Logger: so.Logger, LockTimeout: so.LockTimeout, NoOpenCheck: so.NoOpenCheck, Backend: so.Backend, NewBackend: so.NewBackend},
	})
	if err != nil {
		return nil, err
	}
	g, err := h.StartGroup(ctx, GroupConfig{
		GroupID: so.GroupID, ID: cfg.ID, Metadata: cfg.Metadata,
		InitialMembers: cfg.InitialMembers, ClusterToken: cfg.ClusterToken, Join: cfg.Join,
		JoinTimeout: cfg.JoinTimeout, NotListedGrace: cfg.NotListedGrace, ClusterID: cfg.ClusterID,
		ForceNewCluster: cfg.ForceNewCluster, Raft: cfg.Raft, DisableQuiescence: cfg.DisableQuiescence, DisableRelay: cfg.DisableRelay, DisableRelayAnswers: cfg.DisableRelayAnswers, Transport: cfg.Transport,
		Storage:   storage.GroupOptions{TailCacheBytes: so.TailCacheBytes, KeepSnapshots: so.KeepSnapshots},
		advertise: cfg.AdvertisePeer, single: true,
	}, sm)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Close(cctx)
		return nil, err
	}
	g.ownsH = true
	return g, nil
}
