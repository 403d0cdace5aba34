package understudy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestStartRelaysByDefault: a group started with no setting feeds its
// standbys through relays (three voters, each started by Start, and two
// standbys joining: the leader relays both); Config.DisableRelay reaches
// the group: a cluster started with it feeds its standbys itself, however
// long it runs; DisableRelay with Raft.Relay is refused.
func TestStartRelaysByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	relayed := func(st raft.Status, ids []uint64) int {
		n := 0
		for _, id := range ids {
			if st.Progress[id].RelayedBy != 0 {
				n++
			}
		}
		return n
	}
	withStandbys := func(edit func(*understudy.Config)) (*understudy.Group, []uint64) {
		cfgEdit := func(c *understudy.Config) {
			c.Raft.ManualMembership = true
			c.Raft.Membership = confchange.Settings{Stabilization: 100 * time.Millisecond}
			edit(c)
		}
		tc := newTestCluster(t, 3, cfgEdit)
		l := tc.leader(ctx)
		var ids []uint64
		for id := uint64(4); id <= 5; id++ {
			ln := listen(t)
			require.NoError(t, l.AddLearner(ctx, raft.Member{ID: id, PeerAddr: ln.Addr().String()}))
			cfg := tc.cfg(id, ln)
			cfg.Join = []string{tc.addrs[l.ID()]}
			cfgEdit(&cfg)
			g, err := understudy.Start(ctx, cfg, kv.New())
			require.NoError(t, err)
			tc.hosts[id], tc.addrs[id] = g, ln.Addr().String()
			ids = append(ids, id)
		}
		_, err := l.Propose(ctx, kv.Put("k", "v"))
		require.NoError(t, err)
		return l, ids
	}

	l, ids := withStandbys(func(*understudy.Config) {})
	require.Eventually(t, func() bool {
		st, err := l.Status(ctx)
		return err == nil && relayed(st, ids) == len(ids)
	}, 30*time.Second, 10*time.Millisecond, "the standbys of a group started with no setting relayed")

	l, ids = withStandbys(func(c *understudy.Config) { c.DisableRelay = true })
	require.Eventually(t, func() bool {
		st, err := l.Status(ctx)
		if err != nil {
			return false
		}
		for _, id := range ids {
			if st.Progress[id].Match == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the standbys replicating")
	for range 10 { // ten times the few ticks a standby waits before it is relayed
		st, err := l.Status(ctx)
		require.NoError(t, err)
		require.Zero(t, relayed(st, ids), "a group started with Config.DisableRelay relays: %+v", st.Progress)
		time.Sleep(5 * fastRaft().TickInterval)
	}

	cfg := understudy.Config{ID: 1, DataDir: t.TempDir(), Listener: listen(t), DisableRelay: true}
	cfg.Raft.Relay = true
	cfg.InitialMembers = []raft.Member{{ID: 1, PeerAddr: cfg.Listener.Addr().String()}}
	_, err := understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, raft.ErrInvalidConfig)
	require.ErrorContains(t, err, "DisableRelay and Raft.Relay")
}
