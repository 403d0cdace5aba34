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

// TestPolicyRemovesDeadMembers: with RemoveDeadAfter set, a learner silent
// that long is removed (a read-only one too), and a lost voter is first
// failed over to a ready standby, then removed the same way once it has
// been silent RemoveDeadAfter — the cluster keeps three voters and writes
// throughout, and the removed IDs are refused from then on.
func TestPolicyRemovesDeadMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{Membership: confchange.Settings{
		Stabilization: 100 * time.Millisecond, FailoverAfter: 500 * time.Millisecond, RemoveDeadAfter: time.Second,
	}})
	ro := c.Record(5)
	ro.ReadOnly = true
	if err := lead.Node.AddLearner(ctx, ro); err != nil {
		t.Fatalf("adding read-only learner 5: %v", err)
	}
	c.Join(5)
	waitMembership(ctx, t, lead.Node, "learner 5 in contact", func(m raft.Membership) bool {
		s, ok := memberStatus(m, 5)
		return ok && s.Progress != nil && s.Progress.Match > 0
	})

	c.Crash(5)
	waitMembership(ctx, t, lead.Node, "dead read-only learner 5 removed", func(m raft.Membership) bool {
		return !m.Config.Contains(5) && !m.Pending
	})

	lost := uint64(1)
	for lost == lead.ID {
		lost++ // a voter (1–3) other than the leader
	}
	c.Crash(lost)
	waitMembership(ctx, t, lead.Node, "lost voter failed over to 4", func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && slices.Contains(m.Config.Learners, lost) && !m.Joint() && !m.Pending
	})
	m := waitMembership(ctx, t, lead.Node, "the lost voter removed once dead", func(m raft.Membership) bool {
		return !m.Config.Contains(lost) && !m.Pending
	})
	if len(m.Config.Voters) != 3 || m.Joint() {
		t.Fatalf("after the cleanup: %v, want three voters", m.Config)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("after-cleanup", "x")); err != nil {
		t.Fatal(err)
	}
	if err := lead.Node.AddLearner(ctx, c.Record(lost)); !errorIsCode(err, "member_exists") {
		t.Fatalf("re-adding removed member %d: %v, want member_exists (IDs are never reused)", lost, err)
	}
}

func errorIsCode(err error, code string) bool {
	return err != nil && confchange.Code(err) == code
}

// TestPolicyRestoresAnOddVoterCount: a voter removed by hand with no learner
// that could take its seat leaves two voters, which need both for a
// quorum; the policy demotes one more (never the leader), so that the count
// is odd again and the cluster survives the loss of the one left as a
// learner. The demoted member stays, a standby.
func TestPolicyRestoresAnOddVoterCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cluster.New(t, cluster.Options{Membership: fastMembership})
	lead := c.WaitLeader()
	gone := uint64(1)
	for gone == lead.ID {
		gone++
	}
	// The two voters left are the new configuration's quorum: a leader
	// that has not heard from the other yet (a new leader, a busy machine)
	// refuses the removal (quorum at risk), as it should. Wait until it
	// heard from every voter.
	waitMembership(ctx, t, lead.Node, "every voter heard", func(m raft.Membership) bool {
		for _, mm := range m.Members {
			if mm.Progress != nil && !mm.Progress.RecentActive {
				return false
			}
		}
		return len(m.Members) == 3
	})
	if err := lead.Node.RemoveMember(ctx, gone); err != nil {
		t.Fatalf("removing voter %d: %v", gone, err)
	}
	m := waitMembership(ctx, t, lead.Node, "an odd voter count again", func(m raft.Membership) bool {
		return len(m.Config.Voters) == 1 && !m.Joint() && !m.Pending
	})
	if m.Config.Voters[0] != lead.ID || len(m.Config.Learners) != 1 || m.Config.Contains(gone) {
		t.Fatalf("after the removal of %d: %v (leader %d): want the leader alone as voter and the other a learner", gone, m.Config, lead.ID)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("k", "v")); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyNeverPromotesReadOnly: one voter with a target of three, and
// the only learners ready and in contact are read-only: the seats stay
// empty — the policy, asked again and again, promotes neither, and says
// what it waits for.
func TestPolicyNeverPromotesReadOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	policy := &countingPolicy{inner: confchange.DefaultPolicy{Settings: fastMembership}}
	c := cluster.New(t, cluster.Options{Members: 1, Membership: fastMembership, Policy: policy})
	lead := c.WaitLeader()
	for _, id := range []uint64{2, 3} {
		m := c.Record(id)
		m.ReadOnly = true
		if err := lead.Node.AddLearner(ctx, m); err != nil {
			t.Fatalf("adding read-only learner %d: %v", id, err)
		}
		c.Join(id)
	}
	waitMembership(ctx, t, lead.Node, "read-only learners 2 and 3 ready", func(m raft.Membership) bool { return ready(2)(m) && ready(3)(m) })
	policy.waitRounds(ctx, t, 30)
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Config.Voters) != 1 || m.Config.Voters[0] != lead.ID || len(m.Config.Learners) != 2 {
		t.Fatalf("a read-only learner was promoted: %v", m.Config)
	}
	if _, err := lead.Node.ChangeMembership(ctx, confchange.Promote(2, 3)); !errors.Is(err, confchange.ErrMemberReadOnly) {
		t.Fatalf("promoting read-only learners by hand: %v, want ErrMemberReadOnly", err)
	}
}

// TestPolicyKeepsDeadLearnerTheTargetNeeds: with a target of five and only
// three voters, a dead learner is one of the seats the target needs: it is
// not removed however long it stays silent (the policy waits for it, or an
// operator removes it).
func TestPolicyKeepsDeadLearnerTheTargetNeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := confchange.Settings{TargetVoters: 5, Stabilization: 100 * time.Millisecond, FailoverAfter: 200 * time.Millisecond, RemoveDeadAfter: 300 * time.Millisecond}
	policy := &countingPolicy{inner: confchange.DefaultPolicy{Settings: s}}
	c, lead := withReadyLearner(ctx, t, cluster.Options{Membership: s, Policy: policy})
	c.Crash(4)
	waitMembership(ctx, t, lead.Node, "learner 4 silent", func(m raft.Membership) bool {
		st, ok := memberStatus(m, 4)
		return ok && st.Progress != nil && !st.Progress.LastContact.IsZero() && time.Since(st.Progress.LastContact) > time.Second
	})
	policy.waitRounds(ctx, t, 30)
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Config.Contains(4) {
		t.Fatalf("the dead learner the target needs was removed: %v", m.Config)
	}
}
