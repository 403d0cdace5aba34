package raft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/storage"
)

// newSharedNode is a one-member node on the scheduler s.
func newSharedNode(t *testing.T, s *Scheduler, sm StateMachine) *Node {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(Config{ID: 1, TickInterval: 10 * time.Millisecond, Scheduler: s,
		InitialMembers: []Member{{ID: 1, PeerAddr: "127.0.0.1:7001"}}}, sm, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.Stop(context.Background())
		<-n.Done()
		_ = st.Close()
	})
	return n
}

// A closed scheduler refuses a node's Start, instead of taking a node
// whose tasks no worker would run.
func TestClosedSchedulerRefusesNodes(t *testing.T) {
	s := NewScheduler(SchedulerConfig{})
	s.Close()
	n := newSharedNode(t, s, nopSM{})
	if err := n.Start(loneTransport{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start on a closed scheduler: %v, want ErrStopped", err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("a node refused by its scheduler is not done")
	}
}

// Closing a scheduler waits for its nodes to be done, within
// CloseContext's context; a node stuck in Apply is waited for in the
// background, and a healthy node on the same scheduler still stops.
func TestSchedulerCloseWaitsForItsNodes(t *testing.T) {
	s := NewScheduler(SchedulerConfig{ApplyWorkers: 1})
	sm := &blockingSM{entered: make(chan struct{}), release: make(chan struct{})}
	stuck := newSharedNode(t, s, sm)
	healthy := newSharedNode(t, s, nopSM{})
	for _, n := range []*Node{healthy, stuck} {
		if err := n.Start(loneTransport{}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _, _ = stuck.Propose(context.Background(), []byte("x")) }()
	select {
	case <-sm.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("Apply never called")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.CloseContext(ctx); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("CloseContext with running nodes: %v, want ErrStopTimeout", err)
	}
	// The stuck node holds the only apply worker: the healthy one stops.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := healthy.Stop(sctx); err != nil {
		t.Fatalf("stopping the healthy node: %v", err)
	}
	_ = stuck.Stop(ctx) // times out: Apply is held
	close(sm.release)
	select {
	case <-stuck.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck node did not finish stopping once Apply returned")
	}
	s.Close() // returns: every node is done
}
