package confchange

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDefaultPolicy has one row per default decision.
func TestDefaultPolicy(t *testing.T) {
	tests := []struct {
		name string
		view string
		opts func(*View)
		s    Settings
		want string // the request, "" for none
	}{
		{name: "odd count: promote two at once", view: "voters=(1) learners=(2 3)", want: "promote 2 3"},
		{name: "odd count, one ready: wait", view: "voters=(1) learners=(2 3)\n3 probe", want: ""},
		{name: "even count: promote one", view: "voters=(1 2) learners=(3 4)", want: "promote 3"},
		{name: "target reached: standbys stay", view: "voters=(1 2 3) learners=(4 5)", want: ""},
		{name: "target 5: two more", view: "voters=(1 2 3) learners=(4 5)", s: Settings{TargetVoters: 5}, want: "promote 4 5"},
		{name: "target 1: nothing", view: "voters=(1) learners=(2 3)", s: Settings{TargetVoters: 1}, want: ""},
		{name: "above target: scale down two at once", view: "voters=(1 2 3 4 5)", want: "demote 5 4"},
		{name: "above target by one: demote one", view: "voters=(1 2 3 4)", want: "demote 4"},
		{name: "tie-break: least lag", view: "voters=(1) learners=(2 3 4)\n2 lag=9\n3 lag=3\n4 lag=5", want: "promote 3 4"},
		{name: "tie-break: lowest ID", view: "voters=(1 2) learners=(5 4 3)", want: "promote 3"},
		{name: "read-only never promoted", view: "voters=(1 2) learners=(3 4)\n3 readonly", want: "promote 4"},
		{name: "not stable yet", view: "voters=(1 2) learners=(3)\n3 ready=9s", want: ""},
		{name: "even, no learner in contact: demote one more", view: "voters=(1 2 3 4) learners=(5)\n5 down", s: Settings{TargetVoters: 5}, want: "demote 4"},
		{name: "even, only a read-only learner: demote one more", view: "voters=(1 2) learners=(3)\n3 readonly", want: "demote 2"},
		{name: "dead learner kept: a read-only learner cannot take a seat", view: "voters=(1 2 3) learners=(4 5 6)\n4 down contact=2h\n5 readonly", s: Settings{TargetVoters: 5, MaxLearners: 3, RemoveDeadAfter: time.Minute}, want: ""},
		{name: "dead read-only learner removed even when seats are short", view: "voters=(1 2 3) learners=(4 5)\n4 readonly down contact=2h", s: Settings{TargetVoters: 5, RemoveDeadAfter: time.Minute}, want: "remove 4"},
		{name: "dead learner kept when the target needs it", view: "voters=(1 2 3) learners=(4)\n4 down contact=2h", s: Settings{TargetVoters: 5, RemoveDeadAfter: time.Minute}, want: ""},
		{name: "failover after 30s", view: "voters=(1 2 3) learners=(4)\n3 down contact=30s", want: "swap 3 for 4"},
		{name: "no failover before 30s", view: "voters=(1 2 3) learners=(4)\n3 down contact=29s", want: ""},
		{name: "failover after a custom period", view: "voters=(1 2 3) learners=(4)\n3 down contact=6s", s: Settings{FailoverAfter: 5 * time.Second}, want: "swap 3 for 4"},
		{name: "no failover without known contact", view: "voters=(1 2 3) learners=(4)\n3 down", want: ""},
		{name: "no failover to a read-only standby", view: "voters=(1 2 3) learners=(4)\n3 down contact=1m\n4 readonly", want: ""},
		{name: "failover: longest silent first", view: "voters=(1 2 3 4 5) learners=(6)\n4 down contact=50s\n5 down contact=40s", s: Settings{TargetVoters: 5}, want: "swap 4 for 6"},
		{name: "failover: equal silence, lowest ID", view: "voters=(1 2 3 4 5) learners=(6)\n5 down contact=40s\n4 down contact=40s", s: Settings{TargetVoters: 5}, want: "swap 4 for 6"},
		{name: "failover: least-lag standby", view: "voters=(1 2 3) learners=(4 5)\n3 down contact=1m\n4 lag=7", want: "swap 3 for 5"},
		{name: "fill seats before failover", view: "voters=(1 2 3 4) learners=(5 6)\n4 down contact=1m", s: Settings{TargetVoters: 5}, want: "promote 5"},
		{name: "no active quorum: nothing", view: "voters=(1 2 3) learners=(4)\n2 down contact=1m\n3 down contact=1m", want: ""},
		{name: "joint first", view: "voters=(1 2 4)&&(1 2 3) learners=(5)", want: "leave-joint"},
		{name: "joint without quorum: wait", view: "voters=(1 4 5)&&(1 2 3)\n2 down\n3 down", want: ""},
		{name: "pending: nothing", view: "voters=(1) learners=(2 3)", opts: pending, want: ""},
		{name: "invalid view: nothing", view: "voters=(1 2) learners=(2 3)", want: ""},
		{name: "remove dead learner when set", view: "voters=(1 2 3) learners=(4)\n4 down contact=2m", s: Settings{RemoveDeadAfter: time.Minute}, want: "remove 4"},
		{name: "keep dead learner by default", view: "voters=(1 2 3) learners=(4)\n4 down contact=2h", want: ""},
		{name: "never remove the demoted voter too early", view: "voters=(1 2 3) learners=(4)\n4 down contact=30s", s: Settings{RemoveDeadAfter: time.Minute}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []func(*View)
			if tt.opts != nil {
				opts = append(opts, tt.opts)
			}
			v := mustView(t, tt.view, opts...)
			v.ReadySince = UpdateReadySince(v, tt.s)
			r, ok := DefaultPolicy{Settings: tt.s}.Next(v)
			if tt.want == "" {
				assert.False(t, ok, "got %s", r)
				assert.Equal(t, Request{}, r)
				return
			}
			if assert.True(t, ok) {
				assert.Equal(t, tt.want, r.String())
				assert.Empty(t, Check(v, tt.s, r))
			}
		})
	}
}

// TestPolicyInterface: a host policy replaces the default.
func TestPolicyInterface(t *testing.T) {
	var p Policy = DefaultPolicy{}
	_, ok := p.Next(mustView(t, "voters=(1)"))
	assert.False(t, ok)
	p = fixedPolicy{Remove(3)}
	r, ok := p.Next(View{})
	assert.True(t, ok)
	assert.Equal(t, "remove 3", r.String())
}

type fixedPolicy struct{ r Request }

func (f fixedPolicy) Next(View) (Request, bool) { return f.r, true }

func TestDefaultPolicyWaiting(t *testing.T) {
	for _, tt := range []struct {
		name, view string
		s          Settings
		want       string
	}{
		{"at target", "voters=(1 2 3)", Settings{}, ""},
		{"one ready of two needed", "voters=(1 2 3) learners=(4 5)\n5 down", Settings{TargetVoters: 5}, "waiting for 2 ready standbys to promote at once (1 ready)"},
		{"can act", "voters=(1 2 3) learners=(4 5)", Settings{TargetVoters: 5}, ""},
		{"one seat, learner not stable yet", "voters=(1 2) learners=(3)\n3 ready=9s", Settings{}, "waiting for a ready standby to promote (none ready)"},
		{"lost voter, no standby", "voters=(1 2 3)\n3 down contact=1m", Settings{}, "voter 3 lost"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := mustView(t, tt.view)
			got := DefaultPolicy{Settings: tt.s}.Waiting(v)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("Waiting = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDefaultPolicyNextDecision: when the default policy would next act
// with nothing but time passing, one row per kind of decision time; every
// answer is checked against Next just before and at that time.
func TestDefaultPolicyNextDecision(t *testing.T) {
	const never = time.Duration(-1)
	tests := []struct {
		name string
		view string
		opts func(*View)
		s    Settings
		want time.Duration // after t0; never: the zero time
	}{
		{name: "at rest: never", view: "voters=(1 2 3) learners=(4)", want: never},
		{name: "acting now: now", view: "voters=(1 2 3) learners=(4)\n3 down contact=30s", want: 0},
		{name: "silent voter with a standby: its failover", view: "voters=(1 2 3) learners=(4)\n3 down contact=10s", want: 20 * time.Second},
		{name: "custom FailoverAfter", view: "voters=(1 2 3) learners=(4)\n3 down contact=2s", s: Settings{FailoverAfter: 5 * time.Second}, want: 3 * time.Second},
		{name: "silent voter, no standby: never", view: "voters=(1 2 3)\n3 down contact=10s", want: never},
		{name: "silent voter, read-only standby: never", view: "voters=(1 2 3) learners=(4)\n3 down contact=10s\n4 readonly", want: never},
		{name: "silent voter, standby down too: never", view: "voters=(1 2 3) learners=(4)\n3 down contact=10s\n4 down contact=10s", want: never},
		{name: "no known contact: never", view: "voters=(1 2 3) learners=(4)\n3 down", want: never},
		{name: "two silent voters: the earlier", view: "voters=(1 2 3 4 5) learners=(6)\n4 down contact=10s\n5 down contact=20s", s: Settings{TargetVoters: 5}, want: 10 * time.Second},
		{name: "no active quorum: never", view: "voters=(1 2 3) learners=(4)\n2 down contact=10s\n3 down contact=10s", want: never},
		{name: "lost voter waiting for a standby that stabilizes", view: "voters=(1 2 3) learners=(4)\n3 down contact=1m\n4 ready=5s", s: Settings{Stabilization: 10 * time.Second}, want: 5 * time.Second},
		{name: "learner stabilizing: its promotion", view: "voters=(1 2) learners=(3)\n3 ready=4s", s: Settings{Stabilization: 10 * time.Second}, want: 6 * time.Second},
		{name: "dead learner: its removal when set", view: "voters=(1 2 3) learners=(4)\n4 down contact=10s", s: Settings{RemoveDeadAfter: time.Minute}, want: 50 * time.Second},
		{name: "dead learner kept by default: never", view: "voters=(1 2 3) learners=(4)\n4 down contact=10s", want: never},
		{name: "dead learner the target needs: never", view: "voters=(1 2 3) learners=(4)\n4 down contact=10s", s: Settings{TargetVoters: 5, RemoveDeadAfter: time.Minute}, want: never},
		{name: "failover before a removal", view: "voters=(1 2 3) learners=(4 5)\n3 down contact=10s\n5 down contact=50s", s: Settings{RemoveDeadAfter: time.Minute}, want: 10 * time.Second},
		{name: "pending change: never", view: "voters=(1 2 3) learners=(4)\n3 down contact=10s", opts: pending, want: never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []func(*View)
			if tt.opts != nil {
				opts = append(opts, tt.opts)
			}
			v := mustView(t, tt.view, opts...)
			v.ReadySince = UpdateReadySince(v, tt.s)
			p := DefaultPolicy{Settings: tt.s}
			var d Deadliner = p
			got := d.NextDecision(v)
			if tt.want == never {
				assert.True(t, got.IsZero(), "got %v after t0", got.Sub(t0))
				return
			}
			if !assert.Equal(t, t0.Add(tt.want), got) {
				return
			}
			at := v
			at.Now = got
			_, acts := p.Next(at)
			assert.True(t, acts, "Next does not act at the decision time")
			if tt.want > 0 {
				at.Now = got.Add(-time.Millisecond)
				_, acts = p.Next(at)
				assert.False(t, acts, "Next acts before the decision time")
			}
		})
	}
}
