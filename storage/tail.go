package storage

import (
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"
)

// tailOverhead is what an entry costs in the tail beyond its payload: the
// Entry struct, its pointer fields and the slice slot (approximate).
const tailOverhead = 96

// tail is the in-memory copy of the most recent log entries: ents[i] has
// index start+i, and the last element is the last entry of the log (or ents
// is empty). It holds the *raftpb.Entry values passed to Save (entries are
// immutable by raft's contract), so appending costs no copy. Not safe for
// concurrent use; Store.mu guards it.
type tail struct {
	ents  []*raftpb.Entry
	start uint64
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

func entryCost(e *raftpb.Entry) int64 { return int64(len(e.Data)) + tailOverhead }

// covers reports whether the tail holds index i.
func (t *tail) covers(i uint64) bool {
	return len(t.ents) > 0 && i >= t.start && i < t.start+uint64(len(t.ents))
}

func (t *tail) get(i uint64) *raftpb.Entry { return t.ents[i-t.start] }

// append adds ents (consecutive, ents[0] at most one past the tail's end),
// first dropping tail entries at or after ents[0]'s index (a conflicting
// suffix). The log's last index must then be ents' last.
func (t *tail) append(ents []*raftpb.Entry) {
	if len(ents) > 0 {
		t.lastIndex = 0
	}
	if t.max < 0 || len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	if len(t.ents) == 0 || first < t.start || first > t.start+uint64(len(t.ents)) {
		t.reset()
		t.start = first
	} else {
		t.truncate(first)
	}
	wasEmpty := len(t.ents) == 0
	var d int64
	for _, e := range ents {
		d += entryCost(e)
	}
	t.addBytes(d)
	t.ents = append(t.ents, ents...)
	t.setEmpty(wasEmpty, false)
	t.evict()
}

// truncate drops the entries at index i and after.
func (t *tail) truncate(i uint64) {
	t.lastIndex = 0
	keep := int(i - t.start)
	wasEmpty := len(t.ents) == 0
	var d int64
	for j := keep; j < len(t.ents); j++ {
		d -= entryCost(t.ents[j])
		t.ents[j] = nil
	}
	t.addBytes(d)
	t.ents = t.ents[:keep]
	t.setEmpty(wasEmpty, len(t.ents) == 0)
}

// compact drops the entries at index i and before.
func (t *tail) compact(i uint64) {
	if len(t.ents) == 0 || i < t.start {
		return
	}
	n := min(int(i-t.start+1), len(t.ents))
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
	for n < len(t.ents)-1 && b > limit {
		b -= entryCost(t.ents[n])
		n++
	}
	t.dropFront(n)
}

func (t *tail) dropFront(n int) {
	wasEmpty := len(t.ents) == 0
	var d int64
	for j := 0; j < n; j++ {
		d -= entryCost(t.ents[j])
		t.ents[j] = nil // let the GC have it; the backing array outlives the slot
	}
	t.addBytes(d)
	t.ents = t.ents[n:]
	t.start += uint64(n)
	if len(t.ents) == 0 {
		t.ents = nil
	}
	t.setEmpty(wasEmpty, len(t.ents) == 0)
}

func (t *tail) reset() {
	t.lastIndex = 0
	t.setEmpty(len(t.ents) == 0, true)
	t.addBytes(-t.bytes)
	clear(t.ents)
	t.ents, t.start = nil, 0
}

// dropIdle empties the tail of an idle group but for the last entry's
// index and term (a tail already empty keeps what it kept).
func (t *tail) dropIdle() {
	if len(t.ents) == 0 {
		return
	}
	last := t.ents[len(t.ents)-1]
	t.reset()
	t.lastIndex, t.lastTerm = last.GetIndex(), last.GetTerm()
}

// term returns entry i's term if the tail knows it: an entry it holds, or
// the last one dropIdle kept.
func (t *tail) term(i uint64) (uint64, bool) {
	switch {
	case t.covers(i):
		return t.get(i).GetTerm(), true
	case i != 0 && i == t.lastIndex:
		return t.lastTerm, true
	}
	return 0, false
}
