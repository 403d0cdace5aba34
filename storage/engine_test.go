package storage

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// openEngine opens an engine in dir, closing it when the test ends.
func openEngine(t testing.TB, dir string, opts EngineOptions) *Engine {
	t.Helper()
	e, err := OpenEngine(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func group(t testing.TB, e *Engine, id uint64) *Store {
	t.Helper()
	s, err := e.Group(id, GroupOptions{})
	require.NoError(t, err)
	return s
}

// holdCommitter makes the committer run a write that blocks until release
// is called, and returns once it runs: what is queued meanwhile goes into
// the next commit, together.
func holdCommitter(t testing.TB, e *Engine) (release func()) {
	t.Helper()
	running, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := e.commit(0, false, func(kvTx) error {
			close(running)
			<-unblock
			return nil
		})
		done <- err
	}()
	<-running
	return func() {
		close(unblock)
		require.NoError(t, <-done)
	}
}

// openGroups opens an engine on dir (NoSync) and groups 1..n in it.
func openGroups(t testing.TB, dir string, n int) (*Engine, []*Store) {
	t.Helper()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	stores := make([]*Store, n)
	for g := range stores {
		stores[g] = group(t, e, uint64(g+1))
	}
	return e, stores
}

// waitPending waits until n writes are queued for the next commit.
func waitPending(t testing.TB, e *Engine, n int) {
	t.Helper()
	for e.pendingWrites() < n {
		runtime.Gosched()
	}
	require.Equal(t, n, e.pendingWrites())
}

// waitIdle waits until no commit is running: a yield after a commit, which
// runs after the commit's done callbacks, has then ended too.
func waitIdle(e *Engine) {
	for {
		e.c.mu.Lock()
		busy := e.c.busy
		e.c.mu.Unlock()
		if !busy {
			return
		}
		runtime.Gosched()
	}
}

// storedVersion reads the format version in the bbolt file of dir (closed).
func storedVersion(t testing.TB, dir string) uint64 {
	t.Helper()
	db := openRaw(t, filepath.Join(dir, dbFileName))
	defer db.Close()
	var v uint64
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		vs, err := decodeUvarints(tx.Bucket(metaBucket).Get(versionKey), 1)
		v = vs[0]
		return err
	}))
	return v
}

// TestEngineGroupCommit: 50 groups save concurrently, each from its own
// goroutine; every Save is readable, also after the engine is reopened, and
// the committer wrote them in far fewer commits than Saves. The first Saves
// are queued while the committer is held, so at least one commit carries
// all 50 groups whatever the scheduling.
func TestEngineGroupCommit(t *testing.T) {
	const groups, saves = 50, 20
	dir := t.TempDir()
	e, stores := openGroups(t, dir, groups)
	before := e.Metrics()

	release := holdCommitter(t, e)
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= saves; i++ {
				if err := s.Save(hardState(1, 1, i), []*raftpb.Entry{ent(i, 1, fmt.Sprintf("group %d entry %d", g+1, i))}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	waitPending(t, e, groups)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	m := e.Metrics()
	commits, written := m.Commits-before.Commits-1, m.Saves-before.Saves // -1: holdCommitter's
	require.EqualValues(t, groups*saves, written)
	require.Less(t, commits, written, "group commit: fewer commits than Saves")
	require.EqualValues(t, groups, m.MaxWritesPerCommit, "the held-back Saves went in one commit")
	require.Equal(t, groups, m.OpenGroups)
	require.Contains(t, m.String(), "groups/commit")
	for _, s := range stores {
		require.EqualValues(t, saves, s.Metrics().Saves)
		require.EqualValues(t, 1+saves, s.Metrics().Commits, "the group's creation, then each Save in one commit")
	}

	check := func(e *Engine) {
		ids, err := e.Groups()
		require.NoError(t, err)
		require.Len(t, ids, groups)
		for g := range groups {
			s := stores[g]
			if s.closed.Load() {
				s = group(t, e, uint64(g+1))
			}
			hs, _, err := s.InitialState()
			require.NoError(t, err)
			require.EqualValues(t, saves, hs.GetCommit())
			es, err := s.Entries(1, saves+1, raftNoLimit)
			require.NoError(t, err)
			require.Len(t, es, saves)
			for i, en := range es {
				require.Equal(t, fmt.Sprintf("group %d entry %d", g+1, i+1), string(en.GetData()))
			}
		}
	}
	check(e)
	require.NoError(t, e.Close())
	check(openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true}))
}

// TestEngineFailedCommitIsAllOrNothing: one write of a commit fails after
// the other groups' Saves did their puts in the same transaction. Every
// Save of the commit fails, none of them is visible, the engine refuses
// every group's later writes, and after reopening none of the commit is
// on disk: a commit across groups is all or nothing.
func TestEngineFailedCommitIsAllOrNothing(t *testing.T) {
	const groups = 5
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	stores := make([]*Store, groups)
	for g := range stores {
		stores[g] = group(t, e, uint64(g+1))
		require.NoError(t, stores[g].Save(hardState(1, 1, 1), ents(1, 2, 1), nil))
	}

	release := holdCommitter(t, e)
	results := make(chan error, groups)
	for _, s := range stores {
		go func() { results <- s.Save(hardState(1, 1, 3), ents(2, 4, 1), nil) }()
	}
	waitPending(t, e, groups)
	injected := errors.New("injected write failure")
	failing := make(chan error, 1)
	go func() {
		_, _, err := e.commit(99, false, func(kvTx) error { return injected })
		failing <- err
	}()
	waitPending(t, e, groups+1)
	release()
	require.ErrorIs(t, <-failing, injected)
	for range groups {
		err := <-results
		require.ErrorIs(t, err, injected)
		require.ErrorContains(t, err, e.dbPath)
	}

	for g, s := range stores {
		li, err := s.LastIndex()
		require.NoError(t, err)
		require.EqualValues(t, 1, li, "group %d: the failed Save is not visible", g+1)
		require.ErrorIs(t, s.Save(nil, ents(2, 3, 1), nil), ErrFailed)
		require.ErrorIs(t, s.Compact(1), ErrFailed)
		require.ErrorIs(t, s.SetIdentity(Identity{ClusterID: 1, MemberID: 1}), ErrFailed)
	}
	_, err := e.Group(groups+1, GroupOptions{})
	require.ErrorIs(t, err, ErrFailed)
	require.NoError(t, e.Close())

	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	for g := range groups {
		s := group(t, e, uint64(g+1))
		li, _ := s.LastIndex()
		require.EqualValues(t, 1, li, "group %d", g+1)
		hs, _, err := s.InitialState()
		require.NoError(t, err)
		require.EqualValues(t, 1, hs.GetCommit(), "group %d", g+1)
		require.NoError(t, s.Save(hardState(1, 1, 2), ents(2, 3, 1), nil), "writable again after reopening")
	}
}

// TestEngineWriteErrorStopsEveryGroup: bbolt's file is closed under the
// engine, so a commit's writes fail (EBADF): the Save fails, and every
// group's writes then return ErrFailed.
func TestEngineWriteErrorStopsEveryGroup(t *testing.T) {
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true})
	a, b := group(t, e, 1), group(t, e, 2)
	require.NoError(t, a.Save(nil, ents(1, 2, 1), nil))
	breakDisk(t, e)
	require.Error(t, a.Save(nil, ents(2, 3, 1), nil))
	require.ErrorIs(t, b.Save(nil, ents(1, 2, 1), nil), ErrFailed)
	require.ErrorIs(t, a.MarkRemoved(), ErrFailed)
}

// TestEngineOpensSingleGroupDir: a data dir written by Open (one group)
// opens as an Engine whose group reads the same, and stays at format
// version 1 until a second group is created in it; then it is version 2,
// which a reader of version 1 (the previous release) refuses with
// ErrVersion, and which Open still opens.
func TestEngineOpensSingleGroupDir(t *testing.T) {
	boltOnly(t) // the single-group data dirs of earlier releases are bbolt files
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Save(hardState(2, 1, 5), ents(1, 6, 2), nil))
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 7, MemberID: 3}))
	snap, err := s.CreateSnapshot(4, confState(1), writeBytes([]byte("state")))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.EqualValues(t, formatVersionOneGroup, storedVersion(t, dir))

	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	ids, err := e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, ids)
	g := group(t, e, 1)
	require.Equal(t, uint64(1), g.GroupID())
	hs, cs, err := g.InitialState()
	require.NoError(t, err)
	require.EqualValues(t, 5, hs.GetCommit())
	require.Equal(t, []uint64{1}, cs.GetVoters())
	es, err := g.Entries(1, 6, raftNoLimit)
	require.NoError(t, err)
	requireEntriesEqual(t, ents(1, 6, 2), es, "entries")
	id, _ := g.Identity()
	require.Equal(t, Identity{ClusterID: 7, MemberID: 3}, id)
	got, err := g.Snapshot()
	require.NoError(t, err)
	b, err := readSnapshot(t, g, got)
	require.NoError(t, err)
	require.Equal(t, "state", string(b))
	require.Equal(t, snap.GetMetadata().GetIndex(), got.GetMetadata().GetIndex())
	require.NoError(t, e.Close())
	require.EqualValues(t, formatVersionOneGroup, storedVersion(t, dir), "opening changes nothing")

	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	group(t, e, 2)
	ids, err = e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, ids)
	require.NoError(t, e.Close())
	require.EqualValues(t, formatVersionManyGroups, storedVersion(t, dir))

	// The previous release's check: it read version 1 only.
	db := openRaw(t, filepath.Join(dir, dbFileName))
	old := &Engine{dbPath: filepath.Join(dir, dbFileName)}
	err = db.View(func(tx *bolt.Tx) error { _, err := old.readVersion(boltTx{tx}.Bucket(metaBucket), 1); return err })
	require.ErrorIs(t, err, ErrVersion)
	require.ErrorContains(t, err, "format version 2, this code reads 1 to 1")
	require.NoError(t, db.Close())

	s, err = Open(dir, testOpts())
	require.NoError(t, err)
	li, _ := s.LastIndex()
	require.EqualValues(t, 5, li)
	require.NoError(t, s.Close())
	s, err = Open(dir, Options{Backend: testBackend, NoSync: true, GroupID: 2})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestEngineGroupLifecycle: a group is open once at a time; closing its
// Store releases it; the engine's lock keeps Open out; Close closes the
// groups still open and refuses later calls.
func TestEngineGroupLifecycle(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	a := group(t, e, 1)
	_, err := e.Group(1, GroupOptions{})
	require.ErrorIs(t, err, ErrGroupOpen)
	_, err = e.Group(0, GroupOptions{})
	require.Error(t, err)
	_, err = e.Group(3, GroupOptions{KeepSnapshots: -1})
	require.ErrorContains(t, err, "KeepSnapshots (-1)")
	_, err = Open(dir, testOpts())
	require.ErrorIs(t, err, ErrLocked)
	_, err = OpenEngine(dir, EngineOptions{Backend: testBackend, LockTimeout: -1})
	require.ErrorContains(t, err, "LockTimeout")

	require.NoError(t, a.Save(nil, ents(1, 3, 1), nil))
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Save(nil, ents(3, 4, 1), nil), ErrClosed)
	require.Equal(t, 0, e.Metrics().OpenGroups)
	a = group(t, e, 1)
	li, _ := a.LastIndex()
	require.EqualValues(t, 2, li)
	b := group(t, e, 2)
	require.Equal(t, 2, e.Metrics().OpenGroups)

	require.NoError(t, e.Close())
	require.NoError(t, e.Close(), "idempotent")
	for _, s := range []*Store{a, b} {
		_, err := s.LastIndex()
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, s.Save(nil, ents(3, 4, 1), nil), ErrClosed)
		require.NoError(t, s.Close())
	}
	_, err = e.Group(4, GroupOptions{})
	require.ErrorIs(t, err, ErrClosed)
	_, err = e.Groups()
	require.ErrorIs(t, err, ErrClosed)
	s := open(t, dir, testOpts()) // the lock is free
	require.NoError(t, s.Close())
}

// TestEngineCloseWhileSaving: Close while groups save from their own
// goroutines; every Save either succeeds or returns ErrClosed, and what
// succeeded is there after reopening.
func TestEngineCloseWhileSaving(t *testing.T) {
	dir := t.TempDir()
	e, err := OpenEngine(dir, EngineOptions{Backend: testBackend, NoSync: true})
	require.NoError(t, err)
	const groups = 8
	acked := make([]uint64, groups)
	var wg sync.WaitGroup
	started := make(chan struct{}, groups)
	for g := range groups {
		s := group(t, e, uint64(g+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); ; i++ {
				err := s.Save(hardState(1, 1, i), ents(i, i+1, 1), nil)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				acked[g] = i
				if i == 3 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range groups {
		<-started
	}
	require.NoError(t, e.Close())
	wg.Wait()
	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	for g := range groups {
		li, _ := group(t, e, uint64(g+1)).LastIndex()
		require.GreaterOrEqual(t, li, acked[g])
	}
}

// TestEngineTombstoneIsPerGroup: a removed group is refused, the others are
// not, and Groups lists them all.
func TestEngineTombstoneIsPerGroup(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	a, b := group(t, e, 1), group(t, e, 2)
	require.NoError(t, a.MarkRemoved())
	require.NoError(t, b.Save(nil, ents(1, 2, 1), nil))
	require.NoError(t, a.Close())
	_, err := e.Group(1, GroupOptions{})
	require.ErrorIs(t, err, ErrRemoved)
	_, err = e.Group(1, GroupOptions{})
	require.ErrorIs(t, err, ErrRemoved, "a refused group is not left reserved")
	require.NoError(t, e.Close())

	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	_, err = e.Group(1, GroupOptions{})
	require.ErrorIs(t, err, ErrRemoved)
	b = group(t, e, 2)
	li, _ := b.LastIndex()
	require.EqualValues(t, 1, li)
	ids, err := e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, ids)
}

// TestEngineSnapshotFilesPerGroup: OpenEngine removes every group's
// temporary snapshot files (no group runs yet), Group removes none (another
// view of the group may be writing one), and pruning keeps each group's own
// newest files.
func TestEngineSnapshotFilesPerGroup(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	a, b := group(t, e, 1), group(t, e, 2)
	require.NoError(t, a.Save(nil, ents(1, 20, 1), nil))
	require.NoError(t, b.Save(nil, ents(1, 20, 1), nil))
	for i := uint64(1); i <= 2; i++ {
		_, err := b.CreateSnapshot(i, confState(1), writeBytes([]byte("b")))
		require.NoError(t, err)
	}
	for i := uint64(1); i <= 5; i++ {
		_, err := a.CreateSnapshot(i, confState(1), writeBytes([]byte("a")))
		require.NoError(t, err)
	}
	want := []string{SnapshotFileName(1, 1, 4), SnapshotFileName(1, 1, 5), SnapshotFileName(2, 1, 1), SnapshotFileName(2, 1, 2)}
	require.ElementsMatch(t, want, snapFiles(t, a), "group 1's pruning keeps group 2's files")

	tmp3 := filepath.Join(dir, snapDirName, SnapshotFileName(3, 1, 1)+tmpMarker+"1")
	require.NoError(t, os.WriteFile(tmp3, []byte("partial"), 0o600))
	group(t, e, 3)
	require.FileExists(t, tmp3, "Group leaves temporary files alone")
	require.NoError(t, e.Close())

	tmp1 := filepath.Join(dir, snapDirName, SnapshotFileName(1, 1, 9)+tmpMarker+"2")
	require.NoError(t, os.WriteFile(tmp1, []byte("partial"), 0o600))
	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	require.ElementsMatch(t, want, snapFiles(t, group(t, e, 2)), "OpenEngine removed every group's temporary files")
}

// TestEngineRefusesUnknownBuckets: the open-time check still refuses a
// bucket this format does not write, and a group with only one of its two
// buckets.
func TestEngineRefusesUnknownBuckets(t *testing.T) {
	boltOnly(t) // it edits the bbolt file
	for name, bucket := range map[string][]byte{
		"unknown":  []byte("group/0000000000000001/other"),
		"not hex":  []byte("group/000000000000000g/state"),
		"one only": logBucketName(3),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, testOpts())
			require.NoError(t, s.Close())
			db := openRaw(t, filepath.Join(dir, dbFileName))
			require.NoError(t, db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }))
			require.NoError(t, db.Close())
			e, err := OpenEngine(dir, EngineOptions{Backend: testBackend, NoSync: true})
			if name != "one only" {
				require.ErrorIs(t, err, ErrCorrupt)
				return
			}
			require.NoError(t, err)
			defer e.Close()
			_, err = e.Group(3, GroupOptions{})
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// TestEngineGroupsOpenAndCloseConcurrently: groups are opened, written and
// closed from their own goroutines while others list the groups and read
// the metrics; -race checks the engine's locking, and every group ends with
// all it wrote.
func TestEngineGroupsOpenAndCloseConcurrently(t *testing.T) {
	const groups, rounds = 6, 15
	e := openEngine(t, t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true})
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.Groups(); err != nil {
				t.Error(err)
				return
			}
			_ = e.Metrics()
		}
	}()
	var writers sync.WaitGroup
	for g := uint64(1); g <= groups; g++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for r := uint64(1); r <= rounds; r++ {
				s, err := e.Group(g, GroupOptions{TailCacheBytes: -1})
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Save(hardState(1, 1, r), ents(r, r+1, 1), nil); err != nil {
					t.Error(err)
				}
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	writers.Wait()
	close(done)
	wg.Wait()
	for g := uint64(1); g <= groups; g++ {
		s := group(t, e, g)
		es, err := s.Entries(1, rounds+1, raftNoLimit)
		require.NoError(t, err)
		requireEntriesEqual(t, ents(1, rounds+1, 1), es, "group %d", g)
	}
	require.EqualValues(t, groups, e.Metrics().OpenGroups)
}

// TestEngineTailBudget: the groups' tails together stay near the engine's
// budget while each group's own bound is far larger; a busy group keeps
// more than an equal share while the others are idle, and the entries the
// tails gave back are still read (from bbolt).
func TestEngineTailBudget(t *testing.T) {
	e, err := OpenEngine(t.TempDir(), EngineOptions{Backend: testBackend, NoSync: true, TailCacheBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	const groups = 8
	stores := make([]*Store, groups)
	for g := range stores {
		if stores[g], err = e.Group(uint64(g+1), GroupOptions{TailCacheBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	payload := make([]byte, 1000)
	appendN := func(s *Store, n int) {
		last, err := s.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			ent := &raftpb.Entry{Index: proto.Uint64(last + 1 + uint64(i)), Term: proto.Uint64(1), Data: payload}
			if err := s.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(0)}, []*raftpb.Entry{ent}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One busy group alone may use the whole budget (its own is larger).
	appendN(stores[0], 200)
	if b := e.Metrics().TailBytes; b < 48<<10 || b > 64<<10+2*(1000+tailOverhead) {
		t.Fatalf("one group: tails hold %d bytes, want about the engine's 64 KiB", b)
	}
	// Every group busy: the total stays near the budget, each near a share.
	for g := range stores {
		appendN(stores[g], 100)
	}
	if b := e.Metrics().TailBytes; b > 64<<10+groups*2*(1000+tailOverhead) {
		t.Fatalf("%d groups: tails hold %d bytes, over the engine's 64 KiB budget", groups, b)
	}
	// What was given back is read from bbolt.
	ents, err := stores[0].Entries(1, 301, math.MaxUint64)
	if err != nil || len(ents) != 300 {
		t.Fatalf("reading back: %d entries, %v", len(ents), err)
	}
	// Closing a group returns its bytes.
	before := e.Metrics().TailBytes
	_ = stores[1].Close()
	if after := e.Metrics().TailBytes; after >= before {
		t.Fatalf("closing a group left the tails at %d bytes (were %d)", after, before)
	}
}

// TestEngineDeleteGroup: a deleted group leaves nothing (its records and
// snapshot files go, the other groups stay whole), an open group is not
// deleted, and the group can be created anew — also after a reopen.
func TestEngineDeleteGroup(t *testing.T) {
	dir := t.TempDir()
	e, err := OpenEngine(dir, EngineOptions{Backend: testBackend, NoSync: true})
	require.NoError(t, err)
	s1, err := e.Group(1, GroupOptions{})
	require.NoError(t, err)
	s2, err := e.Group(2, GroupOptions{})
	require.NoError(t, err)
	require.NoError(t, s1.Save(nil, ents(1, 2, 1), nil))
	require.NoError(t, s2.Save(nil, ents(1, 20, 1), nil))
	for i := uint64(1); i <= 2; i++ {
		_, err := s2.CreateSnapshot(i, confState(1), writeBytes([]byte("b")))
		require.NoError(t, err)
	}

	require.ErrorIs(t, e.DeleteGroup(2), ErrGroupOpen)
	require.NoError(t, s2.Close())
	require.NoError(t, e.DeleteGroup(2))
	require.ErrorIs(t, e.DeleteGroup(2), ErrNoGroup)
	ids, err := e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, ids)
	des, err := os.ReadDir(filepath.Join(dir, snapDirName))
	require.NoError(t, err)
	for _, de := range des {
		g, _, _, ok := parseSnapshotFileName(de.Name())
		require.False(t, ok && g == 2, "group 2's snapshot file %s is left", de.Name())
	}
	last, err := s1.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(1), last, "the other group is untouched")

	// Created anew: empty.
	s2, err = e.Group(2, GroupOptions{})
	require.NoError(t, err)
	last, err = s2.LastIndex()
	require.NoError(t, err)
	require.Zero(t, last)
	require.NoError(t, s2.Close())
	require.NoError(t, e.DeleteGroup(2))
	require.NoError(t, e.Close())
	e, err = OpenEngine(dir, EngineOptions{Backend: testBackend, NoSync: true})
	require.NoError(t, err)
	defer func() { _ = e.Close() }()
	ids, err = e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, ids)
}
