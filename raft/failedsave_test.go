package raft_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// A follower whose log write fails stops on the fatal error without
// acknowledging anything that write carried — not even through a later
// append it had already queued: an empty MsgApp (the leader's answer to a
// heartbeat while the write was under way) is acknowledged by an append
// with no entries, which the stopping node drained and delivered. The
// leader then counted entries the follower never wrote (Match past its
// log), and the restarted follower stopped on the next heartbeat:
// "tocommit(N) is out of range [lastIndex(N-k)]" (robustness
// 3voters-disks seed 3, fail-fsync).
func TestFailedSaveAcknowledgesNothingAfterIt(t *testing.T) {
	var (
		mu    sync.Mutex
		disks = map[uint64]*faultstore.Store{}
	)
	wrap := func(id uint64, s *storage.Store) raft.Storage {
		f := faultstore.Wrap(s)
		mu.Lock()
		disks[id] = f
		mu.Unlock()
		return f
	}
	c := cluster.New(t, cluster.Options{WrapStorage: wrap, ManualMembership: true})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("x", "1"))
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, c, lead)
	fID, leadID := f.ID, lead.ID
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	target := st.LastIndex + 1 // the next entry: f's write of it fails

	// f's next write of entries waits until released, then fails: nothing
	// of it is written.
	mu.Lock()
	disk := disks[fID]
	mu.Unlock()
	writing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	disk.BeforeSave(func(_ *raftpb.HardState, ents []*raftpb.Entry, _ *raftpb.Snapshot) error {
		if len(ents) == 0 || ents[len(ents)-1].GetIndex() < target {
			return nil
		}
		once.Do(func() { close(writing) })
		<-release
		return fmt.Errorf("%w: this write fails", faultstore.ErrInjected)
	})
	// Every acknowledgement f sends of an index it never wrote.
	var badAck atomic.Uint64
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		if from == fID && m.GetTo() == leadID && m.GetType() == raftpb.MsgAppResp && !m.GetReject() && m.GetIndex() >= target {
			badAck.Store(m.GetIndex())
		}
		return false
	})

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = lead.Node.Propose(pctx, kv.Put("x", "2")) }()
	select {
	case <-writing:
	case <-ctx.Done():
		t.Fatal("f never wrote the entry")
	}
	// The others commit it; the leader's heartbeats to f, whose ack is
	// held, draw empty MsgApps at the new index: f acknowledges one in an
	// append queued behind the held write. f's commit index reaching the
	// entry says it stepped one (a heartbeat carries at most f's Match).
	for {
		fs, err := f.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fs.Commit >= target {
			break
		}
		if err := pause(ctx, 2*time.Millisecond); err != nil {
			t.Fatalf("f's commit stayed at %d, want %d", fs.Commit, target)
		}
	}
	if _, err := f.Node.Status(ctx); err != nil { // the loop has handed that Ready over
		t.Fatal(err)
	}

	close(release)
	select {
	case <-f.Node.Done():
	case <-ctx.Done():
		t.Fatal("f did not stop on its failed write")
	}
	if err := f.Node.Err(); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("f stopped with %v, want the injected fault", err)
	}
	if err := pause(ctx, 100*time.Millisecond); err != nil { // (acks in flight)
		t.Fatal(err)
	}
	if i := badAck.Load(); i != 0 {
		t.Errorf("f acknowledged index %d after its write of %d failed", i, target)
	}
	last, err := f.Store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if last >= target {
		t.Fatalf("f's storage holds %d: the failed write was written", last)
	}
	if st, err := lead.Node.Status(ctx); err == nil && st.Progress[fID].Match > last {
		t.Errorf("the leader believes f holds %d, its log ends at %d", st.Progress[fID].Match, last)
	}
	hs, _, err := f.Store.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetCommit() > last {
		t.Errorf("f's stored commit index %d is past its log (%d)", hs.GetCommit(), last)
	}

	// f restarts on what it wrote and catches up.
	c.Net.SetFilter(nil)
	c.Crash(fID)
	f = c.Restart(fID)
	propose(ctx, t, lead.Node, kv.Put("x", "3"))
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if err := c.Converge(cctx); err != nil {
		t.Fatalf("after the restart: %v (f: %v)", err, f.Node.Err())
	}
	if !f.IsRunning() || f.Node.Err() != nil {
		t.Fatalf("f after its restart: %v", f.Node.Err())
	}
	select {
	case <-f.Node.Done():
		t.Fatalf("f stopped after its restart: %v", f.Node.Err())
	case <-time.After(200 * time.Millisecond): // heartbeats
	}
}
