package storage

import "github.com/cockroachdb/pebble/v2/vfs"

// noSyncFS is the file system of a Pebble database opened with NoSync: its
// files write as the file system under it does, and their fsyncs do
// nothing. The database commits with pebble.Sync over it, so a commit
// returns only once its WAL record was written to the operating system —
// a process crash (kill -9) loses nothing acknowledged, as with bbolt's
// NoSync, and only a machine crash can. Committing with pebble.NoSync
// instead returns while the record may still sit in the WAL writer's
// buffer in the process: a member killed then loses appends it
// acknowledged, which the cluster then takes for a wiped replica.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.Create(name, c))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) { return noSyncFile(fs.FS.OpenDir(name)) }

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.ReuseForWrite(oldname, newname, c))
}

// unsyncedFile is a file whose syncs do nothing.
type unsyncedFile struct{ vfs.File }

func noSyncFile(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return unsyncedFile{f}, nil
}

func (unsyncedFile) Sync() error                             { return nil }
func (unsyncedFile) SyncData() error                         { return nil }
func (unsyncedFile) SyncTo(int64) (fullSync bool, err error) { return false, nil }
