package storage

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// TestCommitterYieldsBetweenGroupCommits: after a commit that carried the
// writes of more than one group, the committer yields before it takes the
// next batch, and what runs during the yield (here: two more groups
// queueing their appends, as the goroutines the commit readied do) goes
// into that next batch together. A lone group's commits do not yield.
func TestCommitterYieldsBetweenGroupCommits(t *testing.T) {
	var yields atomic.Int32
	var armed atomic.Bool // from the held commit on: the groups' creations yield too
	var stores []*Store
	late := make(chan error, 2)
	hook := func() {
		// The held commit (synchronous) readied no group: the first
		// yield follows the commit of groups 1 and 2.
		if !armed.Load() || yields.Add(1) != 1 {
			return
		}
		for _, s := range stores[2:] { // groups 3 and 4
			s.SaveAsync(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "late")}, nil, func(err error) { late <- err })
		}
	}
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true, commitYield: hook,
		commitRunnable: func() bool { return false }, commitYieldFor: time.Hour})
	for g := uint64(1); g <= 4; g++ {
		stores = append(stores, group(t, e, g))
	}
	before := e.Metrics()

	armed.Store(true)
	release := holdCommitter(t, e)
	early := make(chan error, 2)
	for _, s := range stores[:2] {
		s.SaveAsync(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "early")}, nil, func(err error) { early <- err })
	}
	waitPending(t, e, 2)
	release()
	for range 2 {
		require.NoError(t, <-early)
	}
	for range 2 {
		select {
		case err := <-late:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("groups 3 and 4 never wrote: the committer did not yield after a commit of two groups")
		}
	}
	waitIdle(e) // the yield after a commit follows its done callbacks
	m := e.Metrics()
	require.EqualValues(t, 3, m.Commits-before.Commits, "the held commit, groups 1+2, then groups 3+4 together")
	require.EqualValues(t, 3, yields.Load(), "after the commit of groups 1+2 a yield, and another since that one paid off (groups 3 and 4 queued); one after the commit of 3+4; none after the held (synchronous) one")

	// A lone group's appends yield only after another group's: the first
	// after groups 3 and 4 does, the next ones never.
	saveAsync := func(i uint64) {
		done := make(chan error, 1)
		stores[0].SaveAsync(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "alone")}, nil, func(err error) { done <- err })
		require.NoError(t, <-done)
		waitIdle(e)
	}
	saveAsync(2)
	require.EqualValues(t, 4, yields.Load(), "group 1 after groups 3 and 4: another group wrote")
	n := yields.Load()
	for i := uint64(3); i <= 6; i++ {
		saveAsync(i)
	}
	// Nor do synchronous writes, one group's after another's.
	for i := uint64(2); i <= 3; i++ {
		require.NoError(t, stores[1].Save(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "sync")}, nil))
		require.NoError(t, stores[2].Save(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "sync")}, nil))
	}
	require.Equal(t, n, yields.Load())
}

// TestCommitterDoesNotYieldBeforeAFullBatch: when the next batch already
// holds as many writes as the commit just made (and at least yieldBelow),
// as when thousands of groups write at once after a host's loss, the
// committer commits it without yielding; the commit after it, with nothing
// queued, yields.
func TestCommitterDoesNotYieldBeforeAFullBatch(t *testing.T) {
	var yields atomic.Int32
	var armed atomic.Bool
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true, commitYield: func() {
		if armed.Load() {
			yields.Add(1)
		}
	}, commitRunnable: func() bool { return false }})
	var stores []*Store
	for g := uint64(1); g <= 6; g++ {
		stores = append(stores, group(t, e, g))
	}
	saves := make(chan error, 6)
	saveAsync := func(s *Store) {
		s.SaveAsync(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "x")}, nil, func(err error) { saves <- err })
	}
	armed.Store(true)

	// Groups 1 and 2, and a synchronous write that blocks until groups 3
	// to 6 queued theirs behind it: one commit of three writes, then a
	// batch of four already waiting.
	release := holdCommitter(t, e)
	saveAsync(stores[0])
	saveAsync(stores[1])
	running, unblock := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		_, _, err := e.commit(0, false, func(kvTx) error {
			close(running)
			<-unblock
			return nil
		})
		blocked <- err
	}()
	waitPending(t, e, 3)
	release()
	<-running
	for _, s := range stores[2:] {
		saveAsync(s)
	}
	waitPending(t, e, 4)
	close(unblock)
	require.NoError(t, <-blocked)
	for range 6 {
		require.NoError(t, <-saves)
	}
	waitIdle(e) // the yield after a commit follows its done callbacks
	require.EqualValues(t, 1, yields.Load(), "no yield before the full batch of groups 3-6, one after it")
}

// TestCommitterYieldsAgainWhileItPaysOff: after a commit of several
// groups' writes the committer yields again while the yield paid off (the
// next batch grew) or goroutines wait for a processor, within its bounds:
// maxYields, yieldFor times the commit's duration, and a next batch of
// yieldGrowth times the writes the commit carried.
func TestCommitterYieldsAgainWhileItPaysOff(t *testing.T) {
	cases := []struct {
		name     string
		runnable bool
		bound    time.Duration
		queue    []int // writes of new groups queued during yield i+1
		want     int32 // yields after the commit of groups 1 and 2
	}{
		{name: "once when nothing waits", want: 1},
		{name: "while the batch grows", queue: []int{1, 1, 1}, want: 4},
		{name: "while goroutines wait, at most maxYields", runnable: true, want: maxYields},
		{name: "while goroutines wait, within the time bound", runnable: true, bound: time.Nanosecond, want: 1},
		{name: "not past yieldGrowth times the batch", runnable: true, queue: []int{yieldGrowth * yieldBelow}, want: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var yields atomic.Int32
			var counted atomic.Uint64 // the commit whose yields count (its number)
			counted.Store(math.MaxUint64)
			var commits *atomic.Uint64 // the engine's count of commits
			var stores []*Store
			next := 2 // stores[next] is the next group a yield queues a write of
			queued := make(chan error, 64)
			hook := func() {
				if counted.Load() == math.MaxUint64 || commits.Load() != counted.Load() {
					return
				}
				i := int(yields.Add(1)) - 1
				if i < len(tc.queue) {
					for range tc.queue[i] {
						stores[next].SaveAsync(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "late")}, nil, func(err error) { queued <- err })
						next++
					}
				}
			}
			bound := tc.bound
			if bound == 0 {
				bound = time.Hour
			}
			e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true, commitYield: hook,
				commitRunnable: func() bool { return tc.runnable }, commitYieldFor: bound})
			commits = &e.m.commits
			for g := uint64(1); g <= 2+yieldGrowth*yieldBelow; g++ {
				stores = append(stores, group(t, e, g))
			}
			release := holdCommitter(t, e)
			first := make(chan error, 2)
			for _, s := range stores[:2] {
				s.SaveAsync(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "first")}, nil, func(err error) { first <- err })
			}
			waitPending(t, e, 2)
			// The held commit is synchronous: it readied no group and does
			// not yield. The yields counted follow the commit of groups 1
			// and 2, the one after it; not those after the later commits.
			counted.Store(e.m.commits.Load() + 2)
			release()
			for range 2 {
				require.NoError(t, <-first)
			}
			for _, n := range tc.queue {
				for range n {
					require.NoError(t, <-queued)
				}
			}
			waitIdle(e)
			require.Equal(t, tc.want, yields.Load())
		})
	}
}
