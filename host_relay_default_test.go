package understudy_test

import (
	"context"
	"fmt"
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
	_, l, ids := startWithStandbys(ctx, t, 2, func(*understudy.Config) {})
	require.Eventually(t, func() bool {
		st, err := l.Status(ctx)
		return err == nil && relayed(st, ids) == len(ids)
	}, 30*time.Second, 10*time.Millisecond, "the standbys of a group started with no setting relayed")

	_, l, ids = startWithStandbys(ctx, t, 2, func(c *understudy.Config) { c.DisableRelay = true })
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

// startWithStandbys starts three voters and n standbys (IDs 4, 5, …), each
// by Start with edit applied, the membership manual, and writes once; it
// returns the cluster, its leader and the standbys' IDs.
func startWithStandbys(ctx context.Context, t *testing.T, n int, edit func(*understudy.Config)) (*testCluster, *understudy.Group, []uint64) {
	t.Helper()
	cfgEdit := func(c *understudy.Config) {
		c.Raft.ManualMembership = true
		c.Raft.Membership = confchange.Settings{Stabilization: 100 * time.Millisecond, MaxLearners: max(n, 2)}
		edit(c)
	}
	tc := newTestCluster(t, 3, cfgEdit)
	l := tc.leader(ctx)
	var ids []uint64
	for id := uint64(4); id < uint64(4+n); id++ {
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
	return tc, l, ids
}

// TestRelayedStandbysQuiesceAndWake: with both defaults on (relays and
// quiescence), a group whose standbys are relayed quiesces on every
// member, standbys included; a write wakes it, reaches every standby, and
// the group quiesces again — the standbys relayed again after the wake.
func TestRelayedStandbysQuiesceAndWake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc, l, ids := startWithStandbys(ctx, t, 3, func(*understudy.Config) {})
	relayedAll := func() bool {
		st, err := l.Status(ctx)
		if err != nil {
			return false
		}
		for _, id := range ids {
			if st.Progress[id].RelayedBy == 0 {
				return false
			}
		}
		return true
	}
	quiescedAll := func() bool {
		for _, g := range tc.hosts {
			if st, err := g.Status(ctx); err != nil || !st.Quiesced {
				return false
			}
		}
		return true
	}
	require.Eventually(t, relayedAll, 30*time.Second, 10*time.Millisecond, "the standbys relayed")
	for round := range 3 {
		require.Eventually(t, quiescedAll, 30*time.Second, 10*time.Millisecond, "round %d: every member quiesced, standbys included", round)
		v := fmt.Sprintf("v%d", round)
		_, err := l.Propose(ctx, kv.Put("k", v))
		require.NoError(t, err)
		for _, id := range ids {
			require.Eventually(t, func() bool {
				got, err := tc.hosts[id].StaleRead([]byte("k"))
				return err == nil && string(got) == v
			}, 30*time.Second, 10*time.Millisecond, "round %d: standby %d applies the write that woke the group", round, id)
		}
		require.Eventually(t, relayedAll, 30*time.Second, 10*time.Millisecond, "round %d: the standbys relayed after the wake", round)
	}
}
