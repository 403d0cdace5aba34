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
)

// balancingHost opens host i of hc on ln, balancing leaders every 50ms, at
// most 4 moves a round.
func balancingHost(t *testing.T, hc *hostsCluster, i int, ln net.Listener) *understudy.Host {
	t.Helper()
	h, err := understudy.NewHost(understudy.HostConfig{
		DataDir: filepath.Join(hc.dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
		Storage: storage.EngineOptions{NoSync: true}, Links: livenessLinks,
		LeaderBalance: understudy.LeaderBalance{Interval: 50 * time.Millisecond, MaxMoves: 4},
	})
	require.NoError(t, err)
	return h
}

// leadersPerHost counts, over groups gs[g][host], the groups each host's
// replica leads.
func leadersPerHost(gs [][]*understudy.Group) []int {
	counts := make([]int, 3)
	for _, row := range gs {
		for i, g := range row {
			if g != nil && g.IsLeader() {
				counts[i]++
			}
		}
	}
	return counts
}

// TestLeadersSpreadOverHosts: three hosts balancing their groups'
// leadership (a round every 50ms, at most 4 moves), 30 groups. Host 2
// closes (handing its leaderships over) and opens again on its data dir,
// its groups started again: it leads none of them, hosts 0 and 1 all 30.
// They hand it leaderships until every host leads within one of its share
// (10 each: 9 to 11), and every group takes writes. Without balancing,
// host 2 would lead nothing until some leader failed.
func TestLeadersSpreadOverHosts(t *testing.T) {
	const groups = 30
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hc := &hostsCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		ln := listen(t)
		hc.hosts = append(hc.hosts, balancingHost(t, hc, i, ln))
		hc.addrs = append(hc.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		for _, h := range hc.hosts {
			_ = h.Close(cctx)
		}
	})
	gs := make([][]*understudy.Group, groups)
	for g := range gs {
		gs[g] = hc.start(ctx, uint64(g+1), func() raft.StateMachine { return kv.New() })
	}
	for _, row := range gs {
		leaderOf(ctx, t, row)
	}

	require.NoError(t, hc.hosts[2].Close(ctx))
	for _, row := range gs {
		row[2] = nil
		leaderOf(ctx, t, row)
	}
	ln, err := net.Listen("tcp", hc.addrs[2])
	require.NoError(t, err)
	hc.hosts[2] = balancingHost(t, hc, 2, ln)
	for g, row := range gs {
		row[2], err = hc.hosts[2].StartGroup(ctx, hc.groupConfig(uint64(g+1), 2), kv.New())
		require.NoError(t, err, "group %d on host 2", g+1)
	}

	spread := func(c []int) bool {
		for _, n := range c {
			if n < groups/3-1 || n > groups/3+1 {
				return false
			}
		}
		return c[0]+c[1]+c[2] == groups
	}
	for c := leadersPerHost(gs); !spread(c); c = leadersPerHost(gs) {
		select {
		case <-ctx.Done():
			t.Fatalf("leaders per host %v; want each within one of %d", c, groups/3)
		case <-time.After(20 * time.Millisecond):
		}
	}
	for g, row := range gs {
		require.NoError(t, put(ctx, t, row, "k", fmt.Sprint(g)), "group %d", g+1)
	}
}
