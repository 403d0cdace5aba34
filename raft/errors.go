package raft

import (
	"errors"
	"fmt"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// Errors returned by the Node. They are sentinels: compare them with errors.Is.
var (
	// ErrStopped is returned by every call made after Stop, or after the node
	// stopped itself because of a fatal error (see Node.Err).
	ErrStopped = errors.New("raft: node stopped")

	// ErrStopTimeout is returned by Stop when its context ended before the
	// node's goroutines exited (a host callback that does not return): the
	// node finishes stopping in the background and closes Done then.
	ErrStopTimeout = errors.New("raft: stop did not finish in time")

	// ErrTimeout is returned to a caller whose proposal, membership change or
	// leadership transfer was handed to raft but had no outcome within
	// Config.RequestTimeout, whatever the caller's context (raft drops some
	// messages silently: a forwarded proposal the leader could not take, a
	// transfer it abandoned). The outcome is unknown, as for ErrLeaderChanged.
	ErrTimeout = errors.New("raft: no outcome in time, outcome unknown")

	// ErrDuplicateRequest is returned by ProposeWithID when a command with the
	// same request ID was applied before (by an earlier attempt) and its
	// result was too large for the session to keep
	// (Config.MaxSessionResultSize): it was not applied again. (A retry
	// whose result was kept is answered with that result.)
	ErrDuplicateRequest = errors.New("raft: request already applied")

	// ErrSessionExpired is returned by ProposeWithID for a request whose
	// client session cannot tell whether it was applied: the session expired
	// (Config.MaxClientSessions more recently used ones were registered), was
	// never registered (RegisterClient), or forgot that request (its Seq is
	// at or below one the client acknowledged, or more than 16 newer requests
	// of the session were applied). The request was not applied by this
	// attempt; an earlier attempt's outcome is unknown. Register a new
	// session for new requests.
	ErrSessionExpired = errors.New("raft: client session expired, outcome unknown")

	// ErrInvalidRequest is returned for a malformed argument (e.g. a zero
	// RequestID.Client, a transfer request without exactly one ID). It is
	// confchange's sentinel: one error per reason, library-wide.
	ErrInvalidRequest = confchange.ErrInvalidRequest

	// ErrNotStarted is returned by calls made before Start.
	ErrNotStarted = errors.New("raft: node not started")

	// ErrLeaderChanged is returned to a caller waiting for a proposal when the
	// term changed before the proposal was applied. The outcome is unknown: the
	// command may or may not be applied later: retry only what is idempotent
	// (or read first whether it took effect).
	ErrLeaderChanged = errors.New("raft: leader changed, outcome unknown")

	// ErrNotProposed is returned, joined with the context's error or
	// ErrStopped, when a call ended before its command was handed to raft
	// (e.g. while no leader was known): the command will never be applied,
	// and a retry is safe. Without it, a context error means "outcome
	// unknown".
	ErrNotProposed = errors.New("raft: not proposed, safe to retry")

	// ErrProposalDropped is returned when raft refused a proposal before it
	// was appended (a leadership transfer is in progress, or too many
	// uncommitted entries): the command was not applied, a retry is safe.
	ErrProposalDropped = errors.New("raft: proposal dropped")

	// ErrTooLarge is returned for a command larger than Config.MaxCommandSize.
	ErrTooLarge = errors.New("raft: command too large")

	// ErrNoLeader is the cause attached to a context deadline that expired
	// while no leader was known.
	ErrNoLeader = errors.New("raft: no leader")

	// ErrLearnerCannotLead is returned by TransferLeadership to a learner. It
	// is confchange's sentinel: one error per refusal reason, library-wide.
	ErrLearnerCannotLead = confchange.ErrLearnerCannotLead

	// ErrUnknownMember is returned for a member ID that is not in the
	// configuration (confchange's sentinel).
	ErrUnknownMember = confchange.ErrUnknownMember

	// ErrChangeDropped is returned by a membership change that raft refused
	// to append (it replaces a conf change it cannot take, e.g. while another
	// is pending, by an empty entry): nothing changed, a retry is safe.
	ErrChangeDropped = errors.New("raft: membership change dropped")

	// ErrRemoved is the error a node stops with when it learns that it was
	// removed from the cluster (it applied its removal, or a member refused
	// it as removed). The storage records it: the member cannot start again
	// from it (its ID is never reused; add a new member instead).
	ErrRemoved = errors.New("raft: this member was removed from the cluster")

	// ErrReplicaWiped is the error a node stops with when a peer refuses
	// it because the cluster recorded another incarnation for its member
	// ID (storage.Identity.Incarnation), or when it applies its own record
	// with another one: the data it runs from is not the data the cluster
	// knew — the replica's data was lost (a disk replaced, the group
	// deleted) and it started afresh, so it lacks what it acknowledged and
	// its votes must not count. Its data dir is not marked removed (it was
	// not). Remove the member and add it again under a new ID (a learner
	// first, promoted once caught up).
	ErrReplicaWiped = errors.New("raft: this replica's data was wiped: the cluster knows another copy of this member; remove the member and add it again under a new ID")

	// ErrAlreadyBootstrapped is returned by CheckBootstrap when an initial
	// member knows this member as one that ran already (it published its
	// incarnation, or the peer refuses it as wiped or removed): its data
	// was lost, and bootstrapping it afresh would let an empty voter vote.
	// Remove the member and add it again under a new ID instead.
	ErrAlreadyBootstrapped = errors.New("raft: member already bootstrapped: its data was lost; remove the member and add it again under a new ID")

	// ErrNotMember is returned when joining a cluster that does not list
	// this member (Discover): it must be added first (Node.AddLearner on a
	// member of the cluster), then started.
	ErrNotMember = errors.New("raft: not a member of the cluster")

	// ErrClusterMismatch is returned when a member belongs to another
	// cluster than the one expected (Discover). It is raftio's, which a
	// transport's refusal matches too (transport.ErrClusterMismatch).
	ErrClusterMismatch = raftio.ErrClusterMismatch

	// ErrIdentityMismatch is returned by Start for a storage that holds
	// another member or another cluster (an *IdentityError says which).
	// It is raftio's, as a storage's (storage.ErrIdentityMismatch).
	ErrIdentityMismatch = raftio.ErrIdentityMismatch

	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("raft: invalid config")

	// ErrCorruptEntry is returned (and stops the node) when a committed entry
	// cannot be decoded.
	ErrCorruptEntry = errors.New("raft: corrupt entry")

	// ErrCorruptSnapshot is returned (and stops the node) when a snapshot's
	// node header cannot be decoded.
	ErrCorruptSnapshot = errors.New("raft: corrupt snapshot")
)

// FatalError is the error a node stops with when it cannot go on safely: a
// failure to persist, a storage read that failed inside raft, a panic in the
// state machine. It unwraps to the cause. Op says where it happened.
type FatalError struct {
	Op  string
	Err error
}

func (e *FatalError) Error() string { return fmt.Sprintf("raft: fatal error in %s: %v", e.Op, e.Err) }

// Unwrap returns the cause.
func (e *FatalError) Unwrap() error { return e.Err }

// Identity is the cluster and member a storage belongs to, and the
// incarnation of its copy of the member's data (see IdentityStore).
type Identity = raftio.Identity

// IdentityError says which identity a storage holds and which was asked
// for; it matches ErrIdentityMismatch.
type IdentityError = raftio.IdentityError

// SnapshotProgress is how far a snapshot stream to a peer has come, as a
// transport that streams snapshots reports it.
type SnapshotProgress = raftio.SnapshotProgress

// Reply is a peer's answer to a call to an address (AddrCaller).
type Reply = raftio.Reply
