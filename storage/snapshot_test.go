package storage

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func snapFiles(t testing.TB, s *Store) []string {
	t.Helper()
	des, err := os.ReadDir(s.e.snapDir)
	require.NoError(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestCreateSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, s.Save(hardState(2, 1, 10), append(ents(1, 6, 1), ents(6, 11, 2)...), nil))
	data := bytes.Repeat([]byte("state machine "), 1000)
	snap, err := s.CreateSnapshot(7, confState(1, 2, 3), writeBytes(data))
	require.NoError(t, err)
	require.Equal(t, uint64(7), snap.GetMetadata().GetIndex())
	require.Equal(t, uint64(2), snap.GetMetadata().GetTerm())
	d, err := ParseDescriptor(snap.GetData())
	require.NoError(t, err)
	require.Equal(t, SnapshotFileName(1, 2, 7), d.Name)
	require.EqualValues(t, len(data), d.Size)

	got, err := s.Snapshot()
	require.NoError(t, err)
	require.True(t, proto.Equal(snap, got))
	_, cs, err := s.InitialState()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
	read, err := readSnapshot(t, s, got)
	require.NoError(t, err)
	require.Equal(t, data, read)

	// The log is not compacted.
	fi, _ := s.FirstIndex()
	require.Equal(t, uint64(1), fi)

	// Not newer: refused.
	_, err = s.CreateSnapshot(7, nil, writeBytes(nil))
	require.Equal(t, raft.ErrSnapOutOfDate, err)
	_, err = s.CreateSnapshot(11, nil, writeBytes(nil))
	require.ErrorIs(t, err, ErrOutOfBounds)

	// A nil ConfState keeps the previous one, as MemoryStorage does.
	snap2, err := s.CreateSnapshot(9, nil, writeBytes([]byte("later")))
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, snap2.GetMetadata().GetConfState().GetVoters())

	// Compacted up to the index: its term is kept, so it can be snapshotted.
	require.NoError(t, s.Compact(10))
	_, err = s.CreateSnapshot(10, nil, writeBytes(nil))
	require.NoError(t, err)

	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	got, err = s.Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(10), got.GetMetadata().GetIndex())
	read, err = readSnapshot(t, s, got)
	require.NoError(t, err)
	require.Empty(t, read)
}

func TestCreateSnapshotWriteFails(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 5, 1), nil))
	boom := errors.New("boom")
	_, err := s.CreateSnapshot(3, nil, func(w io.Writer) error {
		_, _ = w.Write(make([]byte, 1<<20))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, snapFiles(t, s), "no file left behind")
	snap, _ := s.Snapshot()
	require.True(t, raft.IsEmptySnap(snap))
}

func TestPruneKeepsNewestTwo(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 21, 1), nil))
	for i := uint64(2); i <= 20; i += 3 {
		_, err := s.CreateSnapshot(i, confState(1), writeBytes([]byte{byte(i)}))
		require.NoError(t, err)
	}
	require.Equal(t, []string{SnapshotFileName(1, 1, 17), SnapshotFileName(1, 1, 20)}, snapFiles(t, s))
}

func TestReceiveSnapshotAndSave(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, s.Save(hardState(1, 1, 3), ents(1, 11, 1), nil))
	data := bytes.Repeat([]byte{7}, 100_000)
	snap := snapshotFor(1, 50, 4, confState(1, 2), data)
	// The stream goes on past the snapshot: ReceiveSnapshot must not read it.
	stream := bytes.NewReader(append(slices.Clone(data), "next frame"...))
	require.NoError(t, s.ReceiveSnapshot(snap, stream))
	rest, _ := io.ReadAll(stream)
	require.Equal(t, "next frame", string(rest))
	// Nothing recorded yet.
	cur, _ := s.Snapshot()
	require.True(t, raft.IsEmptySnap(cur))

	require.NoError(t, s.Save(hardState(4, 2, 50), ents(51, 53, 4), snap))
	fi, _ := s.FirstIndex()
	li, _ := s.LastIndex()
	require.Equal(t, uint64(51), fi)
	require.Equal(t, uint64(52), li)
	term, err := s.Term(50)
	require.NoError(t, err)
	require.Equal(t, uint64(4), term)
	require.NoError(t, s.Close())

	s = open(t, dir, testOpts())
	cur, err = s.Snapshot()
	require.NoError(t, err)
	require.True(t, proto.Equal(snap, cur))
	read, err := readSnapshot(t, s, cur)
	require.NoError(t, err)
	require.Equal(t, data, read)
	got, err := s.Entries(51, 53, raftNoLimit)
	require.NoError(t, err)
	requireEntriesEqual(t, ents(51, 53, 4), got, "")
	// An older snapshot is refused.
	old := receive(t, s, 40, 4, confState(1), []byte("old"))
	require.Equal(t, raft.ErrSnapOutOfDate, s.Save(nil, nil, old))
}

func TestReceiveSnapshotBad(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	data := []byte("the state machine")
	snap := snapshotFor(1, 5, 1, confState(1), data)
	for name, r := range map[string]io.Reader{
		"flipped":   bytes.NewReader(append([]byte("T"), data[1:]...)),
		"truncated": bytes.NewReader(data[:5]),
		"empty":     bytes.NewReader(nil),
	} {
		err := s.ReceiveSnapshot(snap, r)
		require.ErrorIs(t, err, ErrCorrupt, name)
		var ce *CorruptError
		require.ErrorAs(t, err, &ce, name)
		require.Contains(t, ce.File, SnapshotFileName(1, 1, 5), name)
		require.Empty(t, snapFiles(t, s), name)
	}
	// A stream that fails is not corruption, and leaves nothing either.
	boom := errors.New("connection reset")
	err := s.ReceiveSnapshot(snap, io.MultiReader(bytes.NewReader(data[:3]), iotestErrReader{boom}))
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.Empty(t, snapFiles(t, s))

	// A descriptor for another group, or garbage, is refused before reading.
	other := snapshotFor(2, 5, 1, confState(1), data)
	require.ErrorIs(t, s.ReceiveSnapshot(other, bytes.NewReader(data)), ErrCorrupt)
	garbage := &raftpb.Snapshot{Data: []byte("garbage"), Metadata: snap.Metadata}
	require.ErrorIs(t, s.ReceiveSnapshot(garbage, bytes.NewReader(data)), ErrCorrupt)
	// Saving a snapshot whose file was never received fails, changing nothing.
	err = s.Save(nil, nil, snap)
	require.ErrorIs(t, err, fs.ErrNotExist)
	cur, _ := s.Snapshot()
	require.True(t, raft.IsEmptySnap(cur))
	require.NoError(t, s.Save(nil, ents(1, 2, 1), nil), "a refused Save is not fatal")
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

func TestEmptyDataSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	snap := snapshotFor(1, 1, 1, confState(1, 2, 3), nil)
	r := strings.NewReader("ignored")
	require.NoError(t, s.ReceiveSnapshot(snap, r))
	require.Zero(t, r.Len(), "drained")
	require.Empty(t, snapFiles(t, s))
	require.NoError(t, s.Save(hardState(1, 0, 1), nil, snap))
	rc, size, err := s.OpenSnapshot(snap)
	require.NoError(t, err)
	require.Zero(t, size)
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Empty(t, b)
	require.NoError(t, rc.Close())
	require.NoError(t, s.Close())
	s = open(t, dir, testOpts())
	_, cs, err := s.InitialState()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
	fi, _ := s.FirstIndex()
	require.Equal(t, uint64(2), fi)
}

func TestOpenSnapshotDetectsDamage(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10_000)
	for name, damage := range map[string]func(path string){
		"flipped": func(path string) { flipByte(t, path, int64(len(data)/2)) },
		"truncated": func(path string) {
			require.NoError(t, os.Truncate(path, int64(len(data)-1)))
		},
		"grown": func(path string) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte("x"))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		"removed": func(path string) { require.NoError(t, os.Remove(path)) },
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t, t.TempDir(), testOpts())
			require.NoError(t, s.Save(nil, ents(1, 3, 1), nil))
			snap, err := s.CreateSnapshot(2, confState(1), writeBytes(data))
			require.NoError(t, err)
			d, _ := ParseDescriptor(snap.GetData())
			path := filepath.Join(s.e.snapDir, d.Name)
			damage(path)
			_, err = readSnapshot(t, s, snap)
			if name == "removed" {
				require.ErrorIs(t, err, fs.ErrNotExist)
			} else {
				require.ErrorIs(t, err, ErrCorrupt)
				require.ErrorContains(t, err, path)
			}
			// The recorded snapshot is checked (by size) at Open.
			require.NoError(t, s.Close())
			_, err = Open(s.Dir(), testOpts())
			if name == "flipped" {
				require.NoError(t, err, "the checksum is checked when read, not at Open")
			} else {
				require.ErrorIs(t, err, ErrCorrupt)
			}
		})
	}
}

// TestVerifyingReaderSmallBuffers reads a snapshot a few bytes at a time.
func TestVerifyingReaderSmallBuffers(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 3, 1), nil))
	data := bytes.Repeat([]byte("abc"), 1000)
	snap, err := s.CreateSnapshot(2, confState(1), writeBytes(data))
	require.NoError(t, err)
	rc, _, err := s.OpenSnapshot(snap)
	require.NoError(t, err)
	defer rc.Close()
	var got []byte
	buf := make([]byte, 7)
	for {
		n, err := rc.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.Equal(t, data, got)
	_, err = rc.Read(buf)
	require.Equal(t, io.EOF, err, "EOF is sticky")
}

func TestOpenRemovesTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOpts())
	require.NoError(t, err)
	require.NoError(t, s.Close())
	tmp := filepath.Join(dir, snapDirName, SnapshotFileName(1, 1, 1)+tmpMarker+"123")
	require.NoError(t, os.WriteFile(tmp, []byte("partial"), 0o600))
	s = open(t, dir, testOpts())
	require.Empty(t, snapFiles(t, s))
}

// flipByte inverts the byte at off in the file at path.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// TestCreateSnapshotDoesNotBlock: while the state machine streams a
// snapshot, appends, reads, received snapshots and pruning go on.
func TestCreateSnapshotDoesNotBlock(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	require.NoError(t, s.Save(nil, ents(1, 11, 1), nil))
	inWrite, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.CreateSnapshot(5, confState(1), func(w io.Writer) error {
			close(inWrite)
			<-unblock
			_, err := w.Write([]byte("slow state machine"))
			return err
		})
		done <- err
	}()
	<-inWrite
	require.NoError(t, s.Save(hardState(1, 1, 10), ents(11, 21, 1), nil))
	_, err := s.Entries(1, 21, raftNoLimit)
	require.NoError(t, err)
	snap := receive(t, s, 30, 2, confState(1), []byte("from the leader"))
	require.NoError(t, s.Save(nil, nil, snap))
	close(unblock)
	require.Equal(t, raft.ErrSnapOutOfDate, <-done, "the leader's snapshot is newer")
	cur, _ := s.Snapshot()
	require.True(t, proto.Equal(snap, cur))
}
