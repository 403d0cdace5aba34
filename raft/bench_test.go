package raft_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// BenchmarkPropose measures replicated writes on a 3-member in-process
// cluster with durable storage (fsync on): b.N proposals of 256-byte
// commands from P concurrent proposers on the leader. It reports
// proposals/s, p50/p99 latency and the leader's commands per storage commit.
// allocs/op counts the whole process: all three members and the in-process
// network (which clones every message, as serialization would).
func BenchmarkPropose(b *testing.B) {
	for _, p := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("proposers=%d", p), func(b *testing.B) { benchPropose(b, 3, p) })
	}
}

// BenchmarkProposeLeaderOnly is BenchmarkPropose on a one-member cluster:
// its allocs/op are the leader's own per proposal — Propose, raft, the
// storage write, applying and answering — without followers or the test
// network (replication adds a few per message, shared by the batch), plus
// the test state machine's decoding of each command (about 4).
func BenchmarkProposeLeaderOnly(b *testing.B) {
	for _, p := range []int{1, 256} {
		b.Run(fmt.Sprintf("proposers=%d", p), func(b *testing.B) { benchPropose(b, 1, p) })
	}
}

func benchPropose(b *testing.B, members, proposers int) {
	c := cluster.New(b, cluster.Options{Members: members, Sync: true, SnapshotCount: 1 << 40, ManualMembership: true})
	lead := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	value := string(make([]byte, 256-16))
	// Commands are encoded before the clock starts: allocs/op counts the
	// library (and the state machine), not the benchmark's own formatting.
	cmds := make([][][]byte, proposers)
	for w := range cmds {
		cmds[w] = make([][]byte, 1024)
		for i := range cmds[w] {
			cmds[w][i] = kv.Put(fmt.Sprintf("w%d-%d", w, i), value)
		}
	}
	before := lead.Store.Metrics()
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lats  = make([]time.Duration, 0, b.N)
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w := range proposers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, b.N/proposers+1)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				t0 := time.Now()
				if _, err := lead.Node.Propose(ctx, cmds[w][i%1024]); err != nil {
					fails.Add(1)
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if f := fails.Load(); f > 0 {
		b.Fatalf("%d proposals failed", f)
	}
	after := lead.Store.Metrics()
	slices.Sort(lats)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "proposals/s")
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
	if commits := after.Commits - before.Commits; commits > 0 {
		b.ReportMetric(float64(after.Entries-before.Entries)/float64(commits), "entries/commit")
	}
}
