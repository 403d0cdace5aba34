package storage

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// InitialState returns the saved hard state (empty if none) and the
// ConfState of the latest snapshot (empty if none). Part of raft.Storage.
//
// Errors: ErrClosed; ErrCorrupt (a damaged record: the member cannot start
// from this data dir).
func (s *Store) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	hs := proto.Clone(s.hs).(*raftpb.HardState)
	cs := raftpb.EnsureConfState(proto.Clone(s.snap.GetMetadata().GetConfState()).(*raftpb.ConfState))
	return hs, cs, nil
}

// FirstIndex returns the index of the first entry that may be available
// through Entries (one past the latest compaction or snapshot). Part of
// raft.Storage.
//
// Errors: ErrClosed.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.dummy + 1, nil
}

// LastIndex returns the index of the last entry of the log, or FirstIndex()-1
// when the log holds none. Part of raft.Storage.
//
// Errors: ErrClosed.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.last, nil
}

// Snapshot returns the latest recorded snapshot: its metadata, and in Data
// its Descriptor (or nothing for an empty state machine). Open its file with
// OpenSnapshot. Part of raft.Storage.
//
// Errors: ErrClosed; ErrCorrupt for a damaged record.
func (s *Store) Snapshot() (*raftpb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return proto.Clone(s.snap).(*raftpb.Snapshot), nil
}

// Term returns the term of entry i, for i in [FirstIndex()-1, LastIndex()].
// It returns ErrCompacted below that range and ErrUnavailable above it, as
// raft.MemoryStorage does. Part of raft.Storage.
func (s *Store) Term(i uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.termLocked(i)
}

func (s *Store) termLocked(i uint64) (uint64, error) {
	switch {
	case i < s.dummy:
		return 0, ErrCompacted
	case i > s.last:
		return 0, ErrUnavailable
	case i == s.dummy:
		return s.dummyTerm, nil
	}
	if term, ok := s.tail.term(i); ok {
		s.m.tailHits.Add(1)
		return term, nil
	}
	s.m.tailMisses.Add(1)
	var term uint64
	err := s.view(func(tx kvTx) error {
		var key [8]byte
		v := tx.Bucket(s.logBucket).Get(indexKey(key[:0], i))
		if v == nil {
			return s.corruptIndex(i, errMissing)
		}
		t, err := decodeEntryTerm(v)
		if err != nil {
			return s.corruptIndex(i, err)
		}
		term = t
		return nil
	})
	return term, err
}

// Entries returns the entries in [lo, hi), at most maxSize bytes of them
// (as proto.Size counts) but at least one. It returns ErrCompacted if lo is
// at or before FirstIndex()-1 and ErrUnavailable if the log holds no entries,
// as raft.MemoryStorage does; hi past LastIndex()+1 is an error wrapping
// ErrOutOfBounds (MemoryStorage panics). The caller owns the returned slice;
// the entries must not be modified. Part of raft.Storage.
func (s *Store) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if lo <= s.dummy {
		return nil, ErrCompacted
	}
	if hi > s.last+1 {
		return nil, fmt.Errorf("%w: entries [%d, %d) past last index %d", ErrOutOfBounds, lo, hi, s.last)
	}
	if s.last == s.dummy {
		return nil, ErrUnavailable
	}
	if lo > hi {
		return nil, fmt.Errorf("%w: entries [%d, %d): lo > hi", ErrOutOfBounds, lo, hi)
	}
	out := make([]*raftpb.Entry, 0, min(hi-lo, 1024))
	var size uint64
	// full reports whether e (already counted in size) must be left out.
	full := func(e *raftpb.Entry) bool {
		size += entrySize(e)
		return len(out) > 0 && size > maxSize
	}
	i := lo
	if !s.tail.covers(lo) && lo < hi {
		// The part before the tail comes from bbolt.
		end := hi
		if s.tail.len() > 0 && s.tail.start < end {
			end = s.tail.start
		}
		stop := false
		err := s.view(func(tx kvTx) error {
			var key [8]byte
			var a entryAlloc
			c := tx.Bucket(s.logBucket).Cursor()
			k, v := c.Seek(indexKey(key[:0], i))
			for ; i < end; i++ {
				if len(k) != 8 || binary.BigEndian.Uint64(k) != i {
					return s.corruptIndex(i, errMissing)
				}
				e, err := decodeEntry(i, v, &a, int(end-i))
				if err != nil {
					return s.corruptIndex(i, err)
				}
				if full(e) {
					stop = true
					return nil
				}
				out = append(out, e)
				k, v = c.Next()
			}
			return nil
		})
		s.m.tailMisses.Add(uint64(len(out)))
		if err != nil {
			return nil, err
		}
		if stop {
			return out, nil
		}
	}
	n := len(out)
	var a entryAlloc
	want := 0
	if i < hi {
		want = s.tail.fits(i, hi, maxSize-min(size, maxSize)) // sizes the allocation
	}
	for ; i < hi; i++ {
		e, err := s.tail.entry(i, &a, want)
		want--
		if err != nil {
			// The tail holds records it wrote itself: a bug, not the disk.
			return nil, fmt.Errorf("storage: the in-memory tail's entry %d: %w", i, err)
		}
		if full(e) {
			break
		}
		out = append(out, e)
	}
	s.m.tailHits.Add(uint64(len(out) - n))
	return out, nil
}
