package storage

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// BenchmarkEngineGroupCommit: G groups, each saving one 256-byte entry per
// Save from its own goroutine in a loop, fsync on; b.N Saves in all. Either
// the groups share one Engine (one bbolt file, one committer: group commit
// across groups), or each has its own data dir opened with Open (one bbolt
// file and one fsync stream per group, the layout of one process per group
// member): the baseline. It reports Saves/s, commits/s and groups per
// commit. The figures in the issue note come from
//
//	go test -run '^$' -bench EngineGroupCommit -benchtime 3s -count 2 ./storage
func BenchmarkEngineGroupCommit(b *testing.B) {
	for _, g := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("engine/groups=%d", g), func(b *testing.B) {
			e, err := OpenEngine(b.TempDir(), EngineOptions{Backend: testBackend})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			stores := make([]*Store, g)
			for i := range stores {
				if stores[i], err = e.Group(uint64(i+1), GroupOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			before := e.Metrics()
			runGroupSaves(b, stores)
			m := e.Metrics()
			reportCommits(b, m.Commits-before.Commits, m.Writes-before.Writes)
		})
		b.Run(fmt.Sprintf("dirs/groups=%d", g), func(b *testing.B) {
			dir := b.TempDir()
			stores := make([]*Store, g)
			for i := range stores {
				s, err := Open(filepath.Join(dir, fmt.Sprint(i+1)), Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				stores[i] = s
			}
			var before uint64
			for _, s := range stores {
				before += s.Metrics().Commits
			}
			runGroupSaves(b, stores)
			var commits uint64
			for _, s := range stores {
				commits += s.Metrics().Commits
			}
			commits -= before
			reportCommits(b, commits, commits) // one group per commit
		})
	}
}

// runGroupSaves runs b.N Saves spread over the stores, one goroutine each.
func runGroupSaves(b *testing.B, stores []*Store) {
	per := (b.N + len(stores) - 1) / len(stores)
	b.SetBytes(benchEntrySize)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, len(stores))
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := s.Save(nil, benchEntries(uint64(i+1), 1), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	saves := per * len(stores)
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(saves)/secs, "saves/s")
}

func reportCommits(b *testing.B, commits, writes uint64) {
	b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "commits/s")
	if commits > 0 {
		b.ReportMetric(float64(writes)/float64(commits), "groups/commit")
	}
}
