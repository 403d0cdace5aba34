package raft_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// TestManualChangeThePolicyWouldUndo: while the policy acts on its own it
// owns the voter count — a promotion past the target, or a demotion below
// it with a ready learner, is refused before anything is proposed
// (ErrPolicyWouldUndo, saying what to change instead), and the dry run
// says so too; with auto-promote off the same promotion goes through and
// sticks.
func TestManualChangeThePolicyWouldUndo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{Membership: fastMembership})
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Config.Voters, []uint64{1, 2, 3}) || !slices.Equal(m.Config.Learners, []uint64{4}) {
		t.Fatalf("before: %v, want voters (1 2 3), standby 4", m.Config)
	}
	last := m.LastIndex

	err = lead.Node.Promote(ctx, 4)
	if !errors.Is(err, confchange.ErrPolicyWouldUndo) || confchange.Code(err) != "policy_would_undo" ||
		!strings.Contains(err.Error(), "raise target-voters to 5") || !strings.Contains(err.Error(), "auto-promote off") {
		t.Fatalf("promoting 4 past the target: %v, want ErrPolicyWouldUndo saying what to change", err)
	}
	// Through a follower (forwarded to the leader): the same refusal.
	var follower *cluster.Member
	for _, id := range []uint64{1, 2, 3} {
		if id != lead.ID {
			follower = c.Member(id)
			break
		}
	}
	if err := follower.Node.Promote(ctx, 4); !errors.Is(err, confchange.ErrPolicyWouldUndo) || confchange.Code(err) != "policy_would_undo" {
		t.Fatalf("promoting 4 through follower %d: %v, want ErrPolicyWouldUndo", follower.ID, err)
	}
	res, err := lead.Node.CheckMembership(ctx, confchange.Promote(4))
	if !errors.Is(err, confchange.ErrPolicyWouldUndo) || res.Description == "" {
		t.Fatalf("the dry run of promote 4: %q, %v; want the plan and ErrPolicyWouldUndo", res.Description, err)
	}
	other := uint64(1)
	for other == lead.ID {
		other++
	}
	if err := lead.Node.Demote(ctx, other); !errors.Is(err, confchange.ErrPolicyWouldUndo) {
		t.Fatalf("demoting voter %d below the target with standby 4 ready: %v, want ErrPolicyWouldUndo", other, err)
	}
	m, err = lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Config.Voters, []uint64{1, 2, 3}) || m.Pending {
		t.Fatalf("after the refusals: %v, want it unchanged", m.Config)
	}
	requireNoConfChange(t, lead, last, m.LastIndex)

	// Auto-promote off: manual changes are the operator's, and stick.
	cs := lead.Node.Settings()
	cs.AutoPromote = false
	if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := lead.Node.Promote(ctx, 4); err != nil {
		t.Fatalf("promoting 4 with auto-promote off: %v", err)
	}
	m = waitMembership(ctx, t, lead.Node, "4 a voter", func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && !m.Pending && !m.Joint()
	})
	if len(m.Config.Voters) != 4 {
		t.Fatalf("after the promotion: %v", m.Config)
	}
}
