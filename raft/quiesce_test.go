package raft_test

import (
	"context"
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

// quiesceCluster starts a cluster with Quiesce on and every member's host
// live.
func quiesceCluster(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.Quiesce = true
	c := cluster.New(t, opts)
	for _, id := range c.Members() {
		c.Net.SetHostLive(id, true)
	}
	return c
}

// waitQuiesced waits until every running member of c reports its group
// quiesced.
func waitQuiesced(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for {
		all := true
		for _, m := range c.Running() {
			st, err := m.Node.Status(ctx)
			if err != nil {
				t.Fatalf("member %d: Status: %v", m.ID, err)
			}
			if !st.Quiesced {
				all = false
			}
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			for _, m := range c.Running() {
				st, _ := m.Node.Status(context.Background())
				t.Logf("member %d: quiesced %t commit %d wakes %v", m.ID, st.Quiesced, st.Commit, wakes(m.Node))
			}
			t.Fatalf("the group did not quiesce: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// quietSpell lets several election timeouts pass (the cluster's ticks are
// 10 ms, its election timeout 100 ms).
func quietSpell() { time.Sleep(300 * time.Millisecond) }

func wakes(n *raft.Node) map[string]uint64 { return raft.SchedStats(n).Wakes }

// TestQuiescedGroupSendsNothingAndIsNotTicked: an idle group with every
// member caught up on a live host quiesces; then no member sends a
// message or ticks, whatever time passes, Status and Membership calls
// (a metrics scrape) included; the leader's Status says the members are
// recently active through their hosts, and its scheduler counts it
// quiesced.
func TestQuiescedGroupSendsNothingAndIsNotTicked(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	// A follower may quiesce in the loop pass that answers a heartbeat,
	// and a Status asked in that pass is answered before the pass sends
	// the answer: one more call on each member is answered after it.
	for _, m := range c.Running() {
		if _, err := m.Node.Status(ctx); err != nil {
			t.Fatalf("member %d: Status: %v", m.ID, err)
		}
	}
	sent := c.Net.Stats().Sent
	ticks := map[uint64]uint64{}
	for _, m := range c.Running() {
		ticks[m.ID] = raft.Ticks(m.Node)
	}
	quietSpell()
	for _, m := range c.Running() {
		if _, err := m.Node.Membership(ctx); err != nil {
			t.Fatalf("member %d: Membership: %v", m.ID, err)
		}
	}
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Net.Stats().Sent; got != sent {
		t.Fatalf("a quiesced group sent %d messages", got-sent)
	}
	for _, m := range c.Running() {
		if got := raft.Ticks(m.Node); got != ticks[m.ID] {
			t.Fatalf("member %d ticked %d times while quiesced", m.ID, got-ticks[m.ID])
		}
		if s := raft.SchedStats(m.Node); s.Quiesced != 1 {
			t.Fatalf("member %d: scheduler counts %d quiesced; want 1", m.ID, s.Quiesced)
		}
	}
	if !st.Quiesced || st.QuiescedSince.IsZero() {
		t.Fatalf("leader Status: Quiesced %t since %v", st.Quiesced, st.QuiescedSince)
	}
	for id, pp := range st.Progress {
		if !pp.RecentActive || !pp.ContactViaHost {
			t.Fatalf("quiesced member %d on a live host: RecentActive %t, ContactViaHost %t; want both", id, pp.RecentActive, pp.ContactViaHost)
		}
	}
	for _, m := range c.Running() {
		for cause, n := range wakes(m.Node) {
			if n != 0 && cause != "refused" {
				t.Fatalf("member %d woke by %s while only read (%d)", m.ID, cause, n)
			}
		}
	}
}

// TestEveryWakeCauseWakes: from a quiesced group, each call wakes the
// member it is made on (counted under its cause), succeeds, and the group
// quiesces again after.
func TestEveryWakeCauseWakes(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 15*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	follower := func() *raft.Node {
		for _, m := range c.Running() {
			if !m.Node.IsLeader() {
				return m.Node
			}
		}
		t.Fatal("no follower")
		return nil
	}
	leader := func() *raft.Node {
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l.Node
	}
	cases := []struct {
		name  string
		on    func() *raft.Node
		cause string
		do    func(n *raft.Node) error
	}{
		{"propose on the leader", leader, "proposal", func(n *raft.Node) error { _, err := n.Propose(ctx, kv.Put("a", "1")); return err }},
		{"propose on a follower", follower, "proposal", func(n *raft.Node) error { _, err := n.Propose(ctx, kv.Put("b", "1")); return err }},
		{"read on the leader", leader, "read", func(n *raft.Node) error { return n.ReadBarrier(ctx) }},
		{"read on a follower", follower, "read", func(n *raft.Node) error { return n.ReadBarrier(ctx) }},
		{"settings on a follower", follower, "proposal", func(n *raft.Node) error {
			cs := n.Settings()
			cs.FailoverAfter = 40 * time.Second
			return n.UpdateSettings(ctx, cs)
		}},
		{"membership change on the leader", leader, "call", func(n *raft.Node) error {
			// A dry run that the rules may refuse: either way it ran on
			// the leader's loop.
			_, _ = n.CheckMembership(ctx, confchange.Request{Op: confchange.OpRemove, IDs: []uint64{99}})
			return nil
		}},
		{"transfer on the leader", leader, "call", func(n *raft.Node) error {
			for _, m := range c.Running() {
				if m.ID != n.ID() {
					return n.TransferLeadership(ctx, m.ID)
				}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Log(tc.name)
		var n *raft.Node
		for attempt := 1; ; attempt++ {
			waitQuiesced(ctx, t, c)
			n = tc.on()
			before := wakes(n)
			// Still quiesced after the snapshot of its wakes? (A nudge or a
			// late message may have woken it since waitQuiesced.)
			if st, err := n.Status(ctx); err != nil {
				t.Fatal(err)
			} else if !st.Quiesced {
				if attempt == 5 {
					t.Fatalf("%s: member %d kept waking before the call (wakes %v)", tc.name, n.ID(), before)
				}
				continue
			}
			if err := tc.do(n); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			after := wakes(n)
			got := after[tc.cause] - before[tc.cause]
			if got == 1 {
				break
			}
			// Not woken by the call: retry only when something else (a
			// late message on a loaded machine) woke the member between
			// the check and the call, so the call found it awake.
			other := false
			for cause, k := range after {
				other = other || (cause != tc.cause && k > before[cause])
			}
			if got != 0 || !other || attempt == 5 {
				t.Fatalf("%s: member %d woke by %q %d times; want once (wakes before %v, after %v)", tc.name, n.ID(), tc.cause, got, before, after)
			}
			t.Logf("%s: member %d was woken by another cause before the call (wakes before %v, after %v): again", tc.name, n.ID(), before, after)
		}
		if !n.IsLeader() && !strings.HasPrefix(tc.name, "transfer") {
			// The leader was woken by the message the follower sent.
			if l := leader(); wakes(l)["message"]+wakes(l)["nudge"] == 0 {
				t.Fatalf("%s: the leader never woke by a message", tc.name)
			}
		}
	}
	waitQuiesced(ctx, t, c)
}

// TestQuiescedJoinReadinessAndFailover: a join started through a follower
// of a quiesced group wakes it and completes (the group stays awake until
// the learner is ready and recorded so, then quiesces with it); through a
// quiet spell longer than FailoverAfter, the quiesced learner stays ready
// and no voter is failed over while their hosts live — during the spell
// (through their hosts: "via host") and after a wake (the hosts' contact is
// carried into the group's); once a voter's host dies, the leader wakes
// (at once, or at the policy's deadline) and the policy fails it over to
// the standby.
func TestQuiescedJoinReadinessAndFailover(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{Membership: confchange.Settings{
		Stabilization: 100 * time.Millisecond, FailoverAfter: 500 * time.Millisecond,
	}})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	via := follower(t, c, lead)
	c.Net.SetHostLive(4, true)
	addLearner(ctx, t, c, via.Node, 4)
	if w := wakes(lead.Node)["message"] + wakes(lead.Node)["call"] + wakes(lead.Node)["nudge"]; w == 0 {
		t.Fatalf("the join did not wake the leader: %v", wakes(lead.Node))
	}
	waitMembership(ctx, t, lead.Node, "learner 4 ready", ready(4))
	waitQuiesced(ctx, t, c)
	voters := func() []uint64 {
		m, err := lead.Node.Membership(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Config.Voters
	}
	before := voters()

	time.Sleep(800 * time.Millisecond) // longer than FailoverAfter, quiesced
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := memberStatus(m, 4)
	if !s.Readiness.Ready() || s.Progress == nil || !s.Progress.ViaHost {
		t.Fatalf("quiesced learner 4 on a live host: %+v; want ready, via its host", s)
	}
	if !slices.Equal(m.Config.Voters, before) {
		t.Fatalf("voters changed while quiesced: %v, was %v", m.Config.Voters, before)
	}
	// A write wakes the group: the hosts' contact carries over, the
	// policy finds nothing to do, and the group quiesces again.
	propose(ctx, t, lead.Node, kv.Put("k2", "v"))
	waitQuiesced(ctx, t, c)
	if got := voters(); !slices.Equal(got, before) {
		t.Fatalf("voters changed after a wake: %v, was %v (stale contact read as silence)", got, before)
	}
	m, _ = lead.Node.Membership(ctx)
	if s, _ := memberStatus(m, 4); !s.Readiness.Ready() {
		t.Fatalf("learner 4 not ready after a wake: %+v", s)
	}

	lost := follower(t, c, lead).ID
	woken := wakes(lead.Node)["hostDown"] + wakes(lead.Node)["policy"]
	c.Crash(lost)
	c.Net.SetHostLive(lost, false)
	waitMembership(ctx, t, lead.Node, "lost voter failed over to 4", func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && !slices.Contains(m.Config.Voters, lost) && !m.Joint() && !m.Pending
	})
	if w := wakes(lead.Node)["hostDown"] + wakes(lead.Node)["policy"]; w == woken {
		t.Fatalf("the leader was not woken by its member's host's death or the policy's deadline after it: %v", wakes(lead.Node))
	}
	propose(ctx, t, lead.Node, kv.Put("after", "failover"))
}

// TestQuiescedLeaderHostDies: the leader of a quiesced group crashes and
// its host is declared dead: the followers, which tick no more, wake
// (through the throttle), forget the leader and elect a new one; every
// acknowledged write is there.
func TestQuiescedLeaderHostDies(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	for i := range 5 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", i), "v"))
	}
	waitQuiesced(ctx, t, c)
	term := lead.Node.Term()
	c.Crash(lead.ID)
	c.Net.SetHostLive(lead.ID, false)
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("no new leader after the quiesced leader's host died: %v", err)
	}
	if next.ID == lead.ID || next.Node.Term() <= term {
		t.Fatalf("leader %d at term %d; want another member, a later term than %d", next.ID, next.Node.Term(), term)
	}
	var woken uint64
	for _, m := range c.Running() {
		woken += wakes(m.Node)["leaderDead"]
	}
	if woken == 0 {
		t.Fatal("no follower was woken by its leader's host's death")
	}
	for i := range 5 {
		got, err := next.Node.Read(ctx, []byte(fmt.Sprintf("k%d", i)))
		if err != nil || string(got) != "v" {
			t.Fatalf("acknowledged write k%d after failover: %q, %v", i, got, err)
		}
	}
}

// TestQuiescedFollowerPartitionedAndBack: a follower of a quiesced group
// is cut off, woken (a read that cannot finish), times out and prevotes
// into the void; back, it disrupts nothing: same leader, same term (its
// prevotes never raised a term), and the group quiesces again.
func TestQuiescedFollowerPartitionedAndBack(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	term := lead.Node.Term()
	f := follower(t, c, lead)
	c.Net.Isolate(f.ID)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // several election timeouts
	if err := f.Node.ReadBarrier(rctx); err == nil {
		t.Fatal("a read on an isolated follower finished")
	}
	cancel()
	c.Net.Heal()
	propose(ctx, t, lead.Node, kv.Put("k2", "v"))
	waitQuiesced(ctx, t, c)
	for _, m := range c.Running() {
		if m.Node.Term() != term || m.Node.Leader() != lead.ID {
			t.Fatalf("member %d: leader %d term %d; want %d at term %d (no disruption)", m.ID, m.Node.Leader(), m.Node.Term(), lead.ID, term)
		}
	}
}

// TestQuiescedFollowersKnowTheHeir: in a quiesced group exactly one
// follower is the heir (raft.QuietHeir) — the first of the voters but the
// leader in the order members campaign in when a leader's host dies
// (VoterOrder) — so that its wake goes first in its host's throttle; the
// leader is none. A wake clears nothing that matters: after a write and a
// new quiescence, the same.
func TestQuiescedFollowersKnowTheHeir(t *testing.T) {
	c := quiesceCluster(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	for round := range 2 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", round), "v"))
		waitQuiesced(ctx, t, c)
		var others []uint64
		for _, id := range c.Members() {
			if id != lead.ID {
				others = append(others, id)
			}
		}
		want := raft.VoterOrder(lead.Node.ClusterID(), others)[0]
		for _, m := range c.Running() {
			if got := raft.QuietHeir(m.Node); got != (m.ID == want) {
				t.Fatalf("round %d: member %d QuietHeir %t; want the heir to be %d (leader %d)", round, m.ID, got, want, lead.ID)
			}
		}
	}
}

// edgePolicy is the default policy that, asked just before a learner's
// stabilization ends, answers just after (what a loaded machine's clock
// does at random, made certain).
type edgePolicy struct {
	confchange.DefaultPolicy
	within time.Duration
}

func (p edgePolicy) Next(v confchange.View) (confchange.Request, bool) {
	for _, since := range v.ReadySince {
		if end := since.Add(p.Settings.Stabilization); v.Now.Before(end) && end.Sub(v.Now) < p.within {
			time.Sleep(end.Sub(v.Now) + time.Millisecond)
		}
	}
	return p.DefaultPolicy.Next(v)
}

// TestQuiesceDoesNotStrandAPromotion: two learners finish stabilizing in
// an otherwise idle group whose target is 5 voters, its policy asked just
// before a learner is stable and answering just after. The group must not
// quiesce on the policy's "no change" with the learner then judged stable:
// a quiesced leader asks the policy nothing more, and the promotion would
// never happen (kvserver's TestScaleUpAndDown, about 1 run in 10 under
// load, when the two judged at two instants). Both are promoted.
func TestQuiesceDoesNotStrandAPromotion(t *testing.T) {
	s := confchange.Settings{TargetVoters: 5, Stabilization: time.Second}
	c := quiesceCluster(t, cluster.Options{Membership: s, Policy: edgePolicy{confchange.DefaultPolicy{Settings: s}, 20 * time.Millisecond}})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	for _, id := range []uint64{4, 5} {
		c.Net.SetHostLive(id, true)
		addLearner(ctx, t, c, lead.Node, id)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	waitMembership(wctx, t, lead.Node, "learners 4 and 5 promoted", func(m raft.Membership) bool {
		return len(m.Config.Voters) == 5 && !m.Joint() && !m.Pending
	})
}
