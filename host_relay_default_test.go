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
	waitRelayed(ctx, t, l, ids, "the standbys of a group started with no setting relayed")

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

	refusesContradiction(ctx, t, func(c *understudy.Config) { c.DisableRelay, c.Raft.Relay = true, true }, "DisableRelay and Raft.Relay")
}

// refusesContradiction checks that Start refuses a one-member config
// edited to set a Disable… option and the raft setting it turns off.
func refusesContradiction(ctx context.Context, t *testing.T, edit func(*understudy.Config), want string) {
	t.Helper()
	cfg := understudy.Config{ID: 1, DataDir: t.TempDir(), Listener: listen(t)}
	cfg.InitialMembers = []raft.Member{{ID: 1, PeerAddr: cfg.Listener.Addr().String()}}
	edit(&cfg)
	_, err := understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, raft.ErrInvalidConfig)
	require.ErrorContains(t, err, want)
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

// waitRelayed waits until the leader l feeds every standby of ids through
// a relay, writing now and then meanwhile: relays are assigned on the
// leader's ticks, and a group may quiesce (and stop ticking) while a
// standby is fed directly — it just joined, or it fell back for a moment
// (a relay's answers late on a loaded machine) — which costs nothing while
// the group is idle, and is mended at the next tick after a write wakes
// it. So "relayed" is a property of a group that is written to. It
// returns the leader's status that showed every standby relayed.
func waitRelayed(ctx context.Context, t *testing.T, l *understudy.Group, ids []uint64, msg string) raft.Status {
	t.Helper()
	nudged := time.Now()
	var seen raft.Status
	require.Eventually(t, func() bool {
		st, err := l.Status(ctx)
		if err != nil {
			return false
		}
		all := true
		for _, id := range ids {
			all = all && st.Progress[id].RelayedBy != 0
		}
		if !all && time.Since(nudged) > 200*time.Millisecond {
			nudged = time.Now()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = l.Propose(wctx, kv.Put("nudge", "v"))
			cancel()
		}
		if all {
			seen = st
		}
		return all
	}, 30*time.Second, 10*time.Millisecond, msg)
	return seen
}

// TestRelayedStandbysQuiesceAndWake: with both defaults on (relays and
// quiescence), a group whose standbys are relayed quiesces on every
// member, standbys included; a write wakes it, reaches every standby, and
// the group quiesces again — the standbys relayed again once written to
// (waitRelayed).
func TestRelayedStandbysQuiesceAndWake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc, l, ids := startWithStandbys(ctx, t, 3, func(*understudy.Config) {})
	quiescedAll := func() bool {
		for _, g := range tc.hosts {
			if st, err := g.Status(ctx); err != nil || !st.Quiesced {
				return false
			}
		}
		return true
	}
	waitRelayed(ctx, t, l, ids, "the standbys relayed")
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
		waitRelayed(ctx, t, l, ids, fmt.Sprintf("round %d: the standbys relayed after the wake", round))
	}
}

// TestStartRelaysAnswersByDefault: the relayed standbys of a group started
// with no setting answer through their relays (the leader steps relayed
// answers); Config.DisableRelayAnswers reaches the group: they answer
// directly; DisableRelayAnswers with Raft.RelayAnswers is refused.
func TestStartRelaysAnswersByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answered := func(edit func(*understudy.Config)) uint64 {
		_, l, ids := startWithStandbys(ctx, t, 2, edit)
		waitRelayed(ctx, t, l, ids, "the standbys relayed")
		for i := range 50 {
			_, err := l.Propose(ctx, kv.Put(fmt.Sprint("k", i), "v"))
			require.NoError(t, err)
		}
		st, err := l.Status(ctx)
		require.NoError(t, err)
		return st.RelayedAnswers
	}
	require.NotZero(t, answered(func(*understudy.Config) {}), "relayed answers with no setting")
	require.Zero(t, answered(func(c *understudy.Config) { c.DisableRelayAnswers = true }), "relayed answers with DisableRelayAnswers")

	refusesContradiction(ctx, t, func(c *understudy.Config) { c.DisableRelayAnswers, c.Raft.RelayAnswers = true, true },
		"DisableRelayAnswers and Raft.RelayAnswers")
}
