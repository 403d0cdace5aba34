package raft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// waitSettings waits until every running member applied settings
// satisfying ok.
func waitSettings(ctx context.Context, t *testing.T, c *cluster.Cluster, what string, ok func(confchange.ClusterSettings) bool) {
	t.Helper()
	for {
		all := true
		for _, m := range c.Running() {
			all = all && ok(m.Node.Settings())
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("settings never %s: %v", what, c.Running()[0].Node.Settings())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestReplicatedSettingsScaleUpAndDown: the cluster settings travel through
// the log; raising the target promotes two ready standbys at once, lowering
// it demotes two voters at once (never the leader), and the voter count is
// odd in every configuration outside a joint one.
func TestReplicatedSettingsScaleUpAndDown(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, Membership: fastMembership, SnapshotCount: 100, SnapshotCatchUpEntries: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	// The first leader replicates the seed settings.
	waitSettings(ctx, t, c, "replicated", func(cs confchange.ClusterSettings) bool { return cs.TargetVoters == 3 && cs.AutoPromote })

	// Every applied configuration, checked for an odd voter count.
	events, unsub := lead.Node.Subscribe(1024)
	defer unsub()
	even := make(chan string, 16)
	go func() {
		for e := range events {
			if e.Type != raft.EventMembershipChanged {
				continue
			}
			st, err := lead.Node.Status(ctx)
			if err == nil && !st.Joint() && len(st.Voters)%2 == 0 {
				even <- fmt.Sprintf("voters %v learners %v", st.Voters, st.Learners)
			}
		}
	}()

	for _, id := range []uint64{4, 5} {
		if err := lead.Node.AddLearner(ctx, c.Record(id)); err != nil {
			t.Fatal(err)
		}
		c.Join(id)
	}
	f := follower(t, c, lead)
	if err := f.Node.UpdateSettings(ctx, confchange.ClusterSettings{TargetVoters: 4, MaxLearners: 2, AutoPromote: true, FailoverAfter: time.Minute}); !errors.Is(err, confchange.ErrInvalidSettings) {
		t.Fatalf("an even target: %v, want ErrInvalidSettings", err)
	}
	cs := f.Node.Settings()
	cs.TargetVoters = 5
	if err := f.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatalf("raising the target through a follower: %v", err)
	}
	waitSettings(ctx, t, c, "at target 5", func(cs confchange.ClusterSettings) bool { return cs.TargetVoters == 5 })
	waitMembership(ctx, t, lead.Node, "five voters", func(m raft.Membership) bool { return len(m.Config.Voters) == 5 && !m.Joint() })

	cs.TargetVoters = 3
	cs.FailoverAfter = 77 * time.Second // a value no member's Config seeds
	if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatal(err)
	}
	m := waitMembership(ctx, t, lead.Node, "three voters", func(m raft.Membership) bool { return len(m.Config.Voters) == 3 && !m.Joint() })
	if !slices.Contains(m.Config.Voters, m.Leader) || len(m.Config.Learners) != 2 {
		t.Fatalf("after scaling down: leader %d, %v", m.Leader, m.Config)
	}
	select {
	case s := <-even:
		t.Fatalf("an even voter count was applied: %s", s)
	default:
	}

	// The settings survive a restart and travel in snapshots: a member that
	// joins after compaction learns them from the snapshot.
	for i := range 300 {
		if _, err := lead.Node.Propose(ctx, kv.Put("k", string(rune('a'+i%26)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lead.Node.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(f.ID)
	c.Restart(f.ID)
	if err := lead.Node.RemoveMember(ctx, m.Config.Learners[0]); err != nil {
		t.Fatal(err)
	}
	if err := lead.Node.AddLearner(ctx, c.Record(6)); err != nil {
		t.Fatal(err)
	}
	c.Join(6)
	waitSettings(ctx, t, c, "the same everywhere after a restart and a snapshot", func(cs confchange.ClusterSettings) bool {
		return cs.TargetVoters == 3 && cs.FailoverAfter == 77*time.Second
	})
	if c.Net.SnapshotsTo(6) == 0 {
		t.Fatal("member 6 caught up without a snapshot: the test does not cover settings in snapshots")
	}
}

// TestScaleUpWaitsForEnoughStandbys: with one ready standby and two seats
// to fill, nothing changes (never four voters), and Membership says what
// the policy waits for; a read-only learner never counts, even when it is
// the only ready one.
func TestScaleUpWaitsForEnoughStandbys(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, Membership: fastMembership})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	waitSettings(ctx, t, c, "replicated", func(cs confchange.ClusterSettings) bool { return cs.AutoPromote })
	ro := c.Record(4)
	ro.ReadOnly = true
	if err := lead.Node.AddLearner(ctx, ro); err != nil {
		t.Fatal(err)
	}
	c.Join(4)
	if err := lead.Node.AddLearner(ctx, c.Record(5)); err != nil {
		t.Fatal(err)
	}
	c.Join(5)
	events, unsub := lead.Node.Subscribe(256)
	defer unsub()
	cs := lead.Node.Settings()
	cs.TargetVoters = 5
	if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatal(err)
	}
	for waiting := false; !waiting; {
		select {
		case e := <-events:
			waiting = e.Type == raft.EventPolicyWaiting && strings.Contains(e.Detail, "waiting for 2 ready standbys")
		case <-ctx.Done():
			t.Fatal("no EventPolicyWaiting saying what the policy waits for")
		}
	}
	m := waitMembership(ctx, t, lead.Node, "waiting for a second standby", func(m raft.Membership) bool {
		return strings.Contains(m.Waiting, "waiting for 2 ready standbys") && strings.Contains(m.Waiting, "(1 ready)")
	})
	if len(m.Config.Voters) != 3 {
		t.Fatalf("voters %v while waiting", m.Config.Voters)
	}
	if _, err := lead.Node.ChangeMembership(ctx, confchange.Promote(4)); !errors.Is(err, confchange.ErrMemberReadOnly) {
		t.Fatalf("promoting a read-only learner: %v", err)
	}
	// Made promotable, it fills the second seat.
	ro.ReadOnly = false
	if err := lead.Node.UpdateMember(ctx, ro); err != nil {
		t.Fatal(err)
	}
	waitMembership(ctx, t, lead.Node, "five voters", func(m raft.Membership) bool { return len(m.Config.Voters) == 5 && !m.Joint() && m.Waiting == "" })
}

// TestDryRunReportsEveryRefusal: CheckMembership returns every reason at
// once, each with its code, and proposes nothing.
func TestDryRunReportsEveryRefusal(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true, Membership: confchange.Settings{MaxLearners: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	// Replicated explicitly, so that the leader seeds nothing meanwhile.
	if err := lead.Node.UpdateSettings(ctx, lead.Node.Settings()); err != nil {
		t.Fatal(err)
	}
	if err := lead.Node.AddLearner(ctx, c.Record(4)); err != nil {
		t.Fatal(err)
	}
	before, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dup := c.Record(5)
	dup.PeerAddr = c.Record(1).PeerAddr // an address in use, and one learner too many
	_, err = f(c, lead).Node.CheckMembership(ctx, confchange.AddLearner(dup))
	var refs confchange.Refusals
	if !errors.As(err, &refs) || len(refs) < 2 {
		t.Fatalf("dry run: %v, want several refusals", err)
	}
	codes := map[string]bool{}
	for _, r := range refs {
		codes[r.Code()] = true
	}
	if !codes["too_many_learners"] || !codes["member_exists"] {
		t.Fatalf("codes %v", codes)
	}
	after, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireNoConfChange(t, lead, before.LastIndex, after.LastIndex)
}

func f(c *cluster.Cluster, lead *cluster.Member) *cluster.Member {
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			return m
		}
	}
	return lead
}

// TestSettingsSurviveFullRestart: every member stopped and started again
// keeps the replicated settings, whatever its Config now says.
func TestSettingsSurviveFullRestart(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	waitSettings(ctx, t, c, "replicated", func(cs confchange.ClusterSettings) bool { return cs.AutoPromote })
	cs := lead.Node.Settings()
	cs.MaxLearners, cs.FailoverAfter, cs.RemoveDeadAfter = 5, 42*time.Second, time.Hour
	if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatal(err)
	}
	waitSettings(ctx, t, c, "updated", func(got confchange.ClusterSettings) bool { return got == cs })
	for _, id := range c.Members() {
		c.Stop(id)
	}
	for _, id := range c.Members() {
		c.Restart(id)
	}
	c.WaitLeader()
	waitSettings(ctx, t, c, "kept across a full restart", func(got confchange.ClusterSettings) bool { return got == cs })
}

// TestReadinessSurvivesLeaderChange: a learner stable for a while under
// one leader is not sent back to zero by a leader change: the new leader
// credits the time recorded in the log.
func TestReadinessSurvivesLeaderChange(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "transfer"
		if crash {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) { testReadinessAcrossLeaders(t, crash) })
	}
}

// testReadinessAcrossLeaders: learner 4 has been stable for 1.5 s when the
// leader hands over (crash false) or crashes (true); under the next leader
// its stabilization clock goes on instead of starting over.
func testReadinessAcrossLeaders(t *testing.T, crash bool) {
	c := cluster.New(t, cluster.Options{Members: 3, ManualMembership: true, Membership: confchange.Settings{Stabilization: 5 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	if err := lead.Node.AddLearner(ctx, c.Record(4)); err != nil {
		t.Fatal(err)
	}
	c.Join(4)
	stable := func(node *raft.Node) time.Duration {
		m, err := node.Membership(ctx)
		if err != nil {
			return -1
		}
		for _, ms := range m.Members {
			if ms.ID == 4 && (ms.Readiness.Code == confchange.ReasonStabilizing || ms.Readiness.Code == confchange.ReasonReady) {
				return ms.Readiness.For
			}
		}
		return -1
	}
	for stable(lead.Node) < 1500*time.Millisecond {
		select {
		case <-ctx.Done():
			t.Fatal("learner 4 never stabilized")
		case <-time.After(20 * time.Millisecond):
		}
	}
	next := follower(t, c, lead)
	if crash {
		c.Crash(lead.ID)
		next = c.WaitLeader()
	} else if err := lead.Node.TransferLeadership(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	// Under the new leader, once it sees the learner caught up, the clock
	// goes on from where it was (give or take the record's delay).
	var got time.Duration
	for got = stable(next.Node); got < 0; got = stable(next.Node) {
		select {
		case <-ctx.Done():
			t.Fatal("the new leader never saw learner 4 ready")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got < time.Second {
		t.Fatalf("after the leader change, learner 4 is stable for %v: the clock started over", got)
	}
}

// TestCheckSettingsPreviewsThePolicy: the settings' dry run, through a
// follower, reports every invalid field at once, and for valid settings
// what the default policy would do next on the membership as it is —
// promote both ready standbys for a target of five, demote two voters for
// a target of one — and changes nothing.
func TestCheckSettingsPreviewsThePolicy(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, Membership: fastMembership})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	waitSettings(ctx, t, c, "replicated", func(cs confchange.ClusterSettings) bool { return cs.TargetVoters == 3 })
	for _, id := range []uint64{4, 5} {
		addLearner(ctx, t, c, lead.Node, id)
	}
	waitMembership(ctx, t, lead.Node, "standbys 4 and 5 ready", func(m raft.Membership) bool { return ready(4)(m) && ready(5)(m) })
	f := follower(t, c, lead)
	before := f.Node.Settings()

	bad := before
	bad.TargetVoters, bad.MaxLearners = 4, 0
	if _, err := f.Node.CheckSettings(ctx, bad); !errors.Is(err, confchange.ErrInvalidSettings) ||
		!strings.Contains(err.Error(), "target voters") || !strings.Contains(err.Error(), "max learners") {
		t.Fatalf("two invalid fields: %v, want both reported", err)
	}
	for _, tc := range []struct {
		target int
		want   string
	}{{5, "promote 4 5"}, {1, "demote"}, {3, "change nothing"}} {
		cs := before
		cs.TargetVoters = tc.target
		plan, err := f.Node.CheckSettings(ctx, cs)
		if err != nil || !strings.Contains(plan, tc.want) {
			t.Fatalf("target %d: %q, %v; want a plan with %q", tc.target, plan, err, tc.want)
		}
		if _, ids, ok := strings.Cut(plan, "would then: demote "); ok && slices.Contains(strings.Fields(ids), fmt.Sprint(lead.ID)) {
			t.Fatalf("target %d would demote the leader %d: %q", tc.target, lead.ID, plan)
		}
	}
	off := before
	off.AutoPromote, off.TargetVoters = false, 5
	if plan, err := f.Node.CheckSettings(ctx, off); err != nil || !strings.Contains(plan, "automatic changes off") {
		t.Fatalf("auto-promote off: %q, %v", plan, err)
	}
	if got := f.Node.Settings(); got != before {
		t.Fatalf("a dry run changed the settings: %v → %v", before, got)
	}
	m, err := lead.Node.Membership(ctx)
	if err != nil || len(m.Config.Voters) != 3 {
		t.Fatalf("a dry run changed the membership: %v, %v", m.Config, err)
	}
}
