package understudy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
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
