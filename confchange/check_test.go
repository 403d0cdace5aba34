package confchange

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

func member(id uint64) Member {
	return Member{ID: id, PeerAddr: "10.0.0." + itoa(id) + ":7001"}
}

func itoa(id uint64) string { return idsString([]uint64{id}) }

// TestCheckRules has one row per rule, error and seed situation; want lists
// the refusal codes (sorted, deduplicated), none for accepted.
func TestCheckRules(t *testing.T) {
	tests := []struct {
		name string
		view string
		opts func(*View)
		s    Settings
		req  Request
		want []string
	}{
		// Seeds: etcd's learner design figures.
		{name: "seed: add voter to a 1-member cluster", view: "voters=(1)", req: AddVoter(member(2)), want: []string{"quorum_at_risk"}},
		{name: "seed: add learner to a 1-member cluster", view: "voters=(1)", req: AddLearner(member(2))},
		{name: "seed: add voter during a partition", view: "voters=(1 2 3)\n3 down contact=5s", req: AddVoter(member(4)), want: []string{"quorum_at_risk"}},
		{name: "seed: add learner during a partition", view: "voters=(1 2 3)\n3 down contact=5s", req: AddLearner(member(4))},
		{name: "seed: misconfigured address", view: "voters=(1 2 3)", req: AddLearner(Member{ID: 4, PeerAddr: "10.0.0.4"}), want: []string{"invalid_member"}},
		{name: "seed: two members down of four", view: "voters=(1 2 3 4)\n3 down\n4 down", req: Remove(4), want: []string{"quorum_at_risk"}},
		{name: "seed: lagging learner", view: "voters=(1 2 3) learners=(4)\n4 lag=900", opts: last(5000), s: Settings{MaxLag: 500}, req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "seed: snapshot in flight", view: "voters=(1 2 3) learners=(4)\n4 snapshot=10", req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "seed: misconfigured learner is removable", view: "voters=(1 2 3) learners=(4)\n4 down", req: Remove(4)},

		// Shape.
		{name: "unknown op", view: "voters=(1)", req: Request{Op: Op(77)}, want: []string{"invalid_request"}},
		{name: "zero op", view: "voters=(1)", req: Request{}, want: []string{"invalid_request"}},
		{name: "promote nothing", view: "voters=(1)", req: Promote(), want: []string{"invalid_request"}},
		{name: "promote too many IDs", view: "voters=(1)", req: Promote(2, 3, 4, 5, 6, 7, 8, 9, 10, 11), want: []string{"invalid_request"}},
		{name: "remove two", view: "voters=(1 2 3)", req: Request{Op: OpRemove, IDs: []uint64{2, 3}}, want: []string{"invalid_request"}},
		{name: "add with IDs", view: "voters=(1)", req: Request{Op: OpAddLearner, Member: member(2), IDs: []uint64{2}}, want: []string{"invalid_request"}},
		{name: "duplicate IDs", view: "voters=(1 2 3) learners=(4)", req: Promote(4, 4), want: []string{"invalid_request"}},
		{name: "swap with itself", view: "voters=(1 2 3)", req: Swap(2, 2), want: []string{"invalid_request"}},
		{name: "empty config in view", view: "voters=()", req: AddLearner(member(2)), want: []string{"invalid_request"}},
		{name: "invalid config in view", view: "voters=(1 2) learners=(2)", req: AddLearner(member(3)), want: []string{"invalid_request"}},

		// Members.
		{name: "ID 0", view: "voters=(1)", req: AddLearner(Member{PeerAddr: "h:1"}), want: []string{"invalid_member"}},
		{name: "empty metadata key", view: "voters=(1)", req: AddLearner(Member{ID: 2, PeerAddr: "h:1", Metadata: map[string]string{"": "x"}}), want: []string{"invalid_member"}},
		{name: "duplicate ID", view: "voters=(1 2)", req: AddLearner(Member{ID: 2, PeerAddr: "h:1"}), want: []string{"member_exists"}},
		{name: "duplicate address", view: "voters=(1 2)", req: AddLearner(Member{ID: 3, PeerAddr: "10.0.0.2:7001"}), want: []string{"member_exists"}},
		{name: "removed ID reused", view: "voters=(1 2)", opts: removed(5), req: AddLearner(member(5)), want: []string{"member_exists"}},
		{name: "stale record of a non-member is ignored", view: "voters=(1 2)", opts: record(Member{ID: 9, PeerAddr: "10.0.0.3:7001"}), req: AddLearner(member(3))},
		{name: "unknown member", view: "voters=(1 2 3)", req: Remove(7), want: []string{"unknown_member"}},
		{name: "removed member", view: "voters=(1 2 3)", opts: removed(7), req: Demote(7), want: []string{"unknown_member"}},
		{name: "promote a voter", view: "voters=(1 2 3)", req: Promote(2), want: []string{"invalid_member"}},
		{name: "demote a learner", view: "voters=(1 2 3) learners=(4)", req: Demote(4), want: []string{"invalid_member"}},
		{name: "promote read-only", view: "voters=(1 2 3) learners=(4)\n4 readonly", req: Promote(4), want: []string{"member_read_only"}},
		{name: "add read-only voter", view: "voters=(1 2 3)", req: AddVoter(Member{ID: 4, PeerAddr: "h:1", ReadOnly: true}), want: []string{"member_read_only"}},
		{name: "add read-only learner", view: "voters=(1 2 3)", req: AddLearner(Member{ID: 4, PeerAddr: "h:1", ReadOnly: true})},
		{name: "voter made read-only", view: "voters=(1 2 3) learners=(4)", req: UpdateMember(Member{ID: 2, PeerAddr: "10.0.0.2:7001", ReadOnly: true}), want: []string{"member_read_only"}},
		{name: "learner made read-only", view: "voters=(1 2 3) learners=(4)", req: UpdateMember(Member{ID: 4, PeerAddr: "10.0.0.4:7001", ReadOnly: true})},
		{name: "read-only learner made promotable", view: "voters=(1 2 3) learners=(4)\n4 readonly", req: UpdateMember(Member{ID: 4, PeerAddr: "10.0.0.4:7001"})},
		{name: "update", view: "voters=(1 2 3)", req: UpdateMember(Member{ID: 2, PeerAddr: "new:1"})},
		{name: "update keeps own address", view: "voters=(1 2 3)", req: UpdateMember(member(2))},
		{name: "update unknown", view: "voters=(1 2 3)", req: UpdateMember(member(5)), want: []string{"unknown_member"}},
		{name: "update to a taken address", view: "voters=(1 2 3)", req: UpdateMember(Member{ID: 2, PeerAddr: "10.0.0.3:7001"}), want: []string{"member_exists"}},
		// Incarnations: a new member's is its own to publish; a recorded one never changes.
		{name: "add learner with an incarnation", view: "voters=(1 2 3)", req: AddLearner(Member{ID: 4, PeerAddr: "h:1", Incarnation: 0xabc}), want: []string{"invalid_member"}},
		{name: "add voter with an incarnation", view: "voters=(1 2 3)", req: AddVoter(Member{ID: 4, PeerAddr: "h:1", Incarnation: 0xabc}), want: []string{"invalid_member"}},
		{name: "add learner with a record copied from another member", view: "voters=(1 2 3)",
			opts: record(Member{ID: 3, PeerAddr: "10.0.0.3:7001", Incarnation: 0xabc}),
			req:  AddLearner(Member{ID: 4, PeerAddr: "10.0.0.4:7001", Incarnation: 0xabc}), want: []string{"invalid_member"}},
		{name: "update to another incarnation", view: "voters=(1 2 3)", opts: record(Member{ID: 2, PeerAddr: "10.0.0.2:7001", Incarnation: 0xabc}),
			req: UpdateMember(Member{ID: 2, PeerAddr: "10.0.0.2:7001", Incarnation: 0xdef}), want: []string{"invalid_member"}},
		{name: "update keeps the recorded incarnation", view: "voters=(1 2 3)", opts: record(Member{ID: 2, PeerAddr: "10.0.0.2:7001", Incarnation: 0xabc}),
			req: UpdateMember(Member{ID: 2, PeerAddr: "new:1", Incarnation: 0xabc})},

		// Learners.
		{name: "too many learners", view: "voters=(1 2 3) learners=(4 5)", req: AddLearner(member(6)), want: []string{"too_many_learners"}},
		{name: "too many learners counts learners_next", view: "voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3)", req: AddLearner(member(6)), want: []string{"change_in_progress", "too_many_learners"}},
		{name: "max learners raised", view: "voters=(1 2 3) learners=(4 5)", s: Settings{MaxLearners: 3}, req: AddLearner(member(6))},
		{name: "demote above max learners", view: "voters=(1 2 3 4 5) learners=(6 7)", req: Demote(4, 5)},
		{name: "swap above max learners", view: "voters=(1 2 3) learners=(4 5)\n3 down contact=1m", req: Swap(3, 4)},

		// Readiness.
		{name: "promote ready", view: "voters=(1 2 3) learners=(4)", req: Promote(4)},
		{name: "promote lagging", view: "voters=(1 2 3) learners=(4)\n4 lag=1001", opts: last(2000), req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "promote at the threshold", view: "voters=(1 2 3) learners=(4)\n4 lag=1000", opts: last(2000), req: Promote(4)},
		{name: "promote probing", view: "voters=(1 2 3) learners=(4)\n4 probe", req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "promote inactive", view: "voters=(1 2 3) learners=(4)\n4 down contact=12s", req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "promote unstable", view: "voters=(1 2 3) learners=(4)\n4 ready=3s", req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "promote stable enough", view: "voters=(1 2 3) learners=(4)\n4 ready=10s", req: Promote(4)},
		{name: "promote without progress", view: "voters=(1 2 3) learners=(4)\n4 no-progress", req: Promote(4), want: []string{"learner_not_ready"}},
		{name: "replace by a lagging learner", view: "voters=(1 2 3) learners=(4)\n4 lag=3000", opts: last(5000), req: Replace(3, 4), want: []string{"learner_not_ready"}},

		// Voters.
		{name: "ten voters by add", view: "voters=(1 2 3 4 5 6 7 8 9)", req: AddVoter(member(10)), want: []string{"too_many_voters"}},
		{name: "ten voters by promote", view: "voters=(1 2 3 4 5 6 7 8 9) learners=(10)", req: Promote(10), want: []string{"too_many_voters"}},
		{name: "nine voters by promote", view: "voters=(1 2 3 4 5 6 7 8) learners=(9)", req: Promote(9)},

		// In progress.
		{name: "pending change", view: "voters=(1 2 3) learners=(4)", opts: pending, req: Promote(4), want: []string{"change_in_progress"}},
		{name: "joint blocks changes", view: "voters=(1 2 4)&&(1 2 3)", req: Remove(3), want: []string{"change_in_progress"}},
		{name: "joint can be left", view: "voters=(1 2 4)&&(1 2 3)", req: LeaveJoint()},
		{name: "leave while pending", view: "voters=(1 2 4)&&(1 2 3)", opts: pending, req: LeaveJoint(), want: []string{"change_in_progress"}},
		{name: "leave a simple config", view: "voters=(1 2 3)", req: LeaveJoint(), want: []string{"invalid_request"}},
		{name: "transfer while pending", view: "voters=(1 2 3)", opts: pending, req: TransferLeader(2)},

		// Quorum.
		{name: "direct voter add, healthy 3", view: "voters=(1 2 3)", req: AddVoter(member(4))},
		{name: "direct voter add, 5 with 1 down", view: "voters=(1 2 3 4 5)\n5 down", req: AddVoter(member(6))},
		{name: "direct voter add, 5 with 2 down", view: "voters=(1 2 3 4 5)\n4 down\n5 down", req: AddVoter(member(6)), want: []string{"quorum_at_risk"}},
		{name: "remove leaves minority", view: "voters=(1 2 3)\n3 down", req: Remove(2), want: []string{"quorum_at_risk"}},
		{name: "remove the dead", view: "voters=(1 2 3)\n3 down", req: Remove(3)},
		{name: "remove the last voter", view: "voters=(1)", req: Remove(1), want: []string{"quorum_at_risk"}},
		{name: "demote all", view: "voters=(1 2)", req: Demote(1, 2), want: []string{"quorum_at_risk"}},
		{name: "demote leader", view: "voters=(1 2 3)", req: Demote(1)},
		{name: "promote two into a weak cluster", view: "voters=(1 2 3) learners=(4 5)\n3 down", req: Promote(4, 5)},
		{name: "joint incoming half at risk", view: "voters=(1 2 3) learners=(4)\n3 down contact=1m\n4 ready=1s", s: Settings{Stabilization: time.Nanosecond}, req: Replace(2, 4)},
		{name: "joint incoming half lacks majority", view: "voters=(1 2 3 4 5)\n4 down\n5 down", req: Demote(2, 3), want: []string{"quorum_at_risk"}},
		{name: "replacing by a ready learner keeps the majority", view: "voters=(1 2 3 4 5) learners=(6)\n4 down\n5 down", req: Replace(3, 6)},
		{name: "joint current half lacks majority", view: "voters=(1 4 5)&&(1 2 3)\n2 down\n3 down", req: LeaveJoint(), want: []string{"quorum_at_risk"}},
		{name: "no active quorum", view: "voters=(1 2 3) learners=(4)\n2 down\n3 down", req: AddLearner(member(5)), want: []string{"quorum_at_risk"}},
		{name: "no leader in view", view: "voters=(1 2 3)", opts: leader(0), req: Remove(3)},
		{name: "leader not a voter", view: "voters=(2 3 4)\n3 down", opts: leader(1), req: AddLearner(member(5)), want: nil},

		// Leadership.
		{name: "transfer to voter", view: "voters=(1 2 3)", req: TransferLeader(3)},
		{name: "transfer to learner", view: "voters=(1 2 3) learners=(4)", req: TransferLeader(4), want: []string{"learner_cannot_lead"}},
		{name: "transfer to learner-next", view: "voters=(1 2 4)&&(1 2 3) learners_next=(3)", req: TransferLeader(3), want: []string{"learner_cannot_lead"}},
		{name: "transfer to leaving voter", view: "voters=(1 2 4)&&(1 2 3)", req: TransferLeader(3), want: []string{"learner_cannot_lead"}},
		{name: "transfer to unknown", view: "voters=(1 2 3)", req: TransferLeader(9), want: []string{"unknown_member"}},
		{name: "promote a leaving voter", view: "voters=(1 2 4)&&(1 2 3)", req: Promote(3), want: []string{"change_in_progress", "invalid_member"}},
		{name: "demote a leaving voter", view: "voters=(1 2 4)&&(1 2 3)", req: Demote(3), want: []string{"change_in_progress", "invalid_member"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []func(*View)
			if tt.opts != nil {
				opts = append(opts, tt.opts)
			}
			v := mustView(t, tt.view, opts...)
			v.ReadySince = readySinceFromView(t, tt.view, v, tt.s)
			got := Check(v, tt.s, tt.req)
			assert.Equal(t, tt.want, sortedCodes(got), refusalsString(got))
			p, err := PlanChange(v, tt.s, tt.req)
			if len(tt.want) == 0 {
				require.NoError(t, err)
				assert.Equal(t, tt.req, p.Request)
			} else {
				require.Error(t, err)
				assert.Equal(t, got[0].Code(), Code(err))
			}
		})
	}
}

// readySinceFromView recomputes ReadySince with the test's settings, keeping
// the ready= times parseView set.
func readySinceFromView(t *testing.T, _ string, v View, s Settings) map[uint64]time.Time {
	t.Helper()
	return UpdateReadySince(v, s)
}

func last(n uint64) func(*View) {
	return func(v *View) {
		v.LastIndex = n
		for id, pr := range v.Progress {
			pr.Match, pr.Next = n, n+1
			v.Progress[id] = pr
		}
	}
}

func removed(ids ...uint64) func(*View) {
	return func(v *View) {
		v.Removed = map[uint64]bool{}
		for _, id := range ids {
			v.Removed[id] = true
		}
	}
}

func record(m Member) func(*View) { return func(v *View) { v.Members[m.ID] = m } }

func leader(id uint64) func(*View) { return func(v *View) { v.Leader = id } }

func pending(v *View) { v.PendingChange = true }

func TestRefusalErrors(t *testing.T) {
	v := mustView(t, "voters=(1 2 3) learners=(4 5)\n4 lag=4210\n5 snapshot=7", last(100000))
	_, err := PlanChange(v, Settings{}, Promote(4, 5))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrLearnerNotReady)
	assert.NotErrorIs(t, err, ErrQuorumAtRisk)
	assert.Equal(t, "learner_not_ready", Code(err))
	var rs Refusals
	require.ErrorAs(t, err, &rs)
	require.Len(t, rs, 2)
	var r *Refusal
	require.ErrorAs(t, err, &r)
	assert.Equal(t, uint64(4), r.ID)
	assert.Equal(t, ReasonLagging, r.Readiness.Code)
	assert.Equal(t, uint64(4210), r.Readiness.Lag)
	assert.Equal(t, uint64(1000), r.Readiness.MaxLag)
	assert.Equal(t, "confchange: learner not ready: member 4: lag 4,210 entries > 1,000", r.Error())
	assert.Equal(t, r.Error()+"; "+rs[1].Error(), err.Error())
	assert.Len(t, rs.Unwrap(), 2)

	// A single refusal is the *Refusal itself.
	_, err = PlanChange(v, Settings{}, Promote(4))
	_, isOne := err.(*Refusal)
	assert.True(t, isOne)

	// Quorum data.
	v = mustView(t, "voters=(1 2 3)\n3 down")
	_, err = PlanChange(v, Settings{}, Remove(2))
	require.ErrorAs(t, err, &r)
	assert.Equal(t, Quorum{Phase: "new", Voters: "(1 3)", Count: 2, Active: 1, Need: 2}, r.Quorum)
	assert.Equal(t, "quorum_at_risk", r.Code())

	v = mustView(t, "voters=(1 2 3 4 5)\n4 down\n5 down")
	_, err = PlanChange(v, Settings{}, Demote(2, 3))
	require.ErrorAs(t, err, &r)
	assert.Equal(t, Quorum{Phase: "joint", Voters: "(1 4 5)&&(1 2 3 4 5)", Count: 3, Active: 1, Need: 2}, r.Quorum)
	assert.Equal(t, "confchange: quorum at risk: the joint configuration (1 4 5)&&(1 2 3 4 5): its incoming half (1 4 5) would have 1 of 3 voters active, needs 2", r.Error())
}

func TestCodes(t *testing.T) {
	for _, c := range codes {
		assert.Equal(t, c.code, Code(c.err))
		assert.Equal(t, c.code, Code(&Refusal{Err: c.err}))
		assert.Equal(t, c.code, Code(errors.Join(errors.New("x"), c.err)))
		assert.True(t, strings.HasPrefix(c.err.Error(), "confchange: "))
	}
	assert.Equal(t, "", Code(nil))
	assert.Equal(t, "", Code(errors.New("other")))
	want := []string{"learner_not_ready", "quorum_at_risk", "learner_cannot_lead", "change_in_progress",
		"too_many_learners", "member_exists", "unknown_member", "invalid_member", "too_many_voters", "member_read_only"}
	for _, w := range want {
		assert.True(t, slices.ContainsFunc(codes, func(c struct {
			err  error
			code string
		}) bool {
			return c.code == w
		}), w)
	}
}

func TestPeerAddr(t *testing.T) {
	good := []string{"10.0.0.1:7001", "localhost:1", "node-1.example.com:65535", "[::1]:7001", "[fe80::1%eth0]:7001", "a_b:80"}
	bad := []string{"", "10.0.0.1", ":7001", "h:", "h:0", "h:65536", "h:007", "h:+1", "h:1x", "::1:7001", "[::1:7001",
		"[]:1", "[zz]:1", "[::1%]:1", "http://h:1", "h/p:1", "user@h:1", "h h:1", strings.Repeat("a", 600) + ":1"}
	for _, a := range good {
		assert.Empty(t, checkPeerAddr(a), a)
	}
	for _, a := range bad {
		assert.NotEmpty(t, checkPeerAddr(a), a)
	}
	// A listen-everywhere address is never a member's record: every other
	// member would dial it as itself.
	for _, a := range []string{"0.0.0.0:7001", "0:7001", "[::]:7001", "[0:0::0]:7001", "[::%eth0]:7001"} {
		err := CheckPeerAddr(a)
		require.ErrorIs(t, err, ErrInvalidMember, a)
		assert.Contains(t, err.Error(), "unspecified", a)
	}
	assert.NoError(t, CheckPeerAddr("10.0.0.1:7001"))
	refs := Check(mustView(t, "voters=(1 2 3)"), DefaultSettings(), AddLearner(Member{ID: 4, PeerAddr: "0.0.0.0:7004"}))
	require.Len(t, refs, 1)
	require.ErrorIs(t, refs[0], ErrInvalidMember)
}

func TestPlanShapes(t *testing.T) {
	v := mustView(t, "voters=(1 2 3) learners=(4 5)\n3 down contact=1m")
	tests := []struct {
		req            Request
		changes, after string
		joint          bool
	}{
		{AddLearner(member(6)), "l6", "voters=(1 2 3) learners=(4 5 6)", false},
		{AddVoter(member(6)), "", "", false}, // refused: 2 of 4 active
		{Promote(4), "v4", "voters=(1 2 3 4) learners=(5)", false},
		{Promote(4, 5), "v4 v5", "voters=(1 2 3 4 5)", true},
		{Demote(3), "l3", "voters=(1 2) learners=(3 4 5)", false},
		{Remove(3), "r3", "voters=(1 2) learners=(4 5)", false},
		{Remove(5), "r5", "voters=(1 2 3) learners=(4)", false},
		{Replace(3, 4), "v4 r3", "voters=(1 2 4) learners=(5)", true},
		{Swap(3, 4), "v4 l3", "voters=(1 2 4) learners=(3 5)", true},
		{UpdateMember(Member{ID: 3, PeerAddr: "x:1"}), "u3", "voters=(1 2 3) learners=(4 5)", false},
	}
	for _, tt := range tests {
		t.Run(tt.req.String(), func(t *testing.T) {
			tt.req.ChangeID = 42
			p, err := PlanChange(v, Settings{MaxLearners: 3}, tt.req)
			if tt.changes == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.changes, raftpb.ConfChangesToString(p.Change.GetChanges()))
			assert.Equal(t, tt.after, p.After.String())
			assert.Equal(t, tt.joint, p.EntersJoint())
			assert.Equal(t, p.Description, p.String())
			autoLeave, joint := p.Change.EnterJoint()
			assert.Equal(t, tt.joint, joint)
			assert.False(t, autoLeave, "joint changes are left explicitly")
			if tt.joint {
				assert.Equal(t, raftpb.ConfChangeTransitionJointExplicit, p.Change.GetTransition())
			} else {
				assert.Nil(t, p.Change.Transition)
			}
			ctx, err := DecodeContext(p.Change.GetContext())
			require.NoError(t, err)
			assert.Equal(t, uint64(42), ctx.ChangeID)
			assert.Equal(t, len(p.Members), len(ctx.Members))
		})
	}
}

func TestLeaveJointChange(t *testing.T) {
	cc := LeaveJointChange(7)
	assert.True(t, cc.LeaveJoint())
	ctx, err := DecodeContext(cc.GetContext())
	require.NoError(t, err)
	assert.Equal(t, Context{ChangeID: 7}, ctx)
	_, err = Config{Voters: []uint64{1}}.apply(cc)
	assert.Error(t, err, "raft refuses to leave a config that is not joint")
}

func TestTransferPlan(t *testing.T) {
	v := mustView(t, "voters=(1 2 3)")
	p, err := PlanChange(v, Settings{}, TransferLeader(2))
	require.NoError(t, err)
	assert.Nil(t, p.Change)
	assert.False(t, p.EntersJoint())
	assert.True(t, p.After.Equal(v.Config))
}
