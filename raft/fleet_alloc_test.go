//go:build !race

package raft_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/raft"
)

// The leader's own work per tick (membership bookkeeping, readiness,
// catch-up tracking, the policy, relays) does not allocate more with 48
// standbys than with none, give or take the once-a-second pass over the
// members spread over its ticks: before the bookkeeping was rate-limited
// and its view read raft's progress in place, each tick with 48 standbys
// cost about 250 allocations against 5. (Not under -race: its sync.Pool
// drops items at random.)
func TestLeaderTickAllocsDoNotGrowWithStandbys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 52 members")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ticks = 500 // ten passes of the bookkeeping at 20ms ticks
	perTick := func(standbys int) float64 {
		lead := fleet(ctx, t, standbys)
		// The count is the whole process's: the other members' work in the
		// window (a heartbeat round, a late append) only adds to it, so
		// the least of three windows is the leader's ticks.
		least := math.Inf(1)
		for range 3 {
			least = min(least, testing.AllocsPerRun(4, func() {
				if err := raft.LeaderTicks(ctx, lead.Node, ticks); err != nil {
					t.Fatal(err)
				}
			})/ticks)
		}
		return least
	}
	none, many := perTick(0), perTick(48)
	t.Logf("allocations per leader tick: %.2f with no standby, %.2f with 48", none, many)
	if many > none+4 {
		t.Fatalf("%.2f allocations per leader tick with 48 standbys, %.2f with none: the per-tick work grows with the member count", many, none)
	}
}
