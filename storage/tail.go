package storage

import "go.etcd.io/raft/v3/raftpb"

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
	max   int64 // budget; < 0 disables
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
	for _, e := range ents {
		t.bytes += entryCost(e)
	}
	t.ents = append(t.ents, ents...)
	t.evict()
}

// truncate drops the entries at index i and after.
func (t *tail) truncate(i uint64) {
	keep := int(i - t.start)
	for j := keep; j < len(t.ents); j++ {
		t.bytes -= entryCost(t.ents[j])
		t.ents[j] = nil
	}
	t.ents = t.ents[:keep]
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
func (t *tail) evict() {
	n := 0
	b := t.bytes
	for n < len(t.ents)-1 && b > t.max {
		b -= entryCost(t.ents[n])
		n++
	}
	t.dropFront(n)
}

func (t *tail) dropFront(n int) {
	for j := 0; j < n; j++ {
		t.bytes -= entryCost(t.ents[j])
		t.ents[j] = nil // let the GC have it; the backing array outlives the slot
	}
	t.ents = t.ents[n:]
	t.start += uint64(n)
	if len(t.ents) == 0 {
		t.ents = nil
	}
}

func (t *tail) reset() {
	clear(t.ents)
	t.ents, t.start, t.bytes = nil, 0, 0
}
