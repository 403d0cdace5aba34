package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// storeImage is everything a store answers, to compare a damaged store with
// the original.
type storeImage struct {
	hs          *raftpb.HardState
	cs          *raftpb.ConfState
	first, last uint64
	terms       []uint64
	ents        []*raftpb.Entry
	snap        *raftpb.Snapshot
	snapData    []byte
	id          Identity
}

// readAll opens dir and reads everything; any error is returned.
func readAll(t testing.TB, dir string) (img storeImage, err error) {
	s, err := Open(dir, Options{NoSync: true, TailCacheBytes: -1})
	if err != nil {
		return img, err
	}
	defer s.Close()
	if img.hs, img.cs, err = s.InitialState(); err != nil {
		return img, err
	}
	img.first, _ = s.FirstIndex()
	img.last, _ = s.LastIndex()
	for i := img.first - 1; i <= img.last; i++ {
		term, err := s.Term(i)
		if err != nil {
			return img, err
		}
		img.terms = append(img.terms, term)
	}
	if img.ents, err = s.Entries(img.first, img.last+1, raftNoLimit); err != nil {
		return img, err
	}
	if img.snap, err = s.Snapshot(); err != nil {
		return img, err
	}
	if img.snapData, err = readSnapshot(t, s, img.snap); err != nil {
		return img, err
	}
	img.id, err = s.Identity()
	return img, err
}

func requireSameImage(t testing.TB, want, got storeImage, msg string) {
	t.Helper()
	require.True(t, proto.Equal(want.hs, got.hs), msg)
	require.True(t, proto.Equal(want.cs, got.cs), msg)
	require.Equal(t, want.first, got.first, msg)
	require.Equal(t, want.last, got.last, msg)
	require.Equal(t, want.terms, got.terms, msg)
	requireEntriesEqual(t, want.ents, got.ents, "%s", msg)
	require.True(t, proto.Equal(want.snap, got.snap), msg)
	require.Equal(t, want.snapData, got.snapData, msg)
	require.Equal(t, want.id, got.id, msg)
}

// populate writes a store with a compacted log, a snapshot, an identity and
// hard state, ending with two identical commits (see TestCorruptBoltFile).
func populate(t testing.TB, dir string) {
	s, err := Open(dir, Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, s.SetIdentity(Identity{ClusterID: 0xc1, MemberID: 2}))
	for i := uint64(0); i < 30; i++ {
		es := make([]*raftpb.Entry, 10)
		for j := range es {
			idx := i*10 + uint64(j) + 1
			es[j] = ent(idx, i/10+1, fmt.Sprintf("entry %d %s", idx, bytes.Repeat([]byte{'x'}, int(idx%200))))
		}
		require.NoError(t, s.Save(hardState(i/10+1, 1, i*10), es, nil))
	}
	_, err = s.CreateSnapshot(250, confState(1, 2, 3), writeBytes([]byte("snapshot data")))
	require.NoError(t, err)
	require.NoError(t, s.Compact(200))
	require.NoError(t, s.Save(hardState(3, 1, 290), nil, nil))
	require.NoError(t, s.Save(hardState(3, 1, 290), nil, nil))
	require.NoError(t, s.Close())
}

// TestCorruptBoltFile flips single bytes all over the bbolt file and opens
// and reads the store. Each time it must either answer exactly as the
// original did (the byte was unused) or return an error wrapping ErrCorrupt
// naming the file; never panic, never answer differently.
//
// bbolt falls back to the older of its two meta pages when the newer one is
// damaged, which rolls back the last transaction: populate ends with two
// identical commits so that the rollback is invisible. (Outside tests, that
// fallback can lose the last acknowledged write when a meta page rots.)
func TestCorruptBoltFile(t *testing.T) {
	src := t.TempDir()
	populate(t, src)
	want, err := readAll(t, src)
	require.NoError(t, err)
	dbFile := filepath.Join(src, dbFileName)
	orig, err := os.ReadFile(dbFile)
	require.NoError(t, err)
	d, err := ParseDescriptor(want.snap.GetData())
	require.NoError(t, err)
	snapFile := filepath.Join(src, snapDirName, d.Name)
	snapBytes, err := os.ReadFile(snapFile)
	require.NoError(t, err)

	const pageSize = 4096
	var offsets []int
	// Page headers and the first elements of every page, where bbolt keeps
	// its structure, and random bytes anywhere.
	for p := 0; p < len(orig); p += pageSize {
		for _, o := range []int{0, 8, 10, 12, 16, 20, 24, 28, 40, 64} {
			offsets = append(offsets, p+o)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 50
	}
	for range n {
		offsets = append(offsets, rng.IntN(len(orig)))
	}
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, snapDirName), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, snapDirName, filepath.Base(snapFile)), snapBytes, 0o600))
	same, corrupt := 0, 0
	for _, off := range offsets {
		damaged := bytes.Clone(orig)
		damaged[off] ^= 1 << (off % 8)
		require.NoError(t, os.WriteFile(filepath.Join(dir, dbFileName), damaged, 0o600))
		msg := fmt.Sprintf("bit %d of byte %d (page %d)", off%8, off, off/pageSize)
		got, err := readAll(t, dir)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt, msg)
			var ce *CorruptError
			require.True(t, errors.As(err, &ce), msg)
			require.Equal(t, filepath.Join(dir, dbFileName), ce.File, msg)
			corrupt++
			continue
		}
		requireSameImage(t, want, got, msg)
		same++
	}
	t.Logf("%d flips: %d unused bytes, %d detected", len(offsets), same, corrupt)
	require.NotZero(t, corrupt)
}

// TestCorruptRecords damages each record kind through bbolt itself (valid
// pages, bad values) and checks the error names the bucket and key.
func TestCorruptRecords(t *testing.T) {
	group := stateBucketName(1)
	for _, tc := range []struct {
		bucket, key []byte
		where       string
	}{
		{group, hardStateKey, "state/hardstate"},
		{group, snapshotKey, "state/snapshot"},
		{group, boundsKey, "state/bounds"},
		{group, identityKey, "state/identity"},
		{metaBucket, versionKey, "understudy/version"},
		{logBucketName(1), indexKey(nil, 290), "log/0000000000000122"},
		{logBucketName(1), indexKey(nil, 201), "log/00000000000000c9"},
	} {
		dir := t.TempDir()
		populate(t, dir)
		rewriteKey(t, filepath.Join(dir, dbFileName), tc.bucket, tc.key, []byte("garbage"))
		_, err := readAll(t, dir)
		require.ErrorIs(t, err, ErrCorrupt, tc.where)
		require.ErrorContains(t, err, tc.where)
		require.ErrorContains(t, err, dbFileName)
	}
}

// TestCorruptOldEntryDetectedOnRead: an entry outside the cached tail is
// checked when it is read, and Entries reports it instead of returning it.
func TestCorruptOldEntryDetectedOnRead(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	path := filepath.Join(dir, dbFileName)
	db := openRaw(t, path)
	var v []byte
	require.NoError(t, db.View(func(tx *rawTx) error {
		v = bytes.Clone(tx.Bucket(logBucketName(1)).Get(indexKey(nil, 210)))
		return nil
	}))
	require.NoError(t, db.Close())
	v[len(v)/2] ^= 0x10
	rewriteKey(t, path, logBucketName(1), indexKey(nil, 210), v)
	s := open(t, dir, Options{NoSync: true, TailCacheBytes: 1000})
	_, err := s.Entries(201, 291, raftNoLimit)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "entry 210")
	require.ErrorContains(t, err, "checksum")
	_, err = s.Term(210)
	require.ErrorIs(t, err, ErrCorrupt)
	es, err := s.Entries(211, 291, raftNoLimit)
	require.NoError(t, err)
	require.Len(t, es, 80)
	_, err = s.Term(200)
	require.NoError(t, err)
	require.NotEqual(t, raft.ErrCompacted, err)
}

// TestMissingEntry: a hole in the log is corruption, not ErrUnavailable.
func TestMissingEntry(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	path := filepath.Join(dir, dbFileName)
	db := openRaw(t, path)
	require.NoError(t, db.Update(func(tx *rawTx) error { return tx.Bucket(logBucketName(1)).Delete(indexKey(nil, 220)) }))
	require.NoError(t, db.Close())
	s := open(t, dir, Options{NoSync: true, TailCacheBytes: -1})
	_, err := s.Entries(215, 225, raftNoLimit)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "entry 220")
	_, err = s.Term(220)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestGarbageFile(t *testing.T) {
	boltOnly(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, dbFileName), bytes.Repeat([]byte("not a bbolt file"), 1000), 0o600))
	_, err := Open(dir, testOpts())
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, dbFileName)
}

// TestBoltPanicIsCorrupt skips the structure check at Open and damages page
// types, on which bbolt panics: the panic is an ErrCorrupt naming the file,
// and the store lets go of the file (a second Open is not ErrLocked).
func TestBoltPanicIsCorrupt(t *testing.T) {
	src := t.TempDir()
	populate(t, src)
	want, err := readAll(t, src)
	require.NoError(t, err)
	orig, err := os.ReadFile(filepath.Join(src, dbFileName))
	require.NoError(t, err)
	d, err := ParseDescriptor(want.snap.GetData())
	require.NoError(t, err)
	snapBytes, err := os.ReadFile(filepath.Join(src, snapDirName, d.Name))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, snapDirName), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, snapDirName, d.Name), snapBytes, 0o600))
	panics := 0
	for p := 2; p*4096 < len(orig); p++ {
		damaged := bytes.Clone(orig)
		damaged[p*4096+8] ^= 0x03 // branch <-> leaf
		require.NoError(t, os.WriteFile(filepath.Join(dir, dbFileName), damaged, 0o600))
		for range 2 { // the second time shows the lock was released
			s, err := Open(dir, Options{NoSync: true, NoOpenCheck: true, TailCacheBytes: -1})
			if err == nil {
				_, err = s.Entries(201, 301, raftNoLimit)
				_ = s.Close()
			}
			if err != nil {
				require.ErrorIs(t, err, ErrCorrupt, "page %d", p)
				require.ErrorContains(t, err, dbFileName)
				if strings.Contains(err.Error(), "panicked") {
					panics++
				}
			}
		}
	}
	require.NotZero(t, panics)
}

// TestHiddenSubtree: a branch page whose element count lost its last child
// hides a subtree — keys of the log, or a whole bucket, which would read as
// absent (bbolt checksums no page). Open finds the unreachable pages (in no
// tree and not free) and refuses the file as corrupt. Found by
// FuzzCorruptBolt: two flipped bytes made a populated store open as an
// empty one.
func TestHiddenSubtree(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	path := filepath.Join(dir, dbFileName)
	// Only a page of the tree will do: a free page may still hold an old
	// copy of a branch (bbolt copies on write), and damaging it changes
	// nothing. Which pages are free varies from run to run (bbolt's map
	// freelist hands out pages in map order).
	free := map[int]bool{}
	db := openRaw(t, path)
	require.NoError(t, db.View(func(tx *rawTx) error {
		for id := 2; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			free[id] = info.Type == "free"
		}
	}))
	require.NoError(t, db.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := os.Getpagesize() // bbolt's page size
	damaged := false
	for off := 2 * pageSize; off+pageSize <= len(b); off += pageSize {
		p := b[off:]
		if free[off/pageSize] || ne.Uint64(p) != uint64(off/pageSize) || ne.Uint16(p[8:]) != bBranch || ne.Uint16(p[10:]) < 2 {
			continue
		}
		ne.PutUint16(p[10:], ne.Uint16(p[10:])-1) // the last child disappears
		damaged = true
		break
	}
	require.True(t, damaged, "populate wrote no branch page with two children")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	_, err = Open(dir, Options{NoSync: true})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "neither in the tree nor free")
}
