package raft_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft"
)

// TestStandbyReadsCoalesceOnLeader: 24 standbys each reading concurrently
// (linearizable reads: a ReadIndex request each to the leader). raft
// answers every member's ReadIndex request with its own heartbeat to every
// member; the leader takes the requests of one loop pass into one round,
// so the heartbeat rounds it starts are at most the passes that took
// requests — however many requests each pass took. Every member's clock is
// stopped while the standbys read, so that the only heartbeats carrying a
// read context are the rounds'; the requests reach the leader in a burst
// (its traffic paused, then resumed), as on a busy leader.
func TestStandbyReadsCoalesceOnLeader(t *testing.T) {
	const standbys, readsEach = 24, 4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead, ids := withStandbys(ctx, t, relayOptions(false, standbys), standbys)
	for _, m := range c.Running() {
		if err := raft.StopClock(ctx, m.Node); err != nil {
			t.Fatal(err)
		}
	}
	var follower uint64
	for _, id := range []uint64{1, 2, 3} {
		if id != lead.ID {
			follower = id
			break
		}
	}
	var rounds, sent, requests atomic.Int64
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		switch {
		case from == lead.ID:
			sent.Add(1)
			if m.GetTo() == follower && m.GetType() == raftpb.MsgHeartbeat && len(m.GetContext()) > 0 {
				rounds.Add(1) // a round heartbeats every member once
			}
		case m.GetTo() == lead.ID && m.GetType() == raftpb.MsgReadIndex:
			requests.Add(1)
		}
		return false
	})
	passesBefore, err := raft.ReadPasses(ctx, lead.Node)
	if err != nil {
		t.Fatal(err)
	}
	c.Net.Pause(lead.ID)
	var wg sync.WaitGroup
	errs := make(chan error, standbys)
	start := make(chan struct{})
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range readsEach {
				if err := c.Member(id).Node.ReadBarrier(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	time.Sleep(50 * time.Millisecond) // not asserted: only lets the first requests queue up
	c.Net.Resume(lead.ID)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a standby's read: %v", err)
	}
	passesAfter, err := raft.ReadPasses(ctx, lead.Node)
	if err != nil {
		t.Fatal(err)
	}
	passes := passesAfter - passesBefore
	reads := int64(standbys * readsEach)
	t.Logf("%d standby reads: %d ReadIndex requests reached the leader in %d loop passes; it started %d heartbeat rounds and sent %d messages (%.1f per read)",
		reads, requests.Load(), passes, rounds.Load(), sent.Load(), float64(sent.Load())/float64(reads))
	if rounds.Load() > int64(passes) {
		t.Fatalf("the leader started %d heartbeat rounds for ReadIndex requests taken in %d loop passes: one round per request, not per pass", rounds.Load(), passes)
	}
}
