//go:build !unix

package storage

import (
	"os"
	"time"
)

// unlockFile is a no-op where bbolt's lock is released by closing the file.
func unlockFile(*os.File) error { return nil }

// lockDir opens the lock file path; where flock is missing, the Pebble
// database's own lock keeps a second process out.
func lockDir(path string, _ time.Duration) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// releaseLock closes a lockDir lock.
func releaseLock(f *os.File) error { return f.Close() }
