package understudy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestLoopRunsPerSequentialWrite counts the run loops' runs per write
// made one at a time (the library's tick, so that ticks are few), summed
// over a group's three hosts (and, logged, on the leader's host). A
// write's round needs the leader's run for the proposal, for its own
// acknowledgement and for the first follower's (the commit), and each
// follower's run for the append (which carries the last commit index, and
// so the last write's apply). What the loop need not act on at once rides
// with its next run (raft/quietanswers.go): a follower's append answered
// only to its own raft and a small applied batch's answer (9.7-11.2 runs
// a write before, 4.5-6.4 after).
func TestLoopRunsPerSequentialWrite(t *testing.T) {
	hc := newHosts(t, 3)
	hc.tune = func(c *raft.Config) { c.TickInterval = raft.DefaultTickInterval }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gs := hc.start(ctx, 1, func() raft.StateMachine { return kv.New() })
	lead := leaderOf(ctx, t, gs)
	require.NoError(t, put(ctx, t, gs, "warm", "v"))
	// Each member's own record (its incarnation) is a proposal the host
	// makes once, after start: not one of the measured writes.
	require.Eventually(t, func() bool { return ownRecordsPublished(gs...) }, 30*time.Second, 10*time.Millisecond, "every member's record published")
	var leaderHost int
	for i := range gs {
		if gs[i] == lead {
			leaderHost = i
		}
	}
	runs := func() (all, leader uint64) {
		for i, h := range hc.hosts {
			n := h.Scheduler().Stats().LoopRuns
			all += n
			if i == leaderHost {
				leader = n
			}
		}
		return all, leader
	}
	const writes = 100
	all0, lead0 := runs()
	for i := range writes {
		_, err := lead.Propose(ctx, kv.Put(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	all1, lead1 := runs()
	perWrite, onLeader := float64(all1-all0)/writes, float64(lead1-lead0)/writes
	t.Logf("loop runs a write: %.2f on the 3 hosts, %.2f on the leader's", perWrite, onLeader)
	require.Less(t, perWrite, 8.5, "loop runs a write")
}
