package raft_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// quiescedWithStandby starts a quiescing cluster of 3 voters and a ready
// learner 4 (a standby: a lost voter is failed over to it after
// failoverAfter), writes, and waits until the group is quiesced. It
// returns the leader and a voter that does not lead.
func quiescedWithStandby(ctx context.Context, t *testing.T, failoverAfter time.Duration) (*cluster.Cluster, *cluster.Member, *cluster.Member) {
	t.Helper()
	c := quiesceCluster(t, cluster.Options{Membership: confchange.Settings{
		Stabilization: 100 * time.Millisecond, FailoverAfter: failoverAfter,
	}})
	lead := c.WaitLeader()
	c.Net.SetHostLive(4, true)
	addLearner(ctx, t, c, lead.Node, 4)
	waitMembership(ctx, t, lead.Node, "learner 4 ready", ready(4))
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	var f *cluster.Member
	for _, m := range c.Running() {
		if m.ID != lead.ID && m.ID != 4 {
			f = m
			break
		}
	}
	if f == nil {
		t.Fatal("no follower voter")
	}
	return c, lead, f
}

// TestQuiescedHostDownGroupTrafficFlows: the host of a voter of a
// quiesced group is declared not live while the group's own messages
// still flow (host liveness and group traffic disagree). The leader wakes
// (hostDown, or two election timeouts before the policy's deadline when it
// left the voter lagging in place); through a spell longer than FailoverAfter the voter answers
// the group, so nothing is failed over, and the group stays awake (a
// member on a host not live keeps it so). Once the host is live again
// the group quiesces again, the same voters.
func TestQuiescedHostDownGroupTrafficFlows(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, lead, f := quiescedWithStandby(ctx, t, 500*time.Millisecond)
	voters := func() []uint64 {
		m, err := lead.Node.Membership(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Config.Voters
	}
	before := voters()

	woken := func() uint64 { return wakes(lead.Node)["hostDown"] + wakes(lead.Node)["policy"] }
	w0 := woken()
	c.Net.SetHostLive(f.ID, false)
	for woken() == w0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the leader was not woken by member %d's host going down: %v", f.ID, wakes(lead.Node))
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(800 * time.Millisecond) // longer than FailoverAfter, awake
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Quiesced {
		t.Fatalf("the group quiesced with member %d's host not live", f.ID)
	}
	pp := st.Progress[f.ID]
	if pp.HostLive || !pp.RecentActive || pp.ContactViaHost {
		t.Fatalf("member %d (host down, group traffic flowing): HostLive %t RecentActive %t ContactViaHost %t; want false, true, false",
			f.ID, pp.HostLive, pp.RecentActive, pp.ContactViaHost)
	}
	if got := voters(); !slices.Equal(got, before) {
		t.Fatalf("voters changed while member %d answered its group: %v, was %v", f.ID, got, before)
	}

	c.Net.SetHostLive(f.ID, true)
	waitQuiesced(ctx, t, c)
	if got := voters(); !slices.Equal(got, before) {
		t.Fatalf("voters after the host came back: %v, was %v", got, before)
	}
	propose(ctx, t, lead.Node, kv.Put("after", "v"))
}

// TestQuiescedGroupCutHostLive: the group's traffic to and from a voter
// of a quiesced group is cut while its host stays live. While the group
// is quiesced nothing happens through a spell longer than FailoverAfter:
// the host's liveness vouches for the voter (via host), and nothing wakes
// the group. A write wakes it: an awake group reads its own contact only
// (the host's carried over at the wake, then aging), so once
// FailoverAfter passes without the voter answering, the policy fails it
// over to the standby, although its host is still live.
func TestQuiescedGroupCutHostLive(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, lead, f := quiescedWithStandby(ctx, t, 500*time.Millisecond)
	m0, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := m0.Config.Voters

	c.Net.Isolate(f.ID)
	time.Sleep(800 * time.Millisecond) // longer than FailoverAfter, quiesced
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pp := st.Progress[f.ID]
	if !st.Quiesced || !pp.HostLive || !pp.RecentActive || !pp.ContactViaHost {
		t.Fatalf("quiesced, member %d cut off on a live host: Quiesced %t HostLive %t RecentActive %t ContactViaHost %t; want all true",
			f.ID, st.Quiesced, pp.HostLive, pp.RecentActive, pp.ContactViaHost)
	}
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Config.Voters, before) {
		t.Fatalf("voters changed while quiesced: %v, was %v", m.Config.Voters, before)
	}

	propose(ctx, t, lead.Node, kv.Put("wake", "v")) // a quorum without f
	waitMembership(ctx, t, lead.Node, "cut voter failed over to 4", func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && !slices.Contains(m.Config.Voters, f.ID) && !m.Joint() && !m.Pending
	})
	if w := wakes(lead.Node)["hostDown"]; w != 0 {
		t.Fatalf("woken by a host's death %d times; no host died", w)
	}
	if st, err := lead.Node.Status(ctx); err != nil {
		t.Fatal(err)
	} else if pp, ok := st.Progress[f.ID]; ok && pp.ContactViaHost {
		t.Fatalf("awake, member %d's contact still via its host", f.ID)
	}
	c.Net.Heal()
	propose(ctx, t, lead.Node, kv.Put("after", "v"))
}
