package raft_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestQuietApplyAnswersDoNotHoldBackCommitted writes entries three at a
// time, each almost as large as raft's bound on the bytes being applied
// (4 × MaxSizePerMsg): raft hands two to the apply task and holds the
// third, committed, until it hears that they were applied. Those answers
// must run the loop (quietanswers.go: only an answer that leaves raft's
// bound far from full may wait for the loop's next run): otherwise the
// third write waited for the next tick, with nothing else to run the loop
// (13 ticks of 200 ms for 10 rounds; 0-1 after). Ticks are long, so that
// waiting for them shows as ticks.
func TestQuietApplyAnswersDoNotHoldBackCommitted(t *testing.T) {
	c := cluster.New(t, cluster.Options{TickInterval: 200 * time.Millisecond, MaxSizePerMsg: 1024, MaxCommandSize: 4096})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	value := strings.Repeat("v", 4000)
	const rounds = 10
	start := raft.Ticks(lead.Node)
	for r := range rounds {
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				propose(ctx, t, lead.Node, kv.Put(fmt.Sprint("k", r, "-", w), value))
			}()
		}
		wg.Wait()
	}
	ticks := raft.Ticks(lead.Node) - start
	t.Logf("%d rounds of three writes took %d ticks", rounds, ticks)
	if ticks >= rounds/2 {
		t.Fatalf("%d rounds of three writes took %d ticks of %v: writes waited for ticks", rounds, ticks, 200*time.Millisecond)
	}
}

// TestFollowerProposalsAnsweredWithoutTicks has a follower propose writes
// one at a time, then read what the leader wrote, one at a time: a follower answers its proposer once it applied the
// entry, so it must hear of the commit at once. The leader holds back the
// empty MsgApps that only carry a commit index (redundant.go) but not to
// a member whose forwarded proposal the commit covers: otherwise each
// write waited for a heartbeat, one or two ticks. Ticks are long, so that
// waiting for them shows as ticks.
func TestFollowerProposalsAnsweredWithoutTicks(t *testing.T) {
	c := cluster.New(t, cluster.Options{TickInterval: 200 * time.Millisecond})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	var f *cluster.Member
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			f = m
			break
		}
	}
	const writes = 10
	start := raft.Ticks(lead.Node)
	for i := range writes {
		propose(ctx, t, f.Node, kv.Put(fmt.Sprint("k", i), "v"))
	}
	ticks := raft.Ticks(lead.Node) - start
	t.Logf("%d writes through follower %d took %d ticks", writes, f.ID, ticks)
	if ticks >= writes/2 {
		t.Fatalf("%d writes through a follower took %d ticks of %v: they waited for heartbeats", writes, ticks, 200*time.Millisecond)
	}
	// A linearizable read on the follower of what the leader just wrote:
	// the read's heartbeats carry the commit index.
	start = raft.Ticks(lead.Node)
	for i := range writes {
		key := fmt.Sprint("r", i)
		propose(ctx, t, lead.Node, kv.Put(key, "v"))
		if v, err := f.Node.Read(ctx, []byte(key)); err != nil || string(v) != "v" {
			t.Fatalf("follower %d reading %s: %q, %v", f.ID, key, v, err)
		}
	}
	ticks = raft.Ticks(lead.Node) - start
	t.Logf("%d writes on the leader read on follower %d took %d ticks", writes, f.ID, ticks)
	if ticks >= writes/2 {
		t.Fatalf("%d writes on the leader read on a follower took %d ticks of %v: the reads waited for heartbeats", writes, ticks, 200*time.Millisecond)
	}
}

// TestForwardedChangesAnsweredWithoutTicks has a follower add and remove a
// learner, one change at a time: the follower answers once it applied the
// change, so it must hear of the commit at once. The leader sends the
// empty MsgApps that carry a commit index in a Ready that commits a conf
// change (redundant.go): otherwise each change waited for a heartbeat.
// Ticks are long, so that waiting for them shows as ticks.
func TestForwardedChangesAnsweredWithoutTicks(t *testing.T) {
	c := cluster.New(t, cluster.Options{TickInterval: 200 * time.Millisecond, ManualMembership: true})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	var f *cluster.Member
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			f = m
			break
		}
	}
	// The least of three measures: a loaded machine (CI, -race) can
	// stretch one past a few ticks; changes that wait for heartbeats take
	// about half a tick each, every time.
	const rounds = 5
	ticks := uint64(1 << 62)
	for attempt := range 3 {
		start := raft.Ticks(lead.Node)
		for r := range rounds {
			id := uint64(10 + 10*attempt + r)
			if err := f.Node.AddLearner(ctx, c.Record(id)); err != nil {
				t.Fatal(err)
			}
			if err := f.Node.RemoveMember(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		took := raft.Ticks(lead.Node) - start
		t.Logf("%d changes through follower %d took %d ticks", 2*rounds, f.ID, took)
		ticks = min(ticks, took)
	}
	if ticks >= rounds {
		t.Fatalf("%d changes through a follower took %d ticks of %v: they waited for heartbeats", 2*rounds, ticks, 200*time.Millisecond)
	}
}
