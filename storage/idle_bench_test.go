package storage

import (
	"fmt"
	"runtime"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkEngineIdleGroups: what a commit that touches 48 groups costs when
// the data dir holds only them, and when it holds 10,000 groups, the other
// 9,952 idle (each with its identity, hard state and four 100-byte entries,
// as a started group has): the busy ones the first 48 (adjacent keys), or
// spread, one in every 208. Each commit carries one Save per active group
// (one 256-byte entry and the hard state), fsync on. Besides the time, it
// reports counts that do not depend on the machine: bbolt's pages written
// per commit (its dirty pages, the freelist's, the meta page), the bytes
// written per commit (bbolt's pages, or Pebble's batch), the heap allocated
// per commit, and bbolt's free pages. The figures in docs/architecture.md
// ("Idle groups and the engine") come from
//
//	go test -run '^$' -bench EngineIdleGroups -benchtime 200x ./storage
//	UNDERSTUDY_STORAGE_BACKEND=pebble go test -run '^$' -bench EngineIdleGroups -benchtime 200x ./storage
func BenchmarkEngineIdleGroups(b *testing.B) {
	const active = 48
	for _, c := range []struct {
		total  int
		spread bool
	}{{active, false}, {10000, false}, {10000, true}} {
		total := c.total
		b.Run(fmt.Sprintf("groups=%d/spread=%v", total, c.spread), func(b *testing.B) {
			dir := b.TempDir()
			// Fill without fsync, then reopen with it for the measured commits.
			e, err := OpenEngine(dir, EngineOptions{Backend: testBackend, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			for id := 1; id <= total; id++ {
				s, err := e.Group(uint64(id), GroupOptions{TailCacheBytes: -1})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.SetIdentity(Identity{ClusterID: 7, MemberID: 1}); err != nil {
					b.Fatal(err)
				}
				var es []*raftpb.Entry
				for i := uint64(1); i <= 4; i++ {
					es = append(es, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(2),
						Type: raftpb.EntryNormal.Enum(), Data: make([]byte, 100)})
				}
				if err := s.Save(hardState(2, 1, 4), es, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := e.Close(); err != nil {
				b.Fatal(err)
			}
			e, err = OpenEngine(dir, EngineOptions{Backend: testBackend})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			stores := make([]*Store, active)
			for i := range stores {
				id := uint64(i + 1) // the first 48, as groupload's -active
				if c.spread {       // or one in every total/48, as busy groups among idle ones may be
					id = uint64(i*(total/active) + 1)
				}
				if stores[i], err = e.Group(id, GroupOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			for range 100 { // the active logs grow past a page first
				commitEach(b, e, stores)
			}
			before := e.Metrics()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for range b.N {
				commitEach(b, e, stores)
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			m := e.Metrics()
			n := float64(b.N)
			b.ReportMetric(float64(m.PagesWritten-before.PagesWritten)/n, "pages/commit")
			b.ReportMetric(float64(m.BytesWritten-before.BytesWritten)/n, "bytes/commit")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "heapB/commit")
			b.ReportMetric(float64(m.FreePages), "freepages")
		})
	}
}

// commitEach makes one commit carrying a Save in each store: one 256-byte
// entry after its last, and the hard state committing it.
func commitEach(b *testing.B, e *Engine, stores []*Store) {
	ws := make([]*preparedSave, len(stores))
	for i, s := range stores {
		s.wmu.Lock()
		next := s.last + 1
		w, err := s.prepareSave(hardState(2, 1, next), []*raftpb.Entry{{Index: proto.Uint64(next),
			Term: proto.Uint64(2), Type: raftpb.EntryNormal.Enum(), Data: make([]byte, 256)}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	_, err := e.update(func(tx kvTx) error {
		for _, w := range ws {
			if err := w.commit(tx); err != nil {
				return err
			}
		}
		return nil
	})
	for i, s := range stores {
		if err == nil {
			s.mu.Lock()
			ws[i].publish()
			s.mu.Unlock()
		}
		_ = s.saved(ws[i], err)
		s.wmu.Unlock()
	}
	if err != nil {
		b.Fatal(err)
	}
}
