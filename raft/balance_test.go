package raft_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"go.etcd.io/raft/v3/raftpb"
)

// TestTryTransferLeadership: the leader of a quiesced group hands
// leadership to a caught-up follower on a live host at once (the group
// wakes; the follower leads). It refuses — ErrTransferNotNow, nothing
// started — on a follower, to a member whose host died, and while a
// membership change is in motion (a learner's addition proposed while
// both followers are cut off: not applied); a learner cannot lead
// (ErrLearnerCannotLead).
func TestTryTransferLeadership(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c := quiesceCluster(t, cluster.Options{})
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	to := follower(t, c, lead)
	if err := lead.Node.TryTransferLeadership(ctx, to.ID); err != nil {
		t.Fatalf("TryTransferLeadership to caught-up member %d of a quiesced group: %v", to.ID, err)
	}
	for !to.Node.IsLeader() {
		select {
		case <-ctx.Done():
			t.Fatalf("member %d never led after the transfer", to.ID)
		case <-time.After(5 * time.Millisecond):
		}
	}
	lead = to
	if err := follower(t, c, lead).Node.TryTransferLeadership(ctx, lead.ID); !errors.Is(err, raft.ErrTransferNotNow) {
		t.Fatalf("on a follower: %v; want ErrTransferNotNow", err)
	}
	c.Net.SetHostLive(4, true)
	addLearner(ctx, t, c, lead.Node, 4)
	if err := lead.Node.TryTransferLeadership(ctx, 4); !errors.Is(err, raft.ErrLearnerCannotLead) {
		t.Fatalf("to a learner: %v; want ErrLearnerCannotLead", err)
	}

	var others []uint64
	for _, m := range c.Running() {
		if m.ID != lead.ID && m.ID != 4 {
			others = append(others, m.ID)
		}
	}
	// The leader's appends to the other voters are lost, so the removal
	// cannot commit; its heartbeats still reach them (a partition would
	// let check-quorum depose it within an election timeout, and a loaded
	// machine may take that long to ask below).
	leadID := lead.ID
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		return from == leadID && m.GetType() == raftpb.MsgApp && slices.Contains(others, m.GetTo())
	})
	changed := make(chan error, 1)
	go func() {
		_, err := lead.Node.ChangeMembership(ctx, confchange.Request{Op: confchange.OpRemove, IDs: []uint64{4}})
		changed <- err
	}()
	// Proposed, not applied: refused as in motion.
	waitMembership(ctx, t, lead.Node, "the removal pending", func(m raft.Membership) bool { return m.Pending })
	if err := lead.Node.TryTransferLeadership(ctx, others[0]); !errors.Is(err, raft.ErrTransferNotNow) || !strings.Contains(err.Error(), "membership change") {
		t.Fatalf("with a change in motion: %v; want ErrTransferNotNow (a membership change in motion)", err)
	}
	c.Net.Heal()
	if err := <-changed; err != nil {
		t.Fatalf("removing learner 4 after the heal: %v", err)
	}
	c.Crash(4) // removed: out of the running members

	lead, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := follower(t, c, lead).ID
	killHost(c, lost)
	if err := lead.Node.TryTransferLeadership(ctx, lost); !errors.Is(err, raft.ErrTransferNotNow) {
		t.Fatalf("to member %d on a dead host: %v; want ErrTransferNotNow", lost, err)
	}
	if !lead.Node.IsLeader() {
		t.Fatal("a refused transfer moved leadership")
	}
}
