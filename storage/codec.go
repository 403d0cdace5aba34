package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// castagnoli is the CRC-32C table; the hardware-accelerated polynomial on
// amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Every value the store writes to bbolt is "sealed": its payload followed by
// the CRC-32C of the payload, 4 bytes little-endian. bbolt checksums only its
// meta pages, so without the seal a flipped bit in a leaf page would be read
// back as valid data.
const sealSize = 4

var errChecksum = errors.New("checksum mismatch")

func seal(buf []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
}

func unseal(v []byte) ([]byte, error) {
	if len(v) < sealSize {
		return nil, fmt.Errorf("record of %d bytes is shorter than its checksum", len(v))
	}
	p := v[:len(v)-sealSize]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(v[len(p):]) {
		return nil, errChecksum
	}
	return p, nil
}

// Entry record, the value under the entry's index (8 bytes big-endian) in the
// log bucket:
//
//	flags  1 byte   bit 0: Term set, 1: Index set, 2: Type set, 3: Data non-nil
//	term   uvarint  if bit 0
//	type   uvarint  if bit 2 (the int32 enum value, sign-extended)
//	data   the remaining bytes, if bit 3
//	crc    4 bytes  CRC-32C of the above, little-endian
//
// The index is the key, not repeated in the value. The flags keep protobuf's
// field presence, so a decoded entry is proto.Equal to the one stored and
// proto.Size (which raft uses for its size limits) is unchanged.
const (
	entTerm  = 1 << 0
	entIndex = 1 << 1
	entType  = 1 << 2
	entData  = 1 << 3
	entAll   = entTerm | entIndex | entType | entData
)

// encodedEntrySize is the exact size of the record appendEntry writes.
func encodedEntrySize(e *raftpb.Entry) int { return entryBodySize(e) + sealSize }

// entryBodySize is the exact size of the record without its seal: what
// appendEntryBody writes (and the in-memory tail holds).
func entryBodySize(e *raftpb.Entry) int {
	n := 1 + len(e.Data)
	if e.Term != nil {
		n += protowire.SizeVarint(*e.Term)
	}
	if e.Type != nil {
		n += protowire.SizeVarint(uint64(int64(*e.Type)))
	}
	return n
}

// appendEntry appends the record of e to buf.
func appendEntry(buf []byte, e *raftpb.Entry) []byte {
	start := len(buf)
	return seal(appendEntryBody(buf, e), start)
}

// appendEntryBody appends the record of e without its seal to buf.
func appendEntryBody(buf []byte, e *raftpb.Entry) []byte {
	var flags byte
	if e.Term != nil {
		flags |= entTerm
	}
	if e.Index != nil {
		flags |= entIndex
	}
	if e.Type != nil {
		flags |= entType
	}
	if e.Data != nil {
		flags |= entData
	}
	buf = append(buf, flags)
	if e.Term != nil {
		buf = binary.AppendUvarint(buf, *e.Term)
	}
	if e.Type != nil {
		buf = binary.AppendUvarint(buf, uint64(int64(*e.Type)))
	}
	return append(buf, e.Data...)
}

// entryBox holds an Entry and the values its pointer fields point to, so a
// decoded entry costs one allocation (amortised over a batch) instead of four.
type entryBox struct {
	e     raftpb.Entry
	term  uint64
	index uint64
	typ   raftpb.EntryType
}

// entryAlloc hands out entryBoxes and payload bytes from chunks. Chunks are
// never reallocated (decoded entries point into them), only replaced.
type entryAlloc struct {
	boxes []entryBox
	data  []byte
}

const dataChunk = 32 << 10

func (a *entryAlloc) box(hint int) *entryBox {
	if len(a.boxes) == 0 {
		a.boxes = make([]entryBox, min(max(hint, 1), 256))
	}
	b := &a.boxes[0]
	a.boxes = a.boxes[1:]
	return b
}

func (a *entryAlloc) bytes(n int) []byte {
	if n == 0 {
		return []byte{} // non-nil: presence of an empty Data is kept
	}
	if n > dataChunk/4 {
		return make([]byte, n)
	}
	if len(a.data) < n {
		a.data = make([]byte, dataChunk)
	}
	b := a.data[:n:n]
	a.data = a.data[n:]
	return b
}

// decodeEntry decodes the record v stored under index. hint is how many more
// entries the caller expects to decode (sizes the allocation chunks). The
// returned entry shares no memory with v.
func decodeEntry(index uint64, v []byte, a *entryAlloc, hint int) (*raftpb.Entry, error) {
	p, err := unseal(v)
	if err != nil {
		return nil, err
	}
	return parseEntryBody(index, p, a, hint, false)
}

// parseEntryBody decodes an entry record without its seal. With alias, the
// entry's Data is p's bytes (which must never change again: the tail's
// chunks); without, a copy.
func parseEntryBody(index uint64, p []byte, a *entryAlloc, hint int, alias bool) (*raftpb.Entry, error) {
	if len(p) == 0 {
		return nil, errors.New("empty entry record")
	}
	flags := p[0]
	if flags&^entAll != 0 {
		return nil, fmt.Errorf("unknown entry flags %#x", flags)
	}
	p = p[1:]
	b := a.box(hint)
	e := &b.e
	if flags&entTerm != 0 {
		t, n := binary.Uvarint(p)
		if n <= 0 {
			return nil, errors.New("bad term varint")
		}
		b.term, p = t, p[n:]
		e.Term = &b.term
	}
	if flags&entIndex != 0 {
		b.index = index
		e.Index = &b.index
	}
	if flags&entType != 0 {
		t, n := binary.Uvarint(p)
		if n <= 0 || int64(t) < math.MinInt32 || int64(t) > math.MaxInt32 {
			return nil, errors.New("bad type varint")
		}
		b.typ, p = raftpb.EntryType(int64(t)), p[n:]
		e.Type = &b.typ
	}
	if flags&entData != 0 {
		if alias {
			e.Data = p[:len(p):len(p)]
		} else {
			e.Data = a.bytes(len(p))
			copy(e.Data, p)
		}
	} else if len(p) != 0 {
		return nil, fmt.Errorf("%d trailing bytes in an entry without data", len(p))
	}
	return e, nil
}

// decodeEntryTerm returns the term of the entry record v, checking its seal.
func decodeEntryTerm(v []byte) (uint64, error) {
	p, err := unseal(v)
	if err != nil {
		return 0, err
	}
	if len(p) == 0 || p[0]&^entAll != 0 {
		return 0, errors.New("bad entry flags")
	}
	if p[0]&entTerm == 0 {
		return 0, nil
	}
	t, n := binary.Uvarint(p[1:])
	if n <= 0 {
		return 0, errors.New("bad term varint")
	}
	return t, nil
}

// entrySize is proto.Size(e) for an entry without unknown fields, computed
// without reflection. raft's size limits (and MemoryStorage's) use it.
func entrySize(e *raftpb.Entry) uint64 {
	n := 0
	if e.Term != nil {
		n += 1 + protowire.SizeVarint(*e.Term)
	}
	if e.Index != nil {
		n += 1 + protowire.SizeVarint(*e.Index)
	}
	if e.Type != nil {
		n += 1 + protowire.SizeVarint(uint64(int64(*e.Type)))
	}
	if e.Data != nil {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return uint64(n)
}

// Small records in the state bucket. Each is a sequence of uvarints (or a
// protobuf message) followed by the seal; decoders reject trailing bytes.

func appendUvarints(buf []byte, vs ...uint64) []byte {
	start := len(buf)
	for _, v := range vs {
		buf = binary.AppendUvarint(buf, v)
	}
	return seal(buf, start)
}

func decodeUvarints(v []byte, n int) ([]uint64, error) {
	p, err := unseal(v)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		x, m := binary.Uvarint(p)
		if m <= 0 {
			return nil, fmt.Errorf("bad varint in field %d", i)
		}
		out[i], p = x, p[m:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(p))
	}
	return out, nil
}

// Hard state record: flags (bit 0 Term, 1 Vote, 2 Commit set), then the set
// fields as uvarints.
func encodeHardState(hs *raftpb.HardState) []byte {
	return appendHardState(nil, hardStateOf(hs))
}

// hardStateValue is a hard state's fields by value: what a Save keeps of
// the caller's (no pointers into it, no allocation).
type hardStateValue struct {
	term, vote, commit uint64
	flags              byte // bit 0 Term, 1 Vote, 2 Commit set
}

func hardStateOf(hs *raftpb.HardState) hardStateValue {
	v := hardStateValue{term: hs.GetTerm(), vote: hs.GetVote(), commit: hs.GetCommit()}
	for i, p := range [3]*uint64{hs.Term, hs.Vote, hs.Commit} {
		if p != nil {
			v.flags |= 1 << i
		}
	}
	return v
}

// appendHardState appends hs's record to buf.
func appendHardState(buf []byte, hs hardStateValue) []byte {
	start := len(buf)
	buf = append(buf, hs.flags)
	for i, x := range [3]uint64{hs.term, hs.vote, hs.commit} {
		if hs.flags&(1<<i) != 0 {
			buf = binary.AppendUvarint(buf, x)
		}
	}
	return seal(buf, start)
}

// setTo sets hs's fields to v's in place: hs is the Store's own (never
// handed out: InitialState copies it), so only a field that was unset
// allocates.
func (v hardStateValue) setTo(hs *raftpb.HardState) {
	for i, f := range [3]**uint64{&hs.Term, &hs.Vote, &hs.Commit} {
		switch {
		case v.flags&(1<<i) == 0:
			*f = nil
		case *f == nil:
			*f = new([3]uint64{v.term, v.vote, v.commit}[i])
		default:
			**f = [3]uint64{v.term, v.vote, v.commit}[i]
		}
	}
}

func decodeHardState(v []byte) (*raftpb.HardState, error) {
	p, err := unseal(v)
	if err != nil {
		return nil, err
	}
	if len(p) == 0 || p[0]&^7 != 0 {
		return nil, errors.New("bad hard state flags")
	}
	flags := p[0]
	p = p[1:]
	hs := &raftpb.HardState{}
	for i, f := range []**uint64{&hs.Term, &hs.Vote, &hs.Commit} {
		if flags&(1<<i) == 0 {
			continue
		}
		x, m := binary.Uvarint(p)
		if m <= 0 {
			return nil, fmt.Errorf("bad varint in field %d", i)
		}
		*f, p = proto.Uint64(x), p[m:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(p))
	}
	return hs, nil
}

// Snapshot record: the raftpb.Snapshot (metadata and the descriptor in Data)
// marshalled with protobuf; it is small and written once per snapshot.
func encodeSnapshot(s *raftpb.Snapshot) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, err
	}
	return seal(b, 0), nil
}

func decodeSnapshot(v []byte) (*raftpb.Snapshot, error) {
	p, err := unseal(v)
	if err != nil {
		return nil, err
	}
	s := &raftpb.Snapshot{}
	if err := proto.Unmarshal(p, s); err != nil {
		return nil, err
	}
	if len(s.ProtoReflect().GetUnknown()) != 0 {
		return nil, errors.New("unknown fields in snapshot record")
	}
	return raftpb.EnsureSnapshot(s), nil
}
