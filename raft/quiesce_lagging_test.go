package raft_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// waitWake waits until node counts a wake by cause.
func waitWake(ctx context.Context, t *testing.T, n *raft.Node, cause string) {
	t.Helper()
	for wakes(n)[cause] == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("member %d never woke by %q: %v", n.ID(), cause, wakes(n))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killHost crashes member id and declares its host not live.
func killHost(c *cluster.Cluster, id uint64) {
	c.Crash(id)
	c.Net.SetHostLive(id, false)
}

// TestQuiescedWithDeadVoterFailsOverAtDeadline: 3 voters and a ready
// standby; a voter's host dies. The leader stays quiesced (no hostDown
// wake) with the rest of the group, leaving the dead voter lagging, and
// sends nothing; the policy's deadline (its host's death plus
// FailoverAfter, less two election timeouts) wakes it (cause policy,
// counted in the leader's own Status too) and the dead voter is failed
// over to the standby.
func TestQuiescedWithDeadVoterFailsOverAtDeadline(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c, lead, lost := quiescedWithStandby(ctx, t, 2*time.Second)
	killHost(c, lost.ID)
	waitQuiesced(ctx, t, c) // the leader, the other voter, the standby
	quietSpell()            // longer than an election timeout: the dead voter reads as silent
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pp := st.Progress[lost.ID]; pp.HostLive || pp.RecentActive {
		t.Fatalf("quiesced, the dead voter %d: HostLive %t RecentActive %t; want neither", lost.ID, pp.HostLive, pp.RecentActive)
	}
	sent, policy := c.Net.Stats().Sent, wakes(lead.Node)["policy"]
	quietSpell()
	if wakes(lead.Node)["policy"] == policy { // still before the deadline
		if got := c.Net.Stats().Sent; got != sent {
			t.Fatalf("quiesced with a dead voter, the group sent %d messages", got-sent)
		}
		if st, _ := lead.Node.Status(ctx); !st.Quiesced {
			t.Fatal("the leader woke before the policy's deadline")
		}
	} else {
		t.Log("the deadline passed during the quiet spell (a slow run): sends not checked")
	}

	waitMembership(ctx, t, lead.Node, "dead voter failed over to 4", func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && !slices.Contains(m.Config.Voters, lost.ID) && !m.Joint() && !m.Pending
	})
	waitWake(ctx, t, lead.Node, "policy")
	st, err = lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Wakes["policy"] == 0 || st.Wakes["hostDown"] != 0 || st.LastWake == "" {
		t.Fatalf("the leader's own wakes: %v, last %q; want policy counted, no hostDown", st.Wakes, st.LastWake)
	}
	propose(ctx, t, lead.Node, kv.Put("after", "failover"))
}

// TestQuiescedLaggingHostBackWakesAndCatchesUp: 3 voters, no standby; a
// voter's host dies, writes go on without it, and the group quiesces with
// it lagging (the policy has nothing to decide: no timer). Another host
// turning live or dying wakes nothing; the lagging voter's host turning
// live wakes the leader (cause hostUp), which catches the voter up once it
// runs again, and the whole group quiesces again.
func TestQuiescedLaggingHostBackWakesAndCatchesUp(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c := quiesceCluster(t, cluster.Options{})
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	f := follower(t, c, lead)
	killHost(c, f.ID)
	for i := range 5 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("k%d", i), "v"))
	}
	waitQuiesced(ctx, t, c)

	// A host with no member lagging here: nothing wakes.
	woken := func() (n uint64) {
		for _, m := range c.Running() {
			for _, k := range wakes(m.Node) {
				n += k
			}
		}
		return n
	}
	before := woken()
	c.Net.SetHostLive(9, true)
	c.Net.SetHostLive(9, false)
	c.Net.SetHostLive(9, true)
	quietSpell()
	if got := woken(); got != before {
		t.Fatalf("a host the group has no member on changed liveness: %d wakes %v", got-before, wakes(lead.Node))
	}

	c.Net.SetHostLive(f.ID, true)
	waitWake(ctx, t, lead.Node, "hostUp")
	f = c.Restart(f.ID)
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		fs, err := f.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fs.Applied >= st.Commit {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("member %d back: applied %d, the leader's commit %d", f.ID, fs.Applied, st.Commit)
		case <-time.After(10 * time.Millisecond):
		}
	}
	waitQuiesced(ctx, t, c)
	if st, _ := lead.Node.Status(ctx); st.Wakes["hostUp"] != 1 {
		t.Fatalf("the leader's own hostUp wakes: %v; want 1", st.Wakes)
	}
}

// TestLeaderWithoutLiveQuorumDoesNotQuiesce: both followers' hosts die.
// The leader is left with no quorum of caught-up live voters: it does not
// quiesce (a quiesced leader never ticks, so CheckQuorum would never
// depose it) and CheckQuorum steps it down.
func TestLeaderWithoutLiveQuorumDoesNotQuiesce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := quiesceCluster(t, cluster.Options{})
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	waitQuiesced(ctx, t, c)
	var dead []uint64
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			dead = append(dead, m.ID)
			c.Crash(m.ID)
		}
	}
	for _, id := range dead {
		c.Net.SetHostLive(id, false)
	}
	for lead.Node.IsLeader() {
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Quiesced && st.Wakes["hostDown"] > 0 {
			t.Fatalf("the leader quiesced again with no live quorum (wakes %v)", st.Wakes)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the leader without a quorum was never stepped down")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// nextOnly is a host policy that never acts and says nothing of when.
type nextOnly struct{}

func (nextOnly) Next(confchange.View) (confchange.Request, bool) { return confchange.Request{}, false }

// withDeadlines is nextOnly that says it will never act.
type withDeadlines struct{ nextOnly }

func (withDeadlines) NextDecision(confchange.View) time.Time { return time.Time{} }

// TestQuiesceWithDeadHostNeedsPolicyDeadlines: a voter's host dies. With
// the default policy or a host policy that is a confchange.Deadliner, the
// rest of the group stays quiesced — the leader leaves the dead voter
// lagging without waking (no hostDown wake: a dead host's thousands of
// groups led elsewhere do not wake); with a host policy that is none, the
// leader wakes (hostDown) and the group stays awake (nothing tells when
// the policy would act).
func TestQuiesceWithDeadHostNeedsPolicyDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  confchange.Policy
		quiesce bool
	}{
		{"default policy", nil, true},
		{"host policy with deadlines", withDeadlines{}, true},
		{"host policy without deadlines", nextOnly{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			c := quiesceCluster(t, cluster.Options{Policy: tc.policy})
			lead := c.WaitLeader()
			propose(ctx, t, lead.Node, kv.Put("k", "v"))
			waitQuiesced(ctx, t, c)
			killHost(c, follower(t, c, lead).ID)
			if tc.quiesce {
				quietSpell() // longer than an election timeout: the lagging voter reads as silent
				waitQuiesced(ctx, t, c)
				if w := wakes(lead.Node); w["hostDown"] != 0 || w["policy"] != 0 {
					t.Fatalf("the leader woke for a voter's host's death: %v; want it quiesced throughout", w)
				}
				return
			}
			waitWake(ctx, t, lead.Node, "hostDown")
			quietSpell()
			quietSpell()
			if st, err := lead.Node.Status(ctx); err != nil || st.Quiesced {
				t.Fatalf("quiesced with a dead host and a policy without deadlines (%v)", err)
			}
		})
	}
}
