package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// A host link (KindLink) carries the raft messages of every group from one
// host to another on one connection. Its Hello names one of the groups it
// will carry (so that a listener of a release without links answers
// "unknown connection kind" rather than a group mismatch); a listener that
// speaks links ignores the group, cluster and member IDs of a link hello.
//
// After the HelloReply, the dialer sends, in any interleaving:
//
//   - TypeAttach (group in the header): admits one (group, sender,
//     receiver) on the link. The listener checks it exactly as the hello of
//     a group's raft stream (cluster, receiver, sender known and not
//     removed) and answers with a TypeAttachReply. The dialer need not wait:
//     it writes the group's messages right behind the attach, and the
//     listener drops (and counts) the messages of a (group, sender,
//     receiver) it has not admitted.
//   - TypeMessage (group in the header): one raft message, as on a raft
//     stream; its From and To name the attachment it belongs to.
//   - TypeRelay (group in the header): a relay envelope (relay.go), whose
//     container's From and To name the attachment it belongs to.
//   - TypePing (group 0): answered by a TypePong with the same token.
//
// The listener sends TypePong and TypeAttachReply frames, and may send a
// refusing TypeAttachReply at any time for an attachment it accepted
// before (a revocation: the sender was removed, the group stopped).

// AttachSize is the size of the fixed part of an encoded Attach. Later
// versions may append fields; decoders ignore bytes past the fields they
// know.
const AttachSize = 24

// MaxAttachAddr bounds the address an Attach carries.
const MaxAttachAddr = 512

// Attach is the payload of a TypeAttach frame; the group is the frame's.
//
//	offset size field
//	0      8    cluster ID of the sender's group
//	8      8    sender member ID (in the group)
//	16     8    receiver member ID (in the group)
//	24     2    n, the length of the address (optional: absent means 0)
//	26     n    the sender's advertised peer address: where its host is
//	            reachable now (UTF-8, at most MaxAttachAddr bytes)
//	26+n   8    the sender's host ID (optional: absent means 0, unknown)
//	34+n   8    the sender replica's incarnation (optional: absent means 0)
//
// All integers are big endian. An encoder that sets HostID or Incarnation
// writes the address length even when the address is empty.
type Attach struct {
	Cluster uint64
	From    uint64
	To      uint64
	// Addr is the address the sender's host advertises, "" if unknown:
	// the listener learns from it that a peer host moved.
	Addr string
	// HostID identifies the sender's host (made once in its data dir), 0
	// if unknown: address moves are learned per host, never by address.
	HostID uint64
	// Incarnation identifies the sender replica's data: made once when
	// its data dir first held the group, so that a replica whose data was
	// lost and that started afresh under the same member ID is told apart
	// from the one its peers knew. 0 if unknown.
	Incarnation uint64
}

// AppendAttach appends the payload of a to b. An address longer than
// MaxAttachAddr is left out.
func AppendAttach(b []byte, a Attach) []byte {
	b = binary.BigEndian.AppendUint64(b, a.Cluster)
	b = binary.BigEndian.AppendUint64(b, a.From)
	b = binary.BigEndian.AppendUint64(b, a.To)
	addr := a.Addr
	if len(addr) > MaxAttachAddr {
		addr = ""
	}
	if addr == "" && a.HostID == 0 && a.Incarnation == 0 {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)))
	b = append(b, addr...)
	if a.HostID == 0 && a.Incarnation == 0 {
		return b
	}
	b = binary.BigEndian.AppendUint64(b, a.HostID)
	return binary.BigEndian.AppendUint64(b, a.Incarnation)
}

// ParseAttach decodes an Attach payload.
func ParseAttach(p []byte) (Attach, error) {
	if len(p) < AttachSize {
		return Attach{}, fmt.Errorf("%w: attach of %d bytes, want at least %d", ErrMalformed, len(p), AttachSize)
	}
	a := Attach{
		Cluster: binary.BigEndian.Uint64(p[0:8]),
		From:    binary.BigEndian.Uint64(p[8:16]),
		To:      binary.BigEndian.Uint64(p[16:24]),
	}
	if rest := p[AttachSize:]; len(rest) > 0 {
		if len(rest) < 2 {
			return Attach{}, fmt.Errorf("%w: attach address length cut short", ErrMalformed)
		}
		n := int(binary.BigEndian.Uint16(rest))
		if n > MaxAttachAddr || len(rest) < 2+n || !utf8.Valid(rest[2:2+n]) {
			return Attach{}, fmt.Errorf("%w: attach address of %d bytes in %d", ErrMalformed, n, len(rest)-2)
		}
		a.Addr = string(rest[2 : 2+n])
		if ids := rest[2+n:]; len(ids) > 0 {
			if len(ids) < 16 {
				return Attach{}, fmt.Errorf("%w: attach host ID and incarnation cut short", ErrMalformed)
			}
			a.HostID = binary.BigEndian.Uint64(ids[0:8])
			a.Incarnation = binary.BigEndian.Uint64(ids[8:16])
		}
	}
	return a, nil
}

// AttachReplySize is the fixed part of an AttachReply.
const AttachReplySize = 32

// AttachReply is the payload of a TypeAttachReply frame; the group is the
// frame's. The codes are the HelloReply's.
//
//	offset size field
//	0      1    code (0 accepted, else the reason for refusing)
//	1      7    reserved, zero
//	8      8    sender member ID of the attachment answered
//	16     8    receiver member ID of the attachment answered
//	24     8    the listener's cluster ID for the group (0 if none)
//	32     n    reason: UTF-8 text for logs, at most 1024 bytes, may be empty
type AttachReply struct {
	Code    Code
	From    uint64
	To      uint64
	Cluster uint64
	Reason  string
}

// AppendAttachReply appends the payload of r to b. A reason longer than
// MaxReasonSize is truncated.
func AppendAttachReply(b []byte, r AttachReply) []byte {
	var p [AttachReplySize]byte
	p[0] = byte(r.Code)
	binary.BigEndian.PutUint64(p[8:16], r.From)
	binary.BigEndian.PutUint64(p[16:24], r.To)
	binary.BigEndian.PutUint64(p[24:32], r.Cluster)
	b = append(b, p[:]...)
	return append(b, truncateReason(r.Reason)...)
}

// ParseAttachReply decodes an AttachReply payload. Reserved bytes must be
// zero and the reason short UTF-8.
func ParseAttachReply(p []byte) (AttachReply, error) {
	if len(p) < AttachReplySize {
		return AttachReply{}, fmt.Errorf("%w: attach reply of %d bytes, want at least %d", ErrMalformed, len(p), AttachReplySize)
	}
	for _, b := range p[1:8] {
		if b != 0 {
			return AttachReply{}, fmt.Errorf("%w: reserved attach reply bytes set", ErrMalformed)
		}
	}
	reason := p[AttachReplySize:]
	if len(reason) > MaxReasonSize || !utf8.Valid(reason) {
		return AttachReply{}, fmt.Errorf("%w: attach reply reason is not short UTF-8", ErrMalformed)
	}
	return AttachReply{
		Code:    Code(p[0]),
		From:    binary.BigEndian.Uint64(p[8:16]),
		To:      binary.BigEndian.Uint64(p[16:24]),
		Cluster: binary.BigEndian.Uint64(p[24:32]),
		Reason:  string(reason),
	}, nil
}

// FrameBuffered reports whether buffered, the bytes a reader holds ahead
// of the next frame, hold that whole frame, so that reading it will not
// wait for the network. It checks nothing else: the frame may still be
// invalid.
func FrameBuffered(buffered []byte) bool {
	if len(buffered) < HeaderSize {
		return false
	}
	return uint64(len(buffered)) >= HeaderSize+uint64(binary.BigEndian.Uint32(buffered[0:4]))
}
