package storage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rawBounds reads group 1's bounds record: first index - 1, its term, the
// last index (zeros if there is none).
func rawBounds(t *testing.T, e *Engine) [3]uint64 {
	t.Helper()
	var b [3]uint64
	require.NoError(t, e.view(func(tx kvTx) error {
		v := tx.Bucket(stateBucketName(1)).Get(boundsKey)
		if v == nil {
			return nil
		}
		vs, err := decodeUvarints(v, 3)
		copy(b[:], vs)
		return err
	}))
	return b
}

// setFormatVersion writes version as e's format version, as an earlier
// release would have (before any group).
func setFormatVersion(t *testing.T, e *Engine, version uint64) {
	t.Helper()
	_, _, err := e.commit(0, false, func(tx kvTx) error {
		mb, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return mb.Put(versionKey, appendUvarints(nil, version))
	})
	require.NoError(t, err)
}

func rawVersion(t *testing.T, e *Engine) uint64 {
	t.Helper()
	var version uint64
	require.NoError(t, e.view(func(tx kvTx) error {
		vs, err := decodeUvarints(tx.Bucket(metaBucket).Get(versionKey), 1)
		version = vs[0]
		return err
	}))
	return version
}

func requireLog(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	require.NoError(t, err)
	l, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "first and last index")
}

// A Pebble database made by this release is format version 3: appends do
// not rewrite the bounds record, which moves only with a compaction, a
// truncation or a snapshot; the log's bounds survive a reopen either way.
func TestPebbleBoundsRecordMovesOnlyWithTheLog(t *testing.T) {
	dir := t.TempDir()
	opts := EngineOptions{NoSync: true, Backend: BackendPebble}
	e := openEngine(t, dir, opts)
	s := group(t, e, 1)
	require.EqualValues(t, formatVersionLazyBounds, rawVersion(t, e))
	hs := &raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(0)}
	require.NoError(t, s.Save(hs, ents(1, 11, 1), nil))
	require.Equal(t, [3]uint64{}, rawBounds(t, e), "appends write no bounds record")

	reopen := func() {
		t.Helper()
		require.NoError(t, e.Close())
		e = openEngine(t, dir, opts)
		s = group(t, e, 1)
	}
	reopen()
	requireLog(t, s, 1, 10)

	require.NoError(t, s.Compact(5))
	require.Equal(t, [3]uint64{5, 1, 10}, rawBounds(t, e), "a compaction records the bounds")
	require.NoError(t, s.Save(nil, ents(11, 16, 1), nil))
	require.Equal(t, [3]uint64{5, 1, 10}, rawBounds(t, e), "appends leave them")
	reopen()
	requireLog(t, s, 6, 15)

	// A conflicting append cuts the log's end: recorded.
	require.NoError(t, s.Save(nil, ents(13, 15, 2), nil))
	require.Equal(t, [3]uint64{5, 1, 14}, rawBounds(t, e), "a truncation records the bounds")
	reopen()
	requireLog(t, s, 6, 14)
	term, err := s.Term(14)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)

	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(20), Term: proto.Uint64(2),
		ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	require.NoError(t, s.Save(nil, nil, snap))
	require.Equal(t, [3]uint64{20, 2, 20}, rawBounds(t, e), "a snapshot records the bounds")
	require.NoError(t, s.Save(nil, ents(21, 23, 2), nil))
	reopen()
	requireLog(t, s, 21, 22)
}

// A version 3 log that ends before its bounds record says is damage.
func TestPebbleLogShorterThanItsBoundsIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	opts := EngineOptions{NoSync: true, Backend: BackendPebble}
	e := openEngine(t, dir, opts)
	s := group(t, e, 1)
	require.NoError(t, s.Save(&raftpb.HardState{Term: proto.Uint64(1)}, ents(1, 11, 1), nil))
	require.NoError(t, s.Compact(3)) // records the last index, 10
	require.NoError(t, s.Close())
	_, _, err := e.commit(0, false, func(tx kvTx) error {
		return tx.Bucket(logBucketName(1)).Delete(indexKey(nil, 10))
	})
	require.NoError(t, err)
	_, err = e.Group(1, GroupOptions{})
	var ce *CorruptError
	require.True(t, errors.As(err, &ce), "opening a log that ends at 9 with 10 recorded: %v", err)
	require.Contains(t, err.Error(), "log ends at index 9, but 10 was written")
}

// A Pebble database of an earlier release (format version 1 or 2) keeps
// its format: every append still records the bounds, so that the release
// that made it can open it again.
func TestPebbleOfAnEarlierFormatKeepsItsBounds(t *testing.T) {
	dir := t.TempDir()
	opts := EngineOptions{NoSync: true, Backend: BackendPebble}
	e := openEngine(t, dir, opts)
	setFormatVersion(t, e, formatVersionOneGroup)
	require.NoError(t, e.Close())
	e = openEngine(t, dir, opts)
	s := group(t, e, 1)
	require.NoError(t, s.Save(&raftpb.HardState{Term: proto.Uint64(1)}, ents(1, 8, 1), nil))
	require.EqualValues(t, formatVersionOneGroup, rawVersion(t, e))
	require.Equal(t, [3]uint64{0, 0, 7}, rawBounds(t, e), "every append records the bounds")
}

// A release that reads formats up to 2 refuses a version 3 database with
// ErrVersion (it would take the bounds record behind the log for damage).
func TestLazyBoundsRefusedByEarlierReaders(t *testing.T) {
	e := openEngine(t, t.TempDir(), EngineOptions{NoSync: true, Backend: BackendPebble})
	group(t, e, 1)
	err := e.view(func(tx kvTx) error {
		_, err := e.readVersion(tx.Bucket(metaBucket), formatVersionManyGroups)
		return err
	})
	require.ErrorIs(t, err, ErrVersion)
}
