package raft_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// leaderLoad is what a leader received per write with relayed standbys,
// and the heartbeats it built meanwhile.
type leaderLoad struct {
	frames, msgs float64 // received per write: frames (an envelope is one), raft messages carried
	// intervals counts the heartbeat intervals the writes took (a
	// follower voter's heartbeats while appends flow are left out:
	// redundant.go); hbStandby the heartbeats to each relayed standby, on
	// average.
	intervals, hbStandby float64
}

// measureLeaderLoad writes with standbys relayed standbys (a fresh
// cluster) and returns what the leader received per write; answers: the
// relays take their standbys' answers (else they answer directly, as with
// relays of a previous release). A run in which the leader changed (a
// loaded machine, under -race) is measured again, up to three times.
func measureLeaderLoad(t *testing.T, standbys int, answers bool) leaderLoad {
	t.Helper()
	for attempt := 1; ; attempt++ {
		load, ok := measureLeaderLoadOnce(t, standbys, answers)
		if ok {
			return load
		}
		if attempt == 3 {
			t.Fatalf("the leader changed in each of %d runs", attempt)
		}
		t.Logf("the leader changed during the run: measuring again")
	}
}

func measureLeaderLoadOnce(t *testing.T, standbys int, answers bool) (leaderLoad, bool) {
	t.Helper()
	const writes, workers, size = 2000, 8, 512
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := relayOptions(true, standbys)
	opts.RelayAnswers = answers
	opts.TickInterval = 40 * time.Millisecond // an election timeout of 400ms: a loaded leader stays
	c := cluster.New(t, opts)
	defer c.Close()
	c.Net.SetRelayedAnswers(answers)
	lead, ids := addStandbys(ctx, t, c, standbys)
	start := waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	writeAll(ctx, t, lead.Node, "warm", 50, workers, size, true)
	c.Net.ResetTraffic()
	began := time.Now()
	acked := writeAll(ctx, t, lead.Node, "w", writes, workers, size, true)
	took := time.Since(began)
	got := c.Net.ReceivedBy(lead.ID)
	st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	if st.Leader != lead.ID || st.Term != start.Term || acked == 0 {
		return leaderLoad{}, false
	}
	relayed := 0
	for _, id := range ids {
		if st.Progress[id].RelayedBy != 0 {
			relayed++
		}
	}
	t.Logf("answers through relays %v: %d of %d standbys relayed after the writes; the leader stepped %d relayed answers, dropped %d",
		answers, relayed, len(ids), st.RelayedAnswers, st.RelayedAnswersDropped)
	per := float64(acked)
	load := leaderLoad{
		frames:    float64(got.Messages) / per,
		msgs:      float64(got.Carried) / per,
		intervals: float64(took / opts.TickInterval), // HeartbeatTicks 1
	}
	var answered [2]uint64
	for _, id := range ids {
		load.hbStandby += float64(c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat))
		answered[0] += c.Net.Authored(id, lead.ID, raftpb.MsgAppResp)
		answered[1] += c.Net.Authored(id, lead.ID, raftpb.MsgHeartbeatResp)
	}
	load.hbStandby /= float64(len(ids))
	t.Logf("%2d relayed standbys: the leader received %.2f frames and %.2f messages per write; the standbys answered %.2f appends and %.2f heartbeats per write; heartbeats over %d writes (%.0f heartbeat intervals): %.1f to each standby",
		standbys, load.frames, load.msgs, float64(answered[0])/per, float64(answered[1])/per, acked, load.intervals, load.hbStandby)

	// Idle, every standby still hears heartbeats (the commit index of an
	// idle group reaches it that way).
	c.Net.ResetTraffic()
	waitStatus(ctx, t, lead.Node, "heartbeats to every standby while idle", func(s raft.Status) bool {
		if s.Leader != lead.ID {
			return true // checked below
		}
		for _, id := range ids {
			if c.Net.Authored(lead.ID, id, raftpb.MsgHeartbeat) < 3 {
				return false
			}
		}
		return true
	})
	if st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true }); st.Leader != lead.ID {
		return leaderLoad{}, false
	}
	sameLogs(ctx, t, c)
	return load, true
}

// TestRelayNoRedundantHeartbeats: while the leader writes, a relayed
// standby that was sent an append within the heartbeat interval (its next
// append carries the commit index) is not sent its heartbeat too: the
// heartbeats built for it are a small part of the heartbeat intervals
// (before: one per interval); idle, each one hears heartbeats again
// (every third of an election timeout once caught up), and every
// standby's applied log is the leader's. Counts printed for 12 and 24
// standbys.
func TestRelayNoRedundantHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("measures two clusters")
	}
	for _, standbys := range []int{12, 24} {
		load := measureLeaderLoad(t, standbys, true)
		if load.intervals < 10 {
			t.Logf("only %.0f heartbeat intervals in the writes: nothing to compare", load.intervals)
			continue
		}
		// Under load an interval may pass with no append to a standby
		// (raft's inflights full, the loop held up): its heartbeat goes.
		if load.hbStandby > load.intervals/2 {
			t.Fatalf("%d standbys: %.1f heartbeats to each relayed standby over %.0f heartbeat intervals of writes: want at most half",
				standbys, load.hbStandby, load.intervals)
		}
	}
}

// TestRelayAnswersGathered: with 24 relayed standbys, the standbys answer
// through their relays, which hand the answers on gathered: the frames the
// leader receives per write fall against the same cluster whose relays do
// not take answers (a previous release's). Every relayed answer the
// leader stepped came from the relay of its standby; every applied log is
// the leader's.
func TestRelayAnswersGathered(t *testing.T) {
	if testing.Short() {
		t.Skip("measures two clusters")
	}
	direct := measureLeaderLoad(t, 24, false)
	through := measureLeaderLoad(t, 24, true)
	t.Logf("24 standbys, frames the leader received per write: %.2f with direct answers, %.2f through the relays (%.2fx)",
		direct.frames, through.frames, through.frames/direct.frames)
	// Direct, every answer is a frame of its own (1.0-1.2x of the
	// answers). Gathered for relayAnswerWindow, 0.13x; handed on as they
	// came (a flush per loop run, before the window), 0.2-0.5x, depending
	// on the scheduling: the standbys answer at their own moments.
	if through.frames > 0.3*direct.frames {
		t.Fatalf("the leader received %.2f frames per write with answers through the relays, %.2f without: want at most 0.3x", through.frames, direct.frames)
	}
}

// forgedAnswer is an acknowledgement from standby, to the leader, of an
// index the leader never wrote, sent by member from in an envelope.
func forgedAnswer(standby, leader, term, index uint64) *raftio.RelayEnvelope {
	return &raftio.RelayEnvelope{Msgs: []*raftpb.Message{{
		Type: raftpb.MsgAppResp.Enum(), From: &standby, To: &leader, Term: &term, Index: &index,
	}}, Counts: []uint32{0}}
}

// TestRelayAnswersOnlyFromTheirRelay: the leader steps a relayed answer
// only from the relay of its standby at that moment. Answers forged in a
// standby's name by a relay of other standbys, by a standby that relays
// nobody, and in a voter's name by a relay, each acknowledging an index
// the leader never wrote, are dropped and counted: the leader's Match of
// those members stays within its log, its commit index too.
func TestRelayAnswersOnlyFromTheirRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := relayOptions(true, 4)
	opts.RelayAnswers = true
	opts.RelayFanout = 2
	c, lead, ids := withStandbys(ctx, t, opts, 4)
	defer c.Close()
	st := waitStatus(ctx, t, lead.Node, "every standby relayed, through both followers", func(s raft.Status) bool {
		return relayedAll(ids)(s) && len(relaysOf(s)) >= 2
	})
	relays := relaysOf(st)
	var standby, its, other, voter, bystander uint64
	for r, fed := range relays {
		if its == 0 {
			its, standby = r, fed[0]
		} else if other == 0 {
			other = r
		}
	}
	for _, id := range c.Members() {
		switch {
		case id == lead.ID || id == its:
		case !slices.Contains(ids, id) && voter == 0:
			voter = id
		case slices.Contains(ids, id) && id != standby && len(relays[id]) == 0 && bystander == 0:
			bystander = id
		}
	}
	if voter == 0 || bystander == 0 {
		t.Fatalf("relays %v: no follower voter besides %d, or no standby that relays nobody", relays, its)
	}
	forged := st.LastIndex + 1000
	t.Logf("relays %v: forging %d's answers through %d and %d, %d's through %d", relays, standby, other, bystander, voter, its)
	c.Net.SendRelay(other, lead.ID, forgedAnswer(standby, lead.ID, st.Term, forged))
	c.Net.SendRelay(bystander, lead.ID, forgedAnswer(standby, lead.ID, st.Term, forged))
	c.Net.SendRelay(its, lead.ID, forgedAnswer(voter, lead.ID, st.Term, forged))
	waitStatus(ctx, t, lead.Node, "the forged answers dropped or stepped", func(s raft.Status) bool {
		return s.RelayedAnswersDropped >= st.RelayedAnswersDropped+3 || s.Progress[standby].Match >= forged || s.Progress[voter].Match >= forged
	})
	writeAll(ctx, t, lead.Node, "after", 20, 2, 64, false)
	// The standbys' answers come through their relays' gathering, after
	// the voters committed the writes.
	got := waitStatus(ctx, t, lead.Node, "a standby's answer stepped through its relay", func(s raft.Status) bool { return s.RelayedAnswers > 0 })
	for _, id := range []uint64{standby, voter} {
		if m := got.Progress[id].Match; m >= forged || m > got.LastIndex {
			t.Fatalf("member %d's Match is %d, past the leader's last index %d: a forged answer was stepped", id, m, got.LastIndex)
		}
	}
	if got.Commit > got.LastIndex {
		t.Fatalf("commit index %d past the last index %d", got.Commit, got.LastIndex)
	}
	sameLogs(ctx, t, c)
}

// TestRelayAnswersAfterRelayDies: a relay (a follower voter) crashed while
// the leader writes, its standbys answering through it: they fall silent,
// are given another relay (a standby the other voter fed, made a relay for
// them), catch up, and a standby fed directly answers directly (its latest
// leader message came directly).
// Every applied log is the leader's.
func TestRelayAnswersAfterRelayDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := relayOptions(true, 6)
	opts.RelayAnswers = true
	opts.RelayFanout = 3
	c, lead, ids := withStandbys(ctx, t, opts, 6)
	defer c.Close()
	relay, fed := relayWithStandbys(ctx, t, lead, ids)
	waitStatus(ctx, t, lead.Node, "answers through the relays", func(s raft.Status) bool { return s.RelayedAnswers > 0 })
	done := make(chan int)
	go func() { done <- writeAll(ctx, t, lead.Node, "during", 400, 4, 256, true) }()
	waitStatus(ctx, t, lead.Node, "writes under way", func(st raft.Status) bool { return st.Commit > 60 })
	c.Crash(relay)
	t.Logf("relay %d (of %v) crashed", relay, fed)
	<-done
	caughtUp := func(st raft.Status) bool {
		for _, s := range fed {
			if pr := st.Progress[s]; pr.RelayedBy == relay || pr.Match < st.Commit {
				return false
			}
		}
		return true
	}
	st := waitStatus(ctx, t, lead.Node, "the relay's standbys fed otherwise and caught up", caughtUp)
	// They went to another relay (a standby made one, or the other voter
	// beyond its fanout when none keeps up), which may leave none fed
	// directly: cut one of them from its new relay, so that it falls
	// silent behind a relay that is fit and is fed directly.
	if via := st.Progress[fed[0]].RelayedBy; via != 0 {
		c.Net.Block(via, fed[0])
		t.Logf("standby %d cut from its new relay %d", fed[0], via)
	}
	// A standby fed directly through a whole round of writes answers
	// directly: one of the relay's, or the standby made a relay for them
	// (its own messages come from the leader in its envelope).
	var direct []uint64
	for range 20 {
		st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
		direct = direct[:0]
		for _, s := range ids {
			if st.Progress[s].RelayedBy == 0 {
				direct = append(direct, s)
			}
		}
		c.Net.ResetTraffic()
		writeAll(ctx, t, lead.Node, "after", 50, 4, 64, false)
		end := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
		direct = slices.DeleteFunc(direct, func(s uint64) bool { return end.Progress[s].RelayedBy != 0 })
		if len(direct) > 0 {
			break
		}
	}
	if len(direct) == 0 {
		t.Fatalf("none of %v stayed fed directly through a round of writes", ids)
	}
	for _, s := range direct {
		if n := c.Net.Direct(s, lead.ID); n == 0 {
			t.Fatalf("standby %d, fed directly, sent the leader nothing directly (%d envelopes)", s, c.Net.SentBy(s).Envelopes)
		}
	}
	t.Logf("fed directly and answering directly: %v", direct)
	c.Net.Heal()
	sameLogs(ctx, t, c)
}

// TestRelayedStandbyPromoted: two standbys that answer through their
// relays are promoted (five voters); the leader feeds them directly from
// the moment its configuration has them as voters (no Status shows a
// voter relayed), they answer directly — no answer of theirs in an envelope once they
// applied the change — and their answers count: with both original
// followers cut off, writes still commit. Every applied log is the
// leader's.
func TestRelayedStandbyPromoted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := relayOptions(true, 4)
	opts.RelayAnswers = true
	opts.RelayFanout = 2
	c, lead, ids := withStandbys(ctx, t, opts, 4)
	defer c.Close()
	st := waitStatus(ctx, t, lead.Node, "every standby relayed by a follower", func(s raft.Status) bool {
		if !relayedAll(ids)(s) {
			return false
		}
		for _, id := range ids {
			if slices.Contains(ids, s.Progress[id].RelayedBy) {
				return false
			}
		}
		return true
	})
	waitStatus(ctx, t, lead.Node, "answers through the relays", func(s raft.Status) bool { return s.RelayedAnswers > 0 })
	var followers, promote []uint64
	for r, fed := range relaysOf(st) {
		followers = append(followers, r)
		promote = append(promote, fed[0])
	}
	if len(followers) != 2 {
		t.Fatalf("relays %v: want the two followers", relaysOf(st))
	}
	for _, id := range promote {
		waitMembership(ctx, t, lead.Node, "the relayed standby ready", ready(id))
	}
	// Watch the leader's Status while it promotes: a voter is never shown
	// relayed.
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				watched <- nil
				return
			default:
			}
			s, err := lead.Node.Status(ctx)
			if err != nil {
				continue
			}
			for _, id := range promote {
				if slices.Contains(s.Voters, id) && s.Progress[id].RelayedBy != 0 {
					watched <- fmt.Errorf("member %d is a voter relayed by %d", id, s.Progress[id].RelayedBy)
					return
				}
			}
		}
	}()
	done := make(chan int)
	go func() { done <- writeAll(ctx, t, lead.Node, "during", 300, 4, 128, false) }()
	if err := lead.Node.Promote(ctx, promote...); err != nil {
		t.Fatalf("promoting %v: %v", promote, err)
	}
	<-done
	close(stop)
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	for _, id := range promote {
		m := c.Member(id)
		waitStatus(ctx, t, m.Node, "the promotion applied on the promoted member", func(s raft.Status) bool {
			return slices.Contains(s.Voters, id) && !s.Joint()
		})
	}
	c.Net.ResetTraffic()
	for _, f := range followers {
		c.Net.Isolate(f)
	}
	writeAll(ctx, t, lead.Node, "promoted", 100, 4, 128, false)
	for _, id := range promote {
		// Its own answers go directly. (It may relay the standbys left,
		// in envelopes, and hand their answers on: not its own.)
		if e := c.Net.SentBy(id).OwnEnveloped; e != 0 {
			t.Fatalf("promoted member %d sent %d messages of its own in envelopes", id, e)
		}
		if c.Net.Direct(id, lead.ID) == 0 {
			t.Fatalf("promoted member %d answered nothing directly", id)
		}
	}
	c.Net.Heal()
	sameLogs(ctx, t, c)
}
