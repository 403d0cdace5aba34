package sched

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Throttle runs functions in the order they were pushed, at most a given
// number per second (with a burst), on one goroutine started on demand
// that exits when nothing is queued. A key already queued is not queued
// again: a host's wake-ups of one group after a host died are one.
// Pushing never waits.
type Throttle struct {
	lim      *rate.Limiter
	mu       sync.Mutex
	queue    []throttled
	keys     map[any]bool
	running  bool
	wg       sync.WaitGroup
	deferred atomic.Uint64
}

type throttled struct {
	key any
	f   func()
}

// NewThrottle returns a throttle that runs perSec functions a second,
// burst at once.
func NewThrottle(perSec float64, burst int) *Throttle {
	return &Throttle{lim: rate.NewLimiter(rate.Limit(perSec), burst), keys: make(map[any]bool)}
}

// Push queues f under key unless a function under key is queued already.
func (t *Throttle) Push(key any, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys[key] {
		return
	}
	t.keys[key] = true
	t.queue = append(t.queue, throttled{key: key, f: f})
	if !t.running {
		t.running = true
		t.wg.Add(1)
		go t.drain()
	}
}

func (t *Throttle) drain() {
	defer t.wg.Done()
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			t.running = false
			t.queue = nil
			t.mu.Unlock()
			return
		}
		next := t.queue[0]
		t.queue[0] = throttled{}
		t.queue = t.queue[1:]
		delete(t.keys, next.key)
		t.mu.Unlock()
		if d := t.lim.Reserve().Delay(); d > 0 {
			t.deferred.Add(1)
			time.Sleep(d)
		}
		next.f()
	}
}

// Queued returns how many functions wait.
func (t *Throttle) Queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// Deferred counts the functions that waited for the rate.
func (t *Throttle) Deferred() uint64 { return t.deferred.Load() }

// Wait waits until the goroutine has run everything queued and exited.
func (t *Throttle) Wait() { t.wg.Wait() }
