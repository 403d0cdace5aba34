package sched

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Lanes of a Throttle: a function pushed to a lower lane runs before any
// waiting in a higher one, whatever their push order (within a lane, push
// order). A host's wake-ups after a host died put the followers that
// should campaign first, the other followers of a group without a leader
// next, and the rest (a leader's bookkeeping) last.
const (
	LaneUrgent = iota
	LaneSoon
	LaneLater
	numLanes
)

// Throttle runs functions at most a given number per second (with a
// burst), on one goroutine started on demand that exits when nothing is
// queued, lane by lane (see LaneUrgent), in push order within a lane. A
// key already queued is not queued again: a host's wake-ups of one group
// after a host died are one. A function whose stale check says it has
// nothing left to do when its turn comes is dropped without waiting for
// the rate (a group another host's vote request woke already). Pushing
// never waits.
type Throttle struct {
	lim      *rate.Limiter
	mu       sync.Mutex
	lanes    [numLanes][]throttled
	queued   int
	keys     map[any]bool
	running  bool
	wg       sync.WaitGroup
	deferred atomic.Uint64
	skipped  atomic.Uint64
}

type throttled struct {
	key   any
	stale func() bool
	f     func()
}

// NewThrottle returns a throttle that runs perSec functions a second,
// burst at once.
func NewThrottle(perSec float64, burst int) *Throttle {
	return &Throttle{lim: rate.NewLimiter(rate.Limit(perSec), burst), keys: make(map[any]bool)}
}

// Push queues f under key in LaneUrgent unless a function under key is
// queued already.
func (t *Throttle) Push(key any, f func()) { t.PushLane(key, LaneUrgent, nil, f) }

// PushLane queues f under key in lane (clamped to the lanes there are)
// unless a function under key is queued already. stale, if not nil, is
// called when f's turn comes, before the rate is consulted: true drops f.
func (t *Throttle) PushLane(key any, lane int, stale func() bool, f func()) {
	lane = min(max(lane, 0), numLanes-1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys[key] {
		return
	}
	t.keys[key] = true
	t.lanes[lane] = append(t.lanes[lane], throttled{key: key, stale: stale, f: f})
	t.queued++
	if !t.running {
		t.running = true
		t.wg.Add(1)
		go t.drain()
	}
}

// next takes the first function of the first lane that has one; ok is
// false (and the goroutine is to exit) when none is queued.
func (t *Throttle) next() (throttled, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.lanes {
		q := t.lanes[i]
		if len(q) == 0 {
			continue
		}
		next := q[0]
		q[0] = throttled{}
		t.lanes[i] = q[1:]
		if len(t.lanes[i]) == 0 {
			t.lanes[i] = nil
		}
		t.queued--
		delete(t.keys, next.key)
		return next, true
	}
	t.running = false
	return throttled{}, false
}

func (t *Throttle) drain() {
	defer t.wg.Done()
	for {
		next, ok := t.next()
		if !ok {
			return
		}
		if next.stale != nil && next.stale() {
			t.skipped.Add(1)
			continue
		}
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
	return t.queued
}

// Deferred counts the functions that waited for the rate.
func (t *Throttle) Deferred() uint64 { return t.deferred.Load() }

// Skipped counts the functions dropped as stale when their turn came.
func (t *Throttle) Skipped() uint64 { return t.skipped.Load() }

// Wait waits until the goroutine has run everything queued and exited.
func (t *Throttle) Wait() { t.wg.Wait() }
