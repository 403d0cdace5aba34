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
// grown, and a host's thousands of idle groups would each hold some.
type opSet struct {
	mu      sync.Mutex
	stopped bool
	next    uint64
	ops     map[uint64]context.CancelFunc // nil: none in flight
}

// with returns a context derived from parent, canceled when the set stops
// (at once if it has) and after timeout (0: none), and the function that
// ends it, which the caller must call.
func (s *opSet) with(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(parent, timeout)
	} else {
		ctx, cancel = context.WithCancel(parent)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		cancel()
		return ctx, cancel
	}
	s.next++
	id := s.next
	if s.ops == nil {
		s.ops = make(map[uint64]context.CancelFunc, 1)
	}
	s.ops[id] = cancel
	s.mu.Unlock()
	return ctx, func() {
		cancel()
		s.mu.Lock()
		delete(s.ops, id)
		if len(s.ops) == 0 {
			s.ops = nil
		}
		s.mu.Unlock()
	}
}

// stop cancels the operations in flight and every one started after.
func (s *opSet) stop() {
	s.mu.Lock()
	s.stopped = true
	ops := s.ops
	s.ops = nil
	s.mu.Unlock()
	for _, cancel := range ops {
		cancel()
	}
}

// isStopped reports whether stop was called.
func (s *opSet) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
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
