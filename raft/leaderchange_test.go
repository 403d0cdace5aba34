package raft_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// A Replace or Swap of the voter that leads is applied through a joint
// configuration that the leader does not leave itself: it hands leadership
// to an incoming voter, which leaves it. The caller — on the leader, or on a
// follower that forwards the request — is answered with the outcome (nil
// once the joint configuration is left), not "leader changed, outcome
// unknown": the leader's own hand-off must not fail its waiter.
func TestChangeOfTheLeaderAnswersItsOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(leader uint64) confchange.Request
		demote  bool // the leader stays, as a learner
		forward bool // asked of a follower
	}{
		{"swap", func(l uint64) confchange.Request { return confchange.Swap(l, 4) }, true, false},
		{"replace", func(l uint64) confchange.Request { return confchange.Replace(l, 4) }, false, false},
		{"swap forwarded", func(l uint64) confchange.Request { return confchange.Swap(l, 4) }, true, true},
		{"replace forwarded", func(l uint64) confchange.Request { return confchange.Replace(l, 4) }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership})
			via := lead
			if tc.forward {
				via = follower(t, c, lead)
			}
			res, err := via.Node.ChangeMembership(ctx, tc.change(lead.ID))
			if err != nil {
				t.Fatalf("%s of the leader %d and learner 4, asked of member %d: %v", tc.name, lead.ID, via.ID, err)
			}
			if res.Index == 0 {
				t.Fatalf("%s answered without the index it was applied at: %+v", tc.name, res)
			}
			// Answered once applied on the member asked: its own status
			// shows the change done (the joint configuration left).
			if tc.demote || tc.forward {
				st, err := via.Node.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Applied < res.Index || st.Joint() || !slices.Contains(st.Voters, 4) || slices.Contains(st.Voters, lead.ID) ||
					tc.demote != slices.Contains(st.Learners, lead.ID) {
					t.Fatalf("member %d after the %s: applied %d (result %d) voters %v outgoing %v learners %v",
						via.ID, tc.name, st.Applied, res.Index, st.Voters, st.VotersOutgoing, st.Learners)
				}
			}
			if !tc.demote {
				select {
				case <-lead.Node.Done():
				case <-ctx.Done():
					t.Fatalf("the replaced leader %d did not stop", lead.ID)
				}
				if err := lead.Node.Err(); !errors.Is(err, raft.ErrRemoved) {
					t.Fatalf("the replaced leader stopped with %v, want ErrRemoved", err)
				}
				c.Crash(lead.ID) // closes its storage; no longer counted as running
			}
			next := c.WaitLeader()
			m := waitMembership(ctx, t, next.Node, "the change settled", func(m raft.Membership) bool { return !m.Pending })
			if m.Joint() || !slices.Contains(m.Config.Voters, 4) || slices.Contains(m.Config.Voters, lead.ID) ||
				tc.demote != slices.Contains(m.Config.Learners, lead.ID) || len(m.Config.Voters) != 3 {
				t.Fatalf("membership after the %s of %d: %v", tc.name, lead.ID, m.Config)
			}
			if _, err := next.Node.Propose(ctx, kv.Put("after", "1")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
