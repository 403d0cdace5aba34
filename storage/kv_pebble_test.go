package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data dir holds one backend for good: asking for the other is refused
// with ErrBackend and changes nothing; asking for none opens the one it
// holds.
func TestBackendIsTheDataDirs(t *testing.T) {
	for _, tc := range []struct{ wrote, other Backend }{
		{BackendBolt, BackendPebble},
		{BackendPebble, BackendBolt},
	} {
		t.Run(string(tc.wrote), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, Options{NoSync: true, Backend: tc.wrote})
			require.NoError(t, s.Save(hardState(1, 0, 3), ents(1, 4, 1), nil))
			require.NoError(t, s.Close())

			_, err := OpenEngine(dir, EngineOptions{NoSync: true, Backend: tc.other})
			require.ErrorIs(t, err, ErrBackend)
			require.ErrorContains(t, err, string(tc.wrote))

			e := openEngine(t, dir, EngineOptions{NoSync: true}) // the one the dir holds
			require.Equal(t, tc.wrote, e.Backend())
			g := group(t, e, 1)
			li, err := g.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(3), li)
			require.NoError(t, e.Close())
		})
	}
	e := openEngine(t, t.TempDir(), EngineOptions{NoSync: true})
	require.Equal(t, BackendBolt, e.Backend(), "a new data dir's default")
	require.Error(t, EngineOptions{Backend: "rocksdb"}.Validate())
	require.Error(t, Options{Backend: "rocksdb"}.Validate())
}

// A Pebble data dir is locked like a bbolt one: a second engine on it gets
// ErrLocked until the first closes.
func TestPebbleLocked(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{NoSync: true, Backend: BackendPebble})
	_, err := OpenEngine(dir, EngineOptions{NoSync: true, Backend: BackendPebble})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, e.Close())
	e = openEngine(t, dir, EngineOptions{NoSync: true, Backend: BackendPebble})
	require.NoError(t, e.Close())
}

// The format checks hold on Pebble: a newer format version is refused with
// ErrVersion, and a bucket this format does not write with ErrCorrupt.
func TestPebbleFormatChecks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(tx kvTx) error
		want  error
	}{
		{"newer version", func(tx kvTx) error {
			return tx.Bucket(metaBucket).Put(versionKey, appendUvarints(nil, FormatVersion+1))
		}, ErrVersion},
		{"unknown bucket", func(tx kvTx) error {
			_, err := tx.CreateBucket([]byte("group/0000000000000001/other"))
			return err
		}, ErrCorrupt},
		{"unknown key", func(tx kvTx) error {
			return tx.Bucket(stateBucketName(1)).Put([]byte("mystery"), []byte("x"))
		}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openEngine(t, dir, EngineOptions{NoSync: true, Backend: BackendPebble})
			group(t, e, 1)
			_, _, err := e.commit(0, false, tc.write)
			require.NoError(t, err)
			require.NoError(t, e.Close())
			_, err = OpenEngine(dir, EngineOptions{NoSync: true, Backend: BackendPebble})
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// A write transaction sees its own writes, as bbolt's does: two groups
// created in one commit of a Pebble database of version 1 (as releases
// before formatVersionLazyBounds made them) raise its format version to
// many groups.
func TestPebbleCommitSeesItsOwnWrites(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{NoSync: true, Backend: BackendPebble})
	setFormatVersion(t, e, formatVersionOneGroup)
	_, _, err := e.commit(0, false, func(tx kvTx) error {
		if err := e.createGroupBuckets(tx, 1); err != nil {
			return err
		}
		return e.createGroupBuckets(tx, 2)
	})
	require.NoError(t, err)
	var version uint64
	require.NoError(t, e.view(func(tx kvTx) error {
		vs, err := decodeUvarints(tx.Bucket(metaBucket).Get(versionKey), 1)
		version = vs[0]
		return err
	}))
	require.EqualValues(t, formatVersionManyGroups, version)
	ids, err := e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, ids)

	// DeleteGroup removes a group's buckets and keys (one range deletion).
	s := group(t, e, 2)
	require.NoError(t, s.Save(hardState(1, 0, 100), ents(1, 101, 1), nil))
	require.NoError(t, s.Close())
	require.NoError(t, e.DeleteGroup(2))
	require.NoError(t, e.view(func(tx kvTx) error {
		require.Nil(t, tx.Bucket(logBucketName(2)))
		it, err := tx.(*pebbleTx).iter(dataPrefix(logBucketName(2)), prefixEnd(dataPrefix(logBucketName(2))))
		require.NoError(t, err)
		require.False(t, it.First(), "a deleted group's log keys are gone")
		return nil
	}))
	ids, err = e.Groups()
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, ids)
	require.NoError(t, e.Close())
	_, err = os.Stat(filepath.Join(dir, pebbleDirName))
	require.NoError(t, err)
}

// A release that knows only bbolt (it reads format versions 1 and 2 from
// understudy.db) refuses a Pebble data dir with ErrVersion, instead of
// starting a new member beside its records; a Pebble data dir whose
// database is gone is corrupt, not new.
func TestPebbleDataDirRefusedByBboltOnlyReleases(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{NoSync: true, Backend: BackendPebble})
	require.NoError(t, s.Save(hardState(1, 0, 3), ents(1, 4, 1), nil))
	require.NoError(t, s.Close())

	db := openRaw(t, filepath.Join(dir, dbFileName))
	old := &Engine{dbPath: filepath.Join(dir, dbFileName)}
	err := db.View(func(tx *rawTx) error {
		_, err := old.readVersion(boltTx{tx}.Bucket(metaBucket), formatVersionManyGroups)
		return err
	})
	require.ErrorIs(t, err, ErrVersion)
	require.ErrorContains(t, err, "format version 100, this code reads 1 to 2")
	require.NoError(t, db.Close())

	require.NoError(t, os.RemoveAll(filepath.Join(dir, pebbleDirName)))
	_, err = OpenEngine(dir, EngineOptions{NoSync: true})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "missing")
}
