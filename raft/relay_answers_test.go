package raft_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft"
)

// leaderLoad is what a leader received per write with relayed standbys,
// and the heartbeats it built meanwhile.
type leaderLoad struct {
	frames, msgs float64 // received per write: frames (an envelope is one), raft messages carried
	// hbFollower counts the heartbeats to one follower voter (one per
	// heartbeat interval: they are never left out); hbStandby those to
	// each relayed standby, on average.
	hbFollower, hbStandby float64
}

// measureLeaderLoad writes with standbys relayed standbys (a fresh
// cluster) and returns what the leader received per write.
func measureLeaderLoad(t *testing.T, standbys int) leaderLoad {
	t.Helper()
	const writes, workers, size = 2000, 8, 512
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, lead, ids := withStandbys(ctx, t, relayOptions(true, standbys), standbys)
	defer c.Close()
	waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	writeAll(ctx, t, lead.Node, "warm", 50, workers, size, false)
	c.Net.ResetTraffic()
	writeAll(ctx, t, lead.Node, "w", writes, workers, size, false)
	got := c.Net.ReceivedBy(lead.ID)
	st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	relayed := 0
	for _, id := range ids {
		if st.Progress[id].RelayedBy != 0 {
			relayed++
		}
	}
	t.Logf("%d of %d standbys relayed after the writes", relayed, len(ids))
	var follower uint64
	for _, id := range c.Members() {
		if id != lead.ID && !slices.Contains(ids, id) {
			follower = id
			break
		}
	}
	load := leaderLoad{
		frames:     float64(got.Messages) / writes,
		msgs:       float64(got.Carried) / writes,
		hbFollower: float64(c.Net.Authored(lead.ID, follower, raftpb.MsgHeartbeat)),
	}
	var answers [2]uint64
	for _, id := range ids {
		load.hbStandby += float64(c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat))
		answers[0] += c.Net.Authored(id, lead.ID, raftpb.MsgAppResp)
		answers[1] += c.Net.Authored(id, lead.ID, raftpb.MsgHeartbeatResp)
	}
	load.hbStandby /= float64(len(ids))
	t.Logf("%2d relayed standbys: the leader received %.2f frames and %.2f messages per write; the standbys answered %.2f appends and %.2f heartbeats per write; heartbeats over %d writes: %.0f to a follower, %.1f to each standby",
		standbys, load.frames, load.msgs, float64(answers[0])/writes, float64(answers[1])/writes, writes, load.hbFollower, load.hbStandby)

	// Idle, every standby still hears heartbeats (the commit index of an
	// idle group reaches it that way).
	c.Net.ResetTraffic()
	waitStatus(ctx, t, lead.Node, "heartbeats to every standby while idle", func(raft.Status) bool {
		for _, id := range ids {
			if c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat) < 3 {
				return false
			}
		}
		return true
	})
	sameLogs(ctx, t, c)
	return load
}

// TestRelayNoRedundantHeartbeats: while the leader writes, a relayed
// standby that was sent an append within the heartbeat interval (whose
// commit index the heartbeat would not raise) is not sent its heartbeat
// too: the heartbeats built for it are a small part of a follower
// voter's (before: one per interval, as a voter's); idle, each one
// hears heartbeats again, and every standby's applied log is the
// leader's. Counts printed for 12 and 24 standbys.
func TestRelayNoRedundantHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("measures two clusters")
	}
	for _, standbys := range []int{12, 24} {
		load := measureLeaderLoad(t, standbys)
		if load.hbFollower < 10 {
			t.Logf("only %.0f heartbeat intervals in the writes: nothing to compare", load.hbFollower)
			continue
		}
		// Under load an interval may pass with no append to a standby
		// (raft's inflights full, the loop held up): its heartbeat goes.
		if load.hbStandby > load.hbFollower/2 {
			t.Fatalf("%d standbys: %.1f heartbeats to each relayed standby while writing, %.0f to a follower: want at most half",
				standbys, load.hbStandby, load.hbFollower)
		}
	}
}
