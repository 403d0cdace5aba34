package raft

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// mapDedupWindow is the dedupWindow as it was before its compact index (a
// map plus the ring): the reference the index must agree with exactly.
type mapDedupWindow struct {
	size int
	seen map[requestID]struct{}
	ring []requestID // FIFO of remembered IDs, oldest at head
	head int
}

func newMapDedupWindow(size int) *mapDedupWindow {
	return &mapDedupWindow{size: size, seen: make(map[requestID]struct{})}
}

func (d *mapDedupWindow) add(id requestID) bool {
	if _, dup := d.seen[id]; dup {
		return false
	}
	d.seen[id] = struct{}{}
	if len(d.ring) < d.size {
		d.ring = append(d.ring, id)
		return true
	}
	delete(d.seen, d.ring[d.head])
	d.ring[d.head] = id
	d.head = (d.head + 1) % d.size
	return true
}

func (d *mapDedupWindow) ids() []requestID {
	out := make([]requestID, 0, len(d.ring))
	out = append(out, d.ring[d.head:]...)
	return append(out, d.ring[:d.head]...)
}

func (d *mapDedupWindow) reset(ids []requestID) {
	d.seen = make(map[requestID]struct{}, min(len(ids), d.size))
	d.ring = nil
	d.head = 0
	for _, id := range ids {
		d.add(id)
	}
}

// dedupPair drives a dedupWindow and its reference side by side.
type dedupPair struct {
	tb  testing.TB
	d   *dedupWindow
	ref *mapDedupWindow
	ops int // adds
	// checked counts the IDs compared by checkIDs (the work it did).
	checked int
}

func newDedupPair(tb testing.TB, size int, seed uint64) *dedupPair {
	d := newDedupWindow(size)
	d.seed = seed
	return &dedupPair{tb: tb, d: d, ref: newMapDedupWindow(size)}
}

func (p *dedupPair) add(id requestID) {
	p.ops++
	got, want := p.d.add(id), p.ref.add(id)
	if got != want {
		p.tb.Fatalf("size %d, op %d: add(%v) = %v, reference %v", p.d.size, p.ops, id, got, want)
	}
}

func (p *dedupPair) checkIDs() []requestID {
	got, want := p.d.ids(), p.ref.ids()
	p.checked += len(got) + 1
	if !slices.Equal(got, want) || (got == nil) != (want == nil) {
		p.tb.Fatalf("size %d, op %d: ids() = %v, reference %v", p.d.size, p.ops, got, want)
	}
	p.checkIndex()
	return got
}

// reset gives both windows ids and checks they agree afterwards.
func (p *dedupPair) reset(ids []requestID) {
	p.d.reset(ids)
	p.ref.reset(ids)
	p.checkIDs()
}

// checkIndex checks the index's invariants: it holds exactly one slot per
// ring position, every entry is reachable from its home slot without
// crossing a free slot, it is at most half full, and its length never
// exceeds what a full window needs.
func (p *dedupPair) checkIndex() {
	d := p.d
	var idx []uint32
	for _, v := range d.idx16 {
		idx = append(idx, uint32(v))
	}
	idx = append(idx, d.idx32...)
	if len(d.ring) == 0 {
		return
	}
	if len(idx)&(len(idx)-1) != 0 || 2*len(d.ring) > len(idx) || len(idx) > dedupIndexLen(d.size) || cap(d.ring) > d.size {
		p.tb.Fatalf("size %d, op %d: ring %d (cap %d), index %d", d.size, p.ops, len(d.ring), cap(d.ring), len(idx))
	}
	mask := uint(len(idx) - 1)
	seen := make([]bool, len(d.ring))
	for i, v := range idx {
		if v == 0 {
			continue
		}
		pos := int(v - 1)
		if pos >= len(d.ring) || seen[pos] {
			p.tb.Fatalf("size %d, op %d: index slot %d holds %d (ring %d)", d.size, p.ops, i, v, len(d.ring))
		}
		seen[pos] = true
		for j := d.hash(d.ring[pos]) & mask; j != uint(i); j = (j + 1) & mask {
			if idx[j] == 0 {
				p.tb.Fatalf("size %d, op %d: slot %d unreachable from its home across free slot %d", d.size, p.ops, i, j)
			}
		}
	}
	for pos, ok := range seen {
		if !ok {
			p.tb.Fatalf("size %d, op %d: ring position %d not indexed", d.size, p.ops, pos)
		}
	}
}

func TestDedupWindowMatchesReference(t *testing.T) {
	for _, size := range []int{1, 2, 3, 7, 64, 8192} {
		for run := range 3 {
			t.Run(fmt.Sprintf("size=%d/run=%d", size, run), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(size), uint64(run)))
				seed := rng.Uint64()
				if run == 0 {
					seed = 0
				}
				p := newDedupPair(t, size, seed)
				nops := 20*size + 5000
				if testing.Short() {
					nops = 4*size + 1000
				}
				next := map[uint64]uint64{} // each proposer's next consecutive seq
				var recent []requestID
				checkEvery := 2*size + 10
				for range nops {
					var id requestID
					switch r := rng.IntN(100); {
					case r < 40: // a proposer's next sequence number
						prop := uint64(1 + rng.IntN(4))
						next[prop]++
						id = requestID{prop, next[prop]}
					case r < 60 && len(recent) > 0: // a recent ID again (duplicate or evicted)
						id = recent[len(recent)-1-rng.IntN(min(len(recent), 2*size+2))]
					case r < 80: // small random IDs: many repeats
						id = requestID{uint64(rng.IntN(3)), uint64(rng.IntN(2*size + 4))}
					case r < 90: // a proposer's old or future sequence number
						prop := uint64(1 + rng.IntN(4))
						id = requestID{prop, next[prop] - uint64(rng.IntN(3*size+3)) + 2}
					default: // anything
						id = requestID{rng.Uint64() >> rng.IntN(64), rng.Uint64() >> rng.IntN(64)}
					}
					p.add(id)
					if recent = append(recent, id); len(recent) > 1<<16 {
						recent = slices.Clone(recent[len(recent)/2:])
					}
					switch r := rng.IntN(checkEvery); {
					case r == 0:
						p.checkIDs()
					case r == 1: // snapshot round trip
						p.reset(p.checkIDs())
					case r == 2 && rng.IntN(4) == 0: // restore from another window's contents
						ids := slices.Clone(recent[len(recent)-rng.IntN(min(len(recent), 3*size)+1):])
						p.reset(ids)
					case r == 3 && rng.IntN(8) == 0:
						p.reset(nil)
					}
				}
				p.checkIDs()
			})
		}
	}
}

func TestDedupWindowLazy(t *testing.T) {
	d := newDedupWindow(dedupWindowSize)
	if d.ring != nil || d.idx16 != nil || d.idx32 != nil || len(d.ids()) != 0 {
		t.Fatal("a new window holds memory")
	}
	d.reset(nil)
	if d.ring != nil || d.idx16 != nil {
		t.Fatal("an empty reset allocated")
	}
	d.add(requestID{1, 1})
	if cap(d.ring) != 8 || len(d.idx16) != dedupMinIndex || d.idx32 != nil {
		t.Fatalf("after one add: ring cap %d, index %d", cap(d.ring), len(d.idx16))
	}
	for seq := uint64(2); seq <= 3*dedupWindowSize; seq++ {
		d.add(requestID{1, seq})
	}
	if cap(d.ring) != dedupWindowSize || len(d.idx16) != 2*dedupWindowSize {
		t.Fatalf("full: ring cap %d, index %d", cap(d.ring), len(d.idx16))
	}
	d.reset(d.ids()[dedupWindowSize-5:])
	if cap(d.ring) != 5 || len(d.idx16) != dedupMinIndex {
		t.Fatalf("after a reset to 5 IDs: ring cap %d, index %d", cap(d.ring), len(d.idx16))
	}
	d.reset(nil)
	if d.ring != nil || d.idx16 != nil || len(d.ids()) != 0 {
		t.Fatal("an empty reset kept memory")
	}
}

// TestDedupWindowLarge covers the uint32 index (size > 65535).
func TestDedupWindowLarge(t *testing.T) {
	const size = 70000
	p := newDedupPair(t, size, 1)
	for seq := range uint64(size + 5000) {
		p.add(requestID{seq % 3, seq / 3})
		if seq%10 == 0 {
			p.add(requestID{seq % 3, seq / 3})
		}
	}
	for seq := range uint64(size + 5000) {
		p.add(requestID{seq % 3, seq / 3})
	}
	if p.d.idx16 != nil || len(p.d.idx32) != dedupIndexLen(size) {
		t.Fatalf("index16 %d, index32 %d", len(p.d.idx16), len(p.d.idx32))
	}
	p.reset(p.checkIDs())
}

func TestDedupWindowSizeOutOfRange(t *testing.T) {
	for _, size := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("newDedupWindow(%d) did not panic", size)
				}
			}()
			newDedupWindow(size)
		}()
	}
}

// FuzzDedupWindow drives a window and the reference from the fuzz input:
// byte 0 picks the size, bytes 1-8 the hash seed, then each op is a byte
// (low 3 bits the kind) and its operands.
func FuzzDedupWindow(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 1, 5, 6})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 1, 0, 1, 5, 0, 2})
	f.Add([]byte{4, 9, 9, 9, 9, 9, 9, 9, 9, 3, 40, 0, 7, 3, 1, 2, 1, 3, 6, 5, 3, 255, 4})
	f.Add([]byte{7, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 3, 0xff, 6, 5})
	f.Add([]byte{3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 1, 5, 4, 7})
	f.Add([]byte{9, 5, 0, 0, 0, 0, 0, 0, 7, 7, 138, 1, 2, 3, 65, 1, 2, 200, 3, 1, 66, 0, 1, 0, 2, 5, 7, 140, 1, 1, 1, 1, 1, 1, 1, 1, 9, 9, 9, 9})
	sizes := []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 64, 100, 1000, dedupWindowSize}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 9 {
			return
		}
		size := sizes[int(in[0])%len(sizes)]
		p := newDedupPair(t, size, binary.LittleEndian.Uint64(in[1:9]))
		in = in[9:]
		next := func() uint64 {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return uint64(b)
		}
		var seq uint64 // the running proposer's next seq
		// A budget of work per input (an add costs 1, a check or reset the
		// IDs held) keeps every execution, and so minimizing, short.
		const budget = 2 * dedupWindowSize
		work := func() int { return p.ops + p.checked }
		for len(in) > 0 && work() < budget {
			switch op := next(); op & 7 {
			case 0, 1: // a small ID: proposer in the op's high bits, seq the next byte
				p.add(requestID{op >> 3 & 3, next()})
			case 2: // a full 16-byte ID
				var id requestID
				for range 8 {
					id.proposer = id.proposer<<8 | next()
				}
				for range 8 {
					id.seq = id.seq<<8 | next()
				}
				p.add(id)
			case 3: // a run of consecutive seqs from proposer 1 (fills big windows)
				n := (next() + 1) * uint64(1+size/64)
				for range min(n, uint64(budget-work())) {
					seq++
					p.add(requestID{1, seq})
				}
			case 4: // proposer 1's seqs back from the newest
				p.add(requestID{1, seq - next()})
			case 5:
				p.checkIDs()
			case 6: // snapshot round trip
				p.reset(p.checkIDs())
			case 7: // reset to a suffix of the IDs (or nothing), or to any list
				n := int(next())
				ids := p.checkIDs()
				if n < 128 {
					ids = ids[len(ids)-min(len(ids), n):]
				} else { // small IDs: repeats, maybe more than size
					ids = ids[:0]
					for range n - 128 {
						b := next()
						ids = append(ids, requestID{b >> 6, b & 63})
					}
				}
				p.reset(ids)
			}
		}
		p.checkIDs()
	})
}

// dedupAdder is what the benchmarks drive.
type dedupAdder interface{ add(requestID) bool }

var dedupImpls = []struct {
	name string
	new  func(size int) dedupAdder
}{
	{"map", func(size int) dedupAdder { return newMapDedupWindow(size) }},
	{"index", func(size int) dedupAdder { return newDedupWindow(size) }},
}

// BenchmarkDedupWindow adds to a full window of dedupWindowSize: "new" adds
// fresh IDs from three proposers (each evicts the oldest), "dup" repeats
// recent ones (each is found).
func BenchmarkDedupWindow(b *testing.B) {
	for _, impl := range dedupImpls {
		fill := func() (dedupAdder, uint64) {
			d := impl.new(dedupWindowSize)
			var n uint64
			for ; n < 2*dedupWindowSize; n++ {
				d.add(requestID{1 + n%3, n / 3})
			}
			return d, n
		}
		b.Run(impl.name+"/new", func(b *testing.B) {
			d, n := fill()
			b.ReportAllocs()
			for b.Loop() {
				if !d.add(requestID{1 + n%3, n / 3}) {
					b.Fatal("fresh ID reported as duplicate")
				}
				n++
			}
		})
		b.Run(impl.name+"/dup", func(b *testing.B) {
			d, n := fill()
			b.ReportAllocs()
			var i uint64
			for b.Loop() {
				m := n - 1 - i%(dedupWindowSize/2)
				if d.add(requestID{1 + m%3, m / 3}) {
					b.Fatal("recent ID reported as new")
				}
				i++
			}
		})
	}
}

// BenchmarkDedupWindowMemory reports the heap a full window of
// dedupWindowSize holds (B/window, over 64 windows) and what filling one
// allocated in all (alloc-B/window).
func BenchmarkDedupWindowMemory(b *testing.B) {
	const windows = 64
	for _, impl := range dedupImpls {
		b.Run(impl.name, func(b *testing.B) {
			var held, allocated float64
			for b.Loop() {
				ws := make([]dedupAdder, windows)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for w := range ws {
					ws[w] = impl.new(dedupWindowSize)
					for n := range uint64(dedupWindowSize + 100) {
						ws[w].add(requestID{uint64(w), n})
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = float64(after.HeapAlloc-before.HeapAlloc) / windows
				allocated = float64(after.TotalAlloc-before.TotalAlloc) / windows
				runtime.KeepAlive(ws)
			}
			b.ReportMetric(held, "B/window")
			b.ReportMetric(allocated, "alloc-B/window")
		})
	}
}
