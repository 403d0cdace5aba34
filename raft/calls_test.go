package raft_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestMembershipCallsAcrossLeaderRemoval: membership calls made on a
// follower while the leader removes itself — and right after — wait for the
// next leader within their context, as Propose does, instead of failing at
// once because the old leader is gone.
func TestMembershipCallsAcrossLeaderRemoval(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	if _, err := f.Node.Propose(ctx, kv.Put("k", "v")); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	stop := make(chan struct{})
	// Callers on the follower throughout the removal.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				m, err := f.Node.Membership(cctx)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if m.Leader == 0 {
					errs <- errors.New("membership without a leader")
					return
				}
			}
		}()
	}
	if err := lead.Node.RemoveMember(ctx, lead.ID); err != nil && !errors.Is(err, raft.ErrRemoved) && !errors.Is(err, raft.ErrStopped) {
		t.Fatalf("the leader removing itself: %v", err)
	}
	// Right after: a change through the follower, which may still believe
	// the removed member leads.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	err := f.Node.AddLearner(cctx, c.Record(4))
	ccancel()
	if err != nil {
		t.Fatalf("AddLearner through a follower after the leader's removal: %v", err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Membership during the leader's removal: %v", err)
	}
	m, err := f.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Leader == lead.ID || m.Config.Contains(lead.ID) || !m.Config.Contains(4) {
		t.Fatalf("membership after: leader %d, config %v", m.Leader, m.Config)
	}
}

// TestNotProposedIsTyped: a proposal whose context ends while no leader is
// known never reached raft: its error says so (ErrNotProposed, safe to
// retry) besides the context's.
func TestNotProposedIsTyped(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true})
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	for _, m := range c.Running() {
		if m.ID != f.ID {
			c.Crash(m.ID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for f.Node.Leader() != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the follower still knows a leader")
		case <-time.After(10 * time.Millisecond):
		}
	}
	pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer pcancel()
	_, err := f.Node.Propose(pctx, kv.Put("k", "v"))
	if !errors.Is(err, raft.ErrNotProposed) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, raft.ErrNoLeader) {
		t.Fatalf("Propose without a leader: %v, want ErrNotProposed, DeadlineExceeded and ErrNoLeader", err)
	}
	if f.Node.IsLeader() || f.Node.Term() == 0 {
		t.Fatalf("IsLeader %v, Term %d", f.Node.IsLeader(), f.Node.Term())
	}
}

// TestSubscribeChannelsClose: unsubscribing closes the channel; stopping
// the node closes every subscriber's; a subscription after the stop is a
// closed channel.
func TestSubscribeChannelsClose(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 1})
	m := c.WaitLeader()
	if m.Node.Leader() != m.ID || !m.Node.IsLeader() {
		t.Fatalf("Leader() %d, IsLeader %v", m.Node.Leader(), m.Node.IsLeader())
	}
	ch1, cancel1 := m.Node.Subscribe(4)
	ch2, _ := m.Node.Subscribe(4)
	cancel1()
	cancel1() // idempotent
	if !drained(ch1) {
		t.Fatal("the channel stayed open after unsubscribing")
	}
	c.Stop(m.ID)
	if !drained(ch2) {
		t.Fatal("the channel stayed open after the node stopped")
	}
	ch3, cancel3 := m.Node.Subscribe(1)
	defer cancel3()
	if !drained(ch3) {
		t.Fatal("a subscription after the stop is open")
	}
}

// drained reads ch until it is closed, within a second.
func drained(ch <-chan raft.Event) bool {
	timeout := time.After(time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// TestBackToBackChangesAreNotRefused: a membership change made as soon as
// the previous one returned is not refused as "in progress" (the previous
// change is applied; raft's own applied index just had not caught up).
func TestBackToBackChangesAreNotRefused(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	for i := uint64(10); i < 30; i++ {
		node := lead.Node
		if i%2 == 1 {
			node = f.Node // through a follower too
		}
		if err := node.AddLearner(ctx, c.Record(i)); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		if err := node.RemoveMember(ctx, i); err != nil {
			t.Fatalf("remove %d right after adding it: %v", i, err)
		}
	}
}
