//go:build !linux || !(amd64 || arm64)

package aiosync

// Data flushes the data of the open file fd as fdatasync(2) does: here
// (not Linux) it returns fallback(), the plain system call.
func Data(fd uintptr, fallback func() error) error { return fallbackSync(fallback) }

// Full flushes the open file fd as fsync(2) does: here (not Linux on amd64 or arm64) it
// returns fallback(), the plain system call.
func Full(fd uintptr, fallback func() error) error { return fallbackSync(fallback) }

// Available reports whether flushes go through AIO: never here.
func Available() bool { return false }
