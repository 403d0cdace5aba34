package raft_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// A member partitioned while the others write far past compaction catches up
// through the leader's snapshot, streamed beside the MsgSnap.
func TestSnapshotInstallAfterPartition(t *testing.T) {
	c := cluster.New(t, cluster.Options{SnapshotCount: 100, SnapshotCatchUpEntries: 20})
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
	for i := range 400 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", i), "v"))
	}
	first, err := lead.Storage.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 2 {
		t.Fatalf("leader's log was not compacted: first index %d", first)
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
			t.Fatalf("member %d caught up without a snapshot (network: %+v)", lagger, c.Net.Stats())
		}
	}
	if got := c.Member(lagger).SM.Len(); got != 400 {
		t.Fatalf("lagger has %d keys, want 400", got)
	}
}

// Every member restarts from its latest snapshot plus the log after it.
func TestRestartFromSnapshotAndLog(t *testing.T) {
	c := cluster.New(t, cluster.Options{SnapshotCount: 50, SnapshotCatchUpEntries: 10})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	for i := range 175 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", i%60), fmt.Sprint(i)))
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	want := lead.SM.Clone()
	for _, id := range c.Members() {
		snap, err := c.Member(id).Storage.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if snap.GetMetadata().GetIndex() == 0 {
			t.Fatalf("member %d took no snapshot", id)
		}
		c.Crash(id)
	}
	for _, id := range c.Members() {
		c.Restart(id)
	}
	c.WaitLeader()
	// Every restarted member proposes: its request IDs must not collide with
	// the ones it used before the crash (they are in the restored dedup window).
	for _, m := range c.Running() {
		key := fmt.Sprintf("after-%d", m.ID)
		propose(ctx, t, m.Node, kv.Put(key, "restart"))
		want[key] = "restart"
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Running() {
		got := m.SM.Clone()
		if len(got) != len(want) {
			t.Fatalf("member %d has %d keys after restart, want %d", m.ID, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("member %d: %s = %q, want %q", m.ID, k, got[k], v)
			}
		}
	}
}

// A leader stopped cleanly hands leadership to another voter first.
func TestStopHandsOffLeadership(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 20*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	events, cancel := c.Member(lead.ID%3 + 1).Node.Subscribe(16)
	defer cancel()
	c.Stop(lead.ID)
	if err := lead.Node.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("k", "w")); !errors.Is(err, raft.ErrStopped) {
		t.Fatalf("Propose after Stop: %v, want ErrStopped", err)
	}
	next := c.WaitLeader()
	if next.ID == lead.ID {
		t.Fatal("stopped member still leads")
	}
	for {
		select {
		case e := <-events:
			if e.Type == raft.EventLeaderChanged && e.Leader == next.ID {
				return
			}
		case <-ctx.Done():
			t.Fatal("no leader change event")
		}
	}
}

// A member whose disk fails stops with the error instead of going on: its
// callers get ErrStopped, Err says why, and the others keep serving.
func TestFailedPersistStopsTheNode(t *testing.T) {
	disks := map[uint64]*faultstore.Store{}
	c := cluster.New(t, cluster.Options{WrapStorage: func(id uint64, s *storage.Store) raft.Storage {
		disks[id] = faultstore.Wrap(s)
		return disks[id]
	}})
	ctx := ctxT(t, 20*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("before", "1"))
	broken := lead.ID%3 + 1 // a follower
	disks[broken].FailSaves(1 << 30)
	propose(ctx, t, lead.Node, kv.Put("after", "1"))
	m := c.Member(broken)
	select {
	case <-m.Node.Done():
	case <-ctx.Done():
		t.Fatal("node with a failing disk did not stop")
	}
	if err := m.Node.Err(); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("Err() = %v, want the injected disk error", err)
	}
	var fe *raft.FatalError
	if !errors.As(m.Node.Err(), &fe) {
		t.Fatalf("Err() = %T, want *FatalError", m.Node.Err())
	}
	if _, err := m.Node.Propose(ctx, kv.Put("x", "y")); !errors.Is(err, raft.ErrStopped) {
		t.Fatalf("Propose on the stopped node: %v", err)
	}
	// The other two still form a quorum.
	other := lead
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	propose(wctx, t, other.Node, kv.Put("still", "works"))
}

// A follower with a slow disk (every write takes 30 ms) neither stalls the
// others nor diverges: writes commit on the fast majority, and the slow one
// catches up.
func TestSlowDiskFollower(t *testing.T) {
	disks := map[uint64]*faultstore.Store{}
	c := cluster.New(t, cluster.Options{WrapStorage: func(id uint64, s *storage.Store) raft.Storage {
		disks[id] = faultstore.Wrap(s)
		return disks[id]
	}})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	slow := lead.ID%3 + 1
	disks[slow].SetSaveDelay(30 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("w%d-%d", w, i), "v"))
			}
		}()
	}
	wg.Wait()
	disks[slow].SetSaveDelay(0)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Member(slow).SM.Len(); got != 200 {
		t.Fatalf("slow member has %d keys, want 200", got)
	}
}

// SnapshotLogRatio: zero takes the default; values outside [0.01, 100]
// (a negative one, NaN, one that would snapshot on every entry or never)
// are refused.
func TestSnapshotLogRatioValidated(t *testing.T) {
	if c := (raft.Config{ID: 1}).WithDefaults(); c.SnapshotLogRatio != raft.DefaultSnapshotLogRatio {
		t.Fatalf("default ratio %g, want %g", c.SnapshotLogRatio, raft.DefaultSnapshotLogRatio)
	}
	for _, ok := range []float64{0.01, 0.5, 4, 100} {
		if err := (raft.Config{ID: 1, SnapshotLogRatio: ok}).WithDefaults().Validate(); err != nil {
			t.Errorf("ratio %g: %v", ok, err)
		}
	}
	for _, bad := range []float64{-1, 0.001, 101, math.NaN(), math.Inf(1)} {
		err := (raft.Config{ID: 1, SnapshotLogRatio: bad}).WithDefaults().Validate()
		if !errors.Is(err, raft.ErrInvalidConfig) || !strings.Contains(err.Error(), "SnapshotLogRatio") {
			t.Errorf("ratio %g: %v, want ErrInvalidConfig naming SnapshotLogRatio", bad, err)
		}
	}
}
