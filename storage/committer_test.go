package storage

import (
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
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true, commitYield: hook})
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
	m := e.Metrics()
	require.EqualValues(t, 3, m.Commits-before.Commits, "the held commit, groups 1+2, then groups 3+4 together")
	require.EqualValues(t, 2, yields.Load(), "a yield after each commit of two groups' appends, none after the held (synchronous) one")

	// A lone group's appends yield only after another group's: the first
	// after groups 3 and 4 does, the next ones never.
	saveAsync := func(i uint64) {
		done := make(chan error, 1)
		stores[0].SaveAsync(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "alone")}, nil, func(err error) { done <- err })
		require.NoError(t, <-done)
	}
	saveAsync(2)
	require.EqualValues(t, 3, yields.Load(), "group 1 after groups 3 and 4: another group wrote")
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
