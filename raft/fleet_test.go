package raft_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// fleet starts 3 voters and standbys learners 4, 5, … with Relay on and
// the default policy on (it has nothing to do: the voters are its target),
// waits until every standby is ready on the leader, then stops every
// member's clock: from then on the leader ticks only through
// raft.LeaderTicks, and nothing else in the process runs.
func fleet(ctx context.Context, tb testing.TB, standbys int) *cluster.Member {
	tb.Helper()
	c := cluster.New(tb, cluster.Options{
		Relay:        true,
		TickInterval: 20 * time.Millisecond,
		Membership:   confchange.Settings{MaxLearners: max(standbys, 1)},
	})
	lead := c.WaitLeader()
	for i := range standbys {
		id := uint64(4 + i)
		if err := lead.Node.AddLearner(ctx, c.Record(id)); err != nil {
			tb.Fatalf("adding learner %d: %v", id, err)
		}
		c.Join(id)
	}
	for {
		m, err := lead.Node.Membership(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		ready := 0
		for _, ms := range m.Members {
			if ms.Role == confchange.RoleLearner && ms.Readiness.Ready() {
				ready++
			}
		}
		if ready == standbys && m.Leader == lead.ID {
			break
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			tb.Fatalf("waiting for %d ready standbys (%d): %v", standbys, ready, err)
		}
	}
	// The settings replicated (a new cluster's leader seeds them a moment
	// after it leads): the membership is at rest.
	if err := lead.Node.UpdateSettings(ctx, lead.Node.Settings()); err != nil {
		tb.Fatal(err)
	}
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			if err := raft.StopClock(ctx, m.Node); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := raft.StopClock(ctx, lead.Node); err != nil {
		tb.Fatal(err)
	}
	return lead
}

// BenchmarkLeaderTick measures what one tick of the leader costs beyond
// raft's own (its heartbeats): read retries, expiries, the membership
// bookkeeping (readiness, catch-up tracking, events, the policy) and the
// relays, with 0, 12 and 48 standbys. It must not grow with the count.
//
//	go test -run '^$' -bench LeaderTick -benchmem ./raft/
func BenchmarkLeaderTick(b *testing.B) {
	for _, standbys := range []int{0, 12, 48} {
		b.Run(fmt.Sprintf("standbys=%d", standbys), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			lead := fleet(ctx, b, standbys)
			const batch = 100
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				if err := raft.LeaderTicks(ctx, lead.Node, min(batch, b.N-done)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A node with relays on seeds room for a fleet of standbys; without, the
// cap stays where each standby's cost to the leader puts it; a value given
// is kept, and one above the replicated setting's limit is refused.
func TestMaxLearnersDefaultFollowsRelay(t *testing.T) {
	for _, tt := range []struct {
		relay bool
		given int
		want  int
	}{
		{false, 0, confchange.DefaultMaxLearners},
		{true, 0, confchange.DefaultMaxLearnersRelayed},
		{true, 5, 5},
		{false, 64, 64},
	} {
		c := raft.Config{ID: 1, Relay: tt.relay, Membership: confchange.Settings{MaxLearners: tt.given}}.WithDefaults()
		if got := c.Membership.MaxLearners; got != tt.want {
			t.Errorf("Relay %t, MaxLearners %d: %d after the defaults, want %d", tt.relay, tt.given, got, tt.want)
		}
	}
	c := raft.Config{ID: 1, Membership: confchange.Settings{MaxLearners: confchange.MaxLearnersLimit + 1}}.WithDefaults()
	if err := c.Validate(); !errors.Is(err, confchange.ErrInvalidSettings) {
		t.Fatalf("MaxLearners %d: Validate = %v, want ErrInvalidSettings", confchange.MaxLearnersLimit+1, err)
	}
}
