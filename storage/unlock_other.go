//go:build !unix

package storage

import "os"

// unlockFile is a no-op where bbolt's lock is released by closing the file.
func unlockFile(*os.File) error { return nil }
