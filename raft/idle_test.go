package raft_test

import (
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestQuiescedNodeDropsItsLogCache: once its group quiesces, every member
// lets go of its apply task's batch buffers and of its storage's copy of
// the log's tail (an idle replica of a host's many groups holds no entry
// in memory); woken by a write, the
// group reads what it needs back from the database, and every member
// applies the write.
func TestQuiescedNodeDropsItsLogCache(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	for _, m := range c.Running() {
		for raft.ApplyBuffersHeld(m.Node) {
			select {
			case <-ctx.Done():
				t.Fatalf("member %d, quiesced, holds its apply task's batch buffers", m.ID)
			case <-time.After(10 * time.Millisecond):
			}
		}
		for m.Store.Metrics().TailEntries > 0 {
			select {
			case <-ctx.Done():
				mt := m.Store.Metrics()
				t.Fatalf("member %d, quiesced, holds %d entries (%d bytes) in its storage's tail", m.ID, mt.TailEntries, mt.TailBytes)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	lead, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	propose(ctx, t, lead.Node, kv.Put("k", "w"))
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Running() {
		if v, _ := m.SM.Get("k"); v != "w" {
			t.Fatalf("member %d: k = %q after the wake; want w", m.ID, v)
		}
	}
	waitQuiesced(ctx, t, c)
}

// TestQuiescedNodeLetsGoOfLeaderState: a quiesced follower holds no
// leader's bookkeeping and a quiesced leader none of the reused parts of
// its views, and neither holds relay state when nothing is relayed (the
// idle followers of a host's many groups used to keep a leader's maps);
// woken, the group still changes its membership and quiesces again.
func TestQuiescedNodeLetsGoOfLeaderState(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{Relay: true})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	check := func() {
		t.Helper()
		lead, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Running() {
			book, views, relay, err := raft.LeaderStateHeld(ctx, m.Node)
			if err != nil {
				t.Fatal(err)
			}
			if m.ID == lead.ID {
				if !book || views || relay {
					t.Errorf("quiesced leader %d: bookkeeping %t (want true), views %t, relay state %t (want false)", m.ID, book, views, relay)
				}
			} else if book || relay {
				t.Errorf("quiesced follower %d: bookkeeping %t, relay state %t (want false)", m.ID, book, relay)
			}
		}
	}
	check()
	// Woken by a membership change (the leader's bookkeeping checks it),
	// the group quiesces again and lets go again.
	rec, ok := lead.Node.Member(lead.ID)
	if !ok {
		t.Fatalf("leader %d has no record of itself", lead.ID)
	}
	rec.Metadata = map[string]string{"k": "v"}
	if err := lead.Node.UpdateMember(ctx, rec); err != nil {
		t.Fatal(err)
	}
	waitQuiesced(ctx, t, c)
	check()
}
