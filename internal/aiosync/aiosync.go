package aiosync

import "sync/atomic"

// counts of the flushes by path (Stats).
var viaAIO, direct atomic.Uint64

// Stats counts the flushes so far: those made through AIO, and those made
// by the fallback (the plain system call).
func Stats() (aio, fallback uint64) { return viaAIO.Load(), direct.Load() }

// fallbackSync runs fn, the plain system call, and counts it.
func fallbackSync(fn func() error) error {
	direct.Add(1)
	return fn()
}
