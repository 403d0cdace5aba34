package storage

import (
	"encoding/binary"
	"fmt"
	"github.com/understudy-raft/understudy/raft/raftio"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// FormatVersion is the newest on-disk format version this code reads and
// writes; it reads every version from 1. All have the same layout (see the
// package comment). In bbolt, version 1 is a file holding one group,
// version 2 one holding more: a file is written as version 1 until a
// second group is created in it, then raised to 2 for good, so that the
// releases that read only version 1 refuse a shared file with ErrVersion,
// and still open a file of one group. A Pebble database made by this
// release is version 3 from its first group on: its groups' bounds records
// are rewritten only when a snapshot, a compaction or a truncation moves
// the log's first index or cuts its end, not on every append (the log's
// last key is its last index), so releases that read only up to 2, which
// take a bounds record behind the log for damage, refuse it with
// ErrVersion. A Pebble database of version 1 or 2 keeps its format.
const FormatVersion = formatVersionLazyBounds

const (
	formatVersionOneGroup   = 1
	formatVersionManyGroups = 2
	formatVersionLazyBounds = 3
)

// File and bucket names; see the package comment for the layout.
const (
	dbFileName  = "understudy.db"
	snapDirName = "snap"
)

var (
	metaBucket = []byte("understudy")
	versionKey = []byte("version")

	hardStateKey = []byte("hardstate")
	snapshotKey  = []byte("snapshot")
	boundsKey    = []byte("bounds")
	identityKey  = []byte("identity")
	removedKey   = []byte("removed")
)

func logBucketName(group uint64) []byte   { return fmt.Appendf(nil, "group/%016x/log", group) }
func stateBucketName(group uint64) []byte { return fmt.Appendf(nil, "group/%016x/state", group) }

// Identity is the cluster and member a data dir belongs to, and the
// incarnation of its copy of the member's data (raftio.Identity, which
// package raft shares).
type Identity = raftio.Identity

// Store is the durable storage of one raft group: its log, hard state,
// latest snapshot and identity in a bbolt file, and its snapshot files in a
// directory beside it. It implements etcd's raft.Storage. All methods are safe
// for concurrent use.
//
// A Store is a view of one group in an Engine's data dir: Open makes a data
// dir's Engine and its one group's Store together (closing the Store closes
// the Engine); Engine.Group opens one group of many.
//
// Its directory, file and logger are its Engine's (a host holds a Store
// per replica of its many groups).
type Store struct {
	e    *Engine
	opts Options

	logBucket, stateBucket []byte

	owner  bool // Open made e for this Store: Close closes it
	closed atomic.Bool

	// snapMu serialises the pruning of snapshot files. It is held for a
	// directory listing and a few removals, never across a bbolt call.
	snapMu sync.Mutex

	// wmu serialises the group's writers: a holder of wmu prepares a write,
	// hands it to the engine's committer and waits for its commit, so a
	// group has at most one write in a commit. Only a holder of wmu changes
	// the fields under mu, and only while also holding mu exclusively, so a
	// holder of wmu (and the committer running its write) reads them freely
	// (the tail aside: trimTails and DropCaches trim it holding mu alone).
	wmu sync.Mutex
	ws  *preparedSave // the write state Saves reuse (made by the first)

	// mu guards the in-memory view of what is committed. Readers hold it
	// shared for the whole call, including their bbolt read transaction;
	// writers take it exclusively only to publish a committed change, except
	// that a change removing entries (a conflicting append, a snapshot) holds
	// it across its commit, and Compact publishes before its commit, so that a
	// reader never looks in bbolt for an entry the view says exists but a
	// commit has removed.
	mu        sync.RWMutex
	hs        *raftpb.HardState // never nil
	snap      *raftpb.Snapshot  // latest recorded snapshot; never nil
	dummy     uint64            // index of the entry before the first (FirstIndex()-1)
	dummyTerm uint64            // its term
	last      uint64            // last index; dummy when the log is empty
	tail      tail
	identity  Identity

	// garbage is, when not 0, the lowest index that may still have an
	// entry in bbolt below the log's first index: compacted entries are
	// deleted a few at a time by the Saves that follow (deleteGarbage).
	// Guarded by wmu.
	garbage uint64

	m metrics
}

// logger returns the group's logger (made when it logs: rarely).
func (s *Store) logger() *slog.Logger { return s.opts.Logger.With("group", s.opts.GroupID) }

// Open opens (creating it if needed) the data dir dir and the group
// opts.GroupID in it: an Engine of its own with that one group, which the
// Store owns (closing the Store closes it). It returns an error wrapping
// ErrLocked if another Store or Engine holds dir, ErrRemoved if the member
// was removed (MarkRemoved), ErrVersion for a newer format, and ErrCorrupt (a
// *CorruptError naming the file) when the bbolt file, a record in it, or the
// recorded snapshot file fails a check, including when bbolt panics on a
// corrupt page. On error nothing stays open.
func Open(dir string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	e, err := OpenEngine(dir, opts.engine())
	if err != nil {
		return nil, err
	}
	s, err := e.Group(opts.GroupID, opts.group())
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	s.owner = true
	return s, nil
}

// load checks the group's buckets and tombstone, creating the buckets of a
// new group, and reads its committed state into memory. The engine checked
// the format version and the names of every bucket and key at OpenEngine.
func (s *Store) load() error {
	fresh := false
	err := s.view(func(tx kvTx) error {
		// A group seen for the first time has neither bucket; one without
		// the other is damage, not a new group.
		hasState, hasLog := tx.Bucket(s.stateBucket) != nil, tx.Bucket(s.logBucket) != nil
		if hasState != hasLog {
			return s.corrupt(string(s.stateBucket), fmt.Sprintf("state bucket present: %t, log bucket present: %t", hasState, hasLog), nil)
		}
		fresh = !hasState
		return nil
	})
	if err != nil {
		return err
	}
	if fresh {
		err := s.update(func(tx kvTx) error { return s.e.createGroupBuckets(tx, s.opts.GroupID) })
		if err != nil {
			return fmt.Errorf("storage: initialise group %d in %s: %w", s.opts.GroupID, s.e.dbPath, err)
		}
	}
	err = s.view(func(tx kvTx) error {
		sb := tx.Bucket(s.stateBucket)
		if sb.Get(removedKey) != nil {
			return fmt.Errorf("%w: %s (group %d)", ErrRemoved, s.e.dir, s.opts.GroupID)
		}
		if v := sb.Get(hardStateKey); v != nil {
			hs, err := decodeHardState(v)
			if err != nil {
				return s.corruptKey(s.stateBucket, hardStateKey, err)
			}
			s.hs = hs
		}
		if v := sb.Get(snapshotKey); v != nil {
			snap, err := decodeSnapshot(v)
			if err != nil {
				return s.corruptKey(s.stateBucket, snapshotKey, err)
			}
			s.snap = snap
		}
		recordedLast := uint64(0)
		if v := sb.Get(boundsKey); v != nil {
			vs, err := decodeUvarints(v, 3)
			if err != nil {
				return s.corruptKey(s.stateBucket, boundsKey, err)
			}
			s.dummy, s.dummyTerm, recordedLast = vs[0], vs[1], vs[2]
			if recordedLast < s.dummy {
				return s.corruptKey(s.stateBucket, boundsKey, fmt.Errorf("last index %d before first index %d", recordedLast, s.dummy+1))
			}
		}
		if v := sb.Get(identityKey); v != nil {
			id, err := decodeIdentity(v)
			if err != nil {
				return s.corruptKey(s.stateBucket, identityKey, err)
			}
			s.identity = id
		}
		if err := s.loadLog(tx); err != nil {
			return err
		}
		if s.e.lazyBounds.Load() {
			// Version 3: the record's last index is where the log ended
			// when a snapshot, a compaction or a truncation last moved
			// it; appends since went past it.
			if s.last < recordedLast {
				return s.corrupt(string(s.logBucket), fmt.Sprintf("log ends at index %d, but %d was written", s.last, recordedLast), nil)
			}
		} else if s.last != recordedLast {
			// bbolt has no page checksums: a damaged page count can hide
			// the end of the log. The bounds record says where it ends.
			return s.corrupt(string(s.logBucket), fmt.Sprintf("log ends at index %d, but %d was written", s.last, recordedLast), nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.checkSnapshotFile()
}

// loadLog finds the last index and fills the tail from the end of the log.
func (s *Store) loadLog(tx kvTx) error {
	c := tx.Bucket(s.logBucket).Cursor()
	// Entries at or below s.dummy are compacted entries not deleted yet
	// (see Compact): ignored, and deleted by the next Saves.
	if k, _ := c.First(); len(k) == 8 && binary.BigEndian.Uint64(k) <= s.dummy {
		s.garbage = binary.BigEndian.Uint64(k)
	}
	k, _ := c.Seek(indexKey(nil, s.dummy+1))
	if k == nil {
		s.last = s.dummy
		return nil
	}
	if len(k) != 8 || binary.BigEndian.Uint64(k) != s.dummy+1 {
		return &CorruptError{File: s.e.dbPath, Where: string(s.logBucket),
			Detail: fmt.Sprintf("first key %x, want index %d", k, s.dummy+1)}
	}
	k, v := c.Last()
	if len(k) != 8 || binary.BigEndian.Uint64(k) <= s.dummy {
		return &CorruptError{File: s.e.dbPath, Where: string(s.logBucket), Detail: fmt.Sprintf("last key %x", k)}
	}
	s.last = binary.BigEndian.Uint64(k)
	// Warm the tail, newest first, within its budget.
	var rev []*raftpb.Entry
	var a entryAlloc
	budget := s.tail.max
	for i := s.last; k != nil && budget >= 0; i-- {
		if len(k) != 8 || binary.BigEndian.Uint64(k) != i {
			return s.corruptIndex(i, fmt.Errorf("found key %x", k))
		}
		e, err := decodeEntry(i, v, &a, 64)
		if err != nil {
			return s.corruptIndex(i, err)
		}
		rev = append(rev, e)
		budget -= entryCost(e)
		if i == s.dummy+1 {
			break
		}
		k, v = c.Prev()
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	s.tail.append(rev)
	return nil
}

// Close closes the store. It waits for running calls that use bbolt to
// finish; a CreateSnapshot still writing its file returns ErrClosed when it
// is done. A Store from Open closes its Engine too; one from Engine.Group
// releases its group's view, which Engine.Group can open again. Close is
// idempotent.
func (s *Store) Close() error {
	s.closeView()
	if s.owner {
		return s.e.Close()
	}
	return nil
}

// closeView closes the group's view and releases it in the engine.
func (s *Store) closeView() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return
	}
	s.tail.reset()
	s.e.release(s)
}

// Dir returns the data dir the store was opened on.
func (s *Store) Dir() string { return s.e.dir }

// GroupID returns the group the store holds.
func (s *Store) GroupID() uint64 { return s.opts.GroupID }

// view runs fn in a bbolt read transaction, turning a bbolt panic into a
// *CorruptError.
func (s *Store) view(fn func(kvTx) error) error { return s.e.view(fn) }

// update has the engine's committer run fn in its next transaction and
// waits for the commit. The caller holds wmu (or is opening the group).
func (s *Store) update(fn func(kvTx) error) error {
	return s.updateAs(false, fn)
}

// updateAs is update; save says whether fn is a Save's (for the engine's
// metrics).
func (s *Store) updateAs(save bool, fn func(kvTx) error) error {
	dur, writeTime, err := s.e.commit(s.opts.GroupID, save, fn)
	if err == nil {
		s.commitDone(dur, writeTime)
	}
	return err
}

// commitDone counts a commit of the group's write in its metrics.
func (s *Store) commitDone(dur, writeTime time.Duration) {
	s.m.commits.Add(1)
	s.m.commitDur.observe(dur)
	if !s.opts.NoSync {
		s.m.syncDur.observe(writeTime)
	}
}

func (s *Store) corrupt(where, detail string, err error) error {
	return &CorruptError{File: s.e.dbPath, Where: where, Detail: detail, Err: err}
}

func (s *Store) corruptKey(bucket, key []byte, err error) error {
	return &CorruptError{File: s.e.dbPath, Where: string(bucket) + "/" + string(key), Err: err}
}

func (s *Store) corruptIndex(i uint64, err error) error {
	return &CorruptError{File: s.e.dbPath, Where: fmt.Sprintf("%s/%016x (entry %d)", s.logBucket, i, i), Err: err}
}

func indexKey(buf []byte, i uint64) []byte { return binary.BigEndian.AppendUint64(buf, i) }
