package storage

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/understudy-raft/understudy/internal/aiosync"
)

// parkedSyncFS is the disk's file system (vfs.Default) whose files flush
// through internal/aiosync: the goroutine that syncs — Pebble's WAL flush
// loop, one per engine — waits parked, not in an fdatasync that holds its
// Go processor (see docs/architecture.md, "Parked fsyncs").
// Where aiosync cannot, a sync is the file's own (fdatasync, fsync).
// EngineOptions.SyncWait chooses when (SyncWaitAuto: while the engine's
// commits carry many groups).
type parkedSyncFS struct {
	vfs.FS
	// when, if not nil, says whether to park now (SyncWaitAuto: while
	// the engine's commits carry many groups); nil: always.
	when *atomic.Bool
}

func (fs parkedSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.file(fs.FS.Create(name, c))
}

func (fs parkedSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.file(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs parkedSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.file(fs.FS.ReuseForWrite(oldname, newname, c))
}

// parkedFile is a file of parkedSyncFS.
type parkedFile struct {
	vfs.File
	when *atomic.Bool
}

func (fs parkedSyncFS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if f.Fd() == vfs.InvalidFd {
		return f, nil
	}
	return parkedFile{File: f, when: fs.when}, nil
}

func (f parkedFile) SyncData() error {
	if f.when != nil && !f.when.Load() {
		return f.File.SyncData()
	}
	return aiosync.Data(f.Fd(), f.File.SyncData)
}

func (f parkedFile) Sync() error {
	if f.when != nil && !f.when.Load() {
		return f.File.Sync()
	}
	return aiosync.Full(f.Fd(), f.File.Sync)
}
