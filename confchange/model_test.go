package confchange

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

func TestConfigFromConfState(t *testing.T) {
	cs := &raftpb.ConfState{Voters: []uint64{3, 1, 2}, VotersOutgoing: []uint64{1, 2, 4}, Learners: []uint64{5}, LearnersNext: []uint64{4}, AutoLeave: new(true)}
	c := ConfigFromConfState(cs)
	assert.Equal(t, "voters=(1 2 3)&&(1 2 4) learners=(5) learners_next=(4) autoleave", c.String())
	assert.True(t, c.Joint())
	assert.NoError(t, c.ConfState().Equivalent(cs))
	assert.True(t, ConfigFromConfState(c.ConfState()).Equal(c))
	assert.Equal(t, "(1 2 3)&&(1 2 4)", c.VotersString())
	assert.Equal(t, []uint64{1, 2, 3, 4, 5}, c.IDs())

	assert.Equal(t, "voters=()", ConfigFromConfState(nil).String())
	assert.Nil(t, ConfigFromConfState(nil).ConfState().AutoLeave)
	assert.False(t, c.Equal(Config{Voters: []uint64{1, 2, 3}}))
}

func TestConfigStringMatchesEtcd(t *testing.T) {
	// etcd's tracker prints IDs in hex; below 10 the two agree.
	for _, s := range []string{"voters=(1 2 3)", "voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3)", "voters=(1)&&(1) autoleave"} {
		c, err := parseConfig(s)
		require.NoError(t, err)
		trk, err := c.tracker()
		require.NoError(t, err)
		assert.Equal(t, trk.Config.String(), c.String())
		assert.Equal(t, s, c.String())
	}
	_, err := parseConfig("bogus=(1)")
	assert.Error(t, err)
	_, err = parseConfig("voters=(x)")
	assert.Error(t, err)
}

func TestConfigValidate(t *testing.T) {
	for _, s := range []string{"voters=()", "voters=(1 2) learners=(2)", "voters=(1) learners_next=(2)", "voters=(1) autoleave", "voters=(1)&&(2) learners=(2)"} {
		c, err := parseConfig(s)
		require.NoError(t, err)
		assert.Error(t, c.validate(), s)
	}
	for _, s := range []string{"voters=(1)", "voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3)", "voters=(2)&&(1)"} {
		c, err := parseConfig(s)
		require.NoError(t, err)
		assert.NoError(t, c.validate(), s)
	}
}

// TestQuickValidate compares validate with what raft itself does: restore
// the ConfState and read it back unchanged.
func TestQuickValidate(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pick := func() []uint64 {
		var out []uint64
		for id := uint64(1); id <= 5; id++ {
			if r.IntN(3) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	for range 5000 {
		c := Config{Voters: pick(), VotersOutgoing: pick(), Learners: pick(), LearnersNext: pick(), AutoLeave: r.IntN(4) == 0}.Normalize()
		if r.IntN(2) == 0 {
			c.LearnersNext = nil
		}
		trk, err := c.tracker()
		raftOK := err == nil && len(c.Voters) > 0 && configFromTracker(trk.Config).Equal(c)
		if got := c.validate() == nil; got != raftOK {
			t.Fatalf("validate(%s) = %v, raft: %v (%v)", c, got, raftOK, err)
		}
		if got := naiveValid(c); got != raftOK {
			t.Fatalf("naiveValid(%s) = %v, raft: %v", c, got, raftOK)
		}
	}
}

func TestRole(t *testing.T) {
	c, _ := parseConfig("voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3)")
	for id, want := range map[uint64]Role{1: RoleVoter, 4: RoleVoter, 3: RoleLearner, 5: RoleLearner, 9: RoleNone} {
		assert.Equal(t, want, c.Role(id), id)
	}
	c, _ = parseConfig("voters=(1 2 4)&&(1 2 3)")
	assert.Equal(t, RoleNone, c.Role(3))
	assert.True(t, c.Contains(3))
	assert.Equal(t, "voter learner none Role(9)", strings.Join([]string{RoleVoter.String(), RoleLearner.String(), RoleNone.String(), Role(9).String()}, " "))
}

func TestProgressFromTracker(t *testing.T) {
	now := t0
	for st, want := range map[tracker.StateType]ReplState{tracker.StateProbe: StateProbe, tracker.StateReplicate: StateReplicate, tracker.StateSnapshot: StateSnapshot} {
		p := ProgressFromTracker(tracker.Progress{Match: 5, Next: 6, State: st, PendingSnapshot: 3, RecentActive: true}, now)
		assert.Equal(t, Progress{Match: 5, Next: 6, State: want, PendingSnapshot: 3, RecentActive: true, LastContact: now}, p)
	}
	assert.Equal(t, "probe replicate snapshot ReplState(7)", strings.Join([]string{StateProbe.String(), StateReplicate.String(), StateSnapshot.String(), ReplState(7).String()}, " "))
	assert.Equal(t, uint64(0), Progress{Match: 10}.Lag(5))
	assert.Equal(t, uint64(5), Progress{Match: 5}.Lag(10))
	assert.Equal(t, "snapshot match=1 next=2 pending_snapshot=9 inactive", Progress{Match: 1, Next: 2, State: StateSnapshot, PendingSnapshot: 9}.String())
}

func TestMember(t *testing.T) {
	m := Member{ID: 4, PeerAddr: "h:1", ReadOnly: true, Metadata: map[string]string{"z": "1", "a": "2"}}
	assert.Equal(t, "4@h:1 read-only a=2 z=1", m.String())
	assert.True(t, m.Equal(m))
	assert.False(t, m.Equal(Member{ID: 4, PeerAddr: "h:1", ReadOnly: true}))
	assert.True(t, Member{ID: 1}.Equal(Member{ID: 1, Metadata: map[string]string{}}))
}

func TestRequestString(t *testing.T) {
	for want, r := range map[string]Request{
		"add-learner 4@h:1":   AddLearner(Member{ID: 4, PeerAddr: "h:1"}),
		"add-voter 4@h:1":     AddVoter(Member{ID: 4, PeerAddr: "h:1"}),
		"promote 4 5":         Promote(4, 5),
		"demote 2":            Demote(2),
		"remove 3":            Remove(3),
		"replace 3 by 4":      Replace(3, 4),
		"swap 3 for 4":        Swap(3, 4),
		"swap 3":              {Op: OpSwap, IDs: []uint64{3}},
		"update 2@h:2":        UpdateMember(Member{ID: 2, PeerAddr: "h:2"}),
		"leave-joint":         LeaveJoint(),
		"transfer-leader 2":   TransferLeader(2),
		"Op(42)":              {Op: 42},
		"Op(0) 1":             {IDs: []uint64{1}},
		"promote 1 2 3 4 5 6": Promote(1, 2, 3, 4, 5, 6),
	} {
		assert.Equal(t, want, r.String())
	}
}

func TestReasonStrings(t *testing.T) {
	for want, r := range map[string]Reason{
		"ready":                                      {Code: ReasonReady},
		"leader":                                     {Code: ReasonLeader},
		"not a member":                               {Code: ReasonNotMember},
		"no progress known":                          {Code: ReasonNoProgress},
		"never contacted":                            {Code: ReasonNoContact},
		"no contact for 12s":                         {Code: ReasonNoContact, For: 12*time.Second + 400*time.Millisecond, LastContact: t0},
		"no contact for 2m5s":                        {Code: ReasonNoContact, For: 125 * time.Second, LastContact: t0},
		"not recently active":                        {Code: ReasonNoContact, LastContact: t0},
		"refused: cluster mismatch":                  {Code: ReasonNoContact, For: time.Second, LastContact: t0, Refused: "cluster_mismatch"},
		"refused: unknown sender":                    {Code: ReasonNoContact, Refused: "unknown_sender"},
		"snapshot in flight":                         {Code: ReasonSnapshot},
		"snapshot in flight (index 12,345)":          {Code: ReasonSnapshot, Snapshot: 12345},
		"probing, not replicating":                   {Code: ReasonProbing},
		"lag 4,210 entries > 1,000":                  {Code: ReasonLagging, Lag: 4210, MaxLag: 1000},
		"lag 18,446,744,073,709,551,615 entries > 0": {Code: ReasonLagging, Lag: 1<<64 - 1},
		"stable for 3s of 10s":                       {Code: ReasonStabilizing, For: 3 * time.Second, Need: 10 * time.Second},
		"stable for 2.5s of 1m0s":                    {Code: ReasonStabilizing, For: 2500 * time.Millisecond, Need: time.Minute},
		"stable for 0s of 999ms":                     {Code: ReasonStabilizing, For: -time.Second, Need: 999 * time.Millisecond},
		"incarnation not published yet":              {Code: ReasonUnpublished},
		"ReasonCode(99)":                             {Code: 99},
	} {
		assert.Equal(t, want, r.String())
	}
	assert.True(t, Reason{Code: ReasonLeader}.Ready())
	assert.False(t, Reason{Code: ReasonStabilizing}.Ready())
	assert.Equal(t, "1", commas(1))
	assert.Equal(t, "999", commas(999))
	assert.Equal(t, "1,000", commas(1000))
	assert.Equal(t, "0", commas(0))
}

func TestReadiness(t *testing.T) {
	s := Settings{Stabilization: 10 * time.Second, MaxLag: 100}
	v := mustView(t, "voters=(1 2 3) learners=(4)\n4 lag=50")
	// Ready since: missing means "from now on"; a future time is clamped.
	v.ReadySince = nil
	assert.Equal(t, Reason{Code: ReasonStabilizing, Lag: 50, MaxLag: 100, Need: 10 * time.Second}, Readiness(v, s, 4))
	v.ReadySince = map[uint64]time.Time{4: t0.Add(time.Hour)}
	assert.Equal(t, ReasonStabilizing, Readiness(v, s, 4).Code)
	v.ReadySince = map[uint64]time.Time{4: t0.Add(-10 * time.Second)}
	r := Readiness(v, s, 4)
	assert.True(t, r.Ready())
	assert.Equal(t, Reason{Code: ReasonReady, Lag: 50, MaxLag: 100, For: 10 * time.Second, Need: 10 * time.Second}, r)

	// The leader, non-members and ID 0.
	assert.Equal(t, ReasonLeader, Readiness(v, s, 1).Code)
	assert.Equal(t, ReasonNotMember, Readiness(v, s, 9).Code)
	assert.Equal(t, ReasonNotMember, Readiness(v, s, 0).Code)
	v.Leader = 0
	assert.Equal(t, ReasonNotMember, Readiness(v, s, 0).Code)

	// Snapshot pending in replicate state still counts as a snapshot.
	pr := v.Progress[4]
	pr.PendingSnapshot = 7
	v.Progress[4] = pr
	assert.Equal(t, ReasonSnapshot, Readiness(v, s, 4).Code)
}

func TestUpdateReadySince(t *testing.T) {
	v := mustView(t, "voters=(1 2 3) learners=(4 5)\n5 lag=5000", last(10000))
	v.ReadySince = map[uint64]time.Time{4: t0.Add(-time.Minute), 5: t0.Add(-time.Minute), 9: t0}
	got := UpdateReadySince(v, Settings{})
	assert.Equal(t, map[uint64]time.Time{2: t0, 3: t0, 4: t0.Add(-time.Minute)}, got, "leader, non-ready and non-members dropped; new ones start now")
	v.ReadySince = map[uint64]time.Time{4: t0.Add(time.Minute)}
	assert.Equal(t, t0, UpdateReadySince(v, Settings{})[4], "a future time is clamped to now")
}

func TestSettings(t *testing.T) {
	d := DefaultSettings()
	assert.Equal(t, Settings{TargetVoters: 3, MaxLearners: 2, FailoverAfter: 30 * time.Second, Stabilization: 10 * time.Second, SnapshotCount: 10000, MaxLag: 1000}, d)
	assert.NoError(t, Settings{}.Validate())
	assert.NoError(t, d.Validate())
	assert.Equal(t, uint64(1), Settings{SnapshotCount: 9}.WithDefaults().MaxLag)
	assert.Equal(t, uint64(50), Settings{SnapshotCount: 500}.WithDefaults().MaxLag)
	for _, n := range []int{1, 3, 5, 7, 9} {
		assert.NoError(t, Settings{TargetVoters: n}.Validate(), n)
	}
	for _, n := range []int{-1, 2, 4, 6, 8, 10, 11} {
		err := Settings{TargetVoters: n}.Validate()
		assert.ErrorIs(t, err, ErrInvalidSettings, n)
		assert.Contains(t, err.Error(), "TargetVoters")
	}
	err := Settings{TargetVoters: 2, MaxLearners: -1, FailoverAfter: -1, Stabilization: -1, RemoveDeadAfter: -1, SnapshotCount: 10, MaxLag: 11}.Validate()
	require.Error(t, err)
	assert.Len(t, err.(interface{ Unwrap() []error }).Unwrap(), 6, "every problem")
	for _, field := range []string{"TargetVoters (2)", "MaxLearners (-1)", "FailoverAfter (-1ns)", "Stabilization (-1ns)", "RemoveDeadAfter (-1ns)", "MaxLag (11)"} {
		assert.Contains(t, err.Error(), field)
	}
	assert.Equal(t, "invalid_setting", Code(err))
	assert.True(t, errors.Is(err, ErrInvalidSettings))
}

func TestViewString(t *testing.T) {
	v := mustView(t, "voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3)\n2 down contact=3s\n5 no-progress\n4 no-record", removed(7), pending)
	v.Progress[8] = Progress{}
	want := `voters=(1 2 4)&&(1 2 3) learners=(5) learners_next=(3) last=1000 pending-change
1 voter 1@10.0.0.1:7001 leader
2 voter 2@10.0.0.2:7001 replicate match=1000 next=1001 inactive lag=0 contact=3s-ago
3 voter(outgoing)->learner 3@10.0.0.3:7001 replicate match=1000 next=1001 active lag=0 contact=0s-ago ready-for=1h0m0s
4 voter(incoming) replicate match=1000 next=1001 active lag=0 contact=0s-ago ready-for=1h0m0s
5 learner 5@10.0.0.5:7001 no-progress
8 not-a-member probe match=0 next=0 inactive lag=1000
removed=(7)`
	assert.Equal(t, want, v.String())
	c, _ := parseConfig("voters=(1 2 4)&&(1 2 3)")
	v.Config = c
	assert.Equal(t, "voter(outgoing)", v.roleString(3))
}

// TestReadinessWaitsForAPublishedIncarnation: in a cluster whose members
// publish their incarnation (the leader's is recorded), a caught-up,
// stable learner whose own is not recorded yet is not ready — promoted
// so, it could lose its data and come back empty under its ID with no one
// the wiser — its stabilization clock does not run, and a promotion is
// refused with the reason; once recorded it is ready. In a cluster where
// no one publishes (a raw raft.Node's), nothing changes.
func TestReadinessWaitsForAPublishedIncarnation(t *testing.T) {
	s := Settings{Stabilization: 10 * time.Second, MaxLag: 100}
	v := mustView(t, "voters=(1 2 3) learners=(4)\n4 lag=50")
	v.ReadySince = map[uint64]time.Time{4: t0.Add(-time.Minute)}
	assert.True(t, Readiness(v, s, 4).Ready(), "no incarnations at all")
	set := func(id, inc uint64) {
		m := v.Members[id]
		m.Incarnation = inc
		v.Members[id] = m
	}
	set(1, 0xa)
	r := Readiness(v, s, 4)
	assert.Equal(t, ReasonUnpublished, r.Code)
	assert.Equal(t, "incarnation not published yet", r.String())
	_, ok := UpdateReadySince(v, s)[4]
	assert.False(t, ok, "the stabilization clock runs for an unpublished learner")
	_, err := PlanChange(v, s, Promote(4))
	assert.ErrorIs(t, err, ErrLearnerNotReady)
	assert.Contains(t, err.Error(), "incarnation not published yet")
	set(4, 0xb)
	assert.True(t, Readiness(v, s, 4).Ready())
	_, err = PlanChange(v, s, Promote(4))
	assert.NoError(t, err)
}
