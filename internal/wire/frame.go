package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// HeaderSize is the size in bytes of a frame header.
const HeaderSize = 20

// Type is a frame type: what the payload of a frame is.
type Type uint8

// Frame types. The zero value is invalid so that a zeroed header never
// passes as a frame.
const (
	TypeHello         Type = 1  // Hello: the first frame of every connection, dialer to listener.
	TypeHelloReply    Type = 2  // HelloReply: the listener's answer, accept or refuse with a reason.
	TypeMessage       Type = 3  // one encoded raftpb.Message.
	TypePing          Type = 4  // 8-byte opaque token; answered by a TypePong with the same token.
	TypePong          Type = 5  // the token of the TypePing it answers.
	TypeSnapshot      Type = 6  // SnapshotHeader: the MsgSnap and the size of the file that follows.
	TypeSnapshotChunk Type = 7  // a piece of the snapshot file, in order.
	TypeSnapshotEnd   Type = 8  // SnapshotEnd: total size and CRC-32C of the whole file.
	TypeSnapshotAck   Type = 9  // Status: the receiver stored (or failed to store) the snapshot.
	TypeRequest       Type = 10 // Request: a member-to-member call.
	TypeResponse      Type = 11 // Status: the answer to a TypeRequest.
	TypeAttach        Type = 12 // Attach: on a host link, admits a group's sender and receiver before its messages.
	TypeAttachReply   Type = 13 // AttachReply: on a host link, accepts or refuses (or revokes) an attachment.
	TypeRelay         Type = 14 // on a host link: a relay envelope, a leader's messages for standbys (relay.go).

	maxType = TypeRelay
)

var typeNames = [...]string{
	TypeHello:         "hello",
	TypeHelloReply:    "hello-reply",
	TypeMessage:       "message",
	TypePing:          "ping",
	TypePong:          "pong",
	TypeSnapshot:      "snapshot",
	TypeSnapshotChunk: "snapshot-chunk",
	TypeSnapshotEnd:   "snapshot-end",
	TypeSnapshotAck:   "snapshot-ack",
	TypeRequest:       "request",
	TypeResponse:      "response",
	TypeAttach:        "attach",
	TypeAttachReply:   "attach-reply",
	TypeRelay:         "relay",
}

func (t Type) String() string {
	if t > 0 && t <= maxType {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Errors returned by the frame decoder. All of them mean the stream can no
// longer be trusted: the connection must be closed.
var (
	// ErrFrameTooLarge reports a length prefix above the reader's maximum.
	// It is detected from the header alone, before anything is allocated.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrChecksum reports a frame whose CRC-32C does not match its contents.
	ErrChecksum = errors.New("wire: frame checksum mismatch")
	// ErrMalformed reports a frame or payload that does not follow the
	// format: an unknown type, reserved bits set, a payload of the wrong size.
	ErrMalformed = errors.New("wire: malformed frame")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a decoded frame header.
//
//	offset size field
//	0      4    length of the payload in bytes, big endian (the header is not counted)
//	4      1    type
//	5      3    reserved, zero
//	8      8    group ID, big endian
//	16     4    CRC-32C (Castagnoli) of bytes 0..15 followed by the payload, big endian
type Header struct {
	Length uint32
	Type   Type
	Group  uint64
	CRC    uint32
}

// putHeader writes the header fields but not the CRC into b[:16].
func putHeader(b []byte, length int, typ Type, group uint64) {
	binary.BigEndian.PutUint32(b[0:4], uint32(length))
	b[4] = byte(typ)
	b[5], b[6], b[7] = 0, 0, 0
	binary.BigEndian.PutUint64(b[8:16], group)
}

// AppendFrame appends one frame carrying payload to dst and returns the
// extended slice.
func AppendFrame(dst []byte, typ Type, group uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	dst = append(dst, payload...)
	return sealFrame(dst, start, typ, group)
}

// beginFrame reserves room for a header at the end of dst. The payload is
// appended after it and sealFrame completes the header.
func beginFrame(dst []byte) ([]byte, int) {
	start := len(dst)
	return append(dst, make([]byte, HeaderSize)...), start
}

// sealFrame fills in the header of the frame that starts at dst[start] and
// whose payload runs to the end of dst.
func sealFrame(dst []byte, start int, typ Type, group uint64) []byte {
	h := dst[start : start+HeaderSize]
	putHeader(h, len(dst)-start-HeaderSize, typ, group)
	crc := crc32.Update(0, castagnoli, h[:16])
	crc = crc32.Update(crc, castagnoli, dst[start+HeaderSize:])
	binary.BigEndian.PutUint32(h[16:20], crc)
	return dst
}

// SealFrame completes a frame built in place: frame[HeaderSize:] holds the
// payload and frame[:HeaderSize] is overwritten with the header. It lets a
// writer read a payload straight into its send buffer.
func SealFrame(frame []byte, typ Type, group uint64) []byte {
	return sealFrame(frame, 0, typ, group)
}

// ParseHeader decodes a frame header. It checks the type and the reserved
// bytes but not the CRC, which needs the payload.
func ParseHeader(b *[HeaderSize]byte) (Header, error) {
	h := Header{
		Length: binary.BigEndian.Uint32(b[0:4]),
		Type:   Type(b[4]),
		Group:  binary.BigEndian.Uint64(b[8:16]),
		CRC:    binary.BigEndian.Uint32(b[16:20]),
	}
	if h.Type == 0 || h.Type > maxType {
		return h, fmt.Errorf("%w: unknown frame type %d", ErrMalformed, b[4])
	}
	if b[5]|b[6]|b[7] != 0 {
		return h, fmt.Errorf("%w: reserved header bytes set", ErrMalformed)
	}
	return h, nil
}

// Frame is one decoded frame.
type Frame struct {
	Type  Type
	Group uint64
	// Payload is the frame's payload. Reader.Next returns a fresh slice the
	// caller owns; Reader.NextInto returns a slice of the caller's buffer.
	Payload []byte
}

// Reader reads frames from a byte stream. It is not safe for concurrent use.
type Reader struct {
	r    io.Reader
	max  uint32
	hdr  [HeaderSize]byte
	skip []byte // Skip's buffer
}

// readChunk is the most a Reader allocates for a payload ahead of its
// bytes: a larger payload's buffer grows (doubling) as its bytes arrive,
// so that a header declaring a large frame, followed by nothing, costs
// the reader at most this much.
const readChunk = 64 << 10

// NewReader returns a Reader that refuses frames whose payload exceeds
// maxPayload bytes. r should be buffered (a bufio.Reader) when frames are
// small: the Reader issues two reads per frame.
func NewReader(r io.Reader, maxPayload uint32) *Reader {
	return &Reader{r: r, max: maxPayload}
}

// Next reads the next frame into a newly allocated payload that the caller
// owns (decoded messages may alias it).
//
// It returns io.EOF only when the stream ends cleanly between frames, and
// io.ErrUnexpectedEOF for a truncated frame.
func (r *Reader) Next() (Frame, error) {
	return r.next(nil)
}

// NextInto is Next, but reads the payload into buf when it fits, so a loop
// over large frames (snapshot chunks) does not allocate. The payload is only
// valid until the next call.
func (r *Reader) NextInto(buf []byte) (Frame, error) {
	return r.next(buf)
}

func (r *Reader) next(buf []byte) (Frame, error) {
	h, err := r.NextHeader()
	if err != nil {
		return Frame{}, err
	}
	return r.payload(h, buf)
}

// NextHeader reads the next frame's header and checks its type, reserved
// bytes and length (against the reader's maximum). The caller then reads
// the frame's payload with Payload or skips it with Skip, before the next
// frame: so that it decides, from the header, whether the frame is worth
// its size.
//
// It returns io.EOF only when the stream ends cleanly between frames.
func (r *Reader) NextHeader() (Header, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Header{}, err
	}
	h, err := ParseHeader(&r.hdr)
	if err != nil {
		return Header{}, err
	}
	if h.Length > r.max {
		return Header{}, fmt.Errorf("%w: %s frame of %d bytes, the limit is %d", ErrFrameTooLarge, h.Type, h.Length, r.max)
	}
	return h, nil
}

// Payload reads the payload of the frame whose header NextHeader just
// returned, into a newly allocated slice the caller owns.
func (r *Reader) Payload(h Header) (Frame, error) {
	return r.payload(h, nil)
}

// PayloadInto is Payload, reading into buf when the payload fits (then it
// is only valid as long as the caller leaves buf alone).
func (r *Reader) PayloadInto(h Header, buf []byte) (Frame, error) {
	return r.payload(h, buf)
}

// payload reads h's payload, into buf if it fits, and checks the CRC. A
// payload larger than readChunk that does not fit is allocated as it
// arrives.
func (r *Reader) payload(h Header, buf []byte) (Frame, error) {
	n := int(h.Length)
	var payload []byte
	if n <= cap(buf) {
		payload = buf[:n]
		if _, err := io.ReadFull(r.r, payload); err != nil {
			return Frame{}, unexpected(err)
		}
	} else {
		payload = make([]byte, 0, min(n, readChunk))
		for len(payload) < n {
			if len(payload) == cap(payload) {
				payload = slices.Grow(payload, min(n-len(payload), len(payload)))
			}
			k := min(n, cap(payload))
			if _, err := io.ReadFull(r.r, payload[len(payload):k]); err != nil {
				return Frame{}, unexpected(err)
			}
			payload = payload[:k]
		}
	}
	crc := crc32.Update(0, castagnoli, r.hdr[:16])
	crc = crc32.Update(crc, castagnoli, payload)
	if crc != h.CRC {
		return Frame{}, fmt.Errorf("%w: %s frame of %d bytes", ErrChecksum, h.Type, n)
	}
	return Frame{Type: h.Type, Group: h.Group, Payload: payload}, nil
}

// Skip reads and discards the payload of the frame whose header
// NextHeader just returned, through a small buffer, and checks its CRC:
// the stream stays usable, and the frame costs no allocation of its size.
func (r *Reader) Skip(h Header) error {
	if r.skip == nil {
		r.skip = make([]byte, 4<<10)
	}
	crc := crc32.Update(0, castagnoli, r.hdr[:16])
	for left := int(h.Length); left > 0; {
		b := r.skip[:min(left, len(r.skip))]
		if _, err := io.ReadFull(r.r, b); err != nil {
			return unexpected(err)
		}
		crc = crc32.Update(crc, castagnoli, b)
		left -= len(b)
	}
	if crc != h.CRC {
		return fmt.Errorf("%w: %s frame of %d bytes", ErrChecksum, h.Type, h.Length)
	}
	return nil
}

// unexpected reports a stream that ended inside a frame.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CRC returns the CRC-32C (Castagnoli) of b continuing from crc, as used
// for whole snapshot files.
func CRC(crc uint32, b []byte) uint32 {
	return crc32.Update(crc, castagnoli, b)
}
