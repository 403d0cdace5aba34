package understudy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// slowApply is a kv store whose Apply takes a while: a state machine that
// holds its apply worker.
type slowApply struct {
	*kv.Store
	d time.Duration
}

func (s slowApply) Apply(cmds []raft.Command, res []raft.Result) {
	time.Sleep(s.d)
	s.Store.Apply(cmds, res)
}

// TestHostGroupsShareBoundedWorkers: 3 hosts × 24 groups run on one loop
// worker, two I/O workers and two apply workers per host — whatever the
// number of groups — and every group elects a leader and serves writes,
// also while one group's state machine takes 50 ms per batch (it holds
// one apply worker at a time, never a loop).
func TestHostGroupsShareBoundedWorkers(t *testing.T) {
	sc := raft.SchedulerConfig{Workers: 1, IOWorkers: 2, ApplyWorkers: 2}
	hc := newHostsWith(t, 3, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const groups = 24
	all := make([][]*understudy.Group, groups+1)
	for g := uint64(1); g <= groups; g++ {
		sm := func() raft.StateMachine { return kv.New() }
		if g == 1 {
			sm = func() raft.StateMachine { return slowApply{kv.New(), 50 * time.Millisecond} }
		}
		all[g] = hc.start(ctx, g, sm)
	}
	// The slow group is kept busy while the others write.
	slowCtx, stopSlow := context.WithCancel(ctx)
	var slow sync.WaitGroup
	slow.Add(1)
	go func() {
		// Not put: its leaderOf fails the test when its context ends with
		// no leader in sight, which the end of this loop (stopSlow) may
		// meet in the middle of a leadership hand-off (the hosts balance
		// their leaders) — and a goroutine must not fail the test.
		defer slow.Done()
		for i := 0; slowCtx.Err() == nil; i++ {
			var l *understudy.Group
			for _, g := range all[1] {
				if g != nil && g.IsLeader() {
					l = g
				}
			}
			if l == nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			_, _ = l.Propose(slowCtx, kv.Put(fmt.Sprint("slow", i), "x"))
		}
	}()
	var wg sync.WaitGroup
	for g := uint64(2); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				require.NoError(t, put(ctx, t, all[g], fmt.Sprint("k", i), fmt.Sprint(g)))
			}
		}()
	}
	wg.Wait()
	stopSlow()
	slow.Wait()
	for i, h := range hc.hosts {
		st := h.Scheduler().Stats()
		require.LessOrEqual(t, st.Workers, sc.Workers, "host %d", i)
		require.LessOrEqual(t, st.IOWorkers, sc.IOWorkers, "host %d", i)
		require.LessOrEqual(t, st.ApplyWorkers, sc.ApplyWorkers, "host %d", i)
		require.NotZero(t, st.LoopRuns, "host %d", i)
	}
	// Every replica of every group applied its group's writes.
	for g := uint64(2); g <= groups; g++ {
		for i, grp := range all[g] {
			require.Eventually(t, func() bool {
				v, err := grp.StaleRead([]byte("k4"))
				return err == nil && string(v) == fmt.Sprint(g)
			}, 10*time.Second, 5*time.Millisecond, "group %d on host %d", g, i)
		}
	}
}

// TestHostDeleteGroupLetsAReplicaComeBack: a host whose replica of a group
// was removed deletes the group's data and runs a new replica of it, under
// a new ID, which catches up; a running group's data is never deleted.
func TestHostDeleteGroupLetsAReplicaComeBack(t *testing.T) {
	hc := newHosts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gs := hc.start(ctx, 1, func() raft.StateMachine { return kv.New() })
	require.NoError(t, put(ctx, t, gs, "a", "1"))
	require.ErrorIs(t, hc.hosts[2].DeleteGroup(1), understudy.ErrGroupRunning)
	// A write needs one follower: the other may not have answered the
	// leader yet, and a new leader may not have heard from every voter:
	// the transfer and the removal below are then refused (quorum at risk)
	// or time out, as they should. So each waits until the leader heard
	// from every voter.
	allHeard := func() {
		require.Eventually(t, func() bool {
			ms, err := leaderOf(ctx, t, gs).Membership(ctx)
			if err != nil || len(ms.Members) != 3 {
				return false
			}
			for _, m := range ms.Members {
				if m.Progress != nil && !m.Progress.RecentActive {
					return false
				}
			}
			return true
		}, 20*time.Second, 5*time.Millisecond)
	}
	allHeard()
	if gs[2].IsLeader() { // removed, a leader stops before it answers: remove a follower
		// Raft abandons a transfer that does not complete within an
		// election timeout (ErrTimeout; 100 ms here, short under -race on
		// a busy machine): ask again.
		require.Eventually(t, func() bool {
			err := gs[2].TransferLeadership(ctx, replicaID(1, 0))
			require.True(t, err == nil || errors.Is(err, raft.ErrTimeout), "transfer: %v", err)
			return err == nil
		}, 20*time.Second, time.Millisecond)
		allHeard()
	}
	require.NoError(t, leaderOf(ctx, t, gs[:2]).RemoveMember(ctx, replicaID(1, 2)))
	<-gs[2].Done()
	require.ErrorIs(t, gs[2].Err(), raft.ErrRemoved)
	_ = gs[2].Close(ctx) // returns the error it stopped with: ErrRemoved
	require.NoError(t, hc.hosts[2].DeleteGroup(1))
	require.ErrorIs(t, hc.hosts[2].DeleteGroup(1), storage.ErrNoGroup)

	newID := replicaID(1, 2) + 50
	require.NoError(t, leaderOf(ctx, t, gs[:2]).AddLearner(ctx, raft.Member{ID: newID, PeerAddr: hc.addrs[2]}))
	back, err := hc.hosts[2].StartGroup(ctx, understudy.GroupConfig{GroupID: 1, ID: newID, Join: hc.addrs[:2], Raft: fastRaft()}, kv.New())
	require.NoError(t, err)
	require.NoError(t, put(ctx, t, gs[:2], "b", "2"))
	require.Eventually(t, func() bool {
		v, err := back.StaleRead([]byte("b"))
		return err == nil && string(v) == "2"
	}, 20*time.Second, 10*time.Millisecond)
}

// TestHostLinkSettings: HostConfig.Links reach the host's links; a
// negative one is refused and leaves nothing open (the data dir opens
// again).
func TestHostLinkSettings(t *testing.T) {
	dir := t.TempDir()
	_, err := understudy.NewHost(understudy.HostConfig{DataDir: dir, ListenPeer: "127.0.0.1:0",
		Links: understudy.LinkSettings{PingInterval: -time.Second}})
	require.ErrorIs(t, err, transport.ErrInvalidConfig)
	h, err := understudy.NewHost(understudy.HostConfig{DataDir: dir, ListenPeer: "127.0.0.1:0",
		Links: understudy.LinkSettings{PingInterval: 50 * time.Millisecond, ReadTimeout: time.Second}})
	require.NoError(t, err)
	require.NoError(t, h.Close(context.Background()))
}
