package understudy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// initialMembers is the cluster's bootstrap list: what every host's usual
// configuration (a restart uses the same Config) carries.
func (tc *testCluster) initialMembers(n int) []raft.Member {
	var ms []raft.Member
	for id := uint64(1); id <= uint64(n); id++ {
		ms = append(ms, raft.Member{ID: id, PeerAddr: tc.addrs[id]})
	}
	return ms
}

// usual starts member id with its usual configuration: the bootstrap
// list included, as a host's command line always has it.
func (tc *testCluster) usual(ctx context.Context, id uint64, n int) (*understudy.Group, error) {
	return tc.restart(ctx, id, func(c *understudy.Config) { c.InitialMembers = tc.initialMembers(n) })
}

// stop closes member id.
func (tc *testCluster) stop(ctx context.Context, id uint64) {
	tc.t.Helper()
	require.NoError(tc.t, tc.hosts[id].Close(ctx))
	delete(tc.hosts, id)
}

// wipe deletes member id's data dir: its disk was replaced.
func (tc *testCluster) wipe(id uint64) {
	tc.t.Helper()
	require.NoError(tc.t, os.RemoveAll(filepath.Join(tc.dir, fmt.Sprint(id))))
}

// published waits until member on has applied every member's published
// record (metadata and incarnation).
func (tc *testCluster) published(ctx context.Context, on uint64, n int) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		for id := uint64(1); id <= uint64(n); id++ {
			m, ok := tc.hosts[on].Member(id)
			if !ok || m.Metadata["client_addr"] == "" || m.Incarnation == 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	_ = ctx
}

// writeAckedByOneAndTwo leaves a 3-member cluster with write W ("w"="1")
// acknowledged by members 1 and 2 only (3 was stopped before it), then
// stops 1 and 2 too.
func writeAckedByOneAndTwo(ctx context.Context, t *testing.T, tc *testCluster) {
	t.Helper()
	tc.leader(ctx)
	tc.published(ctx, 3, 3)
	tc.stop(ctx, 3)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("w", "1"))
	require.NoError(t, err)
	tc.stop(ctx, 1)
	tc.stop(ctx, 2)
}

// TestWipedReplicaRefusedAtBootstrap is the scenario: replica 3
// stopped; W acknowledged by 1 and 2; 1 and 2 stopped; replica 2's data
// lost; 3 and 2 started with their usual configuration. Before, 2
// bootstrapped afresh as an empty voter, voted for 3, and 3 — which never
// had W — led: W was gone. Now 2's bootstrap asks its initial peers first;
// 3 knows 2 ran before, and the bootstrap is refused.
func TestWipedReplicaRefusedAtBootstrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	writeAckedByOneAndTwo(ctx, t, tc)
	tc.wipe(2)

	_, err := tc.usual(ctx, 3, 3)
	require.NoError(t, err)
	h2, err := tc.usual(ctx, 2, 3)
	if err == nil {
		// What happened before: 2 and 3 elect 3.
		l := tc.leader(ctx)
		v, rerr := l.Read(ctx, []byte("w"))
		require.NoError(t, rerr)
		require.Equal(t, "1", string(v), "the acknowledged write W is gone (leader %d, member 2 %v)", l.ID(), h2.ID())
	}
	require.ErrorIs(t, err, raft.ErrAlreadyBootstrapped)
	for _, want := range []string{"member 3", "remove member 2", "new ID"} {
		require.Contains(t, err.Error(), want)
	}
	has, herr := understudy.HasMember(filepath.Join(tc.dir, "2"))
	require.NoError(t, herr)
	require.False(t, has, "a refused bootstrap wrote nothing")

	// 1 returns: W is there.
	_, err = tc.usual(ctx, 1, 3)
	require.NoError(t, err)
	v, err := tc.leader(ctx).Read(ctx, []byte("w"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
}

// TestWipedReplicaBootstrappedAloneIsNotCounted: the wiped replica 2
// starts while both its peers are down, so no one answers its bootstrap
// check and it bootstraps afresh. Its peers, once back, know 2's
// incarnation from the log: they refuse its connections, so its vote for
// 3 (whose log lacks W) is never counted; 2 learns it was wiped and stops
// with raft.ErrReplicaWiped. 1 returns, and W is there.
func TestWipedReplicaBootstrappedAloneIsNotCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	writeAckedByOneAndTwo(ctx, t, tc)
	tc.wipe(2)

	h2, err := tc.usual(ctx, 2, 3)
	require.NoError(t, err, "no peer answered: the bootstrap goes ahead")
	h3, err := tc.usual(ctx, 3, 3)
	require.NoError(t, err)
	select {
	case <-h2.Done():
	case <-ctx.Done():
		t.Fatalf("the wiped replica did not stop: %v (3 leads: %v)", ctx.Err(), h3.IsLeader())
	}
	require.ErrorIs(t, h2.Err(), raft.ErrReplicaWiped)
	require.NotZero(t, h3.Transport().Stats().Refused["wiped"], "3 refused 2")
	require.Error(t, h2.Close(ctx))
	delete(tc.hosts, 2)

	_, err = tc.usual(ctx, 1, 3)
	require.NoError(t, err)
	v, err := tc.leader(ctx).Read(ctx, []byte("w"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v), "the acknowledged write W is gone")
}

// TestHostDeleteGroupOfAListedReplica: deleting the data of a replica the
// group still lists is refused (ErrGroupNotRemoved) — it was accepted, and
// the replica then bootstrapped afresh with its usual configuration. Once
// forced, that bootstrap is refused (its peers know it ran), and the way
// back is the documented one: remove it, add a new replica under a new ID
// as a learner, which joins, catches up and is promoted.
func TestHostDeleteGroupOfAListedReplica(t *testing.T) {
	hc := newHosts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gs := hc.start(ctx, 1, func() raft.StateMachine { return kv.New() })
	require.NoError(t, put(ctx, t, gs, "a", "1"))
	old := replicaID(1, 2)
	require.Eventually(t, func() bool {
		for _, g := range gs {
			for i := range gs {
				if m, ok := g.Member(replicaID(1, i)); !ok || m.Incarnation == 0 {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "every replica's incarnation published")
	if gs[2].IsLeader() {
		require.NoError(t, gs[2].TransferLeadership(ctx, replicaID(1, 0)))
	}
	require.NoError(t, gs[2].Close(ctx))

	err := hc.hosts[2].DeleteGroup(1)
	require.ErrorIs(t, err, understudy.ErrGroupNotRemoved)
	stored, serr := hc.hosts[2].StoredGroups()
	require.NoError(t, serr)
	require.True(t, slices.ContainsFunc(stored, func(s understudy.StoredGroup) bool { return s.ID == 1 }), "nothing was deleted")

	require.NoError(t, hc.hosts[2].ForceDeleteGroup(1))
	_, err = hc.hosts[2].StartGroup(ctx, hc.groupConfig(1, 2), kv.New())
	require.ErrorIs(t, err, raft.ErrAlreadyBootstrapped)
	stored, serr = hc.hosts[2].StoredGroups()
	require.NoError(t, serr)
	require.False(t, slices.ContainsFunc(stored, func(s understudy.StoredGroup) bool { return s.ID == 1 }),
		"a refused bootstrap leaves no group behind: %+v", stored)

	l := leaderOf(ctx, t, gs[:2])
	require.NoError(t, l.RemoveMember(ctx, old))
	newID := old + 50
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: newID, PeerAddr: hc.addrs[2]}))
	back, err := hc.hosts[2].StartGroup(ctx, understudy.GroupConfig{GroupID: 1, ID: newID, Join: hc.addrs[:2], Raft: fastRaft()}, kv.New())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := back.StaleRead([]byte("a"))
		return err == nil && string(v) == "1"
	}, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { // promoted by the default policy once ready
		m, err := leaderOf(ctx, t, gs[:2]).Membership(ctx)
		return err == nil && slices.Contains(m.Config.Voters, newID)
	}, 20*time.Second, 10*time.Millisecond, "the new replica is promoted")
	require.NoError(t, put(ctx, t, []*understudy.Group{gs[0], gs[1], back}, "b", "2"))
}
