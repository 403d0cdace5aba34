package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/raft/v3/raftpb"
)

// FormatVersion is the on-disk format version this code writes and reads.
const FormatVersion = 1

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

// Identity is the cluster and member a data dir belongs to.
type Identity struct {
	ClusterID, MemberID uint64
}

// Store is the durable storage of one raft group: its log, hard state,
// latest snapshot and identity in a bbolt file, and its snapshot files in a
// directory beside it. It implements etcd's raft.Storage. All methods are safe
// for concurrent use.
type Store struct {
	dir     string
	dbPath  string
	snapDir string
	opts    Options
	log     *slog.Logger
	db      *bolt.DB
	file    *os.File // bbolt's file, closed directly if bbolt panicked

	// poisoned is set when bbolt panicked: its locks may be held and its
	// state is unknown, so no later call enters bbolt (they return the
	// panic's *CorruptError) and Close closes the file instead of the DB.
	poisoned atomic.Pointer[CorruptError]

	logBucket, stateBucket []byte

	closed atomic.Bool

	// snapMu serialises the pruning of snapshot files. It is held for a
	// directory listing and a few removals, never across a bbolt call.
	snapMu sync.Mutex

	// wmu serialises writers (bbolt allows one write transaction at a time
	// anyway). Only a holder of wmu changes the fields under mu, and only
	// while also holding mu exclusively, so a holder of wmu reads them freely.
	wmu    sync.Mutex
	failed error  // set when a commit failed; every later write returns it
	encBuf []byte // reused encoding buffer for Save (bbolt copies at commit)
	keyBuf []byte

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

// Open opens (creating it if needed) the data dir dir and the group
// opts.GroupID in it. It returns an error wrapping ErrLocked if another Store
// holds dir, ErrRemoved if the member was removed (MarkRemoved), ErrVersion
// for a newer format, and ErrCorrupt (a *CorruptError naming the file) when
// the bbolt file, a record in it, or the recorded snapshot file fails a check,
// including when bbolt panics on a corrupt page. On error nothing stays open.
func Open(dir string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Store{
		dir:         dir,
		dbPath:      filepath.Join(dir, dbFileName),
		snapDir:     filepath.Join(dir, snapDirName),
		opts:        opts,
		log:         opts.Logger.With("group", opts.GroupID),
		logBucket:   logBucketName(opts.GroupID),
		stateBucket: stateBucketName(opts.GroupID),
		hs:          &raftpb.HardState{},
		snap:        raftpb.EnsureSnapshot(nil),
		tail:        tail{max: opts.TailCacheBytes},
	}
	if err := os.MkdirAll(s.snapDir, 0o750); err != nil {
		return nil, fmt.Errorf("storage: create data dir: %w", err)
	}
	db, file, err := openBolt(s.dbPath, opts)
	if err != nil {
		return nil, err
	}
	s.db, s.file = db, file
	if !opts.NoOpenCheck {
		if err := checkBoltStructure(file); err != nil {
			_ = s.closeDB()
			return nil, &CorruptError{File: s.dbPath, Detail: "damaged page structure", Err: err}
		}
	}
	if err := s.load(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
	if err := s.cleanSnapDir(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
	s.log.Debug("storage opened", "dir", dir, "first", s.dummy+1, "last", s.last,
		"snapshot", s.snap.GetMetadata().GetIndex(), "tail", len(s.tail.ents))
	return s, nil
}

// openBolt opens the bbolt file, turning a held lock into ErrLocked and a
// bad file (including a bbolt panic) into a *CorruptError.
func openBolt(path string, opts Options) (db *bolt.DB, file *os.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			if file != nil { // release the flock bbolt took
				_ = unlockFile(file)
				_ = file.Close()
			}
			db, file, err = nil, nil, &CorruptError{File: path, Detail: fmt.Sprintf("bbolt panicked while opening: %v", r)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	timeout := opts.LockTimeout
	if timeout == 0 {
		timeout = time.Nanosecond // bbolt's 0 waits forever
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      timeout,
		NoSync:       opts.NoSync,
		FreelistType: bolt.FreelistMapType,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	switch {
	case err == nil:
		return db, file, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, nil, &CorruptError{File: path, Detail: "bbolt cannot open it", Err: err}
	default:
		return nil, nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
}

// load checks the format version and the tombstone, creating the buckets of
// a new store, and reads the committed state into memory.
func (s *Store) load() error {
	fresh := false
	err := s.view(func(tx *bolt.Tx) error {
		mb := tx.Bucket(metaBucket)
		if mb == nil {
			if err := tx.ForEach(func([]byte, *bolt.Bucket) error { return errNotEmpty }); err != nil {
				return s.corrupt(string(metaBucket), "missing format version in a non-empty file", nil)
			}
			fresh = true
			return nil
		}
		v := mb.Get(versionKey)
		if v == nil {
			return s.corrupt(string(metaBucket)+"/"+string(versionKey), "missing format version", nil)
		}
		vs, err := decodeUvarints(v, 1)
		if err != nil {
			return s.corrupt(string(metaBucket)+"/"+string(versionKey), "", err)
		}
		if vs[0] != FormatVersion {
			return fmt.Errorf("%w: %s has format version %d, this code reads %d", ErrVersion, s.dbPath, vs[0], FormatVersion)
		}
		// A group seen for the first time has neither bucket; one without
		// the other is damage, not a new group.
		hasState, hasLog := tx.Bucket(s.stateBucket) != nil, tx.Bucket(s.logBucket) != nil
		if hasState != hasLog {
			return s.corrupt(string(s.stateBucket), fmt.Sprintf("state bucket present: %t, log bucket present: %t", hasState, hasLog), nil)
		}
		fresh = !hasState
		return s.checkNames(tx)
	})
	if err != nil {
		return err
	}
	if fresh {
		err := s.update(func(tx *bolt.Tx) error {
			mb, err := tx.CreateBucketIfNotExists(metaBucket)
			if err != nil {
				return err
			}
			if mb.Get(versionKey) == nil {
				if err := mb.Put(versionKey, appendUvarints(nil, FormatVersion)); err != nil {
					return err
				}
			}
			if _, err := tx.CreateBucketIfNotExists(s.stateBucket); err != nil {
				return err
			}
			_, err = tx.CreateBucketIfNotExists(s.logBucket)
			return err
		})
		if err != nil {
			return fmt.Errorf("storage: initialise %s: %w", s.dbPath, err)
		}
	}
	err = s.view(func(tx *bolt.Tx) error {
		sb := tx.Bucket(s.stateBucket)
		if sb.Get(removedKey) != nil {
			return fmt.Errorf("%w: %s (group %d)", ErrRemoved, s.dir, s.opts.GroupID)
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
			vs, err := decodeUvarints(v, 2)
			if err != nil {
				return s.corruptKey(s.stateBucket, identityKey, err)
			}
			s.identity = Identity{ClusterID: vs[0], MemberID: vs[1]}
		}
		if err := s.loadLog(tx); err != nil {
			return err
		}
		if s.last != recordedLast {
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

var errNotEmpty = errors.New("not empty")

// checkNames checks that the file holds only the buckets and keys this
// format writes. bbolt has no page checksums, so a damaged key would
// otherwise make a record (the hard state, say) silently disappear.
func (s *Store) checkNames(tx *bolt.Tx) error {
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		var g uint64
		var kind string
		switch {
		case string(name) == string(metaBucket):
			return checkKeys(b, versionKey)
		case len(name) == len("group/0000000000000000/state") || len(name) == len("group/0000000000000000/log"):
			if _, err := fmt.Sscanf(string(name), "group/%016x/%s", &g, &kind); err == nil {
				if string(name) == string(stateBucketName(g)) {
					return checkKeys(b, hardStateKey, snapshotKey, boundsKey, identityKey, removedKey)
				}
				if string(name) == string(logBucketName(g)) {
					return nil
				}
			}
		}
		return fmt.Errorf("unknown bucket %q", name)
	})
	if err != nil {
		return s.corrupt("", "", err)
	}
	return nil
}

func checkKeys(b *bolt.Bucket, known ...[]byte) error {
	return b.ForEach(func(k, _ []byte) error {
		for _, kk := range known {
			if string(k) == string(kk) {
				return nil
			}
		}
		return fmt.Errorf("unknown key %q", k)
	})
}

// loadLog finds the last index and fills the tail from the end of the log.
func (s *Store) loadLog(tx *bolt.Tx) error {
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
		return &CorruptError{File: s.dbPath, Where: string(s.logBucket),
			Detail: fmt.Sprintf("first key %x, want index %d", k, s.dummy+1)}
	}
	k, v := c.Last()
	if len(k) != 8 || binary.BigEndian.Uint64(k) <= s.dummy {
		return &CorruptError{File: s.dbPath, Where: string(s.logBucket), Detail: fmt.Sprintf("last key %x", k)}
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
// is done. Close is idempotent.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	s.tail.reset()
	return s.closeDB()
}

// closeDB closes bbolt, or only its file if bbolt panicked: bbolt's own
// locks may then be held, so DB.Close could block forever. The file lock is
// released; bbolt's memory map stays mapped until the process exits.
func (s *Store) closeDB() error {
	if s.poisoned.Load() != nil {
		_ = unlockFile(s.file)
		if err := s.file.Close(); err != nil {
			return fmt.Errorf("storage: close %s: %w", s.dbPath, err)
		}
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("storage: close %s: %w", s.dbPath, err)
	}
	return nil
}

// Dir returns the data dir the store was opened on.
func (s *Store) Dir() string { return s.dir }

// view runs fn in a bbolt read transaction, turning a bbolt panic into a
// *CorruptError.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	if p := s.poisoned.Load(); p != nil {
		return p
	}
	defer s.recoverCorrupt(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.View(fn)
}

// update runs fn in a bbolt write transaction and commits it, turning a bbolt
// panic into a *CorruptError. The caller holds wmu (or is Open).
func (s *Store) update(fn func(*bolt.Tx) error) (err error) {
	if p := s.poisoned.Load(); p != nil {
		return p
	}
	defer s.recoverCorrupt(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	start := time.Now()
	var tx *bolt.Tx
	err = s.db.Update(func(t *bolt.Tx) error { tx = t; return fn(t) })
	if err == nil {
		s.m.commits.Add(1)
		s.m.commitDur.observe(time.Since(start))
		if !s.opts.NoSync {
			// bbolt's write time of the commit: its pages written and
			// fdatasynced, then its meta page written and fdatasynced.
			st := tx.Stats()
			s.m.syncDur.observe(st.GetWriteTime())
		}
	}
	return err
}

func (s *Store) recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		ce := &CorruptError{File: s.dbPath, Detail: fmt.Sprintf("bbolt panicked: %v", r)}
		s.poisoned.CompareAndSwap(nil, ce)
		*err = ce
		s.log.Error("bbolt panicked; the store will not use bbolt again", "file", s.dbPath, "panic", r)
	}
}

func (s *Store) corrupt(where, detail string, err error) error {
	return &CorruptError{File: s.dbPath, Where: where, Detail: detail, Err: err}
}

func (s *Store) corruptKey(bucket, key []byte, err error) error {
	return &CorruptError{File: s.dbPath, Where: string(bucket) + "/" + string(key), Err: err}
}

func (s *Store) corruptIndex(i uint64, err error) error {
	return &CorruptError{File: s.dbPath, Where: fmt.Sprintf("%s/%016x (entry %d)", s.logBucket, i, i), Err: err}
}

func indexKey(buf []byte, i uint64) []byte { return binary.BigEndian.AppendUint64(buf, i) }
