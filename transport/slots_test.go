package transport

import (
	"context"
	"testing"
	"time"
)

// A freed snapshot slot goes to a waiting learner before voters that
// waited longer; a waiter that gives up takes no slot with it.
func TestSnapshotSlotsServeLearnersFirst(t *testing.T) {
	s := newSlots(1)
	ctx := context.Background()
	if err := s.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	wait := func(name string, learner bool) {
		go func() {
			if err := s.acquire(ctx, learner); err == nil {
				order <- name
			}
		}()
	}
	wait("voter", false)
	for s.waiting() < 1 {
		time.Sleep(time.Millisecond)
	}
	gone, cancel := context.WithCancel(ctx)
	go func() { _ = s.acquire(gone, false) }()
	wait("learner", true)
	for s.waiting() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	for s.waiting() > 2 {
		time.Sleep(time.Millisecond)
	}
	s.release()
	if got := <-order; got != "learner" {
		t.Fatalf("first slot to %s, want the learner", got)
	}
	s.release()
	if got := <-order; got != "voter" {
		t.Fatalf("second slot to %s, want the voter", got)
	}
	s.release()
	if s.free != 1 {
		t.Fatalf("%d free slots, want 1", s.free)
	}
}

func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.learners) + len(s.others)
}
