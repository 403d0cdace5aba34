package understudy_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// handoffCounts are a host's scheduler and storage counters summed over
// the hosts of a cluster.
type handoffCounts struct {
	loops, appends, applies, appendInline, applyInline, commits uint64
}

func countHandoffs(hc *hostsCluster) handoffCounts {
	var c handoffCounts
	for _, h := range hc.hosts {
		st := h.Scheduler().Stats()
		c.loops += st.LoopRuns
		c.appends += st.AppendRuns
		c.applies += st.ApplyRuns
		c.appendInline += st.AppendInline
		c.applyInline += st.ApplyInline
		c.commits += h.Engine().Metrics().Commits
	}
	return c
}

// TestHandoffsPerWrite runs 100 groups × 3 members on 3 hosts (one
// scheduler and one storage engine each) under a closed-loop load of 200
// writers, and reports per committed write, summed over the hosts: the
// loop, append and apply task runs on the pools' workers, the applies run
// on a loop's worker instead (raft.Config.InlineApply), the storage
// commits and the goroutine hand-offs (task runs queued for a pool's
// worker; the appends with nothing to write that a loop's worker handles
// are not). These counts are the metric of issue 37's "fewer hand-offs per
// round" (not timings; docs/architecture.md "Hand-offs per round"). It
// checks that every write is answered, and that with InlineApply most
// applies run on the loops' workers.
func TestHandoffsPerWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("300 replicas")
	}
	t.Run("default", func(t *testing.T) {
		c := handoffsPerWrite(t, nil)
		require.Zero(t, c.applyInline)
		require.NotZero(t, c.appendInline, "appends with nothing to write handled on the loops' workers")
	})
	t.Run("InlineApply", func(t *testing.T) {
		c := handoffsPerWrite(t, func(c *raft.Config) { c.InlineApply = true })
		require.Greater(t, c.applyInline, c.applies, "applies on the loops' workers against on apply workers")
	})
}

// handoffsPerWrite is TestHandoffsPerWrite's run with the groups' config
// changed by tune, and returns the counts over the load.
func handoffsPerWrite(t *testing.T, tune func(*raft.Config)) handoffCounts {
	hc := newHosts(t, 3)
	hc.tune = func(c *raft.Config) {
		// The library's tick, as groupload's: at fastRaft's 10 ms the
		// ticks and heartbeats of 300 replicas were most of the loop runs.
		c.TickInterval = raft.DefaultTickInterval
		if tune != nil {
			tune(c)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const groups, writers, perWriter = 100, 200, 15
	all := make([][]*understudy.Group, groups)
	for g := range all {
		all[g] = hc.start(ctx, uint64(g+1), func() raft.StateMachine { return kv.New() })
	}
	for _, gs := range all {
		leaderOf(ctx, t, gs)
	}
	// One write per group first: every group has committed an entry of its
	// leader's term, so the load below measures rounds, not elections.
	for g, gs := range all {
		require.NoError(t, put(ctx, t, gs, "warm", fmt.Sprint(g)))
	}
	before := countHandoffs(hc)
	var wg sync.WaitGroup
	var done atomic.Uint64
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs := all[w%groups]
			for i := range perWriter {
				require.NoError(t, put(ctx, t, gs, fmt.Sprint("k", w, "-", i), "v"))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := countHandoffs(hc)
	n := float64(done.Load())
	require.EqualValues(t, writers*perWriter, n)
	per := func(a, b uint64) float64 { return float64(a-b) / n }
	loops, appends, applies := per(after.loops, before.loops), per(after.appends, before.appends), per(after.applies, before.applies)
	handoffs := loops + appends + applies
	t.Logf("per committed write (3 hosts, %d groups, %d writers, %.0f writes, %.0f writes/s, not a benchmark):", groups, writers, n, n/elapsed.Seconds())
	t.Logf("  loop runs %.2f, append runs %.2f (on a loop's worker %.2f), apply runs %.2f (on a loop's worker %.2f), storage commits %.2f, hand-offs %.2f",
		loops, appends, per(after.appendInline, before.appendInline), applies, per(after.applyInline, before.applyInline), per(after.commits, before.commits), handoffs)
	return handoffCounts{
		loops: after.loops - before.loops, appends: after.appends - before.appends, applies: after.applies - before.applies,
		appendInline: after.appendInline - before.appendInline, applyInline: after.applyInline - before.applyInline,
		commits: after.commits - before.commits,
	}
}
