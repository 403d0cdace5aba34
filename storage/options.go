package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults applied to zero-valued Options fields.
const (
	// DefaultTailCacheBytes is the default budget of the in-memory tail of
	// recent entries: enough for etcd-sized catch-up windows (5,000 entries of
	// a few hundred bytes) to be served without touching bbolt.
	DefaultTailCacheBytes = 16 << 20
	// DefaultEngineTailCacheBytes is the default bound on every group's
	// tail together (EngineOptions.TailCacheBytes).
	DefaultEngineTailCacheBytes = 256 << 20
	// DefaultKeepSnapshots is the default number of snapshot files kept.
	DefaultKeepSnapshots = 2
)

// Options configures Open: its engine's options (EngineOptions) and its one
// group's (GroupOptions) together. The zero value is a valid configuration.
type Options struct {
	// GroupID names the raft group whose log this store holds. All bbolt
	// buckets and snapshot file names are namespaced by it, so that one data
	// dir can hold many groups (OpenEngine). Zero means 1.
	GroupID uint64

	// NoSync skips every fsync: bbolt's and Pebble's commits, snapshot
	// files and the directory. A machine crash (power loss, a kernel panic)
	// can then lose acknowledged writes; a process crash cannot: a commit
	// is written to the operating system before it is acknowledged. For
	// tests, and members that stand in for machines of their own.
	NoSync bool

	// Logger receives the store's log lines. Nil discards them.
	Logger *slog.Logger

	// TailCacheBytes bounds the in-memory tail of the most recent log entries,
	// from which Entries and Term answer without reading bbolt. It counts
	// entry payloads plus a fixed per-entry overhead; the last entry is kept
	// (but by DropCaches, which a quiesced group's node calls). Zero means DefaultTailCacheBytes (16 MiB); negative disables the
	// cache (every read goes to bbolt).
	TailCacheBytes int64

	// LockTimeout is how long Open waits for another holder of the data dir to
	// release it before returning ErrLocked. Zero means do not wait; bbolt
	// polls the lock every 50 ms, so small values behave as zero.
	LockTimeout time.Duration

	// KeepSnapshots is how many snapshot files are kept in the snapshot
	// directory (the newest by index, and always the recorded one). Zero means
	// DefaultKeepSnapshots (2).
	KeepSnapshots int

	// NoOpenCheck skips the check of bbolt's page structure at Open. bbolt
	// checksums only its meta pages; the check reads every page in use once
	// (about as long as reading the file) so that a damaged page is reported
	// as ErrCorrupt instead of crashing bbolt, which can descend a corrupt
	// tree forever. Skip it only for very large files you trust.
	NoOpenCheck bool

	// Backend is the key-value store under the data dir (see
	// EngineOptions.Backend). Zero means the one the data dir holds
	// (NewBackend for a new one).
	Backend Backend

	// NewBackend is the key-value store of a new data dir when Backend is
	// zero; a data dir that holds one keeps it. Zero means BackendPebble
	// for understudy.Start, as for a Host: one group measured 1.6-1.8x
	// bbolt's writes/s with about half its p99 up to 16 writers, and about
	// the same writes/s with a 1.1-1.4x p99 at 256 (benchmarks/README.md,
	// "Session 17 figures"). A data dir made with bbolt stays bbolt.
	NewBackend Backend
}

// Validate reports every invalid field of o, each naming the field and its
// value. It does not modify o; zero values are valid (they mean the default).
func (o Options) Validate() error {
	var errs []error
	if o.LockTimeout < 0 {
		errs = append(errs, fmt.Errorf("storage: LockTimeout (%v) must be >= 0", o.LockTimeout))
	}
	if o.KeepSnapshots < 0 {
		errs = append(errs, fmt.Errorf("storage: KeepSnapshots (%d) must be >= 0", o.KeepSnapshots))
	}
	if err := (EngineOptions{Backend: o.Backend, NewBackend: o.NewBackend}).Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withDefaults returns o with every zero field replaced by its default.
func (o Options) withDefaults() Options {
	if o.GroupID == 0 {
		o.GroupID = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = DefaultTailCacheBytes
	}
	if o.KeepSnapshots == 0 {
		o.KeepSnapshots = DefaultKeepSnapshots
	}
	return o
}

// engine and group split o into what OpenEngine and Engine.Group take.
func (o Options) engine() EngineOptions {
	return EngineOptions{NoSync: o.NoSync, Logger: o.Logger, LockTimeout: o.LockTimeout, NoOpenCheck: o.NoOpenCheck, Backend: o.Backend, NewBackend: o.NewBackend}
}

func (o Options) group() GroupOptions {
	return GroupOptions{TailCacheBytes: o.TailCacheBytes, KeepSnapshots: o.KeepSnapshots}
}

// SyncWait is how the Pebble backend's fsyncs wait (EngineOptions.SyncWait).
//
// A parked fsync goes through Linux AIO (internal/aiosync; Linux on amd64
// and arm64): the same flush, made by a kernel worker, while the goroutine
// that syncs waits parked instead of in a system call that holds its Go
// processor. It pays off on a host of many busy groups on few cores, where
// the processors and not the disk bind (100 groups on 2 cores: about 1.3x
// the writes/s). It costs elsewhere: the kernel worker waits for a CPU like
// any thread, so on a busy machine each fsync takes longer (10 groups
// parked: a better p50, a p99 up to 1.6x higher). Where AIO is not
// available (another system, a sandbox that refuses io_setup, a file
// system without AIO fsync) every fsync is a plain system call. See
// docs/architecture.md, "Parked fsyncs".
type SyncWait int

const (
	// SyncWaitAuto parks the fsyncs while the engine's commits carry the
	// writes of many groups — 8 or more on average, until fewer than 5 —
	// and blocks otherwise. The default.
	SyncWaitAuto SyncWait = iota
	// SyncWaitBlocking makes every fsync a plain system call, as Pebble
	// makes them.
	SyncWaitBlocking
	// SyncWaitParked parks every fsync.
	SyncWaitParked
)

// EngineOptions configures OpenEngine: what concerns the data dir as a whole
// (its bbolt file, its fsyncs, its lock). The zero value is a valid
// configuration. The fields mean what Options' fields of the same names mean.
type EngineOptions struct {
	// NoSync skips every fsync of every group: bbolt's and Pebble's
	// commits, snapshot files and the directory. A machine crash can then
	// lose acknowledged writes; a process crash (kill -9) cannot: a commit
	// is written to the operating system before it is acknowledged. For
	// tests, and members that stand in for machines of their own.
	NoSync bool

	// SyncWait is how the Pebble backend's fsyncs wait: SyncWaitAuto (the
	// zero value), SyncWaitBlocking or SyncWaitParked. No effect with
	// NoSync, nor on bbolt, whose fsyncs are its own.
	SyncWait SyncWait

	// Logger receives the engine's log lines and its groups' (with a
	// "group" attribute). Nil discards them.
	Logger *slog.Logger

	// LockTimeout is how long OpenEngine waits for another holder of the data
	// dir to release it before returning ErrLocked. Zero means do not wait.
	LockTimeout time.Duration

	// NoOpenCheck skips the check of bbolt's page structure at OpenEngine
	// (see Options.NoOpenCheck).
	NoOpenCheck bool

	// TailCacheBytes bounds the in-memory tails of every group together
	// (each group's own bound is GroupOptions.TailCacheBytes): while they
	// hold more, a group holding more than an equal share gives back its
	// oldest entries as it appends. Zero means DefaultEngineTailCacheBytes
	// (256 MiB); negative means no bound beyond the groups' own.
	TailCacheBytes int64

	// Backend is the key-value store under the engine: BackendBolt or
	// BackendPebble. A data dir holds one backend's files for good:
	// OpenEngine refuses a data dir written by the other with ErrBackend.
	// Zero means the backend the data dir holds, and NewBackend for a new
	// one.
	Backend Backend

	// NewBackend is the backend of a new data dir when Backend is zero:
	// the default for what the engine will hold, which an existing data
	// dir never changes (it keeps the one it was created with). Zero
	// means BackendBolt here; understudy.NewHost and understudy.Start set
	// BackendPebble.
	NewBackend Backend

	// pebbleFS, for tests, is the file system the Pebble backend runs on
	// (e.g. one that injects read errors, vfs/errorfs); nil: the disk.
	pebbleFS vfs.FS

	// commitYield, for tests, replaces the committer's yield between
	// commits (runtime.Gosched).
	commitYield func()

	// commitRunnable, for tests, replaces the committer's check for
	// goroutines waiting for a processor (runtime/metrics).
	commitRunnable func() bool

	// commitYieldFor, for tests, replaces the bound on the committer's
	// yields between two commits (yieldFor times the commit's duration).
	commitYieldFor time.Duration
}

// Backend names the key-value store an Engine keeps its records in.
type Backend string

const (
	// BackendBolt keeps the records in one bbolt file (understudy.db):
	// a B+tree, each commit copying the pages it touches and syncing
	// twice. The storage package's default, and understudy.Start's: the
	// fastest for one group, and one file.
	BackendBolt Backend = "bbolt"
	// BackendPebble keeps them in a Pebble database (the pebble directory):
	// each commit appended to its write-ahead log and synced once, so a
	// commit costs its bytes whatever number of groups it carries. For a
	// host of many groups, active or idle among many (see
	// docs/architecture.md): understudy.NewHost's default for a new data
	// dir.
	BackendPebble Backend = "pebble"
)

// Validate reports every invalid field of o, each naming the field and its
// value. Zero values are valid.
func (o EngineOptions) Validate() error {
	if o.LockTimeout < 0 {
		return fmt.Errorf("storage: LockTimeout (%v) must be >= 0", o.LockTimeout)
	}
	for _, b := range []struct {
		field string
		b     Backend
	}{{"Backend", o.Backend}, {"NewBackend", o.NewBackend}} {
		switch b.b {
		case "", BackendBolt, BackendPebble:
		default:
			return fmt.Errorf("storage: %s (%q) must be %q or %q", b.field, b.b, BackendBolt, BackendPebble)
		}
	}
	return nil
}

func (o EngineOptions) withDefaults() EngineOptions {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = DefaultEngineTailCacheBytes
	}
	return o
}

// GroupOptions configures Engine.Group: what concerns one group's view. The
// zero value is a valid configuration. The fields mean what Options' fields
// of the same names mean.
type GroupOptions struct {
	// TailCacheBytes bounds the group's in-memory tail of recent entries.
	// Zero means DefaultTailCacheBytes (16 MiB); negative disables the cache.
	// A host of many groups wants a smaller budget per group.
	TailCacheBytes int64

	// KeepSnapshots is how many of the group's snapshot files are kept (the
	// newest by index, and always the recorded one). Zero means
	// DefaultKeepSnapshots (2).
	KeepSnapshots int
}

// Validate reports every invalid field of o, each naming the field and its
// value. Zero values are valid.
func (o GroupOptions) Validate() error {
	if o.KeepSnapshots < 0 {
		return fmt.Errorf("storage: KeepSnapshots (%d) must be >= 0", o.KeepSnapshots)
	}
	return nil
}
