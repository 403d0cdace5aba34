package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
)

// Engine is the storage of a host: one data dir — one bbolt file (or, with
// BackendPebble, a Pebble database beside it) and one snapshot directory —
// shared by many raft groups, each seen through its own *Store (Group). It
// owns the files (the lock, the open-time checks, the handling of a
// backend's panics) and its committer, which writes every group's queued
// writes in one transaction: a Save of any group waits for the
// commit that carries it, one commit runs at a time, and whatever queued
// while a commit ran goes into the next one, so G groups appending at once
// pay about one commit (two fdatasyncs with bbolt, one with Pebble) instead
// of G. There is no artificial delay: a lone write is committed at once, by
// its own goroutine (see committer.go: the committer is a role the writers
// take in turn; one goroutine commits the batches of asynchronous writes,
// Store.SaveAsync).
//
// A failed commit fails every write in it and stops the engine: every later
// write of every group returns ErrFailed (a storage failure stops the host);
// close the engine and open it again to recover the last committed state.
//
// All methods are safe for concurrent use.
type Engine struct {
	dir, dbPath, snapDir string
	opts                 EngineOptions
	log                  *slog.Logger
	db                   *bolt.DB  // the records (BackendBolt), or the marker of a Pebble data dir
	file                 *os.File  // bbolt's file, closed directly if bbolt panicked
	pdb                  *pebbleDB // BackendPebble: the records

	// lazyBounds: the records' format is formatVersionLazyBounds (a
	// Pebble database made by this release): appends do not rewrite the
	// bounds record. Set at open, or by the first group's creation.
	lazyBounds atomic.Bool

	// poisoned is set when bbolt panicked: its locks may be held and its
	// state is unknown, so no later call enters bbolt (they return the
	// panic's *CorruptError) and Close closes the file instead of the DB.
	poisoned atomic.Pointer[CorruptError]

	// failed is set when a commit failed: every later write returns it.
	failed atomic.Pointer[error]

	mu      sync.Mutex
	groups  map[uint64]*Store // open views; a nil value is a view being opened
	closing bool
	opening sync.WaitGroup // Group calls under way
	closed  chan struct{}  // closed when Close is done

	c committer
	m engineMetrics
	// tails is the budget of every group's tail (nil: none).
	tails *tailBudget
}

// parseGroupBucket parses a group's bucket name, group/<16 hex>/state or
// group/<16 hex>/log, exactly as stateBucketName and logBucketName write it.
func parseGroupBucket(name []byte) (group uint64, kind string, ok bool) {
	var g uint64
	var k string
	if len(name) != len("group/0000000000000000/state") && len(name) != len("group/0000000000000000/log") {
		return 0, "", false
	}
	if _, err := fmt.Sscanf(string(name), "group/%016x/%s", &g, &k); err != nil {
		return 0, "", false
	}
	switch {
	case bytes.Equal(name, stateBucketName(g)):
		return g, "state", true
	case bytes.Equal(name, logBucketName(g)):
		return g, "log", true
	}
	return 0, "", false
}

// createGroupBuckets creates the buckets of group id, which has none, and
// the format version of a new file: formatVersionOneGroup, raised to
// formatVersionManyGroups when the file already holds another group, so
// that a release that reads only version 1 refuses a shared file instead of
// opening one group of it as its own; formatVersionLazyBounds for a new
// Pebble database. It runs in the committer's transaction.
func (e *Engine) createGroupBuckets(tx kvTx, id uint64) error {
	mb, err := tx.CreateBucketIfNotExists(metaBucket)
	if err != nil {
		return err
	}
	version, stored := uint64(formatVersionOneGroup), false
	if e.pdb != nil {
		version = formatVersionLazyBounds // a new Pebble database
	}
	if mb.Get(versionKey) != nil {
		if version, err = e.readVersion(mb, FormatVersion); err != nil {
			return err
		}
		stored = true
	}
	if version < formatVersionManyGroups {
		names, err := tx.BucketsWithPrefix([]byte("group/"), 1)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			version = formatVersionManyGroups
			stored = false
			e.log.Info("the data dir now holds more than one group: format version raised; releases that read only version 1 cannot open it",
				"file", e.dbPath, "version", version, "group", id)
		}
	}
	if !stored {
		if err := mb.Put(versionKey, appendUvarints(nil, version)); err != nil {
			return err
		}
		if version >= formatVersionLazyBounds {
			// Before any of the group's writes: they follow this commit.
			e.lazyBounds.Store(true)
		}
	}
	if _, err := tx.CreateBucket(stateBucketName(id)); err != nil {
		return err
	}
	_, err = tx.CreateBucket(logBucketName(id))
	return err
}

// Group opens the view of group id (creating its buckets if the file has
// none), as Open does for a data dir of one group: its log, hard state,
// snapshot, identity and tombstone, and its snapshot files (pruned here,
// KeepSnapshots of them). The Store's writes go through the engine's
// committer. Closing the Store releases the view; Group(id) opens it again.
//
// It returns an error wrapping ErrGroupOpen if the group is open already,
// ErrRemoved if the group's member was removed (MarkRemoved), ErrClosed
// after Close, ErrFailed after a failed commit, and ErrCorrupt when a record
// of the group or its recorded snapshot file fails a check. id 0 is invalid.
func (e *Engine) Group(id uint64, opts GroupOptions) (*Store, error) {
	if id == 0 {
		return nil, errors.New("storage: group ID 0 is invalid")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := e.groups[id]; ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d in %s", ErrGroupOpen, id, e.dir)
	}
	e.groups[id] = nil // reserved while it opens
	e.opening.Add(1)
	e.mu.Unlock()
	defer e.opening.Done()

	s, err := e.openGroup(id, opts)
	e.mu.Lock()
	if err != nil {
		delete(e.groups, id)
	} else {
		e.groups[id] = s
	}
	e.mu.Unlock()
	return s, err
}

func (e *Engine) openGroup(id uint64, g GroupOptions) (*Store, error) {
	if err := e.failure(); err != nil {
		return nil, err
	}
	opts := Options{
		GroupID: id, NoSync: e.opts.NoSync, Logger: e.opts.Logger, LockTimeout: e.opts.LockTimeout,
		NoOpenCheck: e.opts.NoOpenCheck, TailCacheBytes: g.TailCacheBytes, KeepSnapshots: g.KeepSnapshots,
	}.withDefaults()
	s := &Store{
		e:           e,
		opts:        opts,
		logBucket:   logBucketName(id),
		stateBucket: stateBucketName(id),
		hs:          &raftpb.HardState{},
		snap:        emptySnapshot, // replaced, never modified: shared
		tail:        tail{max: opts.TailCacheBytes, shared: e.tails},
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.pruneSnapshots()
	s.logger().Debug("storage group opened", "dir", e.dir, "first", s.dummy+1, "last", s.last,
		"snapshot", s.snap.GetMetadata().GetIndex(), "tail", s.tail.len())
	return s, nil
}

// trimTails, once the groups' tails together hold more than the engine's
// budget, brings every group's tail down to an equal share of nine tenths
// of it (the tails of idle groups too, which no append of theirs would
// trim). One trim runs at a time; a Save calls it after its write, holding
// none of its own locks.
func (e *Engine) trimTails() {
	b := e.tails
	if !b.over() || !b.trimming.CompareAndSwap(false, true) {
		return
	}
	defer b.trimming.Store(false)
	e.mu.Lock()
	stores := make([]*Store, 0, len(e.groups))
	for _, s := range e.groups {
		if s != nil {
			stores = append(stores, s)
		}
	}
	e.mu.Unlock()
	share := b.max * 9 / 10 / max(b.groups.Load(), 1)
	for _, s := range stores {
		s.mu.Lock()
		s.tail.evictTo(min(share, s.tail.max))
		s.mu.Unlock()
	}
	e.m.tailTrims.Add(1)
}

// release forgets the view s of its group (Store.Close).
func (e *Engine) release(s *Store) {
	e.mu.Lock()
	if e.groups[s.opts.GroupID] == s {
		delete(e.groups, s.opts.GroupID)
	}
	e.mu.Unlock()
}

// Groups returns the IDs of the groups the file holds, ascending, whether
// open or not; a removed group is listed (Group refuses it with ErrRemoved).
//
// Errors: ErrClosed; ErrCorrupt if bbolt panicked.
func (e *Engine) Groups() ([]uint64, error) {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	if closing {
		return nil, ErrClosed
	}
	var ids []uint64
	err := e.view(func(tx kvTx) error {
		names, err := tx.BucketsWithPrefix([]byte("group/"), 0)
		for _, k := range names {
			if id, kind, ok := parseGroupBucket(k); ok && kind == "state" {
				ids = append(ids, id)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// DeleteGroup deletes everything the data dir holds of group id — its
// snapshot files, then its log, hard state, identity and tombstone in one
// commit — so that the host can run a new replica of the group later (a
// replica that was removed from the group, or moved to another host). The
// group must not be open. A crash half-way leaves the group's records
// without their snapshot files: Group then refuses it as corrupt, and
// DeleteGroup again finishes the deletion.
//
// Errors: ErrGroupOpen (close it first); ErrNoGroup when the data dir holds
// nothing of id; ErrClosed; ErrFailed; the file system's.
func (e *Engine) DeleteGroup(id uint64) error {
	if id == 0 {
		return errors.New("storage: group ID 0 is invalid")
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return ErrClosed
	}
	if _, ok := e.groups[id]; ok {
		e.mu.Unlock()
		return fmt.Errorf("%w: group %d in %s", ErrGroupOpen, id, e.dir)
	}
	e.groups[id] = nil // reserved: no Group opens it meanwhile
	e.opening.Add(1)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.groups, id)
		e.mu.Unlock()
		e.opening.Done()
	}()

	des, err := os.ReadDir(e.snapDir)
	if err != nil {
		return fmt.Errorf("storage: read snapshot dir: %w", err)
	}
	found := false
	prefix := fmt.Sprintf("%016x-", id)
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), prefix) {
			continue
		}
		if err := os.Remove(filepath.Join(e.snapDir, de.Name())); err != nil {
			return fmt.Errorf("storage: deleting group %d: %w", id, err)
		}
		found = true
	}
	if found && !e.opts.NoSync {
		if err := syncDir(e.snapDir); err != nil {
			return fmt.Errorf("storage: deleting group %d: %w", id, err)
		}
	}
	_, _, err = e.commit(id, false, func(tx kvTx) error {
		for _, name := range [][]byte{stateBucketName(id), logBucketName(id)} {
			switch err := tx.DeleteBucket(name); {
			case err == nil:
				found = true
			case !errors.Is(err, errBucketNotFound):
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: deleting group %d: %w", id, err)
	}
	if !found {
		return fmt.Errorf("%w: %d in %s", ErrNoGroup, id, e.dir)
	}
	e.log.Info("deleted a group's data", "group", id)
	return nil
}

// GroupRemoved reports whether the data dir records group id's member as
// removed from its cluster (Store.MarkRemoved: the tombstone). It opens
// nothing: the group may be open or not.
//
// Errors: ErrNoGroup when the data dir holds nothing of id; ErrClosed.
func (e *Engine) GroupRemoved(id uint64) (bool, error) {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	if closing {
		return false, ErrClosed
	}
	var removed, found bool
	err := e.view(func(tx kvTx) error {
		sb := tx.Bucket(stateBucketName(id))
		found = sb != nil || tx.Bucket(logBucketName(id)) != nil
		removed = sb != nil && sb.Get(removedKey) != nil
		return nil
	})
	if err != nil {
		return false, err
	}
	if !found {
		return false, fmt.Errorf("%w: %d in %s", ErrNoGroup, id, e.dir)
	}
	return removed, nil
}

// Dir returns the data dir the engine was opened on.
func (e *Engine) Dir() string { return e.dir }

// Backend returns the backend the engine runs on.
func (e *Engine) Backend() Backend { return e.opts.Backend }

// Close closes every group's Store still open (their later calls return
// ErrClosed; Close waits for their running calls, as Store.Close does), then
// closes the file. A Group call under way finishes
// first. Close is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		<-e.closed
		return nil
	}
	e.closing = true
	e.mu.Unlock()
	defer close(e.closed)
	e.opening.Wait()
	e.mu.Lock()
	stores := make([]*Store, 0, len(e.groups))
	for _, s := range e.groups {
		stores = append(stores, s)
	}
	e.mu.Unlock()
	for _, s := range stores {
		s.closeView()
	}
	e.stopCommitter()
	return e.closeDB()
}

// closeDB closes bbolt, or only its file if bbolt panicked: bbolt's own
// locks may then be held, so DB.Close could block forever. The file lock is
// released; bbolt's memory map stays mapped until the process exits.
func (e *Engine) closeDB() error {
	if e.poisoned.Load() != nil { // Pebble too is left as it is
		_ = unlockFile(e.file)
		if err := e.file.Close(); err != nil {
			return fmt.Errorf("storage: close %s: %w", e.dbPath, err)
		}
		return nil
	}
	var perr error
	if e.pdb != nil {
		perr = e.pdb.close()
	}
	if err := e.db.Close(); err != nil {
		return errors.Join(perr, fmt.Errorf("storage: close %s: %w", filepath.Join(e.dir, dbFileName), err))
	}
	return perr
}

// view runs fn in a read transaction of the backend, turning a panic of the
// backend into a *CorruptError.
func (e *Engine) view(fn func(kvTx) error) (err error) {
	if p := e.poisoned.Load(); p != nil {
		return p
	}
	defer e.recoverCorrupt(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if e.pdb != nil {
		return e.pdb.view(fn)
	}
	return e.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// update runs fn in a write transaction of the backend and commits it,
// turning a panic of the backend into a *CorruptError. It returns the time
// the backend took to write and sync the commit (zero with NoSync). Only the
// committer (commitBatch) calls it.
func (e *Engine) update(fn func(kvTx) error) (writeTime time.Duration, err error) {
	if p := e.poisoned.Load(); p != nil {
		return 0, p
	}
	defer e.recoverCorrupt(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if e.pdb != nil {
		return e.pdb.update(fn)
	}
	var tx *bolt.Tx
	err = e.db.Update(func(t *bolt.Tx) error {
		tx = t
		return fn(boltTx{t})
	})
	if err == nil {
		st := tx.Stats()
		if !e.opts.NoSync {
			writeTime = st.GetWriteTime()
		}
		// The pages the commit wrote: its dirty pages (and the freelist's,
		// when it is synced), then its meta page.
		pages := uint64(st.GetPageAlloc()/int64(e.db.Info().PageSize)) + 1
		e.m.pagesWritten.Add(pages)
		e.m.bytesWritten.Add(pages * uint64(e.db.Info().PageSize))
	}
	return writeTime, err
}

func (e *Engine) recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		ce := &CorruptError{File: e.dbPath, Detail: fmt.Sprintf("%s panicked: %v", e.opts.Backend, r)}
		e.poisoned.CompareAndSwap(nil, ce)
		*err = ce
		e.log.Error("the storage backend panicked; the engine will not use it again", "file", e.dbPath, "backend", e.opts.Backend, "panic", r)
	}
}

// failure returns why the engine refuses writes (ErrFailed), or nil.
func (e *Engine) failure() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records a failed commit: no later write is attempted.
func (e *Engine) fail(err error) {
	ferr := fmt.Errorf("%w: a commit failed: %w", ErrFailed, err)
	if e.failed.CompareAndSwap(nil, &ferr) {
		e.log.Error("storage commit failed; refusing every group's further writes", "file", e.dbPath, "err", err)
	}
}

func (e *Engine) corrupt(where, detail string, err error) error {
	return &CorruptError{File: e.dbPath, Where: where, Detail: detail, Err: err}
}

// removeTempSnapshots removes the temporary files interrupted snapshot
// writes left, of every group: at OpenEngine no group runs.
func (e *Engine) removeTempSnapshots() error {
	des, err := os.ReadDir(e.snapDir)
	if err != nil {
		return fmt.Errorf("storage: read snapshot dir: %w", err)
	}
	for _, de := range des {
		if strings.Contains(de.Name(), tmpMarker) {
			if err := os.Remove(filepath.Join(e.snapDir, de.Name())); err != nil {
				return fmt.Errorf("storage: remove partial snapshot: %w", err)
			}
			e.log.Info("removed partial snapshot file", "file", de.Name())
		}
	}
	return nil
}
