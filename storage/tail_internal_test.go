package storage

import (
	"bytes"
	"runtime"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// tailEntry makes entry i of term with a payload of n bytes (its bytes
// name the entry, so a payload overwritten by another shows).
func tailEntry(i, term uint64, n int) *raftpb.Entry {
	data := bytes.Repeat([]byte{byte(i), byte(term)}, n/2+1)[:n]
	return &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term), Data: data}
}

// readTail decodes the tail's entries [lo, hi).
func readTail(t *testing.T, tl *tail, lo, hi uint64) []*raftpb.Entry {
	t.Helper()
	var a entryAlloc
	var out []*raftpb.Entry
	for i := lo; i < hi; i++ {
		if !tl.covers(i) {
			t.Fatalf("the tail does not hold entry %d (it holds %d from %d)", i, tl.len(), tl.start)
		}
		e, err := tl.entry(i, &a, int(hi-i))
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}

// TestTailKeepsPresence: an entry read back from the tail is proto.Equal to
// the one appended, field presence included (no Type, an empty but present
// Data, no Data), and its term is known without decoding.
func TestTailKeepsPresence(t *testing.T) {
	tl := &tail{max: 1 << 20}
	conf := raftpb.EntryType_EntryConfChangeV2
	in := []*raftpb.Entry{
		{Index: proto.Uint64(5), Term: proto.Uint64(2)},
		{Index: proto.Uint64(6), Term: proto.Uint64(2), Data: []byte{}},
		{Index: proto.Uint64(7), Term: proto.Uint64(3), Type: &conf, Data: []byte("change")},
		{Index: proto.Uint64(8), Term: proto.Uint64(1 << 40), Data: bytes.Repeat([]byte("x"), 3*maxTailChunk)}, // a chunk of its own
		{Index: proto.Uint64(9), Term: proto.Uint64(1 << 40), Data: []byte("after")},
	}
	tl.append(in)
	got := readTail(t, tl, 5, 10)
	for j := range in {
		if !proto.Equal(in[j], got[j]) {
			t.Fatalf("entry %d: got %v, want %v", in[j].GetIndex(), got[j], in[j])
		}
		if term, ok := tl.term(in[j].GetIndex()); !ok || term != in[j].GetTerm() {
			t.Fatalf("term(%d) = %d, %v; want %d", in[j].GetIndex(), term, ok, in[j].GetTerm())
		}
	}
	if got[1].Data == nil || got[0].Data != nil {
		t.Fatalf("Data presence lost: %v / %v", got[0].Data, got[1].Data)
	}
}

// TestTailEntriesOutliveOverwrites: entries handed out keep their payloads
// while the tail truncates them, appends conflicting entries in their place,
// evicts and compacts: chunk bytes are written once.
func TestTailEntriesOutliveOverwrites(t *testing.T) {
	tl := &tail{max: 64 << 10}
	var in []*raftpb.Entry
	for i := uint64(1); i <= 100; i++ {
		in = append(in, tailEntry(i, 1, 300))
	}
	tl.append(in)
	held := readTail(t, tl, 50, 101)
	// A new leader's log replaces entries 50 and on.
	var repl []*raftpb.Entry
	for i := uint64(50); i <= 400; i++ {
		repl = append(repl, tailEntry(i, 2, 300))
	}
	tl.append(repl)
	tl.compact(300)
	for j, e := range held {
		if want := in[49+j]; !proto.Equal(e, want) {
			t.Fatalf("entry %d read before the overwrite changed: term %d, data %x...", want.GetIndex(), e.GetTerm(), e.Data[:4])
		}
	}
	// The tail evicted down to its budget and reads the replacing entries.
	if tl.bytes > tl.max || tl.len() == 0 {
		t.Fatalf("the tail holds %d bytes in %d entries, budget %d", tl.bytes, tl.len(), tl.max)
	}
	last := tl.start + uint64(tl.len())
	for j, e := range readTail(t, tl, tl.start, last) {
		if want := repl[tl.start-50+uint64(j)]; !proto.Equal(e, want) {
			t.Fatalf("entry %d: term %d, want %d", want.GetIndex(), e.GetTerm(), want.GetTerm())
		}
	}
}

// TestTailAccountsAndReleases: the tail's byte count is the sum of its
// entries' costs through appends, truncations, evictions and compactions,
// zero when it is empty, and it lets go of the chunks no entry is in.
func TestTailAccountsAndReleases(t *testing.T) {
	budget := &tailBudget{max: 1 << 30}
	tl := &tail{max: 1 << 20, shared: budget}
	check := func(step string) {
		t.Helper()
		var want int64
		for _, l := range tl.locs {
			want += locCost(l)
		}
		if tl.bytes != want || budget.bytes.Load() != want {
			t.Fatalf("%s: the tail counts %d bytes, the budget %d; its entries cost %d", step, tl.bytes, budget.bytes.Load(), want)
		}
		if want := int64(min(tl.len(), 1)); budget.groups.Load() != want {
			t.Fatalf("%s: the budget counts %d groups with entries, want %d", step, budget.groups.Load(), want)
		}
		if tl.len() == 0 && tl.ch != nil {
			t.Fatalf("%s: an empty tail holds %d chunks", step, len(tl.ch.bufs))
		}
		if tl.len() > 0 {
			first := tl.locs[0].chunk - tl.ch.first
			if first != 0 {
				t.Fatalf("%s: the tail holds %d chunks before its first entry's", step, first)
			}
		}
	}
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 2000; i++ {
		ents = append(ents, tailEntry(i, 1, 200+int(i%7)*50))
	}
	tl.append(ents[:1000])
	check("append")
	tl.append(ents[1000:])
	check("append more")
	chunks := len(tl.ch.bufs)
	tl.truncate(1500)
	check("truncate")
	tl.append([]*raftpb.Entry{tailEntry(1500, 2, 10)})
	check("append after the truncation")
	tl.compact(1200)
	check("compact")
	if len(tl.ch.bufs) >= chunks {
		t.Fatalf("compacting 1,200 of 1,500 entries kept %d of %d chunks", len(tl.ch.bufs), chunks)
	}
	tl.evictTo(10 << 10)
	check("evict")
	tl.dropIdle()
	check("drop idle")
	if term, ok := tl.term(1500); !ok || term != 2 {
		t.Fatalf("after dropIdle: term(1500) = %d, %v; want 2", term, ok)
	}
	tl.append(ents[:10])
	tl.reset()
	check("reset")
}

// TestTailHoldsFewObjects: a tail of many entries is a few chunks for the
// garbage collector, not objects per entry; appending copies the entries,
// so the caller's are garbage once the tail took them.
func TestTailHoldsFewObjects(t *testing.T) {
	tl := &tail{max: 64 << 20}
	const n = 20000
	var ents []*raftpb.Entry
	for i := uint64(1); i <= n; i++ {
		ents = append(ents, tailEntry(i, 1, 256))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tl.append(ents)
	ents = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The chunks (20,000 records of ~260 bytes in chunks of at most 64
	// KiB: about 80) and the locations' array; the entries appended are
	// not among them.
	if objs := int64(after.HeapObjects) - int64(before.HeapObjects); objs > n/10 {
		t.Fatalf("the tail of %d entries added %d live heap objects", n, objs)
	}
	if tl.len() != n {
		t.Fatalf("the tail holds %d entries, want %d", tl.len(), n)
	}
	runtime.KeepAlive(tl)
}

// TestTailChunksFollowTheBudget: a group whose share of the engine's budget
// is small writes small chunks, so the memory its tail holds (chunks
// included) stays near what the budgets count.
func TestTailChunksFollowTheBudget(t *testing.T) {
	for _, max := range []int64{16 << 10, 1 << 20} {
		tl := &tail{max: max}
		for i := uint64(1); i <= 5000; i++ {
			tl.append([]*raftpb.Entry{tailEntry(i, 1, 200)})
		}
		var held int
		for _, c := range tl.ch.bufs {
			held += cap(c)
		}
		if limit := int(max) + int(max)/2 + 2*minTailChunk; held > limit {
			t.Fatalf("budget %d: the tail's chunks hold %d bytes (for %d counted), over %d", max, held, tl.bytes, limit)
		}
	}
}

// TestTailReadAllocations: reading entries from the tail costs the
// returned slice and one block of entries for the batch, however many it
// returns (the payloads are the chunks' bytes, not copies).
func TestTailReadAllocations(t *testing.T) {
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true})
	s := group(t, e, 1)
	if err := s.Save(nil, ents(1, 201, 1), nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{1, 10, 200} {
		var got []*raftpb.Entry
		allocs := testing.AllocsPerRun(50, func() {
			var err error
			if got, err = s.Entries(1, 1+n, raftNoLimit); err != nil {
				t.Fatal(err)
			}
		})
		if uint64(len(got)) != n {
			t.Fatalf("read %d entries, want %d", len(got), n)
		}
		if allocs > 2 {
			t.Fatalf("reading %d entries from the tail: %.0f allocations, want at most 2", n, allocs)
		}
	}
}
