package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var errMissing = errors.New("entry missing")

// Save persists what one raft MsgStorageAppend carries, in one bbolt
// transaction (one commit, two fdatasyncs, shared with the writes of the
// engine's other groups queued meanwhile), in this order:
//
//  1. if snap is non-empty (index > 0): record it as the latest snapshot and
//     discard the whole log, as raft.MemoryStorage.ApplySnapshot does. It is
//     refused with ErrSnapOutOfDate unless newer than the latest recorded
//     one, and if its Data names a file, that file must already be in the
//     snapshot directory (ReceiveSnapshot put it there).
//  2. append ents, replacing any conflicting suffix of the log, as
//     raft.MemoryStorage.Append does: entries at or before the first
//     index are ignored; a gap after the last index, or entries that are not
//     consecutive, are refused with ErrOutOfBounds.
//  3. if hs is non-empty, record it as the hard state.
//
// Either all of it is durable when Save returns nil, or none of it is on
// disk after a crash. Save keeps references to the entries (raft treats them
// as immutable) to serve Entries from memory.
func (s *Store) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	pruned, err := s.save(hs, ents, snap)
	if pruned {
		s.pruneSnapshots() // outside wmu: appends need not wait for it
	}
	if s.tail.shared.over() {
		s.e.trimTails() // outside wmu and mu: it takes every group's mu
	}
	return err
}

// save is Save under wmu; it reports whether a snapshot was recorded.
func (s *Store) save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) (bool, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w, err := s.prepareSave(hs, ents, snap)
	if err != nil || w == nil {
		return false, err
	}
	if w.hasSnap || w.truncate {
		// Entries disappear: readers wait for the commit.
		s.mu.Lock()
		if err = s.updateAs(true, w.commitFn); err == nil {
			w.publish()
		}
		s.mu.Unlock()
	} else {
		// Pure append: readers do not look past the old last index, so they
		// run during the commit.
		if err = s.updateAs(true, w.commitFn); err == nil {
			s.mu.Lock()
			w.publish()
			s.mu.Unlock()
		}
	}
	return w.hasSnap, s.saved(w, err)
}

// SaveAsync is Save for a caller that does not wait: it queues the write
// for the engine's next commit and returns; done is called with Save's
// error once the write is durable (or failed). done runs on the goroutine
// that made the commit, after it: it must not block, nor call the Store
// or its Engine. A write that removes entries (a snapshot, a conflicting
// append) and one that cannot be queued run as Save does, before SaveAsync
// returns (done is called before it returns, too).
//
// The group has one write at a time: a Save, SaveAsync or other write of
// the group waits until the previous SaveAsync's done was called. A host's
// append tasks use it so that an I/O worker is not held while its group's
// write waits for a commit: the commit's leader completes every write it
// carries itself, instead of waking one goroutine per group.
func (s *Store) SaveAsync(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, done func(error)) {
	if s.tail.shared.over() {
		s.e.trimTails() // outside wmu and mu: it takes every group's mu
	}
	s.wmu.Lock()
	w, err := s.prepareSave(hs, ents, snap)
	if err != nil || w == nil || w.hasSnap || w.truncate {
		s.wmu.Unlock()
		if err == nil && w != nil {
			err = s.Save(hs, ents, snap)
		}
		done(err)
		return
	}
	w.done = done
	s.e.commitAsync(s.opts.GroupID, w.commitFn, w.asyncDone)
}

// committed completes a SaveAsync once its commit ran (or failed): the
// engine's asynchronous done for it, bound once per write state.
func (w *preparedSave) committed(dur, writeTime time.Duration, err error) {
	s := w.s
	if err == nil {
		s.commitDone(dur, writeTime)
		s.mu.Lock()
		w.publish()
		s.mu.Unlock()
	}
	err = s.saved(w, err)
	done := w.done
	w.done = nil
	s.wmu.Unlock() // w is the next write's from here on
	done(err)
}

// preparedSave is a Save validated and encoded, ready for a commit. A
// Store reuses one (Store.ws) for its writes, held by the holder of wmu
// from prepareSave until saved, so that a write allocates neither it, nor
// its closures, nor its buffers: they are free again when wmu is, after
// the commit (which copied the records).
type preparedSave struct {
	s                        *Store
	hasSnap, truncate, hasHS bool
	snap                     *raftpb.Snapshot
	snapRec                  []byte
	ents                     []*raftpb.Entry
	dummy, dummyTerm, last   uint64 // the log's bounds after the write; last before it
	hs                       hardStateValue
	garbage                  uint64 // s.garbage after the commit
	entries                  int

	// Buffers reused across the group's writes (bbolt keeps references to
	// keys and values until the commit): the entries' records and keys,
	// the hard state's and the bounds' records.
	buf, keys, hsRec, bounds []byte

	// Bound once: the commit for the engine, SaveAsync's completion, and
	// the done of the SaveAsync in progress.
	commitFn  func(kvTx) error
	asyncDone func(dur, writeTime time.Duration, err error)
	done      func(error)
}

// saved finishes a Save after its commit: err is the commit's. The caller
// holds wmu.
func (s *Store) saved(w *preparedSave, err error) error {
	w.snap, w.snapRec, w.ents = nil, nil, nil // nothing of the caller's outlives the write
	if err != nil {
		return s.fail("save", err)
	}
	s.garbage = w.garbage
	s.m.saves.Add(1)
	s.m.entries.Add(uint64(w.entries))
	s.m.bytes.Add(uint64(len(w.buf)))
	return nil
}

// prepareSave validates and encodes a Save into the Store's write state;
// nil when there is nothing to write. The caller holds wmu.
func (s *Store) prepareSave(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) (*preparedSave, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	hasSnap := snap != nil && !raft.IsEmptySnap(snap)
	hasHS := hs != nil && !raft.IsEmptyHardState(hs)

	dummy, dummyTerm, last := s.dummy, s.dummyTerm, s.last
	var snapRec []byte
	if hasSnap {
		meta := snap.GetMetadata()
		if cur := s.snap.GetMetadata().GetIndex(); cur != 0 && cur >= meta.GetIndex() {
			return nil, ErrSnapOutOfDate
		}
		if err := s.checkSnapshotFileFor(snap); err != nil {
			return nil, err
		}
		snap = proto.Clone(snap).(*raftpb.Snapshot)
		raftpb.EnsureSnapshot(snap)
		var err error
		if snapRec, err = encodeSnapshot(snap); err != nil {
			return nil, fmt.Errorf("storage: encode snapshot: %w", err)
		}
		dummy, dummyTerm, last = meta.GetIndex(), meta.GetTerm(), meta.GetIndex()
	}

	// Trim ents as MemoryStorage.Append does.
	if len(ents) > 0 {
		first := dummy + 1
		if ents[0].GetIndex()+uint64(len(ents))-1 < first {
			ents = nil
		} else if ents[0].GetIndex() < first {
			ents = ents[first-ents[0].GetIndex():]
		}
	}
	truncate := false
	if len(ents) > 0 {
		at := ents[0].GetIndex()
		if at > last+1 {
			return nil, fmt.Errorf("%w: append at index %d leaves a gap after last index %d", ErrOutOfBounds, at, last)
		}
		for j, e := range ents {
			if e.GetIndex() != at+uint64(j) {
				return nil, fmt.Errorf("%w: entry %d of the append has index %d, want %d", ErrOutOfBounds, j, e.GetIndex(), at+uint64(j))
			}
		}
		truncate = at <= last
	}
	if !hasSnap && len(ents) == 0 && !hasHS {
		return nil, nil
	}

	w := s.ws
	if w == nil {
		w = &preparedSave{s: s}
		w.commitFn, w.asyncDone = w.commit, w.committed
		s.ws = w
	}
	w.hasSnap, w.truncate, w.hasHS = hasSnap, truncate, hasHS
	w.snap, w.snapRec, w.ents = snap, snapRec, ents
	w.dummy, w.dummyTerm, w.last = dummy, dummyTerm, last
	w.garbage, w.entries = s.garbage, len(ents)

	// Encode outside the transaction.
	buf, keys := w.buf[:0], w.keys[:0]
	if len(ents) > 0 {
		n := 0
		for _, e := range ents {
			n += encodedEntrySize(e)
		}
		if cap(buf) < n {
			buf = make([]byte, 0, n+n/4)
		}
		if cap(keys) < 8*len(ents) {
			keys = make([]byte, 0, 8*len(ents)+8*len(ents)/4)
		}
		for _, e := range ents {
			buf = appendEntry(buf, e)
			keys = indexKey(keys, e.GetIndex())
		}
	}
	w.buf, w.keys = buf, keys
	w.hsRec = w.hsRec[:0]
	if hasHS {
		w.hs = hardStateOf(hs) // a copy: the caller may reuse hs
		w.hsRec = appendHardState(w.hsRec, w.hs)
	}
	return w, nil
}

// commit writes w in tx.
func (w *preparedSave) commit(tx kvTx) error {
	s, ents := w.s, w.ents
	sb := tx.Bucket(s.stateBucket)
	if w.hasSnap {
		if err := sb.Put(snapshotKey, w.snapRec); err != nil {
			return err
		}
		if s.last > s.dummy { // the log holds entries: drop them all
			if err := tx.DeleteBucket(s.logBucket); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(s.logBucket); err != nil {
				return err
			}
		}
	}
	lb := tx.Bucket(s.logBucket)
	lb.Append() // keys only ever grow: pack the pages
	if s.garbage != 0 {
		if w.hasSnap && s.last > s.dummy {
			w.garbage = 0 // the bucket was emptied
		} else {
			var err error
			if w.garbage, err = s.deleteGarbage(lb, w.dummy, 2*len(ents)+garbagePerSave); err != nil {
				return err
			}
		}
	}
	if w.truncate {
		var key [8]byte
		for i := ents[0].GetIndex(); i <= w.last; i++ {
			if err := lb.Delete(indexKey(key[:0], i)); err != nil {
				return err
			}
		}
	}
	off := 0
	for j, e := range ents {
		n := encodedEntrySize(e)
		if err := lb.Put(w.keys[8*j:8*j+8], w.buf[off:off+n]); err != nil {
			return err
		}
		off += n
	}
	// The bounds: after a snapshot or a truncation, and after every append
	// unless the format keeps the log's last index in its last key only
	// (formatVersionLazyBounds).
	if w.hasSnap || w.truncate || (len(ents) > 0 && !s.e.lazyBounds.Load()) {
		newLast := w.dummy
		if len(ents) > 0 {
			newLast = ents[len(ents)-1].GetIndex()
		}
		w.bounds = appendUvarints(w.bounds[:0], w.dummy, w.dummyTerm, newLast)
		if err := sb.Put(boundsKey, w.bounds); err != nil {
			return err
		}
	}
	if w.hasHS {
		return sb.Put(hardStateKey, w.hsRec)
	}
	return nil
}

// publish makes w's write visible in memory: under mu, after the commit.
func (w *preparedSave) publish() {
	s, ents := w.s, w.ents
	if w.hasSnap {
		s.snap = w.snap
		s.dummy, s.dummyTerm, s.last = w.dummy, w.dummyTerm, w.dummy
		s.tail.reset()
	}
	if len(ents) > 0 {
		s.last = ents[len(ents)-1].GetIndex()
		s.tail.append(ents)
	}
	if w.hasHS {
		w.hs.setTo(s.hs)
	}
}

// ApplySnapshot records snap as the latest snapshot and discards the log,
// like raft.MemoryStorage.ApplySnapshot. It is Save(nil, nil, snap).
//
// Errors: Save's.
func (s *Store) ApplySnapshot(snap *raftpb.Snapshot) error {
	return s.Save(nil, nil, snap)
}

// Compact discards the entries up to and including index, keeping its term
// for Term(index), like raft.MemoryStorage.Compact. It returns ErrCompacted
// if index <= FirstIndex()-1 and an error wrapping ErrOutOfBounds if index >
// LastIndex(). The caller must not compact past the applied index.
//
// One small bbolt commit records the new bounds: from then on, and after a
// restart, the log starts after index. The compacted entries themselves are
// deleted by the Saves that follow, a few more than each appends, in their
// own transactions: a compaction after an amortized snapshot discards tens
// of megabytes of log, and deleting it at once held the log's writes for
// ~100 ms (BenchmarkSaveDuringCompact).
func (s *Store) Compact(index uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if index <= s.dummy {
		return ErrCompacted
	}
	if index > s.last {
		return fmt.Errorf("%w: compact %d past last index %d", ErrOutOfBounds, index, s.last)
	}
	s.mu.RLock()
	term, err := s.termLocked(index)
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	oldDummy, last := s.dummy, s.last
	// Publish first: from now on no reader asks the backend for the
	// entries that are deleted later. If the commit fails, memory shows a
	// shorter log than the disk holds, which is safe.
	s.mu.Lock()
	s.dummy, s.dummyTerm = index, term
	s.tail.compact(index)
	s.mu.Unlock()
	deleted := false
	err = s.update(func(tx kvTx) error {
		if err := tx.Bucket(s.stateBucket).Put(boundsKey, appendUvarints(nil, index, term, last)); err != nil {
			return err
		}
		// Pebble: every entry up to index in one range deletion, with the
		// bounds that stop reading them. bbolt: the Saves that follow
		// delete them a few at a time (deleteGarbage).
		if rd, ok := tx.Bucket(s.logBucket).(kvRangeDeleter); ok {
			deleted = true
			return rd.DeleteRange(indexKey(nil, 0), indexKey(nil, index+1))
		}
		return nil
	})
	if err != nil {
		return s.fail("compact", err)
	}
	switch {
	case deleted:
		s.garbage = 0
	case s.garbage == 0:
		s.garbage = oldDummy + 1
	}
	return nil
}

// garbagePerSave is how many compacted entries a Save deletes besides
// twice as many as it appends: the deletions outpace the log's growth, and
// a compaction's backlog is gone once about half as many entries as it
// compacted were appended (sooner with small Saves).
const garbagePerSave = 64

// deleteGarbage deletes, in a Save's transaction, up to budget of the
// compacted entries still in bbolt, oldest first, and returns the next
// value of s.garbage. The caller holds wmu.
func (s *Store) deleteGarbage(lb kvBucket, dummy uint64, budget int) (uint64, error) {
	if s.garbage == 0 || s.garbage > dummy {
		return 0, nil
	}
	var key [8]byte
	k, _ := lb.Cursor().Seek(indexKey(key[:0], s.garbage))
	if len(k) != 8 || binary.BigEndian.Uint64(k) > dummy {
		return 0, nil // nothing left below the first index
	}
	first := binary.BigEndian.Uint64(k)
	end := min(dummy, first+uint64(budget)-1)
	for i := first; i <= end; i++ {
		if err := lb.Delete(indexKey(key[:0], i)); err != nil {
			return 0, err
		}
	}
	if end == dummy {
		return 0, nil
	}
	return end + 1, nil
}

// Identity returns the recorded cluster and member IDs and incarnation,
// zero if never set.
//
// Errors: ErrClosed; ErrCorrupt for a damaged record.
func (s *Store) Identity() (Identity, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return Identity{}, ErrClosed
	}
	return s.identity, nil
}

// SetIdentity durably records the cluster and member IDs and the
// incarnation. A field already recorded as non-zero cannot change: setting
// a different value (zero included) returns an *IdentityError
// (ErrIdentityMismatch) and changes nothing — except an Incarnation of 0,
// which keeps the recorded one. Setting the recorded identity again is a
// no-op.
func (s *Store) SetIdentity(id Identity) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	cur := s.identity
	if id.Incarnation == 0 {
		id.Incarnation = cur.Incarnation
	}
	if (cur.ClusterID != 0 && cur.ClusterID != id.ClusterID) || (cur.MemberID != 0 && cur.MemberID != id.MemberID) ||
		(cur.Incarnation != 0 && cur.Incarnation != id.Incarnation) {
		return &IdentityError{Stored: cur, Requested: id}
	}
	if cur == id {
		return nil
	}
	err := s.update(func(tx kvTx) error {
		vs := []uint64{id.ClusterID, id.MemberID}
		if id.Incarnation != 0 { // else as written before incarnations existed
			vs = append(vs, id.Incarnation)
		}
		return tx.Bucket(s.stateBucket).Put(identityKey, appendUvarints(nil, vs...))
	})
	if err != nil {
		return s.fail("set identity", err)
	}
	s.mu.Lock()
	s.identity = id
	s.mu.Unlock()
	return nil
}

// MarkRemoved durably records that the member was removed from its cluster:
// every later Open of the data dir returns ErrRemoved. The open Store keeps
// working until closed.
func (s *Store) MarkRemoved() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	err := s.update(func(tx kvTx) error {
		return tx.Bucket(s.stateBucket).Put(removedKey, seal([]byte("removed"), 0))
	})
	if err != nil {
		return s.fail("mark removed", err)
	}
	return nil
}

// writable returns why the store cannot write, if it cannot: it is closed,
// or a commit of its engine failed. Caller holds wmu.
func (s *Store) writable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.e.failure()
}

// fail reports a failed write. Its commit failed, which failed the engine
// (Engine.fail): no later write of any group is attempted. Caller holds wmu.
func (s *Store) fail(op string, err error) error {
	s.logger().Debug("storage write failed", "op", op, "err", err) // the engine logs the failure once
	return fmt.Errorf("storage: %s in %s: %w", op, s.e.dbPath, err)
}

// checkSnapshotFileFor checks that the file snap's descriptor names is in
// the snapshot directory with the right size (the checksum is verified when
// it is read).
func (s *Store) checkSnapshotFileFor(snap *raftpb.Snapshot) error {
	if len(snap.GetData()) == 0 {
		return nil
	}
	d, err := s.descriptorFor(snap)
	if err != nil {
		return err
	}
	path := filepath.Join(s.e.snapDir, d.Name)
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("storage: snapshot file for index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	if fi.Size() != d.Size {
		return &CorruptError{File: path, Detail: fmt.Sprintf("size %d, descriptor says %d", fi.Size(), d.Size)}
	}
	return nil
}
