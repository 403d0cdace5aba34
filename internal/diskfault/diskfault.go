// Package diskfault lets tests delay or fail a storage engine's commits
// (a slow or failing fsync of a whole host), by data dir. The storage
// engine asks BeforeCommit before each commit; with no fault set it costs
// one atomic load.
package diskfault

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInjected is the error of an injected commit failure.
var ErrInjected = errors.New("diskfault: injected fsync failure")

type fault struct {
	delay time.Duration
	fail  int // commits left to fail
}

var (
	active atomic.Bool
	mu     sync.Mutex
	faults = map[string]*fault{}
)

// SetDelay makes every commit of the engine at dir wait d first (0: none).
func SetDelay(dir string, d time.Duration) {
	mu.Lock()
	defer mu.Unlock()
	f := get(dir)
	f.delay = d
}

// FailNext makes the next n commits of the engine at dir fail with
// ErrInjected, writing nothing.
func FailNext(dir string, n int) {
	mu.Lock()
	defer mu.Unlock()
	get(dir).fail = n
}

// Clear removes every fault of dir.
func Clear(dir string) {
	mu.Lock()
	defer mu.Unlock()
	delete(faults, dir)
	active.Store(len(faults) > 0)
}

func get(dir string) *fault {
	f := faults[dir]
	if f == nil {
		f = &fault{}
		faults[dir] = f
		active.Store(true)
	}
	return f
}

// BeforeCommit applies dir's faults: it waits the delay, and returns
// ErrInjected for a commit that is to fail.
func BeforeCommit(dir string) error {
	if !active.Load() {
		return nil
	}
	mu.Lock()
	f := faults[dir]
	var d time.Duration
	fail := false
	if f != nil {
		d = f.delay
		if f.fail > 0 {
			f.fail--
			fail = true
		}
	}
	mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	if fail {
		return ErrInjected
	}
	return nil
}
