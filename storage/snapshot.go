package storage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const tmpMarker = ".tmp-"

// CreateSnapshot snapshots the state machine at index: write streams it into
// a temporary file in the snapshot directory, which is fsynced, renamed to
// its final name and the directory fsynced; then the snapshot (index, the
// term of entry index, cs, and its Descriptor in Data) is recorded as the
// latest in one bbolt commit, and snapshot files beyond the newest
// Options.KeepSnapshots are removed. It does not compact the log (call
// Compact). A nil cs keeps the ConfState of the previous snapshot, as
// raft.MemoryStorage.CreateSnapshot does.
//
// It returns ErrSnapOutOfDate if index is not past the latest snapshot's,
// ErrCompacted if entry index was compacted, an error wrapping ErrOutOfBounds
// if index is past the last index, and write's error (wrapped) if write
// fails, leaving no file behind. write runs without any lock of the store
// held: Save, Entries and the other methods proceed while it streams.
func (s *Store) CreateSnapshot(index uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error) {
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	prev := s.snap.GetMetadata()
	if index <= prev.GetIndex() {
		s.mu.RUnlock()
		return nil, ErrSnapOutOfDate
	}
	if index > s.last {
		last := s.last
		s.mu.RUnlock()
		return nil, fmt.Errorf("%w: snapshot at %d past last index %d", ErrOutOfBounds, index, last)
	}
	term, err := s.termLocked(index)
	if cs == nil {
		cs = prev.GetConfState()
	}
	cs = raftpb.EnsureConfState(proto.Clone(cs).(*raftpb.ConfState))
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}

	name := SnapshotFileName(s.opts.GroupID, term, index)
	start := time.Now()
	d, err := s.writeSnapshotFile(name, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 256<<10)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return nil, err
	}
	s.m.snapMetrics().dur.observe(time.Since(start))
	snap := &raftpb.Snapshot{
		Data:     d.Marshal(),
		Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(term), ConfState: cs},
	}
	rec, err := encodeSnapshot(snap)
	if err != nil {
		return nil, fmt.Errorf("storage: encode snapshot: %w", err)
	}

	s.wmu.Lock()
	if err := s.writable(); err != nil {
		s.wmu.Unlock()
		return nil, err
	}
	if cur := s.snap.GetMetadata().GetIndex(); index <= cur {
		// A snapshot received from the leader got there first. The file is
		// left to pruning: it may have the same name as the recorded one.
		s.wmu.Unlock()
		return nil, ErrSnapOutOfDate
	}
	err = s.update(func(tx kvTx) error {
		return tx.Bucket(s.stateBucket).Put(snapshotKey, rec)
	})
	if err != nil {
		err = s.fail("record snapshot", err)
		s.wmu.Unlock()
		return nil, err
	}
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
	s.wmu.Unlock()
	s.m.snapMetrics().count.Add(1)

	s.pruneSnapshots()
	return proto.Clone(snap).(*raftpb.Snapshot), nil
}

// ReceiveSnapshot stores the snapshot file described by snap.Data, reading
// exactly its size from r (never past it, so r may be a shared stream). The
// file goes to a temporary name, is checked against the descriptor's size and
// CRC-32C, fsynced, renamed and the directory fsynced. Nothing is recorded in
// bbolt: Save(…, snap) does that once raft accepts the snapshot. On a size or
// checksum mismatch it returns a *CorruptError and leaves no file behind.
// If snap.Data is empty (an empty state machine), it drains r and stores
// nothing.
func (s *Store) ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(snap.GetData()) == 0 {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("storage: drain empty snapshot: %w", err)
		}
		return nil
	}
	want, err := s.descriptorFor(snap)
	if err != nil {
		return err
	}
	got, err := s.writeSnapshotFile(want.Name, func(w io.Writer) error {
		n, err := io.CopyN(w, r, want.Size)
		if errors.Is(err, io.EOF) {
			return &CorruptError{File: want.Name, Detail: fmt.Sprintf("stream ended after %d of %d bytes", n, want.Size), Err: io.ErrUnexpectedEOF}
		}
		return err
	}, want)
	if err != nil {
		return err
	}
	s.logger().Debug("received snapshot", "file", got.Name, "size", got.Size)
	return nil
}

// OpenSnapshot opens the file snap's descriptor names, for a restore or to
// send it to a peer. The reader checks the CRC-32C as it is read and returns
// a *CorruptError instead of io.EOF at the end if it does not match, or as
// soon as the file turns out longer or shorter than the descriptor says.
// size is the file's size. An empty snap.Data (an empty state machine) gives
// an empty reader and size 0. A file pruned since snap was taken gives an
// error wrapping fs.ErrNotExist.
func (s *Store) OpenSnapshot(snap *raftpb.Snapshot) (rc io.ReadCloser, size int64, err error) {
	if s.closed.Load() {
		return nil, 0, ErrClosed
	}
	if len(snap.GetData()) == 0 {
		return io.NopCloser(bytes.NewReader(nil)), 0, nil
	}
	d, err := s.descriptorFor(snap)
	if err != nil {
		return nil, 0, err
	}
	path := filepath.Join(s.e.snapDir, d.Name)
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("storage: open snapshot: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("storage: open snapshot: %w", err)
	}
	if fi.Size() != d.Size {
		_ = f.Close()
		return nil, 0, &CorruptError{File: path, Detail: fmt.Sprintf("size %d, descriptor says %d", fi.Size(), d.Size)}
	}
	return &verifyingReader{f: f, path: path, want: d, h: crc32.New(castagnoli)}, d.Size, nil
}

// verifyingReader reads a snapshot file, checking its size and CRC-32C.
type verifyingReader struct {
	f    *os.File
	path string
	want Descriptor
	h    hash.Hash32
	n    int64
	err  error // sticky
}

func (r *verifyingReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if rest := r.want.Size - r.n; int64(len(p)) > rest+1 {
		p = p[:rest+1] // one byte more reveals a file that grew
	}
	n, err := r.f.Read(p)
	r.n += int64(n)
	if r.n > r.want.Size {
		r.err = &CorruptError{File: r.path, Detail: fmt.Sprintf("longer than the %d bytes the descriptor says", r.want.Size)}
		return 0, r.err
	}
	r.h.Write(p[:n])
	switch {
	case errors.Is(err, io.EOF):
		switch {
		case r.n != r.want.Size:
			r.err = &CorruptError{File: r.path, Detail: fmt.Sprintf("ends after %d of %d bytes", r.n, r.want.Size), Err: io.ErrUnexpectedEOF}
		case r.h.Sum32() != r.want.CRC32C:
			r.err = &CorruptError{File: r.path, Detail: fmt.Sprintf("CRC-32C %08x, descriptor says %08x", r.h.Sum32(), r.want.CRC32C)}
		default:
			r.err = io.EOF
		}
		return n, r.err
	case err != nil:
		r.err = fmt.Errorf("storage: read snapshot %s: %w", r.path, err)
		return n, r.err
	}
	return n, nil
}

func (r *verifyingReader) Close() error { return r.f.Close() }

// hashingWriter counts and checksums what goes through it.
type hashingWriter struct {
	w io.Writer
	h hash.Hash32
	n int64
}

func (w *hashingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// writeSnapshotFile writes a snapshot file named name through fill: to a
// temporary file, fsynced, renamed, directory fsynced. If want is given, the
// contents must match it. On error no file is left behind.
func (s *Store) writeSnapshotFile(name string, fill func(io.Writer) error, want ...Descriptor) (d Descriptor, err error) {
	f, err := os.CreateTemp(s.e.snapDir, name+tmpMarker+"*")
	if err != nil {
		return d, fmt.Errorf("storage: create snapshot file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	hw := &hashingWriter{w: newRangeSyncer(f, s.opts.NoSync), h: crc32.New(castagnoli)}
	if err := fill(hw); err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.File = filepath.Join(s.e.snapDir, name)
			return d, ce
		}
		return d, fmt.Errorf("storage: write snapshot %s: %w", name, err)
	}
	d = Descriptor{Name: name, Size: hw.n, CRC32C: hw.h.Sum32()}
	if len(want) > 0 && d != want[0] {
		return d, &CorruptError{File: filepath.Join(s.e.snapDir, name),
			Detail: fmt.Sprintf("received %d bytes with CRC-32C %08x, descriptor says %d bytes with %08x", d.Size, d.CRC32C, want[0].Size, want[0].CRC32C)}
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return d, fmt.Errorf("storage: sync snapshot %s: %w", name, err)
		}
	}
	if err := f.Close(); err != nil {
		return d, fmt.Errorf("storage: close snapshot %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.e.snapDir, name)); err != nil {
		return d, fmt.Errorf("storage: rename snapshot %s: %w", name, err)
	}
	if err := s.syncDir(); err != nil {
		return d, err
	}
	s.m.snapMetrics().bytes.Add(uint64(d.Size))
	return d, nil
}

func (s *Store) syncDir() error {
	if s.opts.NoSync {
		return nil
	}
	return syncDir(s.e.snapDir)
}

// syncDir fsyncs directory dir (a file created, renamed or removed in it
// is durable after).
func syncDir(dir string) error {
	df, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("storage: sync snapshot dir: %w", err)
	}
	defer df.Close()
	if err := df.Sync(); err != nil {
		return fmt.Errorf("storage: sync snapshot dir: %w", err)
	}
	return nil
}

// descriptorFor parses snap's descriptor and checks that its file name is the
// one this store's group gives that term and index.
func (s *Store) descriptorFor(snap *raftpb.Snapshot) (Descriptor, error) {
	d, err := ParseDescriptor(snap.GetData())
	if err != nil {
		return d, err
	}
	m := snap.GetMetadata()
	if want := SnapshotFileName(s.opts.GroupID, m.GetTerm(), m.GetIndex()); d.Name != want {
		return d, &CorruptError{File: "snapshot descriptor",
			Detail: fmt.Sprintf("file %q does not match group %d, term %d, index %d", d.Name, s.opts.GroupID, m.GetTerm(), m.GetIndex())}
	}
	return d, nil
}

// checkSnapshotFile checks at Open that the recorded snapshot's file is there.
func (s *Store) checkSnapshotFile() error {
	if raftIsEmptySnap(s.snap) || len(s.snap.GetData()) == 0 {
		return nil
	}
	if err := s.checkSnapshotFileFor(s.snap); err != nil {
		return &CorruptError{File: s.e.dbPath, Where: string(s.stateBucket) + "/" + string(snapshotKey),
			Detail: "recorded snapshot is unusable", Err: err}
	}
	return nil
}

func raftIsEmptySnap(s *raftpb.Snapshot) bool { return s.GetMetadata().GetIndex() == 0 }

func (s *Store) pruneSnapshots() {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.pruneSnapshotsLocked()
}

// pruneSnapshotsLocked removes this group's snapshot files other than the
// newest KeepSnapshots by index, the recorded one, and any newer than the
// recorded one (received, not yet saved). Caller holds snapMu. Failures are
// logged: a file left behind is removed at the next pruning.
func (s *Store) pruneSnapshotsLocked() {
	des, err := os.ReadDir(s.e.snapDir)
	if err != nil {
		s.logger().Warn("prune snapshots", "err", err)
		return
	}
	s.mu.RLock()
	latest := s.snap.GetMetadata().GetIndex()
	s.mu.RUnlock()
	type file struct {
		name  string
		index uint64
	}
	var files []file
	for _, de := range des {
		g, _, idx, ok := parseSnapshotFileName(de.Name())
		if ok && g == s.opts.GroupID {
			files = append(files, file{de.Name(), idx})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return -cmpU64(a.index, b.index) })
	for i, f := range files {
		if i < s.opts.KeepSnapshots || f.index >= latest {
			continue
		}
		if err := os.Remove(filepath.Join(s.e.snapDir, f.name)); err != nil {
			s.logger().Warn("prune snapshot", "file", f.name, "err", err)
			continue
		}
		s.logger().Debug("pruned snapshot", "file", f.name)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ImportSnapshot writes a snapshot at index and term with configuration cs
// through write (a file, as CreateSnapshot does) and installs it as Save
// with that snapshot would: the log is discarded and starts after index.
// It is how a backup is restored into a new data dir. index must be past
// the latest snapshot's (ErrSnapOutOfDate).
func (s *Store) ImportSnapshot(index, term uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if index == 0 {
		return nil, fmt.Errorf("%w: snapshot index 0", ErrOutOfBounds)
	}
	s.mu.RLock()
	cur := s.snap.GetMetadata().GetIndex()
	s.mu.RUnlock()
	if index <= cur {
		return nil, ErrSnapOutOfDate
	}
	name := SnapshotFileName(s.opts.GroupID, term, index)
	d, err := s.writeSnapshotFile(name, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 256<<10)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return nil, err
	}
	snap := &raftpb.Snapshot{
		Data: d.Marshal(),
		Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(term),
			ConfState: raftpb.EnsureConfState(proto.Clone(cs).(*raftpb.ConfState))},
	}
	if err := s.Save(nil, nil, snap); err != nil {
		return nil, err
	}
	return proto.Clone(snap).(*raftpb.Snapshot), nil
}
