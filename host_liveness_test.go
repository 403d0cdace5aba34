package understudy_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// livenessLinks are link settings that detect a host's death quickly and
// leave a loaded test machine room enough not to see one that is not.
var livenessLinks = understudy.LinkSettings{
	PingInterval: 100 * time.Millisecond, LivenessTimeout: 2 * time.Second,
	MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
}

// newLivenessHost starts host i of hc on ln with livenessLinks, without
// leader balancing: the liveness tests put every group's leader on host 0
// (three times its share), which balancing would undo while they watch.
func newLivenessHost(t *testing.T, hc *hostsCluster, i int, ln net.Listener) *understudy.Host {
	t.Helper()
	h, err := understudy.NewHost(understudy.HostConfig{
		DataDir: filepath.Join(hc.dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
		Storage: storage.EngineOptions{NoSync: true}, Links: livenessLinks,
		LeaderBalance: understudy.LeaderBalance{Disabled: true},
	})
	require.NoError(t, err)
	return h
}

// newLivenessHosts is three hosts with livenessLinks, closed at the end.
func newLivenessHosts(t *testing.T) *hostsCluster {
	hc := &hostsCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		ln := listen(t)
		hc.hosts = append(hc.hosts, newLivenessHost(t, hc, i, ln))
		hc.addrs = append(hc.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, h := range hc.hosts {
			if h != nil {
				_ = h.Close(ctx)
			}
		}
	})
	return hc
}

// hostLive returns, from the status of group gs's leader among on, whether
// it sees the host of the replica of host i as live, and the replica's
// host contact; ok is false when the leader has no view of it (it is that
// replica, or it lost the lead).
func hostLive(ctx context.Context, t *testing.T, gs []*understudy.Group, on []int, g uint64, i int) (live bool, at time.Time, ok, self bool) {
	t.Helper()
	var cands []*understudy.Group
	for _, j := range on {
		cands = append(cands, gs[j])
	}
	st, err := leaderOf(ctx, t, cands).Status(ctx)
	if err != nil || st.Progress == nil {
		return false, time.Time{}, false, false // not leading any more: ask again
	}
	if st.ID == replicaID(g, i) {
		return false, time.Time{}, false, true
	}
	pp, ok := st.Progress[replicaID(g, i)]
	return pp.HostLive, pp.HostContact, ok, false
}

// TestHostLivenessInStatus: three hosts, three groups. Every group's
// leader sees each peer's host live (PeerProgress.HostLive). Host 2
// closes: every group's leader on hosts 0 and 1 sees the replica on host
// 2 on a host not live, all groups alike, and hosts 0 and 1 still live;
// host 0's mux lists host 2 as not live, and the groups were told
// (Status.HostLivenessReports). Host 2 starts again: live again
// everywhere.
func TestHostLivenessInStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hc := newLivenessHosts(t)
	groups := []uint64{1, 2, 3}
	gs := map[uint64][]*understudy.Group{}
	for _, g := range groups {
		gs[g] = hc.start(ctx, g, func() raft.StateMachine { return kv.New() })
		require.NoError(t, put(ctx, t, gs[g], "k", "v"))
	}
	all := []int{0, 1, 2}
	waitLive := func(on []int, i int, want bool) {
		t.Helper()
		for _, g := range groups {
			for {
				live, at, ok, self := hostLive(ctx, t, gs[g], on, g, i)
				if self || ok && live == want && (!live || time.Since(at) < time.Minute) {
					break
				}
				require.NoError(t, ctx.Err(), "group %d: waiting for host %d live=%t", g, i, want)
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	for i := range all {
		waitLive(all, i, true)
	}

	// Every group's leader on host 0: it heartbeats host 2's replica, so
	// its transport has a flow on the link to host 2 and is told when that
	// host's liveness changes (a follower elsewhere may never have sent
	// host 2 anything).
	for _, g := range groups {
		for !gs[g][0].IsLeader() {
			if l := leaderOf(ctx, t, gs[g]); l != gs[g][0] {
				_ = l.TransferLeadership(ctx, replicaID(g, 0))
			}
			require.NoError(t, ctx.Err(), "group %d: moving the lead to host 0", g)
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Host 2 closes.
	require.NoError(t, hc.hosts[2].Close(ctx))
	waitLive([]int{0, 1}, 2, false)
	waitLive([]int{0, 1}, 0, true)
	waitLive([]int{0, 1}, 1, true)
	// The groups see their members there gone first (host 2 closes its
	// groups, which refuse them, then its port): the link's row follows
	// once its redial fails.
	row2 := func() (transport.HostLiveness, bool) {
		for _, row := range hc.hosts[0].Mux().Stats().Hosts {
			if row.Addr == hc.addrs[2] {
				return row, true
			}
		}
		return transport.HostLiveness{}, false
	}
	require.Eventually(t, func() bool { row, ok := row2(); return ok && !row.Live }, 30*time.Second, 10*time.Millisecond,
		"host 0's row for host 2 says it is not live: %+v", hc.hosts[0].Mux().Stats().Hosts)
	row, _ := row2()
	require.Equal(t, hc.hosts[2].ID(), row.HostID, "host 0's row for host 2: %+v", row)
	require.GreaterOrEqual(t, row.Transitions, uint64(2), "host 0's row for host 2: %+v", row)
	for _, g := range groups {
		st, err := gs[g][0].Status(ctx)
		require.NoError(t, err)
		require.NotZero(t, st.HostLivenessReports, "group %d's leader on host 0 was never told of host 2's liveness", g)
	}

	// Host 2 starts again on its address.
	ln, err := net.Listen("tcp", hc.addrs[2])
	require.NoError(t, err)
	hc.hosts[2] = newLivenessHost(t, hc, 2, ln)
	for _, g := range groups {
		gs[g][2], err = hc.hosts[2].StartGroup(ctx, hc.groupConfig(g, 2), kv.New())
		require.NoError(t, err, "group %d on host 2", g)
	}
	waitLive([]int{0, 1, 2}, 2, true)
}
