package storage

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestEmptyStore(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	hs, cs, err := s.InitialState()
	require.NoError(t, err)
	require.True(t, raft.IsEmptyHardState(hs))
	require.NotNil(t, cs)
	fi, _ := s.FirstIndex()
	li, _ := s.LastIndex()
	require.Equal(t, uint64(1), fi)
	require.Equal(t, uint64(0), li)
	term, err := s.Term(0)
	require.NoError(t, err)
	require.Zero(t, term)
	_, err = s.Term(1)
	require.Equal(t, raft.ErrUnavailable, err)
	_, err = s.Entries(1, 1, 100)
	require.Equal(t, raft.ErrUnavailable, err)
	snap, err := s.Snapshot()
	require.NoError(t, err)
	require.True(t, raft.IsEmptySnap(snap))
	id, err := s.Identity()
	require.NoError(t, err)
	require.Zero(t, id)
}

func TestSaveAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Save(hardState(2, 1, 3), ents(1, 6, 2), nil))
	require.NoError(t, s.Save(nil, []*raftpb.Entry{ent(4, 3, "x"), ent(5, 3, "y")}, nil))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.LastIndex()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Save(nil, ents(6, 7, 3), nil), ErrClosed)

	s = open(t, dir, testOpts())
	hs, _, err := s.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(hardState(2, 1, 3), hs))
	got, err := s.Entries(1, 6, 1<<20)
	require.NoError(t, err)
	want := append(ents(1, 4, 2), ent(4, 3, "x"), ent(5, 3, "y"))
	requireEntriesEqual(t, want, got, "")
}

func TestEntriesMaxSize(t *testing.T) {
	for _, tailBytes := range []int64{-1, 300, 0} {
		s := open(t, t.TempDir(), Options{Backend: testBackend, NoSync: true, TailCacheBytes: tailBytes})
		es := ents(1, 11, 1)
		require.NoError(t, s.Save(nil, es, nil))
		one := uint64(proto.Size(es[0]))
		for _, tc := range []struct {
			max  uint64
			want int
		}{{0, 1}, {one - 1, 1}, {one, 1}, {2*one - 1, 1}, {2 * one, 2}, {5 * one, 5}, {raftNoLimit, 10}} {
			got, err := s.Entries(1, 11, tc.max)
			require.NoError(t, err)
			require.Len(t, got, tc.want, "tail %d max %d", tailBytes, tc.max)
		}
	}
}

const raftNoLimit = ^uint64(0)

func TestEntriesDoNotAlias(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 6, 1), nil))
	a, err := s.Entries(1, 3, raftNoLimit)
	require.NoError(t, err)
	a = append(a, ent(99, 9, "caller's"))
	_ = a
	b, err := s.Entries(1, 6, raftNoLimit)
	require.NoError(t, err)
	requireEntriesEqual(t, ents(1, 6, 1), b, "")
}

func TestSaveErrors(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 4, 1), nil))
	err := s.Save(nil, ents(5, 6, 1), nil)
	require.ErrorIs(t, err, ErrOutOfBounds, "gap")
	err = s.Save(nil, []*raftpb.Entry{ent(4, 1, ""), ent(6, 1, "")}, nil)
	require.ErrorIs(t, err, ErrOutOfBounds, "not consecutive")
	// Not fatal: the store still writes.
	require.NoError(t, s.Save(nil, ents(4, 5, 1), nil))
	require.Equal(t, ErrCompacted, s.Compact(0))
	require.ErrorIs(t, s.Compact(9), ErrOutOfBounds)
}

func TestCompact(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, s.Save(nil, ents(1, 11, 1), nil))
	require.NoError(t, s.Save(nil, ents(11, 21, 2), nil))
	require.NoError(t, s.Compact(12))
	fi, _ := s.FirstIndex()
	require.Equal(t, uint64(13), fi)
	term, err := s.Term(12)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	_, err = s.Term(11)
	require.Equal(t, raft.ErrCompacted, err)
	_, err = s.Entries(12, 14, raftNoLimit)
	require.Equal(t, raft.ErrCompacted, err)
	require.Equal(t, raft.ErrCompacted, s.Compact(12))
	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	fi, _ = s.FirstIndex()
	require.Equal(t, uint64(13), fi)
	term, err = s.Term(12)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
}

// TestOneCommitPerSave asserts the behaviour the node's performance rests
// on: one bbolt commit per Save, whatever it carries.
func TestOneCommitPerSave(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	snapData := []byte("state")
	next := uint64(1)
	for i := range 20 {
		before := s.Metrics().Commits
		n := uint64(i%5) * 50
		var snap *raftpb.Snapshot
		if i == 10 {
			// A Save carrying a snapshot, entries and hard state.
			snap = receive(t, s, next+100, 3, confState(1), snapData)
			next += 101
		}
		require.NoError(t, s.Save(hardState(3, 1, next-1), ents(next, next+n, 3), snap))
		next += n
		require.Equal(t, before+1, s.Metrics().Commits, "save %d", i)
	}
	before := s.Metrics().Commits
	require.NoError(t, s.Compact(next-10))
	require.Equal(t, before+1, s.Metrics().Commits, "compact")
}

// receive stores a snapshot file as the transport would, returning the
// snapshot to Save.
func receive(t testing.TB, s *Store, index, term uint64, cs *raftpb.ConfState, data []byte) *raftpb.Snapshot {
	t.Helper()
	snap := snapshotFor(s.opts.GroupID, index, term, cs, data)
	require.NoError(t, s.ReceiveSnapshot(snap, bytesReader(data)))
	return snap
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	_, err := Open(dir, testOpts())
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), dir)
	require.NoError(t, s.Close())
	s2 := open(t, dir, testOpts())
	require.NoError(t, s2.Close())
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, s.SetIdentity(Identity{MemberID: 3}))
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 7, MemberID: 3}))
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 7, MemberID: 3}))
	err := s.SetIdentity(Identity{ClusterID: 8, MemberID: 3})
	require.ErrorIs(t, err, ErrIdentityMismatch)
	var ie *IdentityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, Identity{ClusterID: 7, MemberID: 3}, ie.Stored)
	require.ErrorIs(t, s.SetIdentity(Identity{ClusterID: 7}), ErrIdentityMismatch)
	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	id, err := s.Identity()
	require.NoError(t, err)
	require.Equal(t, Identity{ClusterID: 7, MemberID: 3}, id)

	// A data dir written before incarnations (the two-field record just
	// read) gets one once; 0 keeps it; another one is refused.
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 7, MemberID: 3, Incarnation: 0xabc}))
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 7, MemberID: 3}))
	err = s.SetIdentity(Identity{ClusterID: 7, MemberID: 3, Incarnation: 0xdef})
	require.ErrorIs(t, err, ErrIdentityMismatch)
	require.Contains(t, err.Error(), "incarnation")
	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	id, err = s.Identity()
	require.NoError(t, err)
	require.Equal(t, Identity{ClusterID: 7, MemberID: 3, Incarnation: 0xabc}, id)
	require.NoError(t, s.Close())
}

func TestMarkRemoved(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Save(nil, ents(1, 3, 1), nil))
	require.NoError(t, s.MarkRemoved())
	require.NoError(t, s.Save(nil, ents(3, 4, 1), nil), "the open store keeps working")
	require.NoError(t, s.Close())
	_, err = Open(dir, testOpts())
	require.ErrorIs(t, err, ErrRemoved)
	// Nothing stays open: the lock is free.
	_, err = Open(dir, testOpts())
	require.ErrorIs(t, err, ErrRemoved)
	// Another group in the same file is not removed.
	s = open(t, dir, Options{Backend: testBackend, NoSync: true, GroupID: 2})
	require.NoError(t, s.Close())
}

func TestGroupsAreSeparate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{Backend: testBackend, NoSync: true, GroupID: 5})
	require.NoError(t, s.Save(hardState(1, 0, 0), ents(1, 4, 1), nil))
	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	li, _ := s.LastIndex()
	require.Zero(t, li)
}

func TestVersion(t *testing.T) {
	boltOnly(t) // it edits the bbolt file
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Close())
	rewriteKey(t, filepath.Join(dir, dbFileName), metaBucket, versionKey, appendUvarints(nil, FormatVersion+1))
	_, err = Open(dir, testOpts())
	require.ErrorIs(t, err, ErrVersion)
	require.Contains(t, err.Error(), dbFileName)
}

func TestOptionsValidate(t *testing.T) {
	err := Options{Backend: testBackend, LockTimeout: -1, KeepSnapshots: -2}.Validate()
	require.ErrorContains(t, err, "LockTimeout (-1ns)")
	require.ErrorContains(t, err, "KeepSnapshots (-2)")
	_, err = Open(t.TempDir(), Options{Backend: testBackend, KeepSnapshots: -1})
	require.Error(t, err)
	require.NoError(t, Options{Backend: testBackend}.Validate())
}

func TestOpenNotADir(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	_, err := Open(f, testOpts())
	require.Error(t, err)
}

// TestConcurrent runs the node's three kinds of callers at once; -race checks
// the locking, the assertions check that readers never see a torn state.
func TestConcurrent(t *testing.T) {
	s := open(t, t.TempDir(), Options{Backend: testBackend, NoSync: true, TailCacheBytes: 4 << 10})
	const n = 600
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(3)
	go func() { // raft loop: appends, with conflicting suffixes now and then
		defer wg.Done()
		defer close(done)
		last := uint64(0)
		for i := uint64(1); i <= n; i++ {
			at := last + 1
			if i%50 == 0 && last > 5 {
				at = last - 3
			}
			if err := s.Save(hardState(i, 1, 0), ents(at, at+5, i), nil); err != nil {
				t.Error(err)
				return
			}
			last = at + 4
		}
	}()
	go func() { // apply goroutine: snapshots and compaction
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			li, _ := s.LastIndex()
			fi, _ := s.FirstIndex()
			if li < fi+20 {
				continue
			}
			idx := li - 10
			_, err := s.CreateSnapshot(idx, confState(1), writeBytes([]byte("snap")))
			if err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) && !errors.Is(err, raft.ErrCompacted) {
				t.Error(err)
				return
			}
			if err := s.Compact(idx - 5); err != nil && err != raft.ErrCompacted {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // readers: raft and the transport
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			fi, _ := s.FirstIndex()
			li, _ := s.LastIndex()
			if li < fi {
				continue
			}
			es, err := s.Entries(fi, li+1, raftNoLimit)
			if err == raft.ErrCompacted {
				continue
			}
			if err != nil {
				t.Error(err)
				return
			}
			for j, e := range es {
				if e.GetIndex() != fi+uint64(j) {
					t.Errorf("entry %d has index %d", fi+uint64(j), e.GetIndex())
					return
				}
			}
			if _, err := s.Term(li); err != nil && err != raft.ErrCompacted && err != raft.ErrUnavailable {
				t.Error(err)
				return
			}
			snap, _ := s.Snapshot()
			if rc, _, err := s.OpenSnapshot(snap); err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wg.Wait()
}

// TestFailedCommitStopsWrites: after a commit fails (here bbolt's file is
// closed under it, so its writes fail with EBADF), every write returns
// ErrFailed, reads still answer from what was committed, and reopening
// recovers the last committed state.
func TestFailedCommitStopsWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Save(hardState(1, 1, 2), ents(1, 3, 1), nil))
	heal := breakDisk(t, s.e)
	err = s.Save(hardState(1, 1, 3), ents(3, 4, 1), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), s.e.dbPath)
	for _, err := range []error{
		s.Save(nil, ents(3, 4, 1), nil),
		s.Compact(1),
		s.SetIdentity(Identity{ClusterID: 1, MemberID: 1}),
		s.MarkRemoved(),
	} {
		require.ErrorIs(t, err, ErrFailed)
	}
	_, err = s.CreateSnapshot(2, nil, writeBytes([]byte("x")))
	require.ErrorIs(t, err, ErrFailed)
	li, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(2), li, "the failed Save is not visible")
	_ = s.Close() // bbolt's Close reports the closed file
	heal()

	s = open(t, dir, testOpts())
	hs, _, err := s.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(2), hs.GetCommit())
	li, _ = s.LastIndex()
	require.Equal(t, uint64(2), li)
}

func TestApplySnapshotAndMetrics(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 5, 1), nil))
	snap := receive(t, s, 10, 2, confState(1), []byte("leader state"))
	require.NoError(t, s.ApplySnapshot(snap))
	fi, _ := s.FirstIndex()
	require.Equal(t, uint64(11), fi)
	m := s.Metrics()
	require.Equal(t, uint64(2), m.Saves)
	require.Equal(t, uint64(4), m.Entries)
	require.Contains(t, m.String(), "commits=")
	require.Contains(t, (&IdentityError{Stored: Identity{ClusterID: 1, MemberID: 2}, Requested: Identity{ClusterID: 3, MemberID: 2}}).Error(), "cluster 1 member 2")
}

// logKeys returns the indexes of every entry in the log bucket of s,
// closed.
func logKeys(t *testing.T, s *Store) []uint64 {
	t.Helper()
	e, err := OpenEngine(s.e.dir, EngineOptions{Backend: testBackend, NoSync: true})
	require.NoError(t, err)
	defer e.Close()
	var keys []uint64
	require.NoError(t, e.view(func(tx kvTx) error {
		return tx.Bucket(s.logBucket).ForEach(func(k, _ []byte) error {
			keys = append(keys, binary.BigEndian.Uint64(k))
			return nil
		})
	}))
	return keys
}

// bbolt: compaction's deletions ride along the Saves that follow it; what a
// crash leaves undeleted is ignored at the next open and deleted by later
// Saves. Pebble: they go with the compaction, one range deletion. Nothing
// compacted is ever served, before or after a restart.
func TestCompactedEntriesDeletedByLaterSaves(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, s.Save(nil, ents(1, 1001, 1), nil))
	require.NoError(t, s.Compact(900))
	require.NoError(t, s.Close())
	keys := logKeys(t, s)
	if testBackend == BackendPebble {
		// Pebble: the entries went with the bounds, in one range deletion.
		require.Equal(t, uint64(901), keys[0], "Pebble deletes the compacted entries with the compaction")
	} else {
		// The crash case: the bounds are recorded, the entries still there.
		require.Equal(t, uint64(1), keys[0], "no Save ran: the compacted entries are still in bbolt")
	}

	s = open(t, dir, testOpts())
	fi, _ := s.FirstIndex()
	li, _ := s.LastIndex()
	require.Equal(t, uint64(901), fi)
	require.Equal(t, uint64(1000), li)
	_, err := s.Entries(899, 901, raftNoLimit)
	require.Equal(t, raft.ErrCompacted, err)
	got, err := s.Entries(901, 1001, raftNoLimit)
	require.NoError(t, err)
	require.Len(t, got, 100)

	// bbolt: each Save of one entry deletes 2+garbagePerSave of them.
	next := uint64(1001)
	for range 900/(2+garbagePerSave) + 1 {
		require.NoError(t, s.Save(nil, ents(next, next+1, 1), nil))
		next++
	}
	require.NoError(t, s.Close())
	keys = logKeys(t, s)
	require.Equal(t, uint64(901), keys[0], "the compacted entries were not deleted")
	require.Len(t, keys, int(next-901))

	// A snapshot received while entries wait to be deleted empties the log
	// and the wait.
	s = open(t, dir, testOpts())
	require.NoError(t, s.Compact(next-10))
	snap := receive(t, s, next+50, 1, confState(1), []byte("state"))
	require.NoError(t, s.Save(nil, nil, snap))
	require.NoError(t, s.Save(nil, ents(next+51, next+53, 1), nil))
	require.NoError(t, s.Close())
	require.Equal(t, []uint64{next + 51, next + 52}, logKeys(t, s))
	s = open(t, dir, testOpts())
	fi, _ = s.FirstIndex()
	require.Equal(t, next+51, fi)
}
