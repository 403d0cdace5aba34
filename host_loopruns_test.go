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

// TestLoopRunsPerSequentialWrite counts the run loops' runs, summed over a
// group's three hosts, per write made one at a time (the library's tick,
// so that ticks are few). A write's round needs the leader's run for the
// proposal, its runs for its own acknowledgement and the followers' (the
// commit), and each follower's run for the append (which carries the last
// commit index, and so the last write's apply). The answers of an append
// that only a follower's raft hears of and of a small applied batch ride
// with the loop's next run instead of one of their own
// (raft/quietanswers.go): 9.7-11.2 runs a write before, 6.0-6.4 after.
func TestLoopRunsPerSequentialWrite(t *testing.T) {
	hc := newHosts(t, 3)
	hc.tune = func(c *raft.Config) { c.TickInterval = raft.DefaultTickInterval }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gs := hc.start(ctx, 1, func() raft.StateMachine { return kv.New() })
	lead := leaderOf(ctx, t, gs)
	require.NoError(t, put(ctx, t, gs, "warm", "v"))
	runs := func() (n uint64) {
		for _, h := range hc.hosts {
			n += h.Scheduler().Stats().LoopRuns
		}
		return n
	}
	const writes = 100
	before := runs()
	for i := range writes {
		_, err := lead.Propose(ctx, kv.Put(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	perWrite := float64(runs()-before) / writes
	t.Logf("loop runs a write, 3 hosts: %.2f", perWrite)
	require.Less(t, perWrite, 8.5, "loop runs a write")
}
