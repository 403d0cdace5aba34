package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/understudy-raft/understudy/confchange"
)

// Defaults applied by Config.WithDefaults to zero-valued fields.
const (
	DefaultTickInterval           = 100 * time.Millisecond
	DefaultElectionTicks          = 10
	DefaultHeartbeatTicks         = 1
	DefaultMaxSizePerMsg          = 1 << 20
	DefaultMaxInflightMsgs        = 256
	DefaultMaxInflightBytes       = 32 << 20
	DefaultMaxUncommittedSize     = 64 << 20
	DefaultMaxCommandSize         = 3 << 19 // 1.5 MiB, as etcd's --max-request-bytes
	DefaultSnapshotCount          = 10000
	DefaultSnapshotLogRatio       = 1.0
	DefaultSnapshotCatchUpEntries = 5000
	DefaultMaxPendingProposals    = 8192
	DefaultApplyQueueSize         = 64
	DefaultRelayFanout            = 12
)

// Config configures a Node. The zero value of every field but ID means "use
// the default"; WithDefaults fills them and Validate reports every problem.
type Config struct {
	// ID is this member's ID. Required, non-zero.
	ID uint64

	// InitialMembers bootstraps a new cluster when the storage is empty: every
	// listed member starts as a voter, and every initial member must be given
	// the same list. It must contain ID, and no ID or PeerAddr twice.
	// Ignored when the storage already
	// holds state (a restart). Leave it empty to join an existing cluster: the
	// node then waits, empty, for the leader to contact it (it must have been
	// added to the cluster first).
	InitialMembers []Member

	// ClusterID is the cluster this member belongs to, if the host knows it
	// (0: not checked). Start records the member ID, and ClusterID when set,
	// in a storage that keeps an identity (storage.Store does) and refuses a
	// storage that holds another member or another cluster with an error
	// matching ErrIdentityMismatch: two members with swapped data dirs would
	// each carry the other's vote.
	ClusterID uint64

	// TickInterval is the duration of one raft tick. Default 100ms.
	TickInterval time.Duration
	// ElectionTicks is the election timeout in ticks; it must be greater than
	// HeartbeatTicks (etcd suggests 10x). Default 10.
	ElectionTicks int
	// HeartbeatTicks is the heartbeat interval in ticks. Default 1.
	HeartbeatTicks int
	// DisablePreVote turns raft's PreVote off (it is on by default: a
	// partitioned member cannot disrupt the cluster when it comes back).
	DisablePreVote bool
	// DisableCheckQuorum turns CheckQuorum off (on by default: a leader that
	// cannot reach a quorum steps down).
	DisableCheckQuorum bool
	// Quiesce lets an idle group stop ticking and sending: a leader whose
	// group had nothing to do for a few ticks, with every member on a live
	// host (LivenessTransport) caught up, tells its followers, and the
	// group is silent until a proposal, a read, a membership call, a peer
	// message or a host's death wakes it (see "Quiescence" in
	// docs/architecture.md). Members on a host not live are left lagging,
	// as long as the others and the leader are a quorum and the policy can
	// say when it would act on them (confchange.Deadliner): its deadline,
	// or their host turning live again, wakes the leader. Readiness and failover read a quiesced
	// member's host liveness instead of its group's last contact. It needs
	// CheckQuorum and PreVote (Validate refuses it without them), and a
	// transport that reports host liveness (LivenessTransport; without
	// one a group never quiesces). Off by default for a raw Node, whose
	// transport is the caller's; understudy.Host turns it on for the
	// groups it runs (and understudy.Start for its one) unless their
	// GroupConfig.DisableQuiescence is set.
	Quiesce bool
	// Relay lets the leader feed its standbys (learners) through relays,
	// so that its bytes per write do not grow with their number: it sends
	// each entry once per relay — a follower voter, which receives the
	// entries anyway, or a caught-up standby — with each standby's append
	// header, and the relay hands each standby exactly the append the
	// leader built; the standbys answer through their relay when it takes
	// answers (AnswerRelayTransport), else directly. A standby whose
	// relay is silent, slow or unreachable is fed directly again within
	// about an election timeout. It needs a RelayTransport (without one
	// every message goes directly); every member takes relayed messages
	// whatever its own setting. See "Relayed standbys" in
	// docs/architecture.md. Off by default for a raw Node, whose
	// transport is the caller's; understudy.Host turns it on for the
	// groups it runs (and understudy.Start for its one) unless their
	// GroupConfig.DisableRelay is set. A relay envelope for a member whose
	// host speaks protocol version 3 (a release before relays) is dropped
	// and that member reported unreachable, so its standbys are fed
	// directly; one whose host speaks 4 takes envelopes but no answers.
	Relay bool
	// RelayAnswers lets this member, as a relay, take its standbys'
	// answers (MsgAppResp, MsgHeartbeatResp) and hand them on to the
	// leader gathered (see "Answers through the relay" in
	// docs/architecture.md), when its transport carries them
	// (AnswerRelayTransport). Off for a raw Node; understudy.Host turns it
	// on with Relay for the groups it runs (GroupConfig.DisableRelayAnswers
	// keeps it off): a relay gathers its standbys' answers for 5 ms and
	// hands them on together, and with 24 standby processes the leader's
	// CPU per write is 1.32x that of no standby against 1.56x with the
	// answers direct, at the same bytes (session 18). Every member steps
	// relayed answers whatever its own setting (the leader checks each
	// against its relays).
	RelayAnswers bool
	// RelayFanout is how many standbys one relay feeds at most (Relay).
	// Default 12: three voters' two followers feed 24 standbys, beyond
	// that caught-up standbys relay too. One exception: the standbys of a
	// relay that failed, when no relay has room and no standby keeps up
	// to be made one, go to a voter relay beyond it (up to twice), not to
	// the leader's direct sends, until another voter relay has room.
	RelayFanout int
	// InlineApply lets the run loop's worker apply small batches of
	// committed entries itself, right after the Ready that committed them,
	// when the apply task is idle: the apply task's turn is taken on the
	// loop's goroutine (still one at a time, in order), which saves the
	// hand-off to an apply worker and the loop's next run for the apply's
	// answer — about a third of a host's goroutine hand-offs per write at
	// 100 groups ("Hand-offs per round" in docs/architecture.md). Batches
	// over 32 entries or 32 KiB, conf changes, snapshot restores and
	// snapshots go to the apply workers as without it. Set it only for a
	// state machine whose Apply is quick and never blocks (an in-memory
	// map such as kv.Store): while it runs, the loop worker runs no other
	// group's loop, and an Apply that does not return holds the worker
	// for good. Off by default.
	InlineApply bool
	// OnStopped, if set, is called once the node is done, with the reason
	// it stopped (Err: nil after Stop, a *FatalError, ErrRemoved,
	// ErrReplicaWiped), on a goroutine of its own. A host uses it to close
	// the transport of a group that stopped on its own, so that its peers
	// see the group gone ("group not run") instead of a silent member.
	OnStopped func(err error)

	// MaxSizePerMsg bounds the bytes of entries in one append message.
	// Default 1 MiB.
	MaxSizePerMsg uint64
	// MaxInflightMsgs bounds the append messages in flight to one peer.
	// Default 256.
	MaxInflightMsgs int
	// MaxInflightBytes bounds the bytes of entries in flight to one peer.
	// Default 32 MiB.
	MaxInflightBytes uint64
	// MaxUncommittedEntriesSize bounds the bytes of uncommitted entries on the
	// leader; proposals beyond it fail with ErrProposalDropped. Default 64 MiB.
	MaxUncommittedEntriesSize uint64
	// MaxCommandSize bounds one command given to Propose (ErrTooLarge).
	// Default 1.5 MiB. Must not exceed MaxSizePerMsg by more than the entry
	// overhead, or a single command could never be replicated.
	MaxCommandSize int

	// SnapshotCount is the least number of entries applied between two of
	// the node's own snapshots. A snapshot (and a log compaction) is taken
	// once at least this many entries were applied since the last one AND
	// their bytes reach SnapshotLogRatio times the last snapshot's size. A
	// small state is snapshotted about every SnapshotCount entries, as etcd
	// does; a large one every "state's size" of writes (times the ratio), so
	// the snapshot work stays proportional to the bytes written and the log
	// kept is at most about the state's size (times the ratio). Lower it to
	// keep the log short when the state is small; Node.Snapshot takes one
	// on demand. Default 10,000.
	SnapshotCount uint64
	// SnapshotLogRatio is how many times the last snapshot's size the bytes
	// of the entries applied since must reach before the next snapshot
	// (with SnapshotCount). A snapshot writes the whole state, so at ratio
	// r it costs 1/r of the bytes the log took: a higher ratio takes fewer
	// snapshots of a large state, for a longer log (at most about r times
	// the state: the disk it takes and what a restart replays). Default 1;
	// between 0.01 and 100.
	SnapshotLogRatio float64
	// SnapshotCatchUpEntries is the number of entries kept in the log behind
	// a snapshot so that slow followers can catch up without one. Default
	// 5,000, or half of SnapshotCount when that is smaller.
	SnapshotCatchUpEntries uint64

	// RequestTimeout bounds how long a proposal, membership change or
	// leadership transfer that was handed to raft waits for its outcome,
	// whatever the caller's context: raft drops some messages silently, and
	// a caller with context.Background() must not wait for ever. Past it the
	// caller gets ErrTimeout (outcome unknown). Default 5s plus two election
	// timeouts (etcd's request timeout).
	RequestTimeout time.Duration

	// MaxClientSessions bounds the client sessions (RegisterClient) every
	// member keeps: a registration that finds this many expires the least
	// recently used — the one whose latest request is earliest in the log —
	// whose client then gets ErrSessionExpired. Registrations carry the value
	// of the member they were made through, so members configured
	// differently still keep the same sessions. Memory: at most 16 results
	// of at most MaxSessionResultSize bytes per session, for requests the
	// client has not acknowledged (RequestID.Acked): 64 MiB at worst with
	// the defaults, and at most 256 MiB (the product is checked). Default
	// 4096, at most 2^20.
	MaxClientSessions int
	// MaxSessionResultSize bounds the bytes of one request's result (value
	// and error message) a session keeps to answer a retry with; a retry of
	// a request with a larger result gets ErrDuplicateRequest (still applied
	// once). Carried by registrations like MaxClientSessions. Default 1 KiB,
	// at most 1 MiB.
	MaxSessionResultSize int

	// MaxPendingProposals bounds the proposals waiting for the run loop
	// (Propose blocks, within its context, beyond it). Default 8192.
	MaxPendingProposals int
	// ApplyQueueSize is kept for compatibility and no longer used: the
	// committed entries waiting to be applied are bounded by raft's flow
	// control (4 × MaxSizePerMsg in flight), and the run loop never waits
	// for the apply task.
	//
	// Deprecated: it has no effect.
	ApplyQueueSize int

	// Membership holds the membership rules' settings (target voter count,
	// maximum learners, readiness thresholds, failover and removal delays):
	// every membership change is checked against them and the policy uses
	// them. Zero fields are confchange's defaults; MaxLag defaults to a tenth
	// of this node's SnapshotCount, and MaxLearners, with Relay on, to
	// confchange.DefaultMaxLearnersRelayed (48; 2 without). They seed a new
	// cluster's replicated settings, which hold the values themselves:
	// changing this Config later changes nothing (use UpdateSettings).
	Membership confchange.Settings
	// Policy decides membership changes on its own on the leader (promote
	// ready learners, fail over to a standby, leave a joint configuration).
	// Default: confchange.DefaultPolicy with the Membership settings.
	Policy confchange.Policy
	// ManualMembership turns the policy off: only explicit calls change the
	// membership. (The leader still leaves a joint configuration on its own.)
	ManualMembership bool

	// Logger receives the node's logs (and etcd raft's, through an adapter).
	// Default: discard.
	Logger *slog.Logger

	// Scheduler runs the node's work on goroutines shared with other nodes
	// (a host's groups: see Scheduler). Default: the node's own, with one
	// goroutine of each kind.
	Scheduler *Scheduler
}

// WithDefaults returns a copy of c with every zero-valued field set to its default.
func (c Config) WithDefaults() Config {
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = DefaultMaxSizePerMsg
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = DefaultMaxInflightMsgs
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.MaxUncommittedEntriesSize == 0 {
		c.MaxUncommittedEntriesSize = DefaultMaxUncommittedSize
	}
	if c.MaxCommandSize == 0 {
		c.MaxCommandSize = DefaultMaxCommandSize
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = DefaultSnapshotCount
	}
	if c.SnapshotLogRatio == 0 {
		c.SnapshotLogRatio = DefaultSnapshotLogRatio
	}
	if c.SnapshotCatchUpEntries == 0 {
		// Scales down with a small SnapshotCount, so that any valid
		// SnapshotCount works with the default.
		c.SnapshotCatchUpEntries = min(DefaultSnapshotCatchUpEntries, max(c.SnapshotCount/2, 1))
	}
	if c.MaxPendingProposals == 0 {
		c.MaxPendingProposals = DefaultMaxPendingProposals
	}
	if c.MaxClientSessions == 0 {
		c.MaxClientSessions = DefaultMaxClientSessions
	}
	if c.MaxSessionResultSize == 0 {
		c.MaxSessionResultSize = DefaultMaxSessionResultSize
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5*time.Second + 2*time.Duration(c.ElectionTicks)*c.TickInterval
	}
	if c.ApplyQueueSize == 0 {
		c.ApplyQueueSize = DefaultApplyQueueSize
	}
	if c.RelayFanout == 0 {
		c.RelayFanout = DefaultRelayFanout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Membership.SnapshotCount == 0 {
		c.Membership.SnapshotCount = c.SnapshotCount
	}
	if c.Membership.MaxLearners == 0 && c.Relay {
		// Relayed standbys cost the leader little: room for a fleet.
		c.Membership.MaxLearners = confchange.DefaultMaxLearnersRelayed
	}
	c.Membership = c.Membership.WithDefaults()
	if c.Policy == nil {
		c.Policy = confchange.DefaultPolicy{Settings: c.Membership}
	}
	return c
}

// Validate reports every problem with c (after defaults), each naming the
// field and its value. It does not modify c. The error wraps ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.ID == 0 {
		bad("ID must be non-zero")
	}
	if c.TickInterval < 0 {
		bad("TickInterval (%s) must be positive", c.TickInterval)
	}
	if c.HeartbeatTicks < 0 {
		bad("HeartbeatTicks (%d) must be positive", c.HeartbeatTicks)
	}
	if c.ElectionTicks < 0 || (c.ElectionTicks > 0 && c.ElectionTicks <= c.HeartbeatTicks) {
		bad("ElectionTicks (%d) must be greater than HeartbeatTicks (%d)", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.MaxInflightMsgs < 0 {
		bad("MaxInflightMsgs (%d) must be positive", c.MaxInflightMsgs)
	}
	if c.MaxCommandSize < 0 {
		bad("MaxCommandSize (%d) must be positive", c.MaxCommandSize)
	}
	if c.MaxSizePerMsg > 0 && c.MaxCommandSize > 0 && uint64(c.MaxCommandSize) > c.MaxSizePerMsg*4 {
		bad("MaxCommandSize (%d) must be at most 4x MaxSizePerMsg (%d)", c.MaxCommandSize, c.MaxSizePerMsg)
	}
	if c.MaxInflightBytes > 0 && c.MaxSizePerMsg > 0 && c.MaxInflightBytes < c.MaxSizePerMsg {
		bad("MaxInflightBytes (%d) must be at least MaxSizePerMsg (%d)", c.MaxInflightBytes, c.MaxSizePerMsg)
	}
	if c.SnapshotLogRatio != 0 && !(c.SnapshotLogRatio >= 0.01 && c.SnapshotLogRatio <= 100) {
		bad("SnapshotLogRatio (%g) must be between 0.01 and 100", c.SnapshotLogRatio)
	}
	if c.SnapshotCount > 0 && c.SnapshotCatchUpEntries > c.SnapshotCount*10 {
		bad("SnapshotCatchUpEntries (%d) must be at most 10x SnapshotCount (%d)", c.SnapshotCatchUpEntries, c.SnapshotCount)
	}
	if c.RequestTimeout < 0 {
		bad("RequestTimeout (%s) must be positive", c.RequestTimeout)
	}
	if c.MaxPendingProposals < 0 {
		bad("MaxPendingProposals (%d) must be positive", c.MaxPendingProposals)
	}
	if c.MaxClientSessions < 0 || c.MaxClientSessions > maxClientSessionsLimit {
		bad("MaxClientSessions (%d) must be between 1 and %d", c.MaxClientSessions, maxClientSessionsLimit)
	}
	if c.MaxSessionResultSize < 0 || c.MaxSessionResultSize > maxSessionResultSizeLimit {
		bad("MaxSessionResultSize (%d) must be between 1 and %d", c.MaxSessionResultSize, maxSessionResultSizeLimit)
	}
	if kept := uint64(c.MaxClientSessions) * sessionResultsKept * uint64(c.MaxSessionResultSize); c.MaxClientSessions > 0 && c.MaxSessionResultSize > 0 && kept > maxSessionMemory {
		bad("MaxClientSessions (%d) x 16 results x MaxSessionResultSize (%d) must be at most %d MiB", c.MaxClientSessions, c.MaxSessionResultSize, maxSessionMemory>>20)
	}
	if c.RelayFanout < 0 {
		bad("RelayFanout (%d) must be positive", c.RelayFanout)
	}
	if c.ApplyQueueSize < 0 {
		bad("ApplyQueueSize (%d) must be positive", c.ApplyQueueSize)
	}
	if c.Quiesce && (c.DisableCheckQuorum || c.DisablePreVote) {
		bad("Quiesce needs CheckQuorum and PreVote (DisableCheckQuorum %t, DisablePreVote %t)", c.DisableCheckQuorum, c.DisablePreVote)
	}
	if err := c.Membership.Validate(); err != nil {
		bad("Membership: %w", err)
	}
	seen := make(map[uint64]bool)
	addrs := make(map[string]uint64)
	self := false
	for _, m := range c.InitialMembers {
		if other, ok := addrs[m.PeerAddr]; ok && m.PeerAddr != "" && other != m.ID {
			bad("InitialMembers: members %d and %d have the same PeerAddr %q", other, m.ID, m.PeerAddr)
		}
		addrs[m.PeerAddr] = m.ID
		if m.ID == 0 {
			bad("InitialMembers: member ID must be non-zero")
		}
		if seen[m.ID] {
			bad("InitialMembers: duplicate member ID %d", m.ID)
		}
		seen[m.ID] = true
		if m.ID == c.ID {
			self = true
		}
		if m.PeerAddr == "" {
			bad("InitialMembers: member %d has no PeerAddr", m.ID)
		} else if err := confchange.CheckPeerAddr(m.PeerAddr); err != nil {
			bad("InitialMembers: member %d: %v", m.ID, strings.TrimPrefix(err.Error(), confchange.ErrInvalidMember.Error()+": "))
		}
	}
	if len(c.InitialMembers) > 0 && !self {
		bad("InitialMembers must contain this member's ID (%d)", c.ID)
	}
	return errors.Join(errs...)
}
