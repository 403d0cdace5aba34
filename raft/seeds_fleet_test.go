package raft_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// Figure 14 — etcd's cluster-size advice (issue 36): on 30 machines a few
// "active followers" vote and the others are "benched followers" that
// proxy traffic and "have the ability to transition into an active
// follower if needed"; understudy: 5 voters and 25 standbys fed through
// relays (Config.Relay), the policy at TargetVoters 5. The leader is lost:
// the 4 voters left elect a leader, the policy swaps the lost voter for a
// ready standby in one joint change — not the one held behind (its disk
// stalled), the most caught-up first — and the voter count is 5 again.
// Every write acknowledged before, during and after is on every member.
func TestSeedFigure14_BenchedStandbyTakesLostLeadersSeat(t *testing.T) {
	if testing.Short() {
		t.Skip("30 members")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const voters, standbys = 5, 25
	disks := &slowDisks{}
	c := cluster.New(t, cluster.Options{Members: voters, Relay: true, TickInterval: 20 * time.Millisecond, WrapStorage: disks.wrap,
		Membership: confchange.Settings{TargetVoters: voters, MaxLearners: standbys, Stabilization: 100 * time.Millisecond, FailoverAfter: time.Second}})
	lead := c.WaitLeader()
	var bench []uint64
	for id := uint64(voters + 1); id <= voters+standbys; id++ {
		addLearner(ctx, t, c, lead.Node, id)
		bench = append(bench, id)
	}
	seedWrites(ctx, t, lead.Node, "before", 20)
	for _, id := range bench {
		seedWaitMember(ctx, t, lead.Node, id, "ready", seedReady)
	}
	st := waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(bench))
	t.Logf("leader %d relays: %v", lead.ID, relaysOf(st))
	m := seedMembership(ctx, t, lead.Node)
	require.Len(t, m.Config.Voters, voters, "voters before the loss")
	require.Len(t, m.Config.Learners, standbys, "standbys before the loss")

	// The lowest-ID standby (first on ties) falls behind: its disk holds
	// its writes, so its match stays put while the others advance.
	behind := bench[0]
	disks.mu.Lock()
	release := sync.OnceFunc(disks.disks[behind].HoldSaves())
	disks.mu.Unlock()
	t.Cleanup(release) // before the cluster's: a node whose saves are held cannot stop
	seedWrites(ctx, t, lead.Node, "acked", 20)
	waitStatus(ctx, t, lead.Node, "the held standby behind", func(st raft.Status) bool {
		return st.Progress[behind].Match < st.Commit
	})

	// Whether it is still ready when the failover is decided depends on
	// timing (its held disk stops its answers for a while): logged, not
	// asserted. Ready or not, it must not take the seat.
	if ms, ok := seedMember(seedMembership(ctx, t, lead.Node), behind); ok {
		t.Logf("held standby %d before the loss: lag %d, %s", behind, ms.Lag, ms.Readiness)
	}
	// The leader is lost.
	old := lead.ID
	c.Crash(old)
	var rest []*cluster.Member
	for _, m := range c.Running() {
		if m.ID <= voters {
			rest = append(rest, m)
		}
	}
	require.Len(t, rest, voters-1)
	nl := seedLeaderAmong(ctx, t, rest...)
	t.Logf("member %d leads after %d was lost", nl.ID, old)
	seedWrites(ctx, t, nl.Node, "during", 10)

	// A benched one takes the seat: 5 voters again, not joint, the lost
	// leader a learner.
	m = waitMembership(ctx, t, nl.Node, "a standby in the lost leader's seat", func(m raft.Membership) bool {
		return !m.Joint() && len(m.Config.Voters) == voters && !slices.Contains(m.Config.Voters, old)
	})
	var promoted uint64
	for _, id := range m.Config.Voters {
		if id > voters {
			require.Zero(t, promoted, "more than one standby promoted: %v", m.Config.Voters)
			promoted = id
		}
	}
	require.NotZero(t, promoted, "voters %v", m.Config.Voters)
	require.NotEqual(t, behind, promoted, "the standby held behind took the seat over caught-up ones")
	require.Contains(t, m.Config.Learners, old, "the lost leader stays, as a standby")
	require.Len(t, m.Config.Voters, voters, "an odd voter count")
	t.Logf("standby %d took the seat of %d: voters %v", promoted, old, m.Config.Voters)
	seedPoll(ctx, t, "the promoted standby to know itself a voter", func() bool {
		st, err := c.Member(promoted).Node.Status(ctx)
		return err == nil && st.Role != raft.RoleLearner
	})

	// It counts, and nothing acknowledged is lost: the lost leader comes
	// back as a standby, the held one catches up, every member holds every
	// acknowledged write, and every applied log is the leader's.
	release()
	c.Restart(old)
	seedWrites(ctx, t, nl.Node, "after", 10)
	for _, m := range c.Running() {
		for _, p := range []struct {
			prefix string
			n      int
		}{{"before", 20}, {"acked", 20}, {"during", 10}, {"after", 10}} {
			seedHasKeys(ctx, t, m, p.prefix, p.n)
		}
	}
	waitStatus(ctx, t, nl.Node, "the standbys relayed by the new leader", func(st raft.Status) bool {
		return len(relaysOf(st)) > 0
	})
	sameLogs(ctx, t, c)
}
