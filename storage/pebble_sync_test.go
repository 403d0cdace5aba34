package storage

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/aiosync"
)

// A Pebble engine with fsync on flushes its WAL as Pebble does by itself
// with SyncWaitBlocking, through aiosync with SyncWaitParked (when the
// kernel gives the process AIO), and with SyncWaitAuto as the committer
// says (a lone group's commits: blocking; forced parked: through AIO);
// whichever way, its writes are there after a reopen. (No test in this
// package runs in parallel: the counts are the process's.)
func TestPebbleSyncWaits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   SyncWait
		park   bool // SyncWaitAuto: force the committer's verdict
		parked bool // want the WAL's flushes through AIO
	}{
		{"blocking", SyncWaitBlocking, false, false},
		{"parked", SyncWaitParked, false, true},
		{"auto/one-group", SyncWaitAuto, false, false},
		{"auto/many-groups", SyncWaitAuto, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := EngineOptions{Backend: BackendPebble, SyncWait: tc.mode}
			e := openEngine(t, dir, opts)
			s := group(t, e, 1)
			aio0, direct0 := aiosync.Stats()
			for i := uint64(1); i <= 20; i++ {
				if tc.park {
					e.pdb.park.Store(true) // as noteGroups would, with many groups
				}
				hs := &raftpb.HardState{Term: new(uint64(1)), Commit: new(i)}
				require.NoError(t, s.Save(hs, []*raftpb.Entry{ent(i, 1, "x")}, nil))
			}
			aio1, direct1 := aiosync.Stats()
			switch {
			case !tc.parked:
				require.Equal(t, aio0, aio1, "no flush through AIO")
				require.Equal(t, direct0, direct1, "Pebble's own syncs, not aiosync's fallback")
			case aiosync.Available():
				require.GreaterOrEqual(t, aio1-aio0, uint64(20), "a synced Save each: its WAL flush through AIO")
			default:
				t.Log("AIO not available here: the plain calls")
				require.GreaterOrEqual(t, direct1-direct0, uint64(20))
			}
			require.NoError(t, e.Close())
			e = openEngine(t, dir, opts)
			s = group(t, e, 1)
			last, err := s.LastIndex()
			require.NoError(t, err)
			require.EqualValues(t, 20, last)
		})
	}
}

// The committer's verdict for SyncWaitAuto: park from an average of
// parkAbove groups a commit, until it falls below parkBelow.
func TestNoteGroupsParksWhileCommitsCarryManyGroups(t *testing.T) {
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: BackendPebble, NoSync: true})
	steps := []struct {
		groups, commits int
		park            bool
	}{
		{1, 50, false},
		{3, 50, false},  // a few groups: blocking
		{12, 3, false},  // a burst of a few commits does not move it
		{12, 30, true},  // many groups for a while: parked
		{1, 3, true},    // a few lone commits do not move it back
		{6, 50, true},   // between the bounds: it stays
		{1, 30, false},  // a lone group again: blocking
		{6, 50, false},  // between the bounds: it stays
		{100, 30, true}, // a thousand groups' elections
		{1, 50, false},
		// The bounds are exact: a steady parkAbove parks, a steady
		// parkBelow keeps it, one fewer stops it.
		{parkAbove, 60, true},
		{parkBelow, 60, true},
		{parkBelow - 1, 60, false},
		{parkAbove - 1, 60, false},
	}
	for i, st := range steps {
		for range st.commits {
			e.noteGroups(st.groups)
		}
		require.Equal(t, st.park, e.pdb.park.Load(), fmt.Sprintf("step %d: %d commits of %d groups (average x16 %d)", i, st.commits, st.groups, e.c.groupsAvg))
	}
}
