package raft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// The seed scenarios: one test per figure of etcd's learner design
// (seeds/002), each showing what understudy does where etcd's "member add"
// loses availability. The helpers are prefixed "seed" to stay out of the
// way of the package's other tests.

// seedStable makes learners ready quickly, for the promotion scenarios.
var seedStable = confchange.Settings{Stabilization: 100 * time.Millisecond}

// seedCtx returns a context with a generous deadline, canceled at cleanup.
func seedCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// seedPoll polls cond every few milliseconds until it holds, failing the
// test with what when ctx ends first.
func seedPoll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// seedStatus returns member m's status.
func seedStatus(ctx context.Context, t *testing.T, m *cluster.Member) raft.Status {
	t.Helper()
	st, err := m.Node.Status(ctx)
	require.NoError(t, err, "status of member %d", m.ID)
	return st
}

// seedLeaderAmong waits until the members ms agree on a leader that is one
// of them and knows it leads (other members, e.g. across a partition, are
// not asked), and returns it.
func seedLeaderAmong(ctx context.Context, t *testing.T, ms ...*cluster.Member) *cluster.Member {
	t.Helper()
	var lead *cluster.Member
	seedPoll(ctx, t, fmt.Sprintf("a leader among %v", seedIDs(ms)), func() bool {
		var id uint64
		for _, m := range ms {
			st, err := m.Node.Status(ctx)
			if err != nil || st.Leader == 0 || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
		}
		for _, m := range ms {
			if m.ID == id && m.Node.IsLeader() {
				lead = m
				return true
			}
		}
		return false
	})
	return lead
}

func seedIDs(ms []*cluster.Member) []uint64 {
	ids := make([]uint64, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}

// seedOthers returns the running members of c other than the given IDs.
func seedOthers(c *cluster.Cluster, not ...uint64) []*cluster.Member {
	var out []*cluster.Member
	for _, m := range c.Running() {
		if !slices.Contains(not, m.ID) {
			out = append(out, m)
		}
	}
	return out
}

// seedCluster is cluster.New with a tick of 30 ms unless opts sets one:
// these tests assert that no election happens, and at the harness's
// default 10 ms (an election timeout of 100 ms) a loaded machine can
// starve a leader's loop long enough for a follower's election timer or
// the leader's CheckQuorum to fire (CI: "leader changed" under -race with
// other suites running).
func seedCluster(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	if opts.TickInterval == 0 {
		opts.TickInterval = 30 * time.Millisecond
	}
	return cluster.New(t, opts)
}

// seedRequireTerm asserts that every member in ms is at term: no election
// happened (PreVote keeps a cut-off member from raising its own term).
func seedRequireTerm(ctx context.Context, t *testing.T, term uint64, ms ...*cluster.Member) {
	t.Helper()
	for _, m := range ms {
		require.Equal(t, term, seedStatus(ctx, t, m).Term, "term of member %d: an election happened", m.ID)
	}
}

// seedWrites proposes n puts "<prefix><i>" through node, each of which must
// succeed at the first attempt (no election, no dropped proposal).
func seedWrites(ctx context.Context, t *testing.T, node *raft.Node, prefix string, n int) {
	t.Helper()
	for i := range n {
		_, err := node.Propose(ctx, kv.Put(fmt.Sprintf("%s%d", prefix, i), "v"))
		require.NoError(t, err, "write %s%d through member %d", prefix, i, node.ID())
	}
}

// seedHasKeys waits until member m's state machine holds the keys
// "<prefix>0".."<prefix>n-1" (a stale, local read).
func seedHasKeys(ctx context.Context, t *testing.T, m *cluster.Member, prefix string, n int) {
	t.Helper()
	seedPoll(ctx, t, fmt.Sprintf("member %d to hold %s0..%s%d", m.ID, prefix, prefix, n-1), func() bool {
		for i := range n {
			v, err := m.Node.StaleRead([]byte(fmt.Sprintf("%s%d", prefix, i)))
			if err != nil || string(v) != "v" {
				return false
			}
		}
		return true
	})
}

// seedMembership returns the membership as the leader sees it.
func seedMembership(ctx context.Context, t *testing.T, node *raft.Node) raft.Membership {
	t.Helper()
	m, err := node.Membership(ctx)
	require.NoError(t, err, "membership through member %d", node.ID())
	return m
}

// seedMember returns member id's status in m.
func seedMember(m raft.Membership, id uint64) (raft.MemberStatus, bool) {
	for _, s := range m.Members {
		if s.ID == id {
			return s, true
		}
	}
	return raft.MemberStatus{}, false
}

// seedWaitMember polls the leader's membership (through node) until member
// id's status satisfies ok.
func seedWaitMember(ctx context.Context, t *testing.T, node *raft.Node, id uint64, what string, ok func(raft.MemberStatus) bool) {
	t.Helper()
	seedPoll(ctx, t, fmt.Sprintf("member %d %s", id, what), func() bool {
		m, err := node.Membership(ctx)
		if err != nil {
			return false
		}
		s, found := seedMember(m, id)
		return found && ok(s)
	})
}

func seedActive(s raft.MemberStatus) bool   { return s.Progress != nil && s.Progress.RecentActive }
func seedInactive(s raft.MemberStatus) bool { return s.Progress != nil && !s.Progress.RecentActive }
func seedReady(s raft.MemberStatus) bool    { return s.Readiness.Ready() }

// seedCaughtUp waits until member m has applied the leader's commit index
// as of now.
func seedCaughtUp(ctx context.Context, t *testing.T, lead, m *cluster.Member) {
	t.Helper()
	commit := seedStatus(ctx, t, lead).Commit
	seedPoll(ctx, t, fmt.Sprintf("member %d to apply index %d", m.ID, commit), func() bool {
		return m.Node.AppliedIndex() >= commit
	})
}

// seedWithLearner starts a cluster of 3 voters with opts, adds member 4 as
// a learner, starts it, and waits until it has caught up.
func seedWithLearner(ctx context.Context, t *testing.T, opts cluster.Options) (*cluster.Cluster, *cluster.Member, *cluster.Member) {
	t.Helper()
	c := seedCluster(t, opts)
	lead := c.WaitLeader()
	seedWrites(ctx, t, lead.Node, "before", 10)
	require.NoError(t, lead.Node.AddLearner(ctx, c.Record(4)))
	learner := c.Join(4)
	seedCaughtUp(ctx, t, lead, learner)
	seedWaitMember(ctx, t, lead.Node, 4, "active", seedActive)
	return c, lead, learner
}

// seedRequireConfig asserts the leader's applied configuration.
func seedRequireConfig(ctx context.Context, t *testing.T, node *raft.Node, voters, learners []uint64) {
	t.Helper()
	m := seedMembership(ctx, t, node)
	require.False(t, m.Joint(), "joint configuration %v", m.Config)
	require.Equal(t, voters, m.Config.Voters, "voters")
	require.Equal(t, learners, slices.Clip(append([]uint64{}, m.Config.Learners...)), "learners")
}

// Figure 1 — etcd: a new member catching up overloads the leader, heartbeats
// are lost and an election follows; understudy: the learner catches up by a
// streamed snapshot under a steady write load with no election, and every
// write succeeds.
func TestSeedFigure1_NewMemberOnBusyLeader(t *testing.T) {
	c := seedCluster(t, cluster.Options{SnapshotCount: 100, SnapshotCatchUpEntries: 20, ManualMembership: true})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	// Enough history that the log is compacted: the learner needs a snapshot.
	seedWrites(ctx, t, lead.Node, "history", 300)
	term := seedStatus(ctx, t, lead).Term

	// A steady write load, from before the add until the learner caught up.
	var (
		stop    atomic.Bool
		written atomic.Int64
		errMu   sync.Mutex
		loadErr error
		wg      sync.WaitGroup
	)
	value := strings.Repeat("x", 512)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := lead.Node.Propose(ctx, kv.Put(fmt.Sprintf("load%d-%d", w, i), value)); err != nil {
					errMu.Lock()
					loadErr = errors.Join(loadErr, fmt.Errorf("writer %d, write %d: %w", w, i, err))
					errMu.Unlock()
					return
				}
				written.Add(1)
			}
		}()
	}
	stopLoad := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopLoad()
	seedPoll(ctx, t, "the load to start", func() bool { return written.Load() >= 20 })

	require.NoError(t, lead.Node.AddLearner(ctx, c.Record(4)))
	learner := c.Join(4)
	before := written.Load()
	seedCaughtUp(ctx, t, lead, learner)
	seedPoll(ctx, t, "writes while the learner caught up", func() bool { return written.Load() >= before+100 })
	stopLoad()

	errMu.Lock()
	require.NoError(t, loadErr, "a write under load failed while the learner caught up")
	errMu.Unlock()
	require.NoError(t, c.Converge(ctx))
	require.GreaterOrEqual(t, c.Net.SnapshotsTo(4), uint64(1), "the learner caught up without a snapshot: the test did not exercise one")
	seedRequireTerm(ctx, t, term, c.Running()...)
	require.Equal(t, lead.ID, seedStatus(ctx, t, learner).Leader)
	require.Equal(t, raft.RoleLearner, seedStatus(ctx, t, learner).Role)
	t.Logf("%d writes under load, %d snapshot sends to the learner", written.Load(), c.Net.SnapshotsTo(4))
}

// Figure 2 — etcd: a partition that leaves the leader with the active quorum
// keeps the cluster operating; understudy: the same, and the cut-off
// follower (PreVote) does not raise the term even when it comes back.
func TestSeedFigure2_PartitionLeaderInMajority(t *testing.T) {
	c := seedCluster(t, cluster.Options{ManualMembership: true})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	term := seedStatus(ctx, t, lead).Term
	others := seedOthers(c, lead.ID)
	f1, f2 := others[0], others[1]

	c.Net.Partition([]uint64{lead.ID, f1.ID}, []uint64{f2.ID})
	seedWaitMember(ctx, t, lead.Node, f2.ID, "seen as unreachable", seedInactive)
	seedWrites(ctx, t, lead.Node, "during", 20)
	seedWrites(ctx, t, f1.Node, "forwarded", 5)
	require.True(t, lead.Node.IsLeader())
	seedRequireTerm(ctx, t, term, lead, f1)

	c.Net.Heal()
	require.NoError(t, c.Converge(ctx))
	seedHasKeys(ctx, t, f2, "during", 20)
	require.Equal(t, lead.ID, c.WaitLeader().ID)
	seedRequireTerm(ctx, t, term, c.Running()...)
}

// Figure 3 — etcd: a leader isolated from the quorum reverts to follower and
// the cluster is unavailable until a new election; understudy: the isolated
// leader steps down (CheckQuorum), the majority elects a new leader that
// serves writes, and the old leader rejoins as a follower after the heal.
func TestSeedFigure3_IsolatedLeaderStepsDown(t *testing.T) {
	c := seedCluster(t, cluster.Options{ManualMembership: true})
	ctx := seedCtx(t)
	old := c.WaitLeader()
	term := seedStatus(ctx, t, old).Term
	seedWrites(ctx, t, old.Node, "before", 5)

	c.Net.Isolate(old.ID)
	seedPoll(ctx, t, "the isolated leader to step down", func() bool {
		return seedStatus(ctx, t, old).Role != raft.RoleLeader
	})
	lead := seedLeaderAmong(ctx, t, seedOthers(c, old.ID)...)
	require.NotEqual(t, old.ID, lead.ID)
	require.Greater(t, seedStatus(ctx, t, lead).Term, term)
	seedWrites(ctx, t, lead.Node, "after", 20)

	c.Net.Heal()
	seedPoll(ctx, t, "the old leader to follow the new one", func() bool {
		st := seedStatus(ctx, t, old)
		return st.Role == raft.RoleFollower && st.Leader == lead.ID
	})
	require.NoError(t, c.Converge(ctx))
	seedHasKeys(ctx, t, old, "after", 20)
}

// Figure 4 — etcd: a 4th member makes the quorum 3, and a partition keeps
// it only if the new member is on the leader's side; understudy: the new
// member is a learner, the quorum stays 2 of 3 voters, and the leader
// serves on with no election.
func TestSeedFigure4_LearnerAddedThenPartitionWithLeader(t *testing.T) {
	ctx := seedCtx(t)
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true})
	term := seedStatus(ctx, t, lead).Term
	others := seedOthers(c, lead.ID, learner.ID)
	f1, f2 := others[0], others[1]

	c.Net.Partition([]uint64{lead.ID, f1.ID, learner.ID}, []uint64{f2.ID})
	seedWaitMember(ctx, t, lead.Node, f2.ID, "seen as unreachable", seedInactive)
	seedWrites(ctx, t, lead.Node, "during", 20)
	seedHasKeys(ctx, t, learner, "during", 20)
	require.True(t, lead.Node.IsLeader())
	seedRequireTerm(ctx, t, term, lead, f1, learner)
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})

	c.Net.Heal()
	require.NoError(t, c.Converge(ctx))
	seedRequireTerm(ctx, t, term, c.Running()...)
}

// Figure 5 — etcd: with 4 voters a 2-and-2 partition leaves neither side a
// quorum of 3, and an election follows; understudy: the 4th member is a
// learner, so the side with 2 of the 3 voters keeps its leader and serves
// writes while the learner waits with the minority voter.
func TestSeedFigure5_LearnerAddedThenTwoTwoPartition(t *testing.T) {
	ctx := seedCtx(t)
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true})
	term := seedStatus(ctx, t, lead).Term
	others := seedOthers(c, lead.ID, learner.ID)
	f1, f2 := others[0], others[1]

	c.Net.Partition([]uint64{lead.ID, f1.ID}, []uint64{f2.ID, learner.ID})
	seedWaitMember(ctx, t, lead.Node, f2.ID, "seen as unreachable", seedInactive)
	seedWaitMember(ctx, t, lead.Node, learner.ID, "seen as unreachable", seedInactive)
	seedWrites(ctx, t, lead.Node, "during", 20)
	seedWrites(ctx, t, f1.Node, "forwarded", 5)
	require.True(t, lead.Node.IsLeader())
	require.False(t, f2.Node.IsLeader(), "the minority voter leads")
	require.False(t, learner.Node.IsLeader(), "the learner leads")
	seedRequireTerm(ctx, t, term, lead, f1)

	c.Net.Heal()
	require.NoError(t, c.Converge(ctx))
	seedHasKeys(ctx, t, learner, "during", 20)
	require.Equal(t, lead.ID, c.WaitLeader().ID)
	seedRequireTerm(ctx, t, term, c.Running()...)
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})
}

// Figure 6 — etcd: with one follower already cut off, adding a voter makes
// the quorum 3 of 4 with 2 active, and the cluster loses it; understudy: a
// direct voter add is refused (ErrQuorumAtRisk) before anything is
// proposed, and the learner add goes through with the quorum unchanged.
func TestSeedFigure6_PartitionThenAddLearner(t *testing.T) {
	c := seedCluster(t, cluster.Options{ManualMembership: true})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	term := seedStatus(ctx, t, lead).Term
	others := seedOthers(c, lead.ID)
	f1, f2 := others[0], others[1]

	c.Net.Partition([]uint64{lead.ID, f1.ID}, []uint64{f2.ID})
	seedWaitMember(ctx, t, lead.Node, f2.ID, "seen as unreachable", seedInactive)
	seedWrites(ctx, t, lead.Node, "before", 5)

	// The direct voter add: refused, nothing proposed.
	last := seedStatus(ctx, t, lead).LastIndex
	err := lead.Node.AddVoter(ctx, c.Record(4))
	require.ErrorIs(t, err, confchange.ErrQuorumAtRisk)
	var ref *confchange.Refusal
	require.ErrorAs(t, err, &ref)
	require.Equal(t, "quorum_at_risk", ref.Code())
	requireNoConfChange(t, lead, last, seedStatus(ctx, t, lead).LastIndex) // a refused voter add never reaches the log
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{})

	// The learner add: accepted; the new member starts and catches up.
	require.NoError(t, lead.Node.AddLearner(ctx, c.Record(4)))
	learner := c.Join(4)
	seedWrites(ctx, t, lead.Node, "after", 20)
	seedHasKeys(ctx, t, learner, "after", 20)
	seedHasKeys(ctx, t, learner, "before", 5)
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})
	require.True(t, lead.Node.IsLeader())
	seedRequireTerm(ctx, t, term, lead, f1, learner)

	c.Net.Heal()
	require.NoError(t, c.Converge(ctx))
	seedRequireTerm(ctx, t, term, c.Running()...)
}

// Figure 7 — etcd: adding a member to a 1-member cluster makes the quorum
// 2 before the new process starts, and the leader loses it at once;
// understudy: the member is a learner that never starts, the single voter
// keeps leading (no election) and serving writes, and the automatic policy
// does not promote it.
func TestSeedFigure7_AddToOneMemberCluster(t *testing.T) {
	c := seedCluster(t, cluster.Options{Members: 1, Membership: seedStable})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	term := seedStatus(ctx, t, lead).Term

	require.NoError(t, lead.Node.AddLearner(ctx, c.Record(2))) // never started
	seedWrites(ctx, t, lead.Node, "after", 20)
	_, err := lead.Node.Read(ctx, []byte("after0"))
	require.NoError(t, err, "linearizable read on the single voter")
	// Never contacted, it is never ready: neither the policy (on, with a
	// short stabilization) nor an operator can make it count in the quorum.
	seedWaitMember(ctx, t, lead.Node, 2, "not ready (never contacted)", func(s raft.MemberStatus) bool {
		return s.Readiness.Code == confchange.ReasonNoContact
	})
	require.ErrorIs(t, lead.Node.Promote(ctx, 2), confchange.ErrLearnerNotReady)
	seedWrites(ctx, t, lead.Node, "later", 5)
	require.True(t, lead.Node.IsLeader())
	seedRequireTerm(ctx, t, term, lead)
	seedRequireConfig(ctx, t, lead.Node, []uint64{1}, []uint64{2})
}

// seedBadRecord is member 4 with a wrong peer address (TEST-NET-1, nothing
// listens there); the member is never started.
func seedBadRecord(c *cluster.Cluster) raft.Member {
	m := c.Record(4)
	m.PeerAddr = "192.0.2.1:7004"
	return m
}

// Figure 8 — etcd: "member add" with a wrong URL is applied anyway, the new
// member never starts, and once the quorum is lost the change cannot be
// reverted; understudy: the misconfigured member is a learner, the cluster
// keeps serving, and removing it undoes the mistake.
func TestSeedFigure8_MisconfiguredAddIsReversible(t *testing.T) {
	c := seedCluster(t, cluster.Options{Membership: seedStable})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	term := seedStatus(ctx, t, lead).Term

	require.NoError(t, lead.Node.AddLearner(ctx, seedBadRecord(c)))
	seedWrites(ctx, t, lead.Node, "after", 20)
	seedWaitMember(ctx, t, lead.Node, 4, "not ready (never contacted)", func(s raft.MemberStatus) bool {
		return s.Readiness.Code == confchange.ReasonNoContact
	})
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})

	// Reverting it, through a follower (forwarded to the leader).
	f := seedOthers(c, lead.ID)[0]
	require.NoError(t, f.Node.RemoveMember(ctx, 4))
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{})
	seedWrites(ctx, t, lead.Node, "reverted", 5)
	require.NoError(t, c.Converge(ctx))
	seedRequireTerm(ctx, t, term, c.Running()...)
}

// Figure 9 — etcd: with one member failed and one misconfigured, 2 of 4 are
// up and a membership change needs 3 votes: the cluster is stuck;
// understudy: the misconfigured member is a learner, the 2 of 3 voters keep
// serving and remove it.
func TestSeedFigure9_MisconfiguredAddWithMemberDown(t *testing.T) {
	c := seedCluster(t, cluster.Options{Membership: seedStable})
	ctx := seedCtx(t)
	lead := c.WaitLeader()
	term := seedStatus(ctx, t, lead).Term
	others := seedOthers(c, lead.ID)
	f1, down := others[0], others[1]

	c.Crash(down.ID)
	seedWaitMember(ctx, t, lead.Node, down.ID, "seen as down", seedInactive)
	require.NoError(t, lead.Node.AddLearner(ctx, seedBadRecord(c)))
	seedWrites(ctx, t, lead.Node, "after", 20)
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})

	require.NoError(t, lead.Node.RemoveMember(ctx, 4))
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{})
	seedWrites(ctx, t, f1.Node, "reverted", 5)
	require.True(t, lead.Node.IsLeader())
	seedRequireTerm(ctx, t, term, lead, f1)

	// The failed member comes back and catches up.
	back := c.Restart(down.ID)
	require.NoError(t, c.Converge(ctx))
	seedHasKeys(ctx, t, back, "reverted", 5)
}

// Figure 10 — etcd: a learner joins as a non-voting member and receives all
// data from the leader; understudy: the same, written before and after it
// joined, visible in its own state machine.
func TestSeedFigure10_LearnerReceivesData(t *testing.T) {
	ctx := seedCtx(t)
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true})
	seedWrites(ctx, t, lead.Node, "after", 20)
	seedHasKeys(ctx, t, learner, "before", 10)
	seedHasKeys(ctx, t, learner, "after", 20)
	st := seedStatus(ctx, t, learner)
	require.Equal(t, raft.RoleLearner, st.Role)
	require.Equal(t, []uint64{1, 2, 3}, st.Voters)
	require.Equal(t, []uint64{4}, st.Learners)
	require.NoError(t, c.Converge(ctx))
}

// Figure 11 — etcd: a learner that caught up is promoted with "member
// promote" and then counts towards the quorum; understudy: Promote
// succeeds once the leader finds it ready, and the new voter counts.
func TestSeedFigure11_PromoteWhenCaughtUp(t *testing.T) {
	ctx := seedCtx(t)
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: seedStable})
	seedWaitMember(ctx, t, lead.Node, 4, "ready", seedReady)
	require.NoError(t, lead.Node.Promote(ctx, 4))
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3, 4}, []uint64{})
	seedPoll(ctx, t, "member 4 to know itself a voter", func() bool {
		return seedStatus(ctx, t, learner).Role == raft.RoleFollower
	})

	// It counts: with one of the old voters down, the quorum of 3 of 4
	// voters needs member 4's vote, and writes still commit.
	down := seedOthers(c, lead.ID, 4)[0]
	c.Crash(down.ID)
	seedWrites(ctx, t, lead.Node, "after", 10)
	seedHasKeys(ctx, t, learner, "after", 10)
	c.Restart(down.ID)
	require.NoError(t, c.Converge(ctx))
}

// Figure 12 — etcd: a promotion is accepted only once the learner's log
// caught up with the leader's; understudy: promoting a learner that is
// cut off while writes go on is refused (ErrLearnerNotReady, with the
// reason) and nothing changes; once it is back and caught up, it goes
// through.
func TestSeedFigure12_PromoteRefusedWhileLagging(t *testing.T) {
	ctx := seedCtx(t)
	settings := seedStable
	settings.MaxLag = 10
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: settings})
	seedWaitMember(ctx, t, lead.Node, 4, "ready", seedReady)

	c.Net.Isolate(learner.ID)
	seedWrites(ctx, t, lead.Node, "lagging", 30)
	seedWaitMember(ctx, t, lead.Node, 4, "not ready", func(s raft.MemberStatus) bool { return !s.Readiness.Ready() })
	last := seedStatus(ctx, t, lead).LastIndex
	err := lead.Node.Promote(ctx, 4)
	require.ErrorIs(t, err, confchange.ErrLearnerNotReady)
	var ref *confchange.Refusal
	require.ErrorAs(t, err, &ref)
	require.Equal(t, uint64(4), ref.ID)
	require.False(t, ref.Readiness.Ready())
	t.Logf("refused: %v", err)
	requireNoConfChange(t, lead, last, seedStatus(ctx, t, lead).LastIndex) // a refused promotion never reaches the log
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3}, []uint64{4})
	require.Equal(t, raft.RoleLearner, seedStatus(ctx, t, learner).Role)

	c.Net.Heal()
	seedHasKeys(ctx, t, learner, "lagging", 30)
	seedWaitMember(ctx, t, lead.Node, 4, "ready again", seedReady)
	require.NoError(t, lead.Node.Promote(ctx, 4))
	seedRequireConfig(ctx, t, lead.Node, []uint64{1, 2, 3, 4}, []uint64{})
}

// Figure 13 — etcd v3.4: leadership cannot be transferred to a learner,
// and a learner rejects client reads and writes; understudy: the transfer
// is refused (ErrLearnerCannotLead) and the leader stays, but the learner
// serves linearizable reads (ReadIndex asked of the leader) and forwards
// proposals.
func TestSeedFigure13_TransferToLearnerRefused(t *testing.T) {
	ctx := seedCtx(t)
	c, lead, learner := seedWithLearner(ctx, t, cluster.Options{ManualMembership: true})
	term := seedStatus(ctx, t, lead).Term

	err := lead.Node.TransferLeadership(ctx, learner.ID)
	require.ErrorIs(t, err, confchange.ErrLearnerCannotLead)
	require.ErrorIs(t, err, raft.ErrLearnerCannotLead)
	for _, m := range c.Running() {
		require.Equal(t, lead.ID, seedStatus(ctx, t, m).Leader, "member %d's leader", m.ID)
	}
	require.True(t, lead.Node.IsLeader())

	// A linearizable read on the learner sees a write acknowledged by the
	// leader just before.
	_, err = lead.Node.Propose(ctx, kv.Put("fresh", "from-leader"))
	require.NoError(t, err)
	v, err := learner.Node.Read(ctx, []byte("fresh"))
	require.NoError(t, err, "linearizable read on the learner")
	require.Equal(t, "from-leader", string(v))

	// A write on the learner is forwarded to the leader and applied.
	_, err = learner.Node.Propose(ctx, kv.Put("via-learner", "4"))
	require.NoError(t, err, "propose on the learner")
	v, err = lead.Node.Read(ctx, []byte("via-learner"))
	require.NoError(t, err)
	require.Equal(t, "4", string(v))

	seedRequireTerm(ctx, t, term, c.Running()...)
	require.Equal(t, raft.RoleLearner, seedStatus(ctx, t, learner).Role)
	require.NoError(t, c.Converge(ctx))
}
