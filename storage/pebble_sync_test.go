package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/aiosync"
)

// A Pebble engine with fsync on flushes its WAL as Pebble does by itself,
// and with ParkedSync through aiosync (when the kernel gives the process
// AIO); either way its writes are there after a reopen. (No test in this
// package runs in parallel: the counts are the process's.)
func TestPebbleSyncsParked(t *testing.T) {
	for _, parked := range []bool{true, false} {
		t.Run(map[bool]string{true: "parked", false: "blocking"}[parked], func(t *testing.T) {
			dir := t.TempDir()
			opts := EngineOptions{Backend: BackendPebble, ParkedSync: parked}
			e := openEngine(t, dir, opts)
			s := group(t, e, 1)
			aio0, direct0 := aiosync.Stats()
			for i := uint64(1); i <= 20; i++ {
				hs := &raftpb.HardState{Term: new(uint64(1)), Commit: new(i)}
				require.NoError(t, s.Save(hs, []*raftpb.Entry{ent(i, 1, "x")}, nil))
			}
			aio1, direct1 := aiosync.Stats()
			switch {
			case !parked:
				require.Equal(t, aio0, aio1, "by default: no flush through AIO")
				require.Equal(t, direct0, direct1, "by default: Pebble's own syncs, not aiosync's fallback")
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
