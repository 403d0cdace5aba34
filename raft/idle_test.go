package raft_test

import (
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// TestQuiescedNodeDropsItsLogCache: once its group quiesces, every member
// lets go of its storage's copy of the log's tail (an idle replica of a
// host's many groups holds no entry in memory); woken by a write, the
// group reads what it needs back from the database, and every member
// applies the write.
func TestQuiescedNodeDropsItsLogCache(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	for _, m := range c.Running() {
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
