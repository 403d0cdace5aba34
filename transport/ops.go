package transport

import (
	"context"
	"sync"
	"time"
)

// opSet cancels the operations in flight of a peer or a transport (served
// requests, snapshots, calls) when it stops. It holds nothing while none
// is in flight: a context derived from a long-lived parent context would
// do the same, but the parent's map of children keeps its memory once
// grown, and a host's thousands of idle groups would each hold some. Its
// owner's mutex guards it (each method takes it).
type opSet struct {
	stopped bool
	next    uint32
	ops     map[uint32]context.CancelFunc // nil: none in flight
}

// with returns a context derived from parent, canceled when the set stops
// (at once if it has) and after timeout (0: none), and the function that
// ends it, which the caller must call. mu is the owner's mutex, not held.
func (s *opSet) with(mu *sync.Mutex, parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(parent, timeout)
	} else {
		ctx, cancel = context.WithCancel(parent)
	}
	mu.Lock()
	if s.stopped {
		mu.Unlock()
		cancel()
		return ctx, cancel
	}
	s.next++
	id := s.next
	if s.ops == nil {
		s.ops = make(map[uint32]context.CancelFunc, 1)
	}
	s.ops[id] = cancel
	mu.Unlock()
	return ctx, func() {
		cancel()
		mu.Lock()
		delete(s.ops, id)
		if len(s.ops) == 0 {
			s.ops = nil
		}
		mu.Unlock()
	}
}

// stop cancels the operations in flight and every one started after. mu
// is the owner's mutex, not held.
func (s *opSet) stop(mu *sync.Mutex) {
	mu.Lock()
	s.stopped = true
	ops := s.ops
	s.ops = nil
	mu.Unlock()
	for _, cancel := range ops {
		cancel()
	}
}

// isStopped reports whether stop was called. mu is the owner's mutex, not
// held.
func (s *opSet) isStopped(mu *sync.Mutex) bool {
	mu.Lock()
	defer mu.Unlock()
	return s.stopped
}

// DropCaches lets go of what the transport keeps only to be fast while its
// group is busy: its peers' queue buffers, each once drained (the last
// messages of a group that quiesces are still queued when it calls). A
// node calls it when its group quiesces, so that an idle group of a host's
// many keeps none; the next message makes a new one. Safe for concurrent
// use.
func (t *Transport) DropCaches() {
	for _, p := range *t.peers.Load() {
		p.mu.Lock()
		if p.head == len(p.queue) {
			p.queue, p.head = nil, 0
		} else {
			p.idle = true
		}
		p.mu.Unlock()
	}
}
