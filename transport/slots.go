package transport

import (
	"context"
	"sync"
)

// slots bounds the snapshots a host sends at once (MaxConcurrentSnapshots,
// shared by its groups). A freed slot goes to a waiting learner's snapshot
// before any other: a learner catching up is the one a membership change
// waits for, while a lagging voter's quorum does not depend on it.
type slots struct {
	mu       sync.Mutex
	free     int
	learners []chan struct{} // waiting, in order
	others   []chan struct{}
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire takes a slot, waiting within ctx.
func (s *slots) acquire(ctx context.Context, learner bool) error {
	s.mu.Lock()
	if s.free > 0 && len(s.learners) == 0 && (learner || len(s.others) == 0) {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if learner {
		s.learners = append(s.learners, ch)
	} else {
		s.others = append(s.others, ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.drop(ch) {
			return ctx.Err()
		}
		// Handed a slot meanwhile: give it on.
		s.releaseLocked()
		return ctx.Err()
	}
}

// release frees a slot, handing it to the first waiting learner, else to
// the first other waiter.
func (s *slots) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

func (s *slots) releaseLocked() {
	switch {
	case len(s.learners) > 0:
		close(s.learners[0])
		s.learners = s.learners[1:]
	case len(s.others) > 0:
		close(s.others[0])
		s.others = s.others[1:]
	default:
		s.free++
	}
}

// drop removes a waiter that gave up; false if it was handed a slot.
func (s *slots) drop(ch chan struct{}) bool {
	for _, q := range []*[]chan struct{}{&s.learners, &s.others} {
		for i, c := range *q {
			if c == ch {
				*q = append((*q)[:i], (*q)[i+1:]...)
				return true
			}
		}
	}
	return false
}
