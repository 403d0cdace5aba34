package storage

import "golang.org/x/sys/unix"

const rangeSyncSupported = true

// syncRange starts the writeback of [off, off+n) and waits until the chunk
// before it is on disk, so that at most two chunks are in flight. It
// reports false if the file system does not support it; other errors are
// left to the final fsync, which reports them.
func syncRange(fd int, off, n int64) bool {
	if off >= n {
		err := unix.SyncFileRange(fd, off-n, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		if err == unix.ENOSYS || err == unix.EINVAL || err == unix.ESPIPE {
			return false
		}
	}
	err := unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	return err != unix.ENOSYS && err != unix.EINVAL && err != unix.ESPIPE
}
