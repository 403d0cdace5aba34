package sched

import (
	"sync"
	"time"
)

// Clock calls functions at fixed intervals: one goroutine per distinct
// interval, whatever the number of subscribers (a host's groups tick from
// one ticker instead of one each). A goroutine exits when its last
// subscriber cancels.
type Clock struct {
	mu     sync.Mutex
	wheels map[time.Duration]*wheel
	wg     sync.WaitGroup
}

type wheel struct {
	subs map[*sub]struct{}
	stop chan struct{}
	list []*sub // reused by the ticking goroutine
}

type sub struct{ f func() }

// NewClock returns a clock with no subscribers.
func NewClock() *Clock { return &Clock{wheels: make(map[time.Duration]*wheel)} }

// Every calls f every d (in the clock's goroutine for d: f must not block)
// until cancel is called. A slow f delays the others of its interval, and
// ticks missed meanwhile are dropped, as with time.Ticker.
func (c *Clock) Every(d time.Duration, f func()) (cancel func()) {
	s := &sub{f: f}
	c.mu.Lock()
	w := c.wheels[d]
	if w == nil {
		w = &wheel{subs: make(map[*sub]struct{}), stop: make(chan struct{})}
		c.wheels[d] = w
		c.wg.Add(1)
		go c.run(d, w)
	}
	w.subs[s] = struct{}{}
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			delete(w.subs, s)
			if len(w.subs) == 0 && c.wheels[d] == w {
				delete(c.wheels, d)
				close(w.stop)
			}
		})
	}
}

func (c *Clock) run(d time.Duration, w *wheel) {
	defer c.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-w.stop:
			return
		}
		c.mu.Lock()
		w.list = w.list[:0]
		for s := range w.subs {
			w.list = append(w.list, s)
		}
		c.mu.Unlock()
		for _, s := range w.list {
			s.f()
		}
	}
}

// Wait waits until every interval's goroutine has exited (every
// subscriber canceled).
func (c *Clock) Wait() { c.wg.Wait() }
