package raft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestForwardedWritesNeedNoTick: with every member's clock stopped (no
// heartbeats, no elections), writes and linearizable reads made on a
// follower still complete, one after the other. A follower's Propose
// returns once the follower applied the write, so it must learn the
// commit index from the leader's messages of that round, not from the
// next heartbeat: a leader that held back its commit-index updates to
// the follower (messages that other traffic would carry) left every such
// write waiting up to two heartbeat intervals — for ever here — and
// kvserver's forwarded writes at one client at 200 ms each.
func TestForwardedWritesNeedNoTick(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 20*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	for _, m := range c.Running() {
		if err := raft.StopClock(ctx, m.Node); err != nil {
			t.Fatal(err)
		}
	}
	var f *cluster.Member
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			f = m
			break
		}
	}
	for i := range 20 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := f.Node.Propose(wctx, kv.Put(fmt.Sprint("k", i), "v"))
		if err == nil {
			err = f.Node.ReadBarrier(wctx)
		}
		cancel()
		if err != nil {
			t.Fatalf("write and read %d through follower %d with no tick: %v", i, f.ID, err)
		}
	}
	// And the leader's own writes reach a follower's state machine
	// without a tick once a write of the follower's follows them, or a
	// linearizable read on the follower.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	propose(ctx, t, lead.Node, kv.Put("last", "v"))
	if _, err := f.Node.Propose(wctx, kv.Put("after", "v")); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.SM.Get("last"); !ok {
		t.Fatal("the follower applied its own write but not the leader's before it")
	}
	propose(ctx, t, lead.Node, kv.Put("read", "v"))
	if err := f.Node.ReadBarrier(wctx); err != nil {
		t.Fatalf("a read through follower %d after the leader's write, with no tick: %v", f.ID, err)
	}
	if _, ok := f.SM.Get("read"); !ok {
		t.Fatal("a linearizable read on the follower did not see the leader's write before it")
	}
}
