package understudy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// lookupBomb is a kv store whose Lookup panics once armed: a state
// machine fault that stops its group only, while its host lives on.
type lookupBomb struct {
	*kv.Store
	armed *atomic.Bool
}

func (b lookupBomb) Lookup(q []byte) ([]byte, error) {
	if b.armed.Load() {
		panic("lookup bomb")
	}
	return b.Store.Lookup(q)
}

// TestQuiescedFollowersElectWhenTheLeadersGroupStops: three hosts, one
// group with quiescence on, quiesced. The leader's group stops on its
// own (its state machine panics on a stale read, which wakes nothing)
// while its host lives, so host liveness says nothing. Its peers refuse
// the followers' connections from then on ("group not run"), which wakes
// them: without any client call, they elect a new leader among themselves,
// and the group serves a write.
func TestQuiescedFollowersElectWhenTheLeadersGroupStops(t *testing.T) {
	t.Run("closed", func(t *testing.T) { quiescedLeaderGroupStops(t, true) })
	t.Run("state machine panic", func(t *testing.T) { quiescedLeaderGroupStops(t, false) })
}

func quiescedLeaderGroupStops(t *testing.T, closeIt bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := newLivenessHosts(t)
	var armed [3]atomic.Bool
	gs := make([]*understudy.Group, 3)
	for i, h := range hc.hosts {
		cfg := hc.groupConfig(1, i)
		cfg.Raft.Quiesce = true
		g, err := h.StartGroup(ctx, cfg, lookupBomb{Store: kv.New(), armed: &armed[i]})
		require.NoError(t, err)
		gs[i] = g
	}
	require.NoError(t, put(ctx, t, gs, "k", "v"))
	quiesced := func(g *understudy.Group) bool {
		st, err := g.Status(ctx)
		return err == nil && st.Quiesced
	}
	require.Eventually(t, func() bool {
		for _, g := range gs {
			if !quiesced(g) {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the group quiesces")

	lead := -1
	for i, g := range gs {
		if g.IsLeader() {
			lead = i
		}
	}
	require.NotEqual(t, -1, lead)
	if closeIt {
		// Closed with no time to hand leadership over: its host lives on.
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		_ = gs[lead].Close(cctx)
	} else {
		armed[lead].Store(true)
		_, _ = gs[lead].StaleRead([]byte("k")) // its group stops; its host lives
	}
	select {
	case <-gs[lead].Done():
	case <-ctx.Done():
		t.Fatal("the leader's group did not stop")
	}
	var others []*understudy.Group
	for i, g := range gs {
		if i != lead {
			others = append(others, g)
		}
	}
	// No client call: the followers must elect on their own.
	require.Eventually(t, func() bool {
		for _, g := range others {
			if g.IsLeader() {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the followers elect a leader without a client's call")
	require.NoError(t, put(ctx, t, others, "k", "after"))
}

// TestHostGroupsQuiesceByDefault: a host's groups quiesce by default (no
// setting), on every member; a group started with DisableQuiescence on the
// same hosts never does, however long the other stays quiet, because its
// members refuse the leader's quiesce message (the leader counts it as a
// refused wake-up, so it did try) — or, leading, never try.
func TestHostGroupsQuiesceByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := newLivenessHosts(t)
	def := make([]*understudy.Group, 3)
	off := make([]*understudy.Group, 3)
	for i, h := range hc.hosts {
		g, err := h.StartGroup(ctx, hc.groupConfig(1, i), kv.New()) // the default
		require.NoError(t, err)
		def[i] = g
		cfg := hc.groupConfig(2, i)
		cfg.DisableQuiescence = true
		g, err = h.StartGroup(ctx, cfg, kv.New())
		require.NoError(t, err)
		off[i] = g
	}
	require.NoError(t, put(ctx, t, def, "k", "v"))
	require.NoError(t, put(ctx, t, off, "k", "v"))
	quiesced := func(gs []*understudy.Group) int {
		n := 0
		for _, g := range gs {
			if st, err := g.Status(ctx); err == nil && st.Quiesced {
				n++
			}
		}
		return n
	}
	// Each member publishes its own record (its incarnation) once, a
	// proposal that wakes the group; wait for those too, so that the last
	// check below does not catch a late one waking it.
	require.Eventually(t, func() bool { return ownRecordsPublished(def...) && quiesced(def) == 3 }, 30*time.Second, 10*time.Millisecond,
		"the group started without a setting quiesces on every member")
	// Group 1 quiesced after 6 idle ticks; group 2, as idle, has had ten
	// times that by the end of this wait, with its members on the same
	// live hosts.
	for range 10 {
		require.Zero(t, quiesced(off), "a group with DisableQuiescence quiesced")
		time.Sleep(6 * fastRaft().TickInterval)
	}
	require.Equal(t, 3, quiesced(def), "the default group stays quiesced meanwhile")
}

// TestQuiescenceConfigRefused: a host's default needs PreVote and
// CheckQuorum, so a group that disables either without DisableQuiescence
// is refused with an error that names the setting to add (it never asked
// for quiescence); DisableQuiescence with Raft.Quiesce contradicts itself.
// With DisableQuiescence, PreVote off starts.
func TestQuiescenceConfigRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := newHosts(t, 1)
	h := hc.hosts[0]
	for name, edit := range map[string]func(*understudy.GroupConfig){
		"no prevote":      func(c *understudy.GroupConfig) { c.Raft.DisablePreVote = true },
		"no checkquorum":  func(c *understudy.GroupConfig) { c.Raft.DisableCheckQuorum = true },
		"both knobs set":  func(c *understudy.GroupConfig) { c.DisableQuiescence, c.Raft.Quiesce = true, true },
		"quiesce, no pre": func(c *understudy.GroupConfig) { c.Raft.Quiesce, c.Raft.DisablePreVote = true, true },
	} {
		cfg := hc.groupConfig(1, 0)
		edit(&cfg)
		_, err := h.StartGroup(ctx, cfg, kv.New())
		require.ErrorIs(t, err, raft.ErrInvalidConfig, name)
		if name == "no prevote" || name == "no checkquorum" {
			require.ErrorContains(t, err, "set DisableQuiescence", name)
		}
		stored, err := h.StoredGroups()
		require.NoError(t, err)
		require.Empty(t, stored, "%s: a refused group left data", name)
	}
	cfg := hc.groupConfig(1, 0)
	cfg.DisableQuiescence, cfg.Raft.DisablePreVote = true, true
	g, err := h.StartGroup(ctx, cfg, kv.New())
	require.NoError(t, err)
	require.NoError(t, g.Close(ctx))
}

// TestStartQuiescesByDefault: Start's one group quiesces by default, as a
// host's groups do (three members, each started by Start, with no
// setting); Config.DisableQuiescence reaches the group: a cluster started
// with it never quiesces, however long it idles.
func TestStartQuiescesByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiesced := func(tc *testCluster) int {
		n := 0
		for _, g := range tc.hosts {
			if st, err := g.Status(ctx); err == nil && st.Quiesced {
				n++
			}
		}
		return n
	}
	def := newTestCluster(t, 3)
	_, err := def.leader(ctx).Propose(ctx, kv.Put("k", "v"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return quiesced(def) == 3 }, 30*time.Second, 10*time.Millisecond,
		"Start's groups quiesce without a setting")

	off := newTestCluster(t, 3, func(c *understudy.Config) { c.DisableQuiescence = true })
	_, err = off.leader(ctx).Propose(ctx, kv.Put("k", "v"))
	require.NoError(t, err)
	for range 10 { // ten times the idle spell after which a group quiesces
		require.Zero(t, quiesced(off), "a group started with Config.DisableQuiescence quiesced")
		time.Sleep(6 * fastRaft().TickInterval)
	}
}
