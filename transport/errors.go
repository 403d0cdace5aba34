package transport

import (
	"errors"
	"fmt"
	"github.com/understudy-raft/understudy/raft/raftio"

	"github.com/understudy-raft/understudy/internal/wire"
)

// Errors. The refusal reasons (ErrRemoved … ErrBusy) come wrapped in a
// *RefusedError, which also matches ErrRefused.
var (
	// ErrClosed is returned by calls on a closed Transport.
	ErrClosed = errors.New("transport: closed")
	// ErrInvalidConfig is wrapped by every problem Config.Validate reports.
	ErrInvalidConfig = errors.New("transport: invalid config")
	// ErrUnknownPeer is returned by Call for a member ID that was never
	// added or has been removed.
	ErrUnknownPeer = errors.New("transport: unknown peer")
	// ErrNoCluster is returned by Call on a transport whose cluster ID is
	// still 0: a joiner must use CallAddr until it learns the cluster.
	ErrNoCluster = errors.New("transport: cluster ID not known yet")
	// ErrNotSent is matched (besides the cause) by a Call or CallAddr error
	// when the request certainly never reached the peer's handler: an
	// unknown peer, no cluster ID yet, a dial, TLS or handshake failure,
	// a refusal, a closed transport. Retrying such a call cannot apply a
	// request twice. Any other error (the connection broke after the request
	// was written) leaves the outcome unknown.
	ErrNotSent = raftio.ErrNotSent
	// ErrRefused matches every refusal of a connection by the peer; the
	// reason is one of the sentinels below.
	ErrRefused = errors.New("transport: connection refused by peer")

	// ErrRemoved: the peer knows this member as removed from the cluster.
	ErrRemoved = raftio.ErrRemoved
	// ErrClusterMismatch: the peer belongs to another cluster, or has not
	// joined one yet.
	ErrClusterMismatch = raftio.ErrClusterMismatch
	// ErrGroupMismatch: the peer serves another raft group.
	ErrGroupMismatch = errors.New("transport: group ID mismatch")
	// ErrUnknownSender: the peer does not know this member (not added yet).
	ErrUnknownSender = raftio.ErrUnknownSender
	// ErrWrongReceiver: the member at the address is not the one dialed
	// (an address now used by another member).
	ErrWrongReceiver = errors.New("transport: receiver ID mismatch")
	// ErrVersion: the peer speaks no protocol version in common.
	ErrVersion = errors.New("transport: no common protocol version")
	// ErrBusy: the peer is receiving as many snapshots as it allows; the
	// snapshot is reported failed and raft retries it later.
	ErrBusy = errors.New("transport: peer busy")
	// ErrBadHello: the peer could not parse our hello (a bug or an
	// incompatible build).
	ErrBadHello = errors.New("transport: malformed hello")
	// ErrWiped: the peer recorded another incarnation for this member's ID
	// (SetPeerIncarnation): this member's data is not the data its peers
	// knew — it was lost, and the member started afresh. Final: its votes
	// and acknowledgements are never counted again; remove the member and
	// add a new one under a new ID.
	ErrWiped = raftio.ErrWiped

	// ErrProtocol: the peer sent something the protocol does not allow at
	// that point (an unexpected frame type, a message for another member).
	ErrProtocol = errors.New("transport: protocol violation")
	// ErrRemote matches every *RemoteError.
	ErrRemote = errors.New("transport: remote error")
)

// Reasons are the stable, snake_case names under which Stats counts
// refusals and connection errors.
const (
	ReasonRemoved         = "removed"
	ReasonClusterMismatch = "cluster_mismatch"
	ReasonGroupMismatch   = "group_mismatch"
	ReasonUnknownSender   = "unknown_sender"
	ReasonWrongReceiver   = "wrong_receiver"
	ReasonVersion         = "version"
	ReasonBusy            = "busy"
	ReasonBadHello        = "bad_hello"
	ReasonWiped           = "wiped"

	ReasonTLS            = "tls"             // TLS handshake failed (no, or a wrong, certificate)
	ReasonTimeout        = "timeout"         // a deadline passed: handshake, read or write
	ReasonFrameTooLarge  = "frame_too_large" // a length prefix above MaxFrameSize
	ReasonChecksum       = "checksum"        // a frame with a bad CRC-32C
	ReasonMalformed      = "malformed"       // bytes that are not frames, a bad payload
	ReasonProtocol       = "protocol"        // an unexpected frame
	ReasonUnexpectedEOF  = "unexpected_eof"  // a connection closed inside a frame
	ReasonIO             = "io"              // any other read or write error
	ReasonSnapshotStore  = "snapshot_store"  // the SnapshotStore failed
	ReasonSnapshotFailed = "snapshot_failed" // the snapshot stream was bad
)

var codeErrors = map[wire.Code]struct {
	err    error
	reason string
}{
	wire.CodeVersion:         {ErrVersion, ReasonVersion},
	wire.CodeClusterMismatch: {ErrClusterMismatch, ReasonClusterMismatch},
	wire.CodeGroupMismatch:   {ErrGroupMismatch, ReasonGroupMismatch},
	wire.CodeWrongReceiver:   {ErrWrongReceiver, ReasonWrongReceiver},
	wire.CodeUnknownSender:   {ErrUnknownSender, ReasonUnknownSender},
	wire.CodeRemoved:         {ErrRemoved, ReasonRemoved},
	wire.CodeBusy:            {ErrBusy, ReasonBusy},
	wire.CodeBadHello:        {ErrBadHello, ReasonBadHello},
	wire.CodeWiped:           {ErrWiped, ReasonWiped},
}

// RefusedError reports a connection the peer refused in its handshake
// reply. It matches ErrRefused and the sentinel of its reason:
//
//	if errors.Is(err, transport.ErrRemoved) { … stop the member … }
type RefusedError struct {
	Peer   uint64 // the member ID dialed (0 for CallAddr)
	Addr   string // the address dialed
	Reason string // the stable reason name, e.g. "removed"
	Detail string // the peer's explanation, for logs
	err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("transport: %s refused the connection: %s (%s)", e.target(), e.Reason, e.Detail)
}

func (e *RefusedError) target() string {
	if e.Peer == 0 {
		return e.Addr
	}
	return fmt.Sprintf("member %x at %s", e.Peer, e.Addr)
}

// Unwrap returns the reason's sentinel and ErrRefused.
func (e *RefusedError) Unwrap() []error { return []error{e.err, ErrRefused} }

func refusedError(peer uint64, addr string, r wire.HelloReply) *RefusedError {
	ce, ok := codeErrors[r.Code]
	if !ok {
		ce.err, ce.reason = ErrProtocol, fmt.Sprintf("code_%d", r.Code)
	}
	return &RefusedError{Peer: peer, Addr: addr, Reason: ce.reason, Detail: r.Reason, err: ce.err}
}

// RemoteError is an error a peer's Handler.ServeRequest returned, as text:
// errors do not cross the wire with their identity, so a caller that needs
// typed errors encodes them in its response payloads.
type RemoteError struct {
	Peer    uint64
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("transport: member %x: %s", e.Peer, e.Message)
}

// Unwrap returns ErrRemote.
func (e *RemoteError) Unwrap() error { return ErrRemote }

// notSentError marks a call error whose request never left this member.
type notSentError struct{ err error }

func notSent(err error) error { return &notSentError{err} }

func (e *notSentError) Error() string   { return e.err.Error() }
func (e *notSentError) Unwrap() []error { return []error{ErrNotSent, e.err} }
