package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"go.etcd.io/raft/v3/raftpb"
)

// Version is this build's protocol version. It versions the wire format
// AND what members hand each other through it — the kinds of raft log
// entries and their payloads, the snapshot header, the member-to-member
// requests — so that a member never receives something it cannot apply (an
// unknown entry kind stops a member with a fatal error). Bump it, and only
// it, with every such change: a new entry kind or payload, a new snapshot
// header version, a new request op an older leader would not serve, a
// frame or payload change.
//
// Version 1 was the first release's; 2 adds the entry kinds, snapshot
// header versions and request ops that came after it; 3 adds the
// incarnation to the member records (confchange.Context) and the refusal
// CodeWiped; 4 adds the TypeRelay frame on host links (relayed standbys);
// 5 adds relayed standbys' answers in TypeRelay frames (AnswersVersion);
// 6 adds delta-coded headers in TypeRelay frames (DeltaVersion).
const Version uint16 = 6

// The range of versions this build speaks: 3 to 6. Version 4 differs
// from 3 only by the TypeRelay frame, 5 from 4 only by the answers a
// TypeRelay frame may carry, and 6 from 5 only by how a TypeRelay frame
// may code its headers, so a member of this build talks to one of
// the previous releases at version 5, 4 or 3 (the listener picks the highest
// version both speak) and sends on such a connection nothing that version
// lacks: a rolling upgrade keeps every member connected. Members whose
// ranges do not meet refuse each other at the hello (CodeVersion, with a
// reason naming both ranges).
const (
	MinVersion uint16 = 3
	MaxVersion        = Version
)

// RelayVersion is the first version whose connections carry TypeRelay
// frames.
const RelayVersion uint16 = 4

// AnswersVersion is the first version whose connections carry relayed
// standbys' answers in TypeRelay frames (RelayAnswers, and the
// TakesAnswers flag a relay sets only when its link to the leader's host
// speaks it).
const AnswersVersion uint16 = 5

// DeltaVersion is the first version whose connections carry TypeRelay
// frames with delta-coded headers (each written as the fields in which it
// differs from the one before: a leader's appends to a relay's standbys
// differ only in To).
const DeltaVersion uint16 = 6

// Magic opens every Hello payload, so that a stray client (an HTTP request,
// a port scanner) is told apart from a peer speaking another version.
var Magic = [4]byte{'U', 'S', 'T', 'W'}

// Kind is what a connection carries, fixed by its Hello.
type Kind uint8

// Connection kinds.
const (
	KindStream   Kind = 1 // raft messages, dialer to listener, with pings both ways
	KindSnapshot Kind = 2 // one MsgSnap and its file, then the listener's ack
	KindRequest  Kind = 3 // member-to-member requests and their responses
	KindLink     Kind = 4 // a host link: every group's raft messages from one host to another
)

func (k Kind) String() string {
	switch k {
	case KindStream:
		return "stream"
	case KindSnapshot:
		return "snapshot"
	case KindRequest:
		return "request"
	case KindLink:
		return "link"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// HelloSize is the size of an encoded Hello. Later versions may append
// fields; decoders ignore bytes past HelloSize.
const HelloSize = 48

// Hello is the first frame of a connection, sent by the dialer.
//
//	offset size field
//	0      4    magic "USTW"
//	4      2    lowest protocol version the dialer speaks
//	6      2    highest protocol version the dialer speaks
//	8      1    connection kind
//	9      7    reserved, zero
//	16     8    group ID
//	24     8    cluster ID (0: the dialer does not know it yet)
//	32     8    sender (dialer) member ID
//	40     8    receiver member ID (0: unknown, only for request connections)
//	48     8    the dialer's host ID (optional: absent means 0, unknown)
//	56     8    the dialer replica's incarnation (optional: absent means 0)
//
// All integers are big endian. The two optional fields are written
// together, when either is set.
type Hello struct {
	MinVersion, MaxVersion uint16
	Kind                   Kind
	Group                  uint64
	Cluster                uint64
	From                   uint64
	To                     uint64
	// HostID identifies the dialer's host (made once in its data dir).
	HostID uint64
	// Incarnation identifies the dialing replica's data (see Attach).
	Incarnation uint64
}

// AppendHello appends the payload of h to b.
func AppendHello(b []byte, h Hello) []byte {
	var p [HelloSize]byte
	copy(p[0:4], Magic[:])
	binary.BigEndian.PutUint16(p[4:6], h.MinVersion)
	binary.BigEndian.PutUint16(p[6:8], h.MaxVersion)
	p[8] = byte(h.Kind)
	binary.BigEndian.PutUint64(p[16:24], h.Group)
	binary.BigEndian.PutUint64(p[24:32], h.Cluster)
	binary.BigEndian.PutUint64(p[32:40], h.From)
	binary.BigEndian.PutUint64(p[40:48], h.To)
	b = append(b, p[:]...)
	if h.HostID == 0 && h.Incarnation == 0 {
		return b
	}
	b = binary.BigEndian.AppendUint64(b, h.HostID)
	return binary.BigEndian.AppendUint64(b, h.Incarnation)
}

// ParseHello decodes a Hello payload. It checks the magic and the size;
// whether the versions, kind and IDs are acceptable is the caller's call.
func ParseHello(p []byte) (Hello, error) {
	if len(p) < HelloSize {
		return Hello{}, fmt.Errorf("%w: hello of %d bytes, want at least %d", ErrMalformed, len(p), HelloSize)
	}
	if [4]byte(p[0:4]) != Magic {
		return Hello{}, fmt.Errorf("%w: bad magic %q in hello", ErrMalformed, p[0:4])
	}
	h := Hello{
		MinVersion: binary.BigEndian.Uint16(p[4:6]),
		MaxVersion: binary.BigEndian.Uint16(p[6:8]),
		Kind:       Kind(p[8]),
		Group:      binary.BigEndian.Uint64(p[16:24]),
		Cluster:    binary.BigEndian.Uint64(p[24:32]),
		From:       binary.BigEndian.Uint64(p[32:40]),
		To:         binary.BigEndian.Uint64(p[40:48]),
	}
	if ids := p[HelloSize:]; len(ids) > 0 {
		if len(ids) < 16 {
			return Hello{}, fmt.Errorf("%w: hello host ID and incarnation cut short", ErrMalformed)
		}
		h.HostID = binary.BigEndian.Uint64(ids[0:8])
		h.Incarnation = binary.BigEndian.Uint64(ids[8:16])
	}
	return h, nil
}

// Code is the outcome carried by a HelloReply.
type Code uint8

// Reply codes. Anything but CodeAccepted refuses the connection, and the
// listener closes it after sending the reply.
const (
	CodeAccepted        Code = 0
	CodeVersion         Code = 1 // no protocol version in common
	CodeClusterMismatch Code = 2 // the dialer's cluster ID is not the listener's
	CodeGroupMismatch   Code = 3 // the dialer's group ID is not the listener's
	CodeWrongReceiver   Code = 4 // the receiver ID is not the listener's member ID
	CodeUnknownSender   Code = 5 // the sender is not a member the listener knows
	CodeRemoved         Code = 6 // the sender was removed from the cluster
	CodeBusy            Code = 7 // too many concurrent snapshots; retry later
	CodeBadHello        Code = 8 // the hello was malformed or had an unknown kind
	// CodeWiped: the sender presents another incarnation than the one
	// recorded for its member ID: its data was lost and it started
	// afresh (version 3).
	CodeWiped Code = 9
)

// MaxReasonSize bounds the free-text reason in a HelloReply or an error
// Status.
const MaxReasonSize = 1024

// HelloReplySize is the fixed part of a HelloReply.
const HelloReplySize = 24

// HelloReply is the listener's answer to a Hello.
//
//	offset size field
//	0      2    chosen protocol version (0 when refused)
//	2      1    code (0 accepted, else the reason for refusing)
//	3      1    reserved, zero
//	4      4    the largest frame payload the listener accepts on the
//	            connection (optional: 0 means not said)
//	8      8    the listener's cluster ID (0 if it does not know it)
//	16     8    the listener's member ID
//	24     n    reason: UTF-8 text for logs, at most 1024 bytes, may be empty
//
// The frame limit is in bytes that were reserved (zero) before it, not
// after the reason, which runs to the end of the payload: decoders that
// do not know it ignore it, and an encoder that does not know it says 0.
type HelloReply struct {
	Version uint16
	Code    Code
	// MaxFrame is the largest frame payload the listener accepts on this
	// connection, 0 if it does not say: a dialer sends nothing larger (a
	// frame over it would be refused or dropped by the listener).
	MaxFrame uint32
	Cluster  uint64
	Member   uint64
	Reason   string
}

// AppendHelloReply appends the payload of r to b. A reason longer than
// MaxReasonSize is truncated.
func AppendHelloReply(b []byte, r HelloReply) []byte {
	var p [HelloReplySize]byte
	binary.BigEndian.PutUint16(p[0:2], r.Version)
	p[2] = byte(r.Code)
	binary.BigEndian.PutUint32(p[4:8], r.MaxFrame)
	binary.BigEndian.PutUint64(p[8:16], r.Cluster)
	binary.BigEndian.PutUint64(p[16:24], r.Member)
	b = append(b, p[:]...)
	return append(b, truncateReason(r.Reason)...)
}

// ParseHelloReply decodes a HelloReply payload.
func ParseHelloReply(p []byte) (HelloReply, error) {
	if len(p) < HelloReplySize {
		return HelloReply{}, fmt.Errorf("%w: hello reply of %d bytes, want at least %d", ErrMalformed, len(p), HelloReplySize)
	}
	reason := p[HelloReplySize:]
	if len(reason) > MaxReasonSize || !utf8.Valid(reason) {
		return HelloReply{}, fmt.Errorf("%w: hello reply reason is not short UTF-8", ErrMalformed)
	}
	return HelloReply{
		Version:  binary.BigEndian.Uint16(p[0:2]),
		Code:     Code(p[2]),
		MaxFrame: binary.BigEndian.Uint32(p[4:8]),
		Cluster:  binary.BigEndian.Uint64(p[8:16]),
		Member:   binary.BigEndian.Uint64(p[16:24]),
		Reason:   string(reason),
	}, nil
}

func truncateReason(s string) string {
	if len(s) <= MaxReasonSize {
		return s
	}
	s = s[:MaxReasonSize]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Status payloads (TypeSnapshotAck, TypeResponse) start with one status
// byte: StatusOK followed by the result, or StatusError followed by a
// UTF-8 error text of at most MaxReasonSize bytes.
const (
	StatusOK    byte = 0
	StatusError byte = 1
)

// AppendStatus appends a status payload to b: StatusOK and data when
// errText is empty, else StatusError and errText.
func AppendStatus(b []byte, data []byte, errText string) []byte {
	if errText != "" {
		b = append(b, StatusError)
		return append(b, truncateReason(errText)...)
	}
	b = append(b, StatusOK)
	return append(b, data...)
}

// ParseStatus decodes a status payload. ok reports StatusOK; data is the
// result (aliasing p) or the error text.
func ParseStatus(p []byte) (ok bool, data []byte, err error) {
	if len(p) == 0 {
		return false, nil, fmt.Errorf("%w: empty status", ErrMalformed)
	}
	switch p[0] {
	case StatusOK:
		return true, p[1:], nil
	case StatusError:
		if len(p)-1 > MaxReasonSize || !utf8.Valid(p[1:]) {
			return false, nil, fmt.Errorf("%w: error status is not short UTF-8", ErrMalformed)
		}
		return false, p[1:], nil
	}
	return false, nil, fmt.Errorf("%w: status byte %d", ErrMalformed, p[0])
}

// A Request payload is the caller's remaining time budget in nanoseconds
// (8 bytes big endian, 0 for none) followed by the opaque request.

// AppendRequest appends a request payload to b.
func AppendRequest(b []byte, timeoutNanos uint64, req []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, timeoutNanos)
	return append(b, req...)
}

// ParseRequest decodes a request payload; req aliases p.
func ParseRequest(p []byte) (timeoutNanos uint64, req []byte, err error) {
	if len(p) < 8 {
		return 0, nil, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(p))
	}
	return binary.BigEndian.Uint64(p[:8]), p[8:], nil
}

// A SnapshotHeader payload is the size of the snapshot file in bytes
// (8 bytes big endian) followed by the encoded MsgSnap.

// AppendSnapshotHeader appends a snapshot header payload to b.
func AppendSnapshotHeader(b []byte, size uint64, msg []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, size)
	return append(b, msg...)
}

// ParseSnapshotHeader decodes a snapshot header payload; msg aliases p.
func ParseSnapshotHeader(p []byte) (size uint64, msg []byte, err error) {
	if len(p) < 8 {
		return 0, nil, fmt.Errorf("%w: snapshot header of %d bytes", ErrMalformed, len(p))
	}
	return binary.BigEndian.Uint64(p[:8]), p[8:], nil
}

// SnapshotEndSize is the size of a SnapshotEnd payload: the total size of
// the file (8 bytes) and its CRC-32C (4 bytes), big endian.
const SnapshotEndSize = 12

// AppendSnapshotEnd appends a snapshot end payload to b.
func AppendSnapshotEnd(b []byte, size uint64, crc uint32) []byte {
	b = binary.BigEndian.AppendUint64(b, size)
	return binary.BigEndian.AppendUint32(b, crc)
}

// ParseSnapshotEnd decodes a snapshot end payload.
func ParseSnapshotEnd(p []byte) (size uint64, crc uint32, err error) {
	if len(p) != SnapshotEndSize {
		return 0, 0, fmt.Errorf("%w: snapshot end of %d bytes, want %d", ErrMalformed, len(p), SnapshotEndSize)
	}
	return binary.BigEndian.Uint64(p[:8]), binary.BigEndian.Uint32(p[8:]), nil
}

// PingSize is the size of a ping or pong payload: an opaque token the
// pinger chooses (the transport uses its monotonic send time).
const PingSize = 8

// AppendPing appends a ping or pong payload to b.
func AppendPing(b []byte, token uint64) []byte {
	return binary.BigEndian.AppendUint64(b, token)
}

// ParsePing decodes a ping or pong payload.
func ParsePing(p []byte) (uint64, error) {
	if len(p) != PingSize {
		return 0, fmt.Errorf("%w: ping of %d bytes", ErrMalformed, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// AppendMessageFrame appends one TypeMessage frame carrying m to dst, with
// the message encoded in place (no intermediate buffer).
func AppendMessageFrame(dst []byte, group uint64, m *raftpb.Message) ([]byte, error) {
	dst, start := beginFrame(dst)
	dst, err := AppendMessage(dst, m)
	if err != nil {
		return dst[:start], err
	}
	return sealFrame(dst, start, TypeMessage, group), nil
}
