package raft_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// slowTraffic is what the leader sent over a slow steady load, and then
// idle but awake.
type slowTraffic struct {
	writes int
	bytes  uint64 // all the leader sent during the writes
	// appsStandby and beatsStandby are the appends and heartbeats the
	// leader built for the relayed standbys during the writes, headerBytes
	// their headers' bytes in the envelopes.
	appsStandby, beatsStandby, headerBytes uint64
	idleTicks                              int
	idleBytes                              uint64 // all the leader sent while idle
	idleBeatsStandby                       uint64 // heartbeats it built for the standbys while idle
}

// measureSlowRate writes one write at a time, at most rate a second, for
// d with standbys relayed standbys (ticks of tick running), then stays
// idle (awake) for idle, and counts what the leader sent by kind.
func measureSlowRate(t *testing.T, standbys int, rate int, tick, d, idle time.Duration) slowTraffic {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead, ids, start := relayedFleetWarm(ctx, t, standbys, tick, 20, 1)
	defer c.Close()
	val := strings.Repeat("v", 512)
	tk := time.NewTicker(time.Second / time.Duration(rate))
	defer tk.Stop()
	out := slowTraffic{}
	for end := time.Now().Add(d); time.Now().Before(end); out.writes++ {
		<-tk.C
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := lead.Node.Propose(wctx, kv.Put(fmt.Sprintf("s-%d", out.writes), val))
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	tk.Stop()
	out.bytes = c.Net.SentBy(lead.ID).Bytes
	for _, id := range ids {
		out.appsStandby += c.Net.Authored(lead.ID, id, raftpb.MsgApp)
		out.beatsStandby += c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat)
		out.headerBytes += c.Net.AuthoredBytes(lead.ID, id, raftpb.MsgApp) + c.Net.AuthoredBytes(lead.ID, id, raftpb.MsgHeartbeat)
	}
	// Idle but awake (no quiescence here): what every tick costs.
	c.Net.ResetTraffic()
	time.Sleep(idle)
	out.idleTicks = int(idle / tick)
	out.idleBytes = c.Net.SentBy(lead.ID).Bytes
	for _, id := range ids {
		out.idleBeatsStandby += c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat)
	}
	if st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true }); st.Leader != lead.ID || st.Term != start.Term {
		t.Skipf("the leader changed during the measure (%d term %d, then %d term %d): nothing to compare", lead.ID, start.Term, st.Leader, st.Term)
	}
	sameLogs(ctx, t, c)
	w := float64(max(out.writes, 1))
	t.Logf("%2d standbys at %d writes/s: %d writes, %.0f B per write; for the standbys per write: %.2f appends, %.2f heartbeats, %.0f B of headers; idle: %.0f B per tick, %.2f heartbeats per tick to the standbys",
		standbys, rate, out.writes, float64(out.bytes)/w, float64(out.appsStandby)/w, float64(out.beatsStandby)/w, float64(out.headerBytes)/w,
		float64(out.idleBytes)/float64(out.idleTicks), float64(out.idleBeatsStandby)/float64(out.idleTicks))
	return out
}

// TestRelayLeaderTrafficAtSlowRate: at a slow steady rate (60 writes a
// second, ticks of 50 ms) and then idle but awake, what the leader sends
// for 24 relayed standbys grows with the writes, not with the time. Per
// write, it builds one append per standby — the one with the entry, not
// also raft's commit-index bump after it (which the next append or
// heartbeat carries) — and no heartbeat while appends flow; idle, it
// heartbeats a caught-up standby every third of an election timeout, not
// every tick. Before: 2 appends per standby per write, 1.77x the bytes
// per write of no standby, and 16x the bytes per idle tick (a heartbeat
// per standby per tick). Counts, not timings; every standby applies the
// leader's log.
func TestRelayLeaderTrafficAtSlowRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures two clusters for a few seconds each")
	}
	// Ticks of 50 ms: a write (one at a time, 27 members in one process,
	// slower under -race) takes less than a heartbeat interval, so that
	// the load is a steady stream and what is counted is per write.
	const standbys, rate, tick = 24, 60, 50 * time.Millisecond
	none := measureSlowRate(t, 0, rate, tick, 2*time.Second, 1500*time.Millisecond)
	fleet := measureSlowRate(t, standbys, rate, tick, 2*time.Second, 1500*time.Millisecond)
	perWrite := func(s slowTraffic) float64 { return float64(s.bytes) / float64(max(s.writes, 1)) }
	perTick := func(s slowTraffic) float64 { return float64(s.idleBytes) / float64(max(s.idleTicks, 1)) }
	bytesX, idleX := perWrite(fleet)/perWrite(none), perTick(fleet)/perTick(none)
	appsPer := float64(fleet.appsStandby) / float64(fleet.writes*standbys)
	idleBeatsPer := float64(fleet.idleBeatsStandby) / float64(fleet.idleTicks*standbys)
	t.Logf("24 relayed standbys against none: %.2fx the bytes per write, %.2fx per idle tick; %.2f appends per standby per write, %.2f heartbeats per standby per idle tick",
		bytesX, idleX, appsPer, idleBeatsPer)
	// One append per standby per write (a retransmission may add some);
	// it was two.
	if appsPer > 1.4 {
		t.Errorf("the leader built %.2f appends per relayed standby per write: want at most 1.4 (one, with the entry)", appsPer)
	}
	if bytesX > 1.6 {
		t.Errorf("the leader sent %.2fx the bytes per write of no standby at %d writes/s: want at most 1.6x", bytesX, rate)
	}
	// Idle: a heartbeat per standby every third of an election timeout
	// (10 ticks: every 3 ticks), not every tick.
	if idleBeatsPer > 0.5 {
		t.Errorf("idle, the leader built %.2f heartbeats per relayed standby per tick: want at most 0.5", idleBeatsPer)
	}
	if idleX > 10 {
		t.Errorf("idle, the leader sent %.2fx the bytes per tick of no standby: want at most 10x", idleX)
	}
}

// TestRelayAskerSentCommitUpdates: a relayed standby that forwards writes
// (its Propose returns once it applied the write) is still sent raft's
// commit-index bumps, which a relayed standby that only follows the log is
// not: its write does not wait for the next heartbeat.
func TestRelayAskerSentCommitUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := relayOptions(true, 4)
	opts.TickInterval = 50 * time.Millisecond // a forwarded write takes less than an interval, also under -race
	c, lead, ids := withStandbys(ctx, t, opts, 4)
	waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	asker, follower := c.Member(ids[0]), ids[1]
	writeAll(ctx, t, asker.Node, "warm", 5, 1, 256, false)
	c.Net.ResetTraffic()
	const writes = 40
	for i := range writes {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := asker.Node.Propose(wctx, kv.Put(fmt.Sprintf("a-%d", i), "v"))
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // one at a time, slowly
	}
	st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	if st.Progress[asker.ID].RelayedBy == 0 {
		t.Skipf("standby %d was fed directly at the end (a fallback): nothing to compare", asker.ID)
	}
	toAsker := float64(c.Net.Authored(lead.ID, asker.ID, raftpb.MsgApp)) / writes
	toFollower := float64(c.Net.Authored(lead.ID, follower, raftpb.MsgApp)) / writes
	t.Logf("appends per write: %.2f to the standby that forwards the writes, %.2f to one that follows", toAsker, toFollower)
	if toAsker < 1.6 {
		t.Errorf("the leader built %.2f appends per write for the standby that forwards them: want its commit-index bumps too (about 2)", toAsker)
	}
	if toFollower > 1.4 {
		t.Errorf("the leader built %.2f appends per write for a standby that follows: want about 1", toFollower)
	}
	sameLogs(ctx, t, c)
}

// relayedFleetWarm starts 3 voters and standbys relayed (the tick given),
// waits until every standby is relayed, writes warm 512-byte puts from
// workers writers, and resets the traffic counters: the setup of the
// relay traffic measures. It returns the leader's status at the start.
func relayedFleetWarm(ctx context.Context, t *testing.T, standbys int, tick time.Duration, warm, workers int) (*cluster.Cluster, *cluster.Member, []uint64, raft.Status) {
	t.Helper()
	opts := relayOptions(true, standbys)
	opts.TickInterval = tick
	c, lead, ids := withStandbys(ctx, t, opts, standbys)
	if standbys > 0 {
		waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	}
	writeAll(ctx, t, lead.Node, "warm", warm, workers, 512, false)
	start := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	c.Net.ResetTraffic()
	return c, lead, ids, start
}
