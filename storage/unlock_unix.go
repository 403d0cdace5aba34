//go:build unix

package storage

import (
	"os"
	"syscall"
)

// unlockFile releases the flock bbolt holds on f. Closing f alone does not
// while bbolt's memory map still references the file.
func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
