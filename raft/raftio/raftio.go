// Package raftio holds what package raft shares with the storage and the
// transport it runs on: a member's identity as its data dir records it,
// a snapshot stream's progress, a peer's reply to a call, and the errors
// raft tells apart when a peer refuses it. It imports nothing of
// understudy's, so that raft imports neither storage nor transport (as
// dragonboat's raftio), and a host may bring its own storage or transport:
// it implements raft.Storage and raft.Transport with these types.
//
// Package raft re-exports each name (raft.Identity is raftio.Identity);
// packages storage and transport use them for their records and errors
// (storage.Identity and transport.ErrRemoved are the same as these).
package raftio

import (
	"errors"
	"fmt"
)

// Identity is the cluster and member a data dir belongs to.
type Identity struct {
	ClusterID, MemberID uint64
	// Incarnation identifies this copy of the member's data: a random
	// non-zero number made once, when the data dir first holds the group
	// (or, for a data dir written before incarnations existed, when it is
	// first opened by a member). A replica whose data was lost and that
	// starts afresh under the same member ID gets a new one, which is how
	// its peers tell it apart from the replica they knew. 0: none yet.
	Incarnation uint64
}

// ErrIdentityMismatch is matched by the error of recording an identity
// when a different cluster or member ID (or incarnation) is already
// recorded. The *IdentityError says which.
var ErrIdentityMismatch = errors.New("storage: identity mismatch")

// IdentityError is returned when the recorded identity differs from the
// one being set. It unwraps to ErrIdentityMismatch.
type IdentityError struct {
	Stored, Requested Identity
}

func (e *IdentityError) Error() string {
	if e.Stored.ClusterID == e.Requested.ClusterID && e.Stored.MemberID == e.Requested.MemberID {
		return fmt.Sprintf("storage: identity mismatch: data dir holds cluster %x member %x of incarnation %x, asked to set incarnation %x",
			e.Stored.ClusterID, e.Stored.MemberID, e.Stored.Incarnation, e.Requested.Incarnation)
	}
	return fmt.Sprintf("storage: identity mismatch: data dir holds cluster %x member %x, asked to set cluster %x member %x",
		e.Stored.ClusterID, e.Stored.MemberID, e.Requested.ClusterID, e.Requested.MemberID)
}

// Unwrap returns ErrIdentityMismatch.
func (e *IdentityError) Unwrap() error { return ErrIdentityMismatch }

// SnapshotProgress is how far a snapshot stream to a peer has come.
type SnapshotProgress struct {
	Index uint64 // the snapshot's index; 0: no snapshot in flight
	Sent  int64  // bytes of its file sent so far
	Total int64  // bytes of its file
}

// Reply is a peer's answer to a member-to-member call.
type Reply struct {
	// Payload is the peer handler's response.
	Payload []byte
	// ClusterID is the peer's cluster ID (0 if it has none yet) and MemberID
	// its member ID, from its handshake reply: how a joiner learns them.
	ClusterID, MemberID uint64
}

// The errors a transport's refusals and calls are matched against (the
// transport wraps them with the peer's reason). Their text names the
// layer that reports them.
var (
	// ErrNotSent is matched (besides the cause) by a call's error when the
	// request certainly never reached the peer's handler: an unknown peer,
	// no cluster ID yet, a dial, TLS or handshake failure, a refusal, a
	// closed transport. Retrying such a call cannot apply a request twice.
	// Any other error (the connection broke after the request was written)
	// leaves the outcome unknown.
	ErrNotSent = errors.New("transport: request not sent")
	// ErrRemoved: the peer knows this member as removed from the cluster.
	ErrRemoved = errors.New("transport: member was removed")
	// ErrClusterMismatch: the peer belongs to another cluster, or has not
	// joined one yet.
	ErrClusterMismatch = errors.New("transport: cluster ID mismatch")
	// ErrUnknownSender: the peer does not know this member (not added yet).
	ErrUnknownSender = errors.New("transport: sender is not a known member")
	// ErrWiped: the peer recorded another incarnation for this member's ID:
	// this member's data is not the data its peers knew — it was lost, and
	// the member started afresh. Final: its votes and acknowledgements are
	// never counted again; remove the member and add a new one under a new
	// ID.
	ErrWiped = errors.New("transport: member's data was wiped")
)
