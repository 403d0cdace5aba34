package understudy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// A leader balancing round's view of a host's groups (their voters,
// leaders and hosts' liveness) is built in buffers the balancer reuses:
// it allocates next to nothing, whatever the number of groups. Before, it
// allocated about 8 objects per group each round (the voters' records,
// their configuration, the view's entries): at 10,000 groups, about 13 MB
// a round per host while the balancer was still spreading leaderships.
func TestLeaderViewAllocationsDoNotGrowWithGroups(t *testing.T) {
	const groups = 30
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := &hostsCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		ln := listen(t)
		h, err := understudy.NewHost(understudy.HostConfig{
			DataDir: filepath.Join(hc.dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
			Storage: storage.EngineOptions{NoSync: true}, LeaderBalance: understudy.LeaderBalance{Disabled: true},
		})
		require.NoError(t, err)
		hc.hosts = append(hc.hosts, h)
		hc.addrs = append(hc.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		for _, h := range hc.hosts {
			_ = h.Close(cctx)
		}
	})
	for g := range groups {
		leaderOf(ctx, t, hc.start(ctx, uint64(g+1), func() raft.StateMachine { return kv.New() }))
	}
	// AllocsPerRun counts the whole process's allocations: the groups just
	// started may still be settling (a tick, a quiescing round) in a
	// window, which only adds. The least of a few windows is the view's.
	n := understudy.LeaderViewAllocs(hc.hosts[0])
	for range 5 {
		if n < groups/3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
		n = min(n, understudy.LeaderViewAllocs(hc.hosts[0]))
	}
	t.Logf("%.1f allocations per view of %d groups", n, groups)
	if n >= groups/3 {
		t.Fatalf("%.1f allocations per leader balancing view of %d groups, want fewer than %d: the view allocates per group", n, groups, groups/3)
	}
}
