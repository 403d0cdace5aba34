package raft_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// openFilesUnder counts this process's open file descriptors on files
// under dir (Linux: /proc/self/fd).
func openFilesUnder(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list open files: %v", err)
	}
	dir, _ = filepath.EvalSymlinks(dir)
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestStopWhileSavingAReceivedSnapshot: a follower stopped while it saves a
// snapshot received from the leader (its storage is slow: the Save is held
// until the stop has begun) neither leaks the two files it opened for the
// restore — a restore queued for an apply goroutine that already returned
// was never closed (issue 27) — nor stops persisting what it was handed
// (the append goroutine returned without its final drain when it could
// not queue the restore). Each round stops it at that point and counts the
// open files in its data dir once it has stopped; it then restarts from
// the saved snapshot and catches up.
func TestStopWhileSavingAReceivedSnapshot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts open files through /proc")
	}
	var (
		mu     sync.Mutex
		armed  atomic.Uint64 // the member whose next snapshot Save is held
		saving = make(chan struct{}, 1)
		gate   chan struct{}
	)
	gate = make(chan struct{})
	wrap := func(id uint64, s *storage.Store) raft.Storage {
		fs := faultstore.Wrap(s)
		fs.BeforeSave(func(_ *raftpb.HardState, _ []*raftpb.Entry, snap *raftpb.Snapshot) error {
			if snap.GetMetadata().GetIndex() == 0 || armed.Load() != id {
				return nil
			}
			mu.Lock()
			g := gate
			mu.Unlock()
			select {
			case saving <- struct{}{}:
			default:
			}
			<-g
			return nil
		})
		return fs
	}
	c := cluster.New(t, cluster.Options{Members: 3, SnapshotCount: 50, SnapshotCatchUpEntries: 5, ManualMembership: true, WrapStorage: wrap})
	ctx := ctxT(t, 120*time.Second)
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	const rounds = 6
	for round := range rounds {
		c.Stop(f.ID)
		// Enough writes that the leader compacts past the follower's log:
		// it needs a snapshot.
		for i := range 120 {
			propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("r%d-%d", round, i), "v"))
		}
		if _, err := lead.Node.Snapshot(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		gate = make(chan struct{})
		mu.Unlock()
		armed.Store(f.ID)
		m := c.Restart(f.ID)
		select {
		case <-saving:
		case <-ctx.Done():
			t.Fatalf("round %d: the follower never saved a snapshot", round)
		}
		// The Save is held: stop the follower, and let the Save go on once
		// the stop has begun (the node refuses calls from then on).
		stopped := make(chan struct{})
		go func() { defer close(stopped); c.Stop(f.ID) }()
		for {
			if _, err := m.Node.StaleRead([]byte("x")); errors.Is(err, raft.ErrStopped) {
				break
			}
			if err := pause(ctx, time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		armed.Store(0)
		mu.Lock()
		close(gate)
		mu.Unlock()
		<-stopped
		if n := openFilesUnder(t, m.Dir); n != 0 {
			t.Fatalf("round %d: %d files in the stopped member's data dir are still open", round, n)
		}
		// It restarts from the snapshot it saved and catches up.
		m = c.Restart(f.ID)
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitAppliedOn(ctx, m.Node, st.Commit); err != nil {
			t.Fatalf("round %d: the restarted follower applied %d of %d: %v", round, m.Node.AppliedIndex(), st.Commit, err)
		}
	}
}

// waitAppliedOn waits until node has applied index.
func waitAppliedOn(ctx context.Context, node *raft.Node, index uint64) error {
	for node.AppliedIndex() < index {
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
