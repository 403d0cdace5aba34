package raft

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/understudy-raft/understudy/confchange"
)

// Entry payload format (the Data of a normal raft entry):
//
//	byte 0      kind (entryCommand, entrySessionCommand, entrySettings,
//	            entryReadiness: a learner's readiness, see readiness.go,
//	            entrySettingsSeed: settings applied only if none are set,
//	            entryRegisterClient: a client session, see sessions.go, or
//	            entryClientCommand: written by older versions only)
//	bytes 1-8   proposer member ID, big endian
//	bytes 9-16  proposer's sequence number, big endian
//	bytes 17-40 entrySessionCommand only: the caller's RequestID (client,
//	            seq, acked); entryClientCommand: bytes 17-32 (client, seq)
//	rest        the command, as given to Propose; for entrySettings, the
//	            cluster settings (confchange.ClusterSettings.Encode), which the
//	            node applies itself: the state machine never sees them; for
//	            entryRegisterClient, the session bounds (3 x uint32)
//
// The (proposer, sequence) pair identifies the proposal: the proposer
// resolves its caller when it applies the entry, and every member skips a
// pair it applied recently (a proposal duplicated by the network is applied
// once). A session command also carries the caller's RequestID, which every
// member checks against the client's session: a retry through any member is
// applied once (sessions.go). An older version's entryClientCommand is
// checked against the window of the last 8192 client request IDs it used.
const (
	entryCommand       byte = 1
	entryClientCommand byte = 2
	entrySettings      byte = 3
	// entrySettingsSeed is the first leader's seed: applied only while no
	// settings are set, so that it never overrides an update that reached
	// the log before it.
	entrySettingsSeed   byte = 5
	entrySessionCommand byte = 6
	entryRegisterClient byte = 7
	entryHeaderSize          = 17
	clientHeaderSize         = entryHeaderSize + 16
	sessionHeaderSize        = entryHeaderSize + 24
	maxEntryKindKnown        = entryRegisterClient
)

// requestID identifies one proposal cluster-wide.
type requestID struct {
	proposer uint64
	seq      uint64
}

// RequestID identifies a command of a client session across retries
// (Node.ProposeWithID). Client is the ID Node.RegisterClient returned;
// Seq numbers the client's requests, starting at 1 and increasing: a new
// request never reuses or goes below the Seq of an earlier one (a retry
// reuses its own). Acked, optional, tells the cluster that the client has
// the answers of every request with a Seq at or below it, so that their
// results can be dropped; it must be below Seq.
//
// Every member keeps, per session, the results of the client's latest 16
// requests above Acked: a retry of one of them is answered with its first
// result and not applied again, however many other commands were applied
// in between; a request at or below the part the session forgot is
// answered with ErrSessionExpired and not applied. So a client may have up
// to 16 requests outstanding (sent but unanswered) at a time.
type RequestID struct {
	Client uint64
	Seq    uint64
	Acked  uint64
}

func encodeCommand(id requestID, cmd []byte) []byte {
	return appendCommand(make([]byte, 0, entryHeaderSize+len(cmd)), id, RequestID{}, cmd)
}

// appendCommand appends the payload of cmd with id (and rid, if its Client
// is set: a session command) to b.
func appendCommand(b []byte, id requestID, rid RequestID, cmd []byte) []byte {
	kind := entryCommand
	if rid.Client != 0 {
		kind = entrySessionCommand
	}
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	if rid.Client != 0 {
		b = binary.BigEndian.AppendUint64(b, rid.Client)
		b = binary.BigEndian.AppendUint64(b, rid.Seq)
		b = binary.BigEndian.AppendUint64(b, rid.Acked)
	}
	return append(b, cmd...)
}

// appendLegacyClientCommand appends an older version's client command
// (entryClientCommand: no Acked) to b. Only tests write one.
func appendLegacyClientCommand(b []byte, id requestID, rid RequestID, cmd []byte) []byte {
	b = append(b, entryClientCommand)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	b = binary.BigEndian.AppendUint64(b, rid.Client)
	b = binary.BigEndian.AppendUint64(b, rid.Seq)
	return append(b, cmd...)
}

// appendSettings appends the payload of a settings entry with id to b.
func appendSettings(b []byte, id requestID, settings []byte) []byte {
	return appendSettingsKind(b, entrySettings, id, settings)
}

func appendSettingsKind(b []byte, kind byte, id requestID, settings []byte) []byte {
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	return append(b, settings...)
}

// decodeSettings splits a settings entry's payload.
func decodeSettings(b []byte) (requestID, confchange.ClusterSettings, error) {
	if len(b) < entryHeaderSize || (b[0] != entrySettings && b[0] != entrySettingsSeed) {
		return requestID{}, confchange.ClusterSettings{}, fmt.Errorf("%w: not a settings entry", ErrCorruptEntry)
	}
	id := requestID{proposer: binary.BigEndian.Uint64(b[1:9]), seq: binary.BigEndian.Uint64(b[9:17])}
	cs, err := confchange.DecodeClusterSettings(b[entryHeaderSize:])
	return id, cs, err
}

// payloadSize is the size of the payload appendCommand makes.
func payloadSize(rid RequestID, cmd []byte) int {
	if rid.Client != 0 {
		return sessionHeaderSize + len(cmd)
	}
	return entryHeaderSize + len(cmd)
}

// decodeCommand splits an entry payload; rid.Client is 0 for a plain
// command (b[0] tells a session command from an older version's client
// command). It never panics on bad input.
func decodeCommand(b []byte) (id requestID, rid RequestID, cmd []byte, err error) {
	if len(b) < entryHeaderSize {
		return id, rid, nil, fmt.Errorf("%w: payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), entryHeaderSize)
	}
	switch b[0] {
	case entryCommand, entryClientCommand, entrySessionCommand:
	default:
		return id, rid, nil, fmt.Errorf("%w: unknown entry kind %d (this version knows up to %d)", ErrCorruptEntry, b[0], maxEntryKindKnown)
	}
	id = requestID{
		proposer: binary.BigEndian.Uint64(b[1:9]),
		seq:      binary.BigEndian.Uint64(b[9:17]),
	}
	if b[0] == entryCommand {
		return id, rid, b[entryHeaderSize:], nil
	}
	size := clientHeaderSize
	if b[0] == entrySessionCommand {
		size = sessionHeaderSize
	}
	if len(b) < size {
		return id, rid, nil, fmt.Errorf("%w: client payload of %d bytes is shorter than the %d-byte header", ErrCorruptEntry, len(b), size)
	}
	rid = RequestID{Client: binary.BigEndian.Uint64(b[17:25]), Seq: binary.BigEndian.Uint64(b[25:33])}
	if size == sessionHeaderSize {
		rid.Acked = binary.BigEndian.Uint64(b[33:41])
	}
	if rid.Client == 0 {
		return id, rid, nil, fmt.Errorf("%w: client payload with client ID 0", ErrCorruptEntry)
	}
	return id, rid, b[size:], nil
}

// dedupWindow remembers the last `size` distinct request IDs added to it
// (those of the applied commands), first in, first out: adding one it holds
// changes nothing. It is deterministic (by log position, never by time), so
// that every member skips the same duplicates, and part of the snapshot
// (ids, reset).
//
// The IDs are kept in a ring, oldest at head, and found through an exact
// index over the ring: an open-addressing hash table (linear probing,
// deletion by backward shift, so no tombstones) of ring positions+1 (0 is a
// free slot), uint16 while size <= 65535, else uint32, at most half full.
// What it costs: nothing until the first add (an idle member's windows are
// empty), then ring and index grow by doubling with the IDs held; a full
// window of size n holds the ring, 16n bytes, and an index of the next power
// of two >= 2n slots: 160 KiB for n = 8192 (a Go map in place of the index
// made it about 560 KiB). An add hashes the ID, probes the index (about two
// slots on average, each compared against the ring) and, when full, unlinks
// the evicted ID (hashed again); it allocates only while the window grows.
//
// The hash is seeded per window at random: the seed decides only where an
// ID sits in the index, never whether it is remembered, so members still
// agree, while nobody choosing request IDs can aim them at one cluster of
// slots.
type dedupWindow struct {
	size int
	seed uint64
	ring []requestID // FIFO of remembered IDs, oldest at head; cap <= size
	head int
	// The index, power-of-two length, at most half full: idx16 while
	// size <= math.MaxUint16, else idx32 (the other stays nil).
	idx16 []uint16
	idx32 []uint32
}

// dedupMinIndex is the index length of a window's first add (smaller only
// if the window is smaller: the next power of two >= 2×size).
const dedupMinIndex = 16

func newDedupWindow(size int) *dedupWindow {
	if size < 1 || uint64(size) > math.MaxUint32 {
		panic(fmt.Sprintf("raft: dedup window size %d out of range", size))
	}
	return &dedupWindow{size: size, seed: rand.Uint64()}
}

// add records id and reports whether it was new.
func (d *dedupWindow) add(id requestID) bool {
	if d.size <= math.MaxUint16 {
		return dedupAdd(d, &d.idx16, id)
	}
	return dedupAdd(d, &d.idx32, id)
}

// ids returns the remembered IDs, oldest first (none for a nil window).
func (d *dedupWindow) ids() []requestID {
	if d == nil {
		return nil
	}
	out := make([]requestID, 0, len(d.ring))
	out = append(out, d.ring[d.head:]...)
	return append(out, d.ring[:d.head]...)
}

// reset replaces the contents with ids (oldest first), as if added in that
// order to an empty window. The memory is sized for them (none if empty).
func (d *dedupWindow) reset(ids []requestID) {
	d.ring, d.idx16, d.idx32, d.head = nil, nil, nil, 0
	if n := min(len(ids), d.size); n > 0 {
		d.ring = make([]requestID, 0, n)
		l := max(dedupIndexLen(n), min(dedupMinIndex, dedupIndexLen(d.size)))
		if d.size <= math.MaxUint16 {
			d.idx16 = make([]uint16, l)
		} else {
			d.idx32 = make([]uint32, l)
		}
	}
	for _, id := range ids {
		d.add(id)
	}
}

// dedupIndexLen is the index length for n IDs: the next power of two >= 2n.
func dedupIndexLen(n int) int {
	return 1 << bits.Len(uint(2*n-1))
}

// hash mixes id with the window's seed (murmur3's finalizer): a proposer's
// consecutive sequence numbers land on unrelated slots.
func (d *dedupWindow) hash(id requestID) uint {
	h := (id.proposer^d.seed)*0x9e3779b97f4a7c15 ^ id.seq
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint(h)
}

func dedupAdd[S uint16 | uint32](d *dedupWindow, index *[]S, id requestID) bool {
	idx := *index
	h := d.hash(id)
	if len(idx) > 0 {
		mask := uint(len(idx) - 1)
		for i := h & mask; idx[i] != 0; i = (i + 1) & mask {
			if d.ring[idx[i]-1] == id {
				return false
			}
		}
	}
	if len(d.ring) < d.size { // not full yet: head is 0, the ring only grows
		if len(d.ring) == cap(d.ring) {
			ring := make([]requestID, len(d.ring), min(d.size, max(8, 2*cap(d.ring))))
			copy(ring, d.ring)
			d.ring = ring
		}
		d.ring = append(d.ring, id)
		if 2*len(d.ring) > len(idx) {
			idx = make([]S, max(2*len(idx), min(dedupMinIndex, dedupIndexLen(d.size))))
			*index = idx
			for p := range d.ring[:len(d.ring)-1] {
				dedupInsert(idx, d.hash(d.ring[p]), S(p+1))
			}
		}
		dedupInsert(idx, h, S(len(d.ring)))
		return true
	}
	dedupDelete(d, idx, d.head)
	d.ring[d.head] = id
	dedupInsert(idx, h, S(d.head+1))
	if d.head++; d.head == d.size {
		d.head = 0
	}
	return true
}

// dedupInsert puts ring position+1 v into the first free slot from h.
func dedupInsert[S uint16 | uint32](idx []S, h uint, v S) {
	mask := uint(len(idx) - 1)
	i := h & mask
	for idx[i] != 0 {
		i = (i + 1) & mask
	}
	idx[i] = v
}

// dedupDelete unlinks ring position p from the index and shifts back the
// entries after it in its cluster that may move (Knuth's algorithm R), so a
// probe still finds every remaining entry before the first free slot.
func dedupDelete[S uint16 | uint32](d *dedupWindow, idx []S, p int) {
	mask := uint(len(idx) - 1)
	v := S(p + 1)
	i := d.hash(d.ring[p]) & mask
	for idx[i] != v {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; idx[j] != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home slot k
		// lies cyclically in (i, j].
		k := d.hash(d.ring[idx[j]-1]) & mask
		if (j-k)&mask >= (j-i)&mask {
			idx[i] = idx[j]
			i = j
		}
	}
	idx[i] = 0
}
