package raft_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestTransferToMemberApplyingAConfChange transfers leadership to a
// follower whose apply task is stalled on a write before a committed conf
// change: etcd raft refuses to campaign with committed conf changes not
// applied and drops the leader's MsgTimeoutNow, and the transfer failed
// after an election timeout although the follower had every entry. The
// follower's loop holds the message and steps it again once it applied
// what it committed (timeoutnow.go): the transfer completes once the
// stall ends.
func TestTransferToMemberApplyingAConfChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sms := map[uint64]*stalledApplies{}
	var mu sync.Mutex
	c := cluster.New(t, cluster.Options{TickInterval: 50 * time.Millisecond, ManualMembership: true,
		WrapStateMachine: func(id uint64, sm *kv.Store) raft.StateMachine {
			s := &stalledApplies{Store: sm, entered: make(chan struct{}, 1), release: make(chan struct{})}
			mu.Lock()
			sms[id] = s
			mu.Unlock()
			return s
		}})
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	to := follower(t, c, lead)
	mu.Lock()
	gate := sms[to.ID]
	mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	defer release()
	gate.stalled.Store(true)
	propose(ctx, t, lead.Node, kv.Put("k", "v")) // the follower's apply stalls on it
	select {
	case <-gate.entered:
	case <-ctx.Done():
		t.Fatal("the follower never applied the write")
	}
	if err := lead.Node.AddLearner(ctx, c.Record(9)); err != nil {
		t.Fatal(err)
	}
	timeoutNow := make(chan struct{})
	var once sync.Once
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		if m.GetType() == raftpb.MsgTimeoutNow && m.GetTo() == to.ID {
			once.Do(func() { close(timeoutNow) })
		}
		return false
	})
	errc := make(chan error, 1)
	go func() { errc <- lead.Node.TransferLeadership(ctx, to.ID) }()
	select {
	case <-timeoutNow:
	case err := <-errc:
		t.Fatalf("the transfer ended before the leader told member %d to campaign: %v", to.ID, err)
	case <-ctx.Done():
		t.Fatal("the leader never told the transferee to campaign")
	}
	// The follower has the message and a conf change it has not applied.
	time.Sleep(100 * time.Millisecond)
	release()
	if err := <-errc; err != nil {
		t.Fatalf("transferring leadership to member %d: %v", to.ID, err)
	}
	if l := lead.Node.Leader(); l != to.ID {
		t.Fatalf("member %d leads after the transfer to %d", l, to.ID)
	}
	c.Net.SetFilter(nil)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}
