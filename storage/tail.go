package storage

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"
)

// tailLocSize is what an entry's location costs (tailLoc).
const tailLocSize = int64(unsafe.Sizeof(tailLoc{}))

// tailOverhead bounds what an entry costs in the tail beyond its payload:
// its location and its record's header (flags, term and type varints).
const tailOverhead = tailLocSize + 1 + 2*binary.MaxVarintLen64

// tail is the in-memory copy of the most recent log entries: entry start+i
// is locs[i], and the last is the last entry of the log (or locs is empty).
//
// It holds the entries as records (appendEntryBody's, without the seal) in
// chunks of bytes, and each entry's place and term in locs: memory the
// garbage collector does not scan. Held as *raftpb.Entry values, a busy
// host's tails (up to EngineOptions.TailCacheBytes) were millions of small
// objects that every collection had to mark, and its mark phases grew with
// the tails to seconds. Reads decode the entries they return (one
// allocation for a batch); their Data is the chunk's bytes, not a copy.
//
// Chunk bytes are written once: a truncation or an eviction drops
// locations, never rewrites a chunk's bytes, so an entry handed out stays
// valid while the tail goes on. A chunk is let go once no location is in
// it. Not safe for concurrent use; Store.mu guards it.
type tail struct {
	locs  []tailLoc
	start uint64
	// ch holds the records (nil while the tail is empty: a Store per
	// replica of a host's many groups stays small).
	ch    *tailChunks
	bytes int64
	max   int64 // the group's budget; < 0 disables
	// shared is the engine's budget for every group's tail, or nil.
	shared *tailBudget
	// lastIndex and lastTerm are the last entry's, kept by dropIdle when
	// it empties the tail (0: none): raft asks for the last term of an
	// idle group's log on every election it holds or votes in, which
	// would otherwise be a database read each. Any change of the log's
	// end (append, truncate, reset) forgets them.
	lastIndex, lastTerm uint64
}

// tailChunks are a tail's chunks of records: bufs[0] has sequence number
// first (a location names its chunk by sequence number, so dropping chunks
// from the front renumbers nothing). Only the last has room to write in.
type tailChunks struct {
	bufs  [][]byte
	first uint32
}

// tailLoc is where one entry's record is: in chunk (a sequence number) at
// off, n bytes; and its term (for Term, without decoding).
type tailLoc struct {
	term   uint64
	chunk  uint32
	off, n uint32
}

// Chunk sizes: a group's first chunk is small (a host of many groups has
// many that write rarely), each next one twice the last, up to
// maxTailChunk and to a quarter of the group's budget; a record larger
// than that gets a chunk of its own.
const (
	minTailChunk = 4 << 10
	maxTailChunk = 64 << 10
)

// tailBudget is the engine's bound on its groups' tails together
// (EngineOptions.TailCacheBytes): while they hold more, a group that holds
// more than an equal share gives back its oldest entries as it appends, so
// that a few busy groups may use much of the budget while many idle ones
// hold little, and the total stays near the bound.
type tailBudget struct {
	max      int64
	bytes    atomic.Int64 // every group's tail bytes
	groups   atomic.Int64 // groups whose tail holds entries
	trimming atomic.Bool  // a trimTails runs
}

// over reports whether the groups' tails hold more than the budget.
func (b *tailBudget) over() bool { return b != nil && b.bytes.Load() > b.max }

// addBytes accounts d more (or fewer) bytes to t and to the shared budget.
func (t *tail) addBytes(d int64) {
	t.bytes += d
	if t.shared != nil {
		t.shared.bytes.Add(d)
	}
}

// setEmpty tracks the group count of the shared budget as t's tail goes
// from holding entries to empty (empty true) or back.
func (t *tail) setEmpty(wasEmpty, empty bool) {
	if t.shared == nil || wasEmpty == empty {
		return
	}
	if empty {
		t.shared.groups.Add(-1)
	} else {
		t.shared.groups.Add(1)
	}
}

// limit is the group's budget now: its own, or less while the engine's
// groups together hold more than the engine's budget.
func (t *tail) limit() int64 {
	b := t.shared
	if b == nil || b.bytes.Load() <= b.max {
		return t.max
	}
	return min(t.max, b.max/max(b.groups.Load(), 1))
}

// entryCost is what e costs the tail's budgets: its record and location.
func entryCost(e *raftpb.Entry) int64 { return int64(entryBodySize(e)) + tailLocSize }

// locCost is entryCost of the entry at l.
func locCost(l tailLoc) int64 { return int64(l.n) + tailLocSize }

// len returns how many entries the tail holds.
func (t *tail) len() int { return len(t.locs) }

// covers reports whether the tail holds index i.
func (t *tail) covers(i uint64) bool {
	return len(t.locs) > 0 && i >= t.start && i < t.start+uint64(len(t.locs))
}

// entry decodes entry i (covers(i) must hold) with a's allocations; hint is
// how many more the caller expects (as decodeEntry's). Its Data is the
// chunk's bytes.
func (t *tail) entry(i uint64, a *entryAlloc, hint int) (*raftpb.Entry, error) {
	l := t.locs[i-t.start]
	c := t.ch.bufs[l.chunk-t.ch.first]
	return parseEntryBody(i, c[l.off:l.off+l.n:l.off+l.n], a, hint, true)
}

// fits returns about how many of the tail's entries from lo (before hi)
// fit in maxSize bytes as entrySize counts them (at least one): an
// estimate from the records' lengths, to size a read's allocation.
func (t *tail) fits(lo, hi, maxSize uint64) int {
	var size uint64
	n := 0
	for _, l := range t.locs[lo-t.start : hi-t.start] {
		// The record's header stands for the term and type fields; the
		// index and the data's tag and length add about 12 bytes.
		size += uint64(l.n) + 12
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	return max(n, 1)
}

// append adds ents (consecutive, ents[0] at most one past the tail's end),
// first dropping tail entries at or after ents[0]'s index (a conflicting
// suffix). The log's last index must then be ents' last. The tail keeps
// copies: ents are the caller's again.
func (t *tail) append(ents []*raftpb.Entry) {
	if len(ents) > 0 {
		t.lastIndex = 0
	}
	if t.max < 0 || len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	if len(t.locs) == 0 || first < t.start || first > t.start+uint64(len(t.locs)) {
		t.reset()
		t.start = first
	} else {
		t.truncate(first)
	}
	wasEmpty := len(t.locs) == 0
	var d int64
	for _, e := range ents {
		n := entryBodySize(e)
		k := t.room(n)
		c := t.ch.bufs[k]
		off := len(c)
		t.ch.bufs[k] = appendEntryBody(c, e)
		t.locs = append(t.locs, tailLoc{term: e.GetTerm(), chunk: t.ch.first + uint32(k), off: uint32(off), n: uint32(n)})
		d += locCost(t.locs[len(t.locs)-1])
	}
	t.addBytes(d)
	t.setEmpty(wasEmpty, false)
	t.evict()
}

// room returns the index in t.ch.bufs of the last chunk, with room made
// for a record of n bytes: a new chunk if the last has too little.
func (t *tail) room(n int) int {
	if t.ch == nil {
		t.ch = &tailChunks{}
	}
	b := t.ch.bufs
	if k := len(b) - 1; k >= 0 && cap(b[k])-len(b[k]) >= n {
		return k
	}
	size := minTailChunk
	if k := len(b) - 1; k >= 0 {
		// At most a quarter of the group's budget now, so that what the
		// budgets do not count (the unused end of the last chunk, the
		// evicted records that share a chunk with held ones) stays a
		// fraction of what they do: a host of 10,000 busy groups shares
		// its budget out in a few KiB each.
		size = min(2*cap(b[k]), maxTailChunk, max(minTailChunk, int(t.limit()/4)))
	}
	t.ch.bufs = append(b, make([]byte, 0, max(size, n)))
	return len(t.ch.bufs) - 1
}

// truncate drops the entries at index i and after. Their bytes stay in
// their chunk (an entry handed out may still read them); appends go on
// after them.
func (t *tail) truncate(i uint64) {
	t.lastIndex = 0
	keep := int(i - t.start)
	wasEmpty := len(t.locs) == 0
	var d int64
	for _, l := range t.locs[keep:] {
		d -= locCost(l)
	}
	t.addBytes(d)
	t.locs = t.locs[:keep]
	if len(t.locs) == 0 {
		t.releaseChunks()
	}
	t.setEmpty(wasEmpty, len(t.locs) == 0)
}

// compact drops the entries at index i and before.
func (t *tail) compact(i uint64) {
	if len(t.locs) == 0 || i < t.start {
		return
	}
	n := min(int(i-t.start+1), len(t.locs))
	t.dropFront(n)
}

// evict drops the oldest entries while the tail is over budget, keeping at
// least the last one.
func (t *tail) evict() { t.evictTo(t.limit()) }

// evictTo drops the oldest entries while the tail holds more than limit
// bytes, keeping at least the last one.
func (t *tail) evictTo(limit int64) {
	n := 0
	b := t.bytes
	for n < len(t.locs)-1 && b > limit {
		b -= locCost(t.locs[n])
		n++
	}
	t.dropFront(n)
}

func (t *tail) dropFront(n int) {
	if n == 0 {
		return
	}
	wasEmpty := len(t.locs) == 0
	var d int64
	for _, l := range t.locs[:n] {
		d -= locCost(l)
	}
	t.addBytes(d)
	t.locs = t.locs[n:]
	t.start += uint64(n)
	if len(t.locs) == 0 {
		t.locs = nil
		t.releaseChunks()
	} else if k := t.locs[0].chunk - t.ch.first; k > 0 {
		// Let the GC have the chunks no location is in.
		clear(t.ch.bufs[:k])
		t.ch.bufs = t.ch.bufs[k:]
		t.ch.first += k
	}
	t.setEmpty(wasEmpty, len(t.locs) == 0)
}

// releaseChunks lets go of every chunk (the tail holds no entry).
func (t *tail) releaseChunks() { t.ch = nil }

func (t *tail) reset() {
	t.lastIndex = 0
	t.setEmpty(len(t.locs) == 0, true)
	t.addBytes(-t.bytes)
	t.locs, t.start = nil, 0
	t.releaseChunks()
}

// dropIdle empties the tail of an idle group but for the last entry's
// index and term (a tail already empty keeps what it kept).
func (t *tail) dropIdle() {
	if len(t.locs) == 0 {
		return
	}
	last, lastTerm := t.start+uint64(len(t.locs))-1, t.locs[len(t.locs)-1].term
	t.reset()
	t.lastIndex, t.lastTerm = last, lastTerm
}

// term returns entry i's term if the tail knows it: an entry it holds, or
// the last one dropIdle kept.
func (t *tail) term(i uint64) (uint64, bool) {
	switch {
	case t.covers(i):
		return t.locs[i-t.start].term, true
	case i != 0 && i == t.lastIndex:
		return t.lastTerm, true
	}
	return 0, false
}
