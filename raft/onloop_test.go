package raft_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
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

// heldSaves is a storage whose asynchronous writes can be held in flight:
// queued, neither written nor completed, until released.
type heldSaves struct {
	*storage.Store
	mu     sync.Mutex
	held   bool
	queued []func()
}

func (h *heldSaves) SaveAsync(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, done func(error)) {
	h.mu.Lock()
	if h.held {
		h.queued = append(h.queued, func() { h.Store.SaveAsync(hs, ents, snap, done) })
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.Store.SaveAsync(hs, ents, snap, done)
}

func (h *heldSaves) hold() {
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
}

func (h *heldSaves) release() {
	h.mu.Lock()
	h.held = false
	q := h.queued
	h.queued = nil
	h.mu.Unlock()
	for _, f := range q {
		f()
	}
}

// A follower's answer to an append with nothing to write (the leader's
// commit index reaching it) is handled on the loop's worker only when no
// write of the follower is in flight: it acknowledges the entries before
// it, so it leaves after their fsync, not before (the leader would count
// entries the follower may lose towards a commit).
func TestEmptyAppendAckWaitsForTheWriteBeforeIt(t *testing.T) {
	var mu sync.Mutex
	stores := map[uint64]*heldSaves{}
	c := cluster.New(t, cluster.Options{WrapStorage: func(id uint64, s *storage.Store) raft.Storage {
		h := &heldSaves{Store: s}
		mu.Lock()
		stores[id] = h
		mu.Unlock()
		return h
	}})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "1"))
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	var f uint64
	for _, id := range c.Members() {
		if id != lead.ID {
			f = id
			break
		}
	}
	mu.Lock()
	held := stores[f]
	mu.Unlock()
	held.hold()
	defer held.release()
	propose(ctx, t, lead.Node, kv.Put("x", "1")) // committed by the leader and the other follower
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	index := st.Commit
	// The leader's commit index reaches the follower in an empty append,
	// whose answer acknowledges index; the follower's write of it is held.
	for {
		fs, err := c.Member(f).Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fs.Commit >= index {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for range 50 {
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Progress[f].Match; m >= index {
			t.Fatalf("member %d acknowledged index %d (match %d) while its write of it was in flight", f, index, m)
		}
		time.Sleep(2 * time.Millisecond)
	}
	held.release()
	for {
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Progress[f].Match >= index {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
