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
		// The first yield follows the held commit (group 0's, after
		// group 4's creation), the second the commit of groups 1 and 2.
		if !armed.Load() || yields.Add(1) != 2 {
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
	require.EqualValues(t, 3, yields.Load(), "a yield after each commit: each is another group's, or two groups'")

	// A lone group's commits, one write each, yield only after another
	// group's: the first after groups 3 and 4 does, the next ones never.
	require.NoError(t, stores[0].Save(hardState(1, 1, 2), []*raftpb.Entry{ent(2, 1, "alone")}, nil))
	require.EqualValues(t, 4, yields.Load(), "group 1 after groups 3 and 4: another group wrote")
	n := yields.Load()
	for i := uint64(3); i <= 6; i++ {
		require.NoError(t, stores[0].Save(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, "alone")}, nil))
	}
	require.Equal(t, n, yields.Load())
}
