package storage

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// pebbleDataDir writes groups 1..n, each with a hard state and
// pebbleEntries entries of 2 KB (records over several blocks), to a new
// Pebble data dir, flushed to tables, and returns it.
func pebbleDataDir(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	e, err := OpenEngine(dir, EngineOptions{Backend: BackendPebble, NoSync: true})
	require.NoError(t, err)
	for id := uint64(1); id <= uint64(n); id++ {
		s, err := e.Group(id, GroupOptions{})
		require.NoError(t, err)
		var es []*raftpb.Entry
		for i := uint64(1); i <= pebbleEntries; i++ {
			es = append(es, ent(i, 2, strings.Repeat("x", 2<<10)))
		}
		require.NoError(t, s.Save(hardState(2, 1, 3), es, nil))
		require.NoError(t, s.Close())
	}
	require.NoError(t, e.pdb.db.Flush()) // the records in tables: reads go to the files
	require.NoError(t, e.Close())
	return dir
}

// Opening a Pebble data dir of many groups checks every group's records
// with a bounded number of iterators open at once, not one per group kept
// until the check ends (5,000 groups held 87 MB that way).
func TestPebbleOpenHoldsFewIterators(t *testing.T) {
	const groups = 300
	dir := pebbleDataDir(t, groups)
	e := openEngine(t, dir, EngineOptions{Backend: BackendPebble, NoSync: true})
	require.LessOrEqual(t, e.pdb.peakIters.Load(), int64(4),
		"iterators open at once while opening %d groups", groups)
	require.Zero(t, e.pdb.liveIters.Load(), "iterators left open after OpenEngine")
	for id := uint64(1); id <= groups; id++ {
		s := group(t, e, id)
		require.NoError(t, s.Close())
	}
	require.LessOrEqual(t, e.pdb.peakIters.Load(), int64(4), "iterators open at once while opening the groups")
	require.Zero(t, e.pdb.liveIters.Load(), "iterators left open after opening and closing the groups")
}

const pebbleEntries = 8

var errInjectedRead = errors.New("injected read error")

// failReadsFrom fails every read of a table file from the k-th one (0-based)
// on, as a disk that went bad would.
type failReadsFrom struct {
	k     int64
	reads atomic.Int64
}

func (f *failReadsFrom) String() string { return "fail table reads" }

func (f *failReadsFrom) MaybeError(op errorfs.Op) error {
	if (op.Kind != errorfs.OpFileRead && op.Kind != errorfs.OpFileReadAt) || !strings.HasSuffix(op.Path, ".sst") {
		return nil
	}
	if f.reads.Add(1)-1 >= f.k {
		return errInjectedRead
	}
	return nil
}

// A read that fails (an I/O error) — wherever it happens: opening the data
// dir, opening a group, reading its log — is reported as that error
// (errors.Is), never as ErrCorrupt: the data is not known to be damaged,
// and a corruption report sends an operator to restore a backup. Every read
// of the data is failed in turn, from the first on.
func TestPebbleReadErrorIsNotCorruption(t *testing.T) {
	const groups = 3
	src := pebbleDataDir(t, groups)
	failures := 0
	for k := int64(0); ; k++ {
		require.Less(t, k, int64(1000), "reads never stopped failing the open")
		dir := filepath.Join(t.TempDir(), "copy")
		_, err := vfs.Clone(vfs.Default, vfs.Default, src, dir)
		require.NoError(t, err)
		inj := &failReadsFrom{k: k}
		err = openAndReadAll(dir, groups, errorfs.Wrap(vfs.Default, inj))
		if err == nil {
			require.Positive(t, failures, "no read of a table failed anything: the test reads nothing from the files")
			return
		}
		failures++
		require.ErrorIs(t, err, errInjectedRead, "read %d failed", k)
		require.False(t, isCorrupt(err), "read %d failed with an I/O error, reported as corruption: %v", k, err)
	}
}

// openAndReadAll opens the engine at dir on fs, each group, and reads its
// state and log; it returns the first error.
func openAndReadAll(dir string, groups int, fs vfs.FS) error {
	e, err := OpenEngine(dir, EngineOptions{Backend: BackendPebble, NoSync: true, pebbleFS: fs})
	if err != nil {
		return err
	}
	defer func() { _ = e.Close() }()
	for id := uint64(1); id <= uint64(groups); id++ {
		s, err := e.Group(id, GroupOptions{TailCacheBytes: -1})
		if err != nil {
			return err
		}
		_, _, err = s.InitialState()
		if err == nil {
			_, err = s.Entries(1, pebbleEntries+1, 1<<30)
		}
		_ = s.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
