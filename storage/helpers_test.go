package storage

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/understudy-raft/understudy/internal/diskfault"
	"hash/crc32"
	"io"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// open opens a store in dir with NoSync unless opts say otherwise, closing it
// when the test ends.
func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testOpts() Options { return Options{NoSync: true, Backend: testBackend} }

// testBackend is the backend the package's tests run on:
// UNDERSTUDY_STORAGE_BACKEND (bbolt or pebble; .ci/run runs the package
// under both), bbolt by default.
var testBackend = Backend(os.Getenv("UNDERSTUDY_STORAGE_BACKEND"))

// boltOnly skips a test that looks inside the bbolt file when the package's
// tests run on another backend.
func boltOnly(t testing.TB) {
	t.Helper()
	if testBackend != "" && testBackend != BackendBolt {
		t.Skipf("inspects the bbolt file; the tests run on %s", testBackend)
	}
}

// ent builds an entry with every field set.
func ent(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term),
		Type: raftpb.EntryNormal.Enum(), Data: []byte(data)}
}

// ents builds entries [lo, hi) of one term.
func ents(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i < hi; i++ {
		out = append(out, ent(i, term, "e"))
	}
	return out
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(vote), Commit: proto.Uint64(commit)}
}

func confState(voters ...uint64) *raftpb.ConfState {
	return &raftpb.ConfState{Voters: voters, AutoLeave: proto.Bool(false)}
}

// writeBytes is a CreateSnapshot callback writing b.
func writeBytes(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

// readSnapshot reads the whole snapshot file snap describes.
func readSnapshot(t testing.TB, s *Store, snap *raftpb.Snapshot) ([]byte, error) {
	t.Helper()
	rc, size, err := s.OpenSnapshot(snap)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = io.Copy(&buf, rc)
	if err == nil {
		require.EqualValues(t, size, buf.Len())
	}
	return buf.Bytes(), err
}

func requireEntriesEqual(t testing.TB, want, got []*raftpb.Entry, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	require.Equal(t, len(want), len(got), msg)
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			require.Failf(t, "entries differ", "at %d: want %v, got %v; %s", i, want[i], got[i], msg)
		}
	}
}

// snapshotFor builds the snapshot a leader would send for data (nil data:
// an empty state machine, no descriptor).
func snapshotFor(group, index, term uint64, cs *raftpb.ConfState, data []byte) *raftpb.Snapshot {
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(term), ConfState: raftpb.EnsureConfState(proto.Clone(cs).(*raftpb.ConfState)),
	}}
	if data != nil {
		snap.Data = Descriptor{
			Name:   SnapshotFileName(group, term, index),
			Size:   int64(len(data)),
			CRC32C: crc32.Checksum(data, castagnoli),
		}.Marshal()
	}
	return snap
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// rewriteKey sets bucket/key in the bbolt file at path (the store closed).
func rewriteKey(t testing.TB, path string, bucket, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, value) }))
	require.NoError(t, db.Close())
}

type rawTx = bolt.Tx

func openRaw(t testing.TB, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	return db
}

// breakDisk makes e's commits fail from now on: with bbolt, by closing its
// file (its writes fail with EBADF); with Pebble, through diskfault. heal
// ends the fault (for a reopen).
func breakDisk(t testing.TB, e *Engine) (heal func()) {
	t.Helper()
	if e.pdb == nil {
		require.NoError(t, e.file.Close())
		return func() {}
	}
	diskfault.FailNext(e.dir, 1<<30)
	t.Cleanup(func() { diskfault.Clear(e.dir) })
	return func() { diskfault.Clear(e.dir) }
}

func isCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }
