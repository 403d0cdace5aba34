package confchange

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// contextVersion is the first byte of an encoded Context.
const contextVersion = 1

// Context is the payload of every ConfChangeV2 the node proposes: the node's
// change ID, so it can tell whether raft appended its change, and the member
// records the change adds or updates, so every member learns peer addresses
// and metadata through the log.
//
// The encoding is small, versioned and canonical (one encoding per value):
//
//	version      byte (1)
//	change ID    uvarint
//	members      uvarint count, then per member in ascending ID order:
//	  ID         uvarint, not 0
//	  flags      byte: bit 0 read-only, bit 1 incarnation, other bits 0
//	  peer addr  uvarint length, bytes
//	  metadata   uvarint count, then per entry in ascending key order:
//	             uvarint length, key bytes (not empty); uvarint length, value bytes
//	  incarnation uvarint, not 0; only with flag bit 1 (protocol version 3)
//
// Varints are minimal. An empty Context field (nil) decodes as the zero
// Context, so a conf change from elsewhere is readable.
type Context struct {
	ChangeID uint64
	Members  []Member
}

const (
	flagReadOnly    = 1
	flagIncarnation = 2
)

// Encode returns the canonical encoding of c. Members are written in ID order;
// a member with ID 0, a duplicate ID or an empty metadata key is an error
// (ErrBadContext).
func (c Context) Encode() ([]byte, error) {
	ms := slices.Clone(c.Members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	b := []byte{contextVersion}
	b = binary.AppendUvarint(b, c.ChangeID)
	b = binary.AppendUvarint(b, uint64(len(ms)))
	for i, m := range ms {
		if m.ID == 0 || (i > 0 && ms[i-1].ID == m.ID) {
			return nil, badContext("member ID %d is 0 or repeated", m.ID)
		}
		b = binary.AppendUvarint(b, m.ID)
		var flags byte
		if m.ReadOnly {
			flags |= flagReadOnly
		}
		if m.Incarnation != 0 {
			flags |= flagIncarnation
		}
		b = append(b, flags)
		b = appendString(b, m.PeerAddr)
		b = binary.AppendUvarint(b, uint64(len(m.Metadata)))
		for _, k := range slices.Sorted(maps.Keys(m.Metadata)) {
			if k == "" {
				return nil, badContext("member %d has an empty metadata key", m.ID)
			}
			b = appendString(b, k)
			b = appendString(b, m.Metadata[k])
		}
		if m.Incarnation != 0 {
			b = binary.AppendUvarint(b, m.Incarnation)
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func badContext(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadContext}, args...)...)
}

// DecodeContext decodes a ConfChangeV2.Context. Empty input is the zero
// Context. Anything that is not exactly a canonical encoding — an unknown
// version, a truncated or overlong field, unsorted or repeated IDs or keys,
// unknown flags, trailing bytes — is an error wrapping ErrBadContext that
// says where; it never panics and never allocates more than the input's size.
func DecodeContext(b []byte) (Context, error) {
	if len(b) == 0 {
		return Context{}, nil
	}
	d := decoder{b: b}
	if v := d.byte("version"); d.err == nil && v != contextVersion {
		return Context{}, badContext("unknown version %d", v)
	}
	var c Context
	c.ChangeID = d.uvarint("change ID")
	n := d.count("member count", 4)
	for i := uint64(0); i < n && d.err == nil; i++ {
		what := "member " + strconv.FormatUint(i, 10)
		m := Member{ID: d.uvarint(what + " ID")}
		if d.err == nil && (m.ID == 0 || (i > 0 && m.ID <= c.Members[i-1].ID)) {
			d.fail("%s: ID %d is 0 or not ascending", what, m.ID)
		}
		flags := d.byte(what + " flags")
		if d.err == nil && flags&^(flagReadOnly|flagIncarnation) != 0 {
			d.fail("%s: unknown flags %#x", what, flags)
		}
		m.ReadOnly = flags&flagReadOnly != 0
		m.PeerAddr = d.string(what + " peer address")
		k := d.count(what+" metadata count", 2)
		prev := ""
		for j := uint64(0); j < k && d.err == nil; j++ {
			key := d.string(what + " metadata key")
			val := d.string(what + " metadata value")
			if d.err == nil && (key == "" || (j > 0 && key <= prev)) {
				d.fail("%s: metadata key %q is empty or not ascending", what, key)
			}
			if m.Metadata == nil {
				m.Metadata = make(map[string]string, k)
			}
			m.Metadata[key], prev = val, key
		}
		if flags&flagIncarnation != 0 {
			m.Incarnation = d.uvarint(what + " incarnation")
			if d.err == nil && m.Incarnation == 0 {
				d.fail("%s: incarnation 0 with its flag set", what)
			}
		}
		c.Members = append(c.Members, m)
	}
	if d.err == nil && d.off != len(b) {
		d.fail("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return Context{}, d.err
	}
	return c, nil
}

type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = badContext("at byte %d: "+format, append([]any{d.off}, args...)...)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated %s", what)
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail("truncated %s", what)
		return 0
	case n < 0 || n != len(binary.AppendUvarint(nil, v)):
		d.fail("bad varint in %s", what)
		return 0
	}
	d.off += n
	return v
}

// count reads a count of items of at least minSize bytes each, refusing one
// the rest of the input cannot hold.
func (d *decoder) count(what string, minSize int) uint64 {
	n := d.uvarint(what)
	if d.err == nil && n > uint64((len(d.b)-d.off)/minSize) {
		d.fail("%s %d exceeds the %d bytes left", what, n, len(d.b)-d.off)
		return 0
	}
	return n
}

func (d *decoder) string(what string) string {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated %s: length %d, %d bytes left", what, n, len(d.b)-d.off)
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}
