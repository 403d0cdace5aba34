package raft

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// Finding 7: Stop racing Start, and Stops of a node never started, never
// panic, and the node ends stopped either way.
func TestStopRacesStart(t *testing.T) {
	for i := range 30 {
		n := newTestNode(t, 1, nopSM{})
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); _ = n.Start(loneTransport{}) }()
		go func() { defer wg.Done(); _ = n.Stop(context.Background()) }()
		go func() { defer wg.Done(); _ = n.Stop(context.Background()) }()
		wg.Wait()
		select {
		case <-n.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the node did not stop", i)
		}
		if _, err := n.Propose(context.Background(), []byte("x")); !errors.Is(err, ErrStopped) {
			t.Fatalf("round %d: Propose after Stop: %v, want ErrStopped", i, err)
		}
		if err := n.Start(loneTransport{}); err == nil {
			t.Fatalf("round %d: Start after Stop succeeded", i)
		}
	}
}

// blockingSM blocks in Apply until released.
type blockingSM struct {
	nopSM
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSM) Apply(cmds []Command, results []Result) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
}

func (s *blockingSM) Restore(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err }

// Finding 12: Stop's context bounds its wait for a host Apply that does
// not return; the node finishes stopping once it does.
func TestStopIsBoundedByContext(t *testing.T) {
	sm := &blockingSM{entered: make(chan struct{}), release: make(chan struct{})}
	n := newTestNode(t, 1, sm)
	if err := n.Start(loneTransport{}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = n.Propose(context.Background(), []byte("x")) }()
	select {
	case <-sm.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Apply never called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := n.Stop(ctx)
	if !errors.Is(err, ErrStopTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a blocked Apply: %v, want ErrStopTimeout", err)
	}
	close(sm.release)
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not finish stopping after Apply returned")
	}
}

// TestDoneMadeOnDemand: a node makes its Done channel for its first
// caller (a host's idle replicas hold none), and Done is closed once the
// node is done whether it was asked before the stop, or only after.
func TestDoneMadeOnDemand(t *testing.T) {
	for _, askFirst := range []bool{true, false} {
		n := newTestNode(t, 1, nopSM{})
		if err := n.Start(loneTransport{}); err != nil {
			t.Fatal(err)
		}
		if n.donec.Load() != nil {
			t.Fatal("a started node made its Done channel before anyone asked")
		}
		var done <-chan struct{}
		if askFirst {
			done = n.Done()
		}
		if err := n.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !askFirst {
			done = n.Done()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("asked first %t: Done not closed after Stop returned", askFirst)
		}
		if n.Done() != done {
			t.Fatalf("asked first %t: Done returned another channel", askFirst)
		}
	}
}
