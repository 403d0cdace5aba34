package raft_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// With InlineApply, the loop's worker applies the small batches, and the
// rest of the apply task's work still happens on an apply worker: every
// member takes snapshots when due (the loop hands them over), a member cut
// off while the others write past compaction restores the leader's
// snapshot, and every member ends with the same state.
func TestInlineApplySnapshotsAndCatchUp(t *testing.T) {
	c := cluster.New(t, cluster.Options{InlineApply: true, SnapshotCount: 50, SnapshotCatchUpEntries: 10})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	var lagger uint64
	for _, id := range c.Members() {
		if id != lead.ID {
			lagger = id
			break
		}
	}
	events, cancel := c.Member(lagger).Node.Subscribe(64)
	defer cancel()
	c.Net.Isolate(lagger)
	for i := range 300 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", i%80), fmt.Sprint(i)))
	}
	for _, m := range c.Running() {
		if m.ID == lagger {
			continue
		}
		snap, err := m.Storage.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if snap.GetMetadata().GetIndex() == 0 {
			t.Fatalf("member %d took no snapshot in 300 writes (SnapshotCount 50)", m.ID)
		}
	}
	c.Net.Heal()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	restored := false
	for !restored {
		select {
		case e := <-events:
			restored = e.Type == raft.EventSnapshotRestored
		default:
			t.Fatalf("member %d caught up without a snapshot", lagger)
		}
	}
	want := lead.SM.Clone()
	for _, m := range c.Running() {
		got := m.SM.Clone()
		if len(got) != len(want) {
			t.Fatalf("member %d has %d keys, want %d", m.ID, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("member %d: %s = %q, want %q", m.ID, k, got[k], v)
			}
		}
	}
}
