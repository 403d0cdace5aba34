package storage

import (
	"errors"
	"github.com/understudy-raft/understudy/raft/raftio"

	"go.etcd.io/raft/v3"
)

// Errors that etcd's raft compares with ==. The raft.Storage methods return
// them unwrapped; they are the very values of package raft, so either name
// works with == and errors.Is.
var (
	// ErrCompacted is returned by Entries, Term and Compact when the index
	// predates the first index still held (it was compacted or replaced by a
	// snapshot).
	ErrCompacted = raft.ErrCompacted

	// ErrUnavailable is returned by Entries and Term when the index is past
	// the last index, or when the log holds no entries at all.
	ErrUnavailable = raft.ErrUnavailable

	// ErrSnapOutOfDate is returned by Save, ApplySnapshot and CreateSnapshot
	// when the snapshot is not newer than the latest recorded one.
	ErrSnapOutOfDate = raft.ErrSnapOutOfDate

	// ErrSnapshotTemporarilyUnavailable is etcd's sentinel for a snapshot that
	// is being prepared. Store.Snapshot never returns it (a recorded snapshot
	// is always complete); it is here for wrappers and fakes.
	ErrSnapshotTemporarilyUnavailable = raft.ErrSnapshotTemporarilyUnavailable
)

// Errors of this package. They are returned wrapped (use errors.Is), with the
// file and, where it applies, the bucket, key or index they concern.
var (
	// ErrCorrupt marks data on disk that failed a check: a checksum, a record
	// that does not decode, a missing entry inside the log, a snapshot file of
	// the wrong size, or a bbolt page that made bbolt panic. A *CorruptError
	// carries the details. The store never repairs or skips corrupt data.
	ErrCorrupt = errors.New("storage: corrupt data")

	// ErrLocked is returned by Open and OpenEngine when another Store or
	// Engine (in this or another process) holds the data dir.
	ErrLocked = errors.New("storage: data dir is locked by another store")

	// ErrRemoved is returned by Open when the member was removed from its
	// cluster (MarkRemoved) and the data dir must not be started again.
	ErrRemoved = errors.New("storage: member was removed from the cluster")

	// ErrVersion is returned by Open when the data dir was written in a format
	// version this code does not know (a newer release wrote it).
	ErrVersion = errors.New("storage: unsupported format version")

	// ErrBackend means the data dir holds the files of another backend than
	// the one asked for (EngineOptions.Backend).
	ErrBackend = errors.New("storage: the data dir holds another backend")

	// ErrGroupOpen is returned by Engine.Group when the group's Store is
	// open already (close it first).
	ErrGroupOpen = errors.New("storage: group is already open")

	// ErrNoGroup is returned by Engine.DeleteGroup for a group the data
	// dir holds nothing of.
	ErrNoGroup = errors.New("storage: no such group")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("storage: store is closed")

	// ErrOutOfBounds is returned for an index past the end of the log where
	// etcd's MemoryStorage would panic: Compact or CreateSnapshot past the last
	// index, Entries with hi past LastIndex()+1, and an append that would leave
	// a gap or whose entries are not consecutive.
	ErrOutOfBounds = errors.New("storage: index out of bounds")

	// ErrIdentityMismatch is returned by SetIdentity when a different cluster
	// or member ID is already recorded. The *IdentityError says which.
	ErrIdentityMismatch = raftio.ErrIdentityMismatch

	// ErrFailed is returned by every write after a bbolt commit failed or
	// bbolt panicked: what reached the disk is then unknown (an fsync error may
	// have dropped pages), so the store stops writing. A commit carries the
	// writes of every group of an Engine, so its failure stops them all.
	// Close and Open again, which recovers the last committed transaction.
	ErrFailed = errors.New("storage: store failed, close and reopen it")
)

// CorruptError describes corrupt data. It unwraps to ErrCorrupt and to the
// underlying cause, if any, in the manner of pebble's CorruptBlockData.
type CorruptError struct {
	// File is the path of the file that holds the bad data.
	File string
	// Where locates the data in the file: "bucket/key" for bbolt records, an
	// index for log entries, empty when the whole file is concerned.
	Where string
	// Detail says what is wrong.
	Detail string
	// Err is the underlying error, or nil.
	Err error
}

func (e *CorruptError) Error() string {
	msg := "storage: corrupt data in " + e.File
	if e.Where != "" {
		msg += " at " + e.Where
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrCorrupt and the underlying error.
func (e *CorruptError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, e.Err}
}

// IdentityError is returned by SetIdentity when the recorded identity differs
// from the one being set (raftio.IdentityError). It unwraps to
// ErrIdentityMismatch.
type IdentityError = raftio.IdentityError
