package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/understudy-raft/understudy/confchange"
)

// A snapshot's data, as the Node writes it through Storage.CreateSnapshot:
//
//	"USN5"                      magic and version ("USN4": no sessions; "USN3": no settings either; "USN2": no client IDs either)
//	uint32 (big endian)          length of the header
//	header                       see below
//	uint32 (big endian)          CRC-32C of the header
//	the state machine's bytes    as written by Snapshot.Write, up to EOF
//
// header:
//
//	uvarint length, bytes        member records: a confchange.Context encoding (change ID 0)
//	uvarint n, then n IDs:       removed member IDs, ascending
//	uvarint n, then n IDs:       uvarint proposer, uvarint sequence (dedup window, oldest first)
//	uvarint n, then n IDs:       uvarint client, uvarint sequence (older versions' client request IDs, oldest first; USN3)
//	uvarint length, bytes        the replicated cluster settings (confchange.ClusterSettings.Encode; empty: none yet; USN4)
//	sessions                     the client sessions (sessionTable.appendTo, sessions.go; USN5)
//
// The header carries what the node derives from the log besides the state
// machine, so that a member restored from a snapshot is identical to one that
// applied the log.
const (
	snapMagic   = "USN5"
	snapMagicV4 = "USN4"
	snapMagicV3 = "USN3"
	snapMagicV2 = "USN2"
	// maxSnapHeaderSize bounds the header: the client sessions are most of
	// it, at most maxSessionMemory per configuration of the members.
	maxSnapHeaderSize = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapHeader is the node's part of a snapshot.
type snapHeader struct {
	members []Member // sorted by ID
	removed []uint64 // sorted
	dedup   []requestID
	clients []requestID // older versions' client request IDs (proposer is the client ID)
	// settings are the replicated cluster settings, encoded (nil: none yet).
	settings []byte
	// sessions are the client sessions, encoded (sessionTable.appendTo; nil:
	// none); table is them decoded, when the header was read.
	sessions []byte
	table    *sessionTable
}

func (h *snapHeader) encode() ([]byte, error) {
	recs, err := confchange.Context{Members: h.members}.Encode()
	if err != nil {
		return nil, err
	}
	b := binary.AppendUvarint(nil, uint64(len(recs)))
	b = append(b, recs...)
	b = binary.AppendUvarint(b, uint64(len(h.removed)))
	for _, id := range h.removed {
		b = binary.AppendUvarint(b, id)
	}
	b = binary.AppendUvarint(b, uint64(len(h.dedup)))
	for _, id := range h.dedup {
		b = binary.AppendUvarint(b, id.proposer)
		b = binary.AppendUvarint(b, id.seq)
	}
	b = binary.AppendUvarint(b, uint64(len(h.clients)))
	for _, id := range h.clients {
		b = binary.AppendUvarint(b, id.proposer)
		b = binary.AppendUvarint(b, id.seq)
	}
	b = binary.AppendUvarint(b, uint64(len(h.settings)))
	b = append(b, h.settings...)
	if len(h.sessions) == 0 {
		return binary.AppendUvarint(b, 0), nil
	}
	return append(b, h.sessions...), nil
}

// writeTo writes the framed header.
func (h *snapHeader) writeTo(w io.Writer) error {
	body, err := h.encode()
	if err != nil {
		return err
	}
	if len(body) > maxSnapHeaderSize {
		return fmt.Errorf("raft: snapshot header of %d bytes exceeds %d", len(body), maxSnapHeaderSize)
	}
	buf := make([]byte, 0, len(snapMagic)+8+len(body))
	buf = append(buf, snapMagic...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
	buf = append(buf, body...)
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(body, castagnoli))
	_, err = w.Write(buf)
	return err
}

// readSnapHeader reads the framed header from r, leaving r at the state
// machine's bytes. Every failure wraps ErrCorruptSnapshot.
func readSnapHeader(r io.Reader) (*snapHeader, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: reading header: %v", ErrCorruptSnapshot, err)
	}
	version := 5
	switch string(pre[:4]) {
	case snapMagic:
	case snapMagicV4:
		version = 4
	case snapMagicV3:
		version = 3
	case snapMagicV2:
		version = 2
	default:
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptSnapshot, pre[:4])
	}
	n := binary.BigEndian.Uint32(pre[4:])
	if n > maxSnapHeaderSize {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds %d", ErrCorruptSnapshot, n, maxSnapHeaderSize)
	}
	// Read as it comes: a corrupt length allocates no more than the data.
	body, err := io.ReadAll(io.LimitReader(r, int64(n)+4))
	if err != nil {
		return nil, fmt.Errorf("%w: reading header: %v", ErrCorruptSnapshot, err)
	}
	if len(body) != int(n)+4 {
		return nil, fmt.Errorf("%w: reading header: %d of %d bytes", ErrCorruptSnapshot, len(body), n+4)
	}
	body, sum := body[:n], binary.BigEndian.Uint32(body[n:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: header checksum %08x, want %08x", ErrCorruptSnapshot, got, sum)
	}
	return decodeSnapHeader(body, version)
}

var errShort = errors.New("truncated")

func decodeSnapHeader(b []byte, version int) (*snapHeader, error) {
	d := decoder{b: b}
	h := &snapHeader{}
	if recs := d.bytes(); d.err == nil {
		ctx, err := confchange.DecodeContext(recs)
		if err != nil {
			return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
		}
		h.members = ctx.Members
	}
	nr := d.count()
	for i := uint64(0); i < nr && d.err == nil; i++ {
		h.removed = append(h.removed, d.uvarint())
	}
	nd := d.count()
	for i := uint64(0); i < nd && d.err == nil; i++ {
		h.dedup = append(h.dedup, requestID{proposer: d.uvarint(), seq: d.uvarint()})
	}
	if version >= 3 {
		nc := d.count()
		for i := uint64(0); i < nc && d.err == nil; i++ {
			h.clients = append(h.clients, requestID{proposer: d.uvarint(), seq: d.uvarint()})
		}
	}
	if version >= 4 {
		if b := d.bytes(); d.err == nil && len(b) > 0 {
			if _, err := confchange.DecodeClusterSettings(b); err != nil {
				return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
			}
			h.settings = b
		}
	}
	if version >= 5 && d.err == nil {
		t, err := decodeSessions(&d)
		if err != nil {
			return nil, fmt.Errorf("%w: header: sessions: %v", ErrCorruptSnapshot, err)
		}
		h.table = t
		h.sessions = t.appendTo(nil)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, d.err)
	}
	return h, nil
}

// decoder reads uvarints and length-prefixed bytes; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a element count, refusing one larger than the bytes left
// (every element takes at least one byte), so a bad count cannot make the
// caller allocate or loop without bound.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = fmt.Errorf("count %d exceeds the %d bytes left", n, len(d.b))
		return 0
	}
	return n
}

func (d *decoder) u8() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errShort
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
