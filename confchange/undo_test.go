package confchange

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPolicyWouldUndo has one row per case of "would the default policy's
// next step undo this manual change?".
func TestPolicyWouldUndo(t *testing.T) {
	tests := []struct {
		name string
		view string
		s    Settings
		req  Request
		want string // "" when not undone, else words the detail holds
	}{
		{name: "promotion past the target: the surplus is demoted", view: "voters=(1 2 3) learners=(4)",
			req: Promote(4), want: "then the policy: demote 4; it keeps 3 voters (target-voters) while auto-promote is on: raise target-voters to 5"},
		{name: "two past the target", view: "voters=(1 2 3) learners=(4 5)",
			req: Promote(4, 5), want: "then the policy: demote 5 4; it keeps 3 voters (target-voters) while auto-promote is on: raise target-voters to 5"},
		{name: "the policy demotes a less healthy voter instead: still undone", view: "voters=(1 2 3) learners=(4)\n3 lag=50",
			req: Promote(4), want: "then the policy: demote 3;"},
		{name: "promotion up to the target", view: "voters=(1) learners=(2 3)", req: Promote(2, 3)},
		{name: "promotion below the target: the policy fills the next seat", view: "voters=(1 2 3) learners=(4 5)",
			s: Settings{TargetVoters: 5}, req: Promote(4)},
		{name: "an even count, no other standby in contact: one is demoted", view: "voters=(1 2 3) learners=(4 5)\n5 down",
			s: Settings{TargetVoters: 5}, req: Promote(4), want: "then the policy: demote 4; it keeps 5 voters (target-voters) while auto-promote is on: turn auto-promote off"},
		{name: "demotion below the target: the caught-up voter is promoted again", view: "voters=(1 2 3)",
			req: Demote(3), want: "demote 3 (voters 3 → 2), then the policy: promote 3; it keeps 3 voters (target-voters) while auto-promote is on: lower target-voters to 1"},
		{name: "demotion below the target with a ready standby", view: "voters=(1 2 3) learners=(4)\n3 lag=50",
			req: Demote(3), want: "then the policy: promote 4;"},
		{name: "demotion of a voter out of contact, no standby: not undone", view: "voters=(1 2 3)\n3 down", req: Demote(3)},
		{name: "demotion above the target", view: "voters=(1 2 3 4 5)", req: Demote(5)},
		{name: "demotion of two above the target", view: "voters=(1 2 3 4 5)", req: Demote(4, 5)},
		{name: "demotion of two below the target", view: "voters=(1 2 3 4 5)", s: Settings{TargetVoters: 5},
			req: Demote(4, 5), want: "then the policy: promote 4 5; it keeps 5 voters (target-voters) while auto-promote is on: lower target-voters to 3"},
		{name: "demotion of a lagging voter to target 1: nothing to undo", view: "voters=(1 2 3)\n3 lag=5000", s: Settings{TargetVoters: 1}, req: Demote(3)},
		{name: "already above the target: the surplus goes too", view: "voters=(1 2) learners=(3)", req: Promote(3),
			s: Settings{TargetVoters: 1}, want: "then the policy: demote 3 2;"},
		{name: "other ops are not asked", view: "voters=(1 2 3) learners=(4)", req: Remove(4)},
		{name: "an add is not asked", view: "voters=(1 2 3)", req: AddLearner(Member{ID: 4, PeerAddr: "h:1"})},
		{name: "a voter promoted: Check's business", view: "voters=(1 2 3)", req: Promote(3)},
		{name: "a learner demoted: Check's business", view: "voters=(1 2 3) learners=(4)", req: Demote(4)},
		{name: "the leader demoted: Check's business", view: "voters=(1 2 3)", req: Demote(1)},
		{name: "unknown member", view: "voters=(1 2 3)", req: Promote(9)},
		{name: "joint: not asked", view: "voters=(1 2 4)&&(1 2 3) learners=(5)", req: Promote(5)},
		{name: "target 9 reached: only auto-promote off", view: "voters=(1 2 3 4 5 6 7 8 9) learners=(10)",
			s: Settings{TargetVoters: 9}, req: Promote(10), want: "then the policy: demote 10; it keeps 9 voters (target-voters) while auto-promote is on: turn auto-promote off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustView(t, tt.view)
			v.ReadySince = UpdateReadySince(v, tt.s)
			before := mustView(t, tt.view)
			before.ReadySince = UpdateReadySince(before, tt.s)
			r := PolicyWouldUndo(DefaultPolicy{Settings: tt.s}, v, tt.req)
			assert.Equal(t, before, v, "the view was changed")
			if tt.want == "" {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.True(t, errors.Is(r, ErrPolicyWouldUndo))
			assert.Equal(t, "policy_would_undo", r.Code())
			assert.Contains(t, r.Error(), tt.want)
			assert.Equal(t, 1, strings.Count(r.Error(), "undo"), r.Error())
		})
	}
}

// policyFunc is a host's own policy.
type policyFunc func(View) (Request, bool)

func (f policyFunc) Next(v View) (Request, bool) { return f(v) }

// TestPolicyWouldUndoAsksTheHostsPolicy: a host's policy is asked the same
// question; one that panics counts as doing nothing.
func TestPolicyWouldUndoAsksTheHostsPolicy(t *testing.T) {
	v := mustView(t, "voters=(1 2 3) learners=(4)")
	demoteNew := policyFunc(func(v View) (Request, bool) {
		if len(v.Config.Voters) > 3 {
			return Demote(v.Config.Voters[len(v.Config.Voters)-1]), true
		}
		return Request{}, false
	})
	r := PolicyWouldUndo(demoteNew, v, Promote(4))
	require.NotNil(t, r)
	assert.Contains(t, r.Error(), "change what the policy aims for, or turn auto-promote off")
	assert.Nil(t, PolicyWouldUndo(policyFunc(func(View) (Request, bool) { return Request{}, false }), v, Promote(4)))
	assert.Nil(t, PolicyWouldUndo(policyFunc(func(View) (Request, bool) { panic("boom") }), v, Promote(4)))
	assert.Nil(t, PolicyWouldUndo(nil, v, Promote(4)))
}
