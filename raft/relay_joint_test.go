package raft_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
)

// TestRelayJointChange: with one standby a relay (RelayFanout 1), the two
// follower voters and the caught-up standbys relay for the others, so
// half the standbys or more are fed through relays; while writes go on,
// two relayed standbys are promoted in one joint change and then the two
// follower voters — the relays — demoted in another: the voters are
// swapped, two for two. Each change completes (the configuration leaves
// the joint state), the relays are chosen again (the new follower voters
// fed directly, the demoted ones now standbys), and every member's
// applied log is the leader's, entry for entry.
func TestRelayJointChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const standbys = 6
	opts := relayOptions(true, standbys)
	opts.RelayFanout = 1
	c, lead, ids := withStandbys(ctx, t, opts, standbys)
	st := waitStatus(ctx, t, lead.Node, "every standby relayed or a relay", fedOrRelay(ids))
	relays := relaysOf(st)
	var followers, relayed []uint64
	for _, id := range []uint64{1, 2, 3} {
		if id != lead.ID {
			followers = append(followers, id)
		}
	}
	for _, id := range ids {
		if st.Progress[id].RelayedBy != 0 {
			relayed = append(relayed, id)
		}
	}
	if 2*len(relayed) < len(ids) {
		t.Fatalf("%d of %d standbys relayed (%v), want half or more", len(relayed), len(ids), relays)
	}
	// Promote one standby a follower relays and one a standby relays.
	var promote []uint64
	for _, want := range []bool{true, false} {
		for _, id := range relayed {
			if slices.Contains(followers, st.Progress[id].RelayedBy) == want && !slices.Contains(promote, id) {
				promote = append(promote, id)
				break
			}
		}
	}
	if len(promote) != 2 {
		t.Fatalf("want a standby relayed by a follower and one relayed by a standby: relays %v", relays)
	}
	t.Logf("relays %v: promoting %v, then demoting %v", relays, promote, followers)
	for _, id := range promote {
		waitMembership(ctx, t, lead.Node, "the relayed standby ready", ready(id))
	}

	done := make(chan int)
	go func() { done <- writeAll(ctx, t, lead.Node, "during", 1000, 4, 128, true) }()
	waitStatus(ctx, t, lead.Node, "writes under way", func(s raft.Status) bool { return s.Commit > st.Commit+30 })
	// While the promotion is joint, the other standbys stay relayed.
	others := slices.DeleteFunc(slices.Clone(relayed), func(id uint64) bool { return slices.Contains(promote, id) })
	if _, err := lead.Node.ChangeMembership(ctx, confchange.Promote(promote...)); err != nil {
		t.Fatalf("promoting %v: %v", promote, err)
	}
	waitStatus(ctx, t, lead.Node, "five voters, the other standbys relayed", func(s raft.Status) bool {
		if s.Joint() || len(s.Voters) != 5 {
			return false
		}
		for _, id := range others {
			if s.Progress[id].RelayedBy == 0 {
				return false
			}
		}
		return true
	})
	if _, err := lead.Node.ChangeMembership(ctx, confchange.Demote(followers...)); err != nil {
		t.Fatalf("demoting %v: %v", followers, err)
	}
	mid := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	acked := <-done
	if mid.Commit >= st.Commit+1000 {
		t.Logf("the writes were over before the second change completed (commit %d)", mid.Commit)
	}
	want := slices.Sorted(slices.Values(append([]uint64{lead.ID}, promote...)))
	learners := slices.Sorted(slices.Values(append(slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool {
		return slices.Contains(promote, id)
	}), followers...)))
	// The relays are chosen again: the promoted standbys are fed directly
	// (and relay, as follower voters), every standby — the demoted voters
	// among them — is relayed or a relay (fed directly, caught up).
	st = waitStatus(ctx, t, lead.Node, "the swapped voters, the relays chosen again", func(s raft.Status) bool {
		if s.Joint() || !slices.Equal(s.Voters, want) || !slices.Equal(s.Learners, learners) {
			return false
		}
		for _, id := range promote {
			if s.Progress[id].RelayedBy != 0 {
				return false
			}
		}
		return fedOrRelay(learners)(s)
	})
	t.Logf("voters %v, learners %v, relays %v; %d writes acknowledged during the changes", st.Voters, st.Learners, relaysOf(st), acked)
	writeAll(ctx, t, lead.Node, "after", 50, 4, 128, false)
	sameLogs(ctx, t, c)
}

// TestRelayJointChangeLeaderCrashed: as TestRelayJointChange, the leader
// promotes two relayed standbys in one joint change while the others are
// relayed, but every append carrying the leave-joint entry is dropped
// (directly or inside a relay envelope) and the leader is crashed inside
// the joint configuration: the next leader, in a later term, inherits it
// and completes it (the five voters), chooses relays again for the
// standbys — the old leader's relay choices die with its term — and every
// applied log, the restarted old leader's included, is the new leader's.
func TestRelayJointChangeLeaderCrashed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const standbys = 6
	opts := relayOptions(true, standbys)
	opts.RelayFanout = 1
	c, lead, ids := withStandbys(ctx, t, opts, standbys)
	st := waitStatus(ctx, t, lead.Node, "every standby relayed or a relay", fedOrRelay(ids))
	var relayed []uint64
	for _, id := range ids {
		if st.Progress[id].RelayedBy != 0 {
			relayed = append(relayed, id)
		}
	}
	if 2*len(relayed) < len(ids) {
		t.Fatalf("%d of %d standbys relayed (%v), want half or more", len(relayed), len(ids), relaysOf(st))
	}
	promote := relayed[:2]
	for _, id := range promote {
		waitMembership(ctx, t, lead.Node, "the relayed standby ready", ready(id))
	}
	writeAll(ctx, t, lead.Node, "before", 50, 4, 128, false)

	var held atomic.Int64
	c.Net.SetFilter(func(_ uint64, m *raftpb.Message) bool {
		if carriesLeaveJoint(m) {
			held.Add(1)
			return true
		}
		return false
	})
	go func() { _, _ = lead.Node.ChangeMembership(ctx, confchange.Promote(promote...)) }()
	joint := waitStatus(ctx, t, lead.Node, "the leader joint, its leave-joint held back", func(s raft.Status) bool {
		return s.Joint() && held.Load() > 0
	})
	old := lead.ID
	c.Crash(old)
	var next *raft.Node
	for _, m := range c.Running() {
		if slices.Contains(joint.Voters, m.ID) {
			next = m.Node
			break
		}
	}
	waitStatus(ctx, t, next, "a next leader in the joint configuration", func(s raft.Status) bool {
		return s.Leader != 0 && s.Leader != old && s.Term > joint.Term
	})
	nl := c.WaitLeader()
	if st := waitStatus(ctx, t, nl.Node, "status", func(raft.Status) bool { return true }); !st.Joint() {
		t.Fatalf("the next leader %d is not in the joint configuration the old one entered: %v / %v", nl.ID, st.Voters, st.VotersOutgoing)
	}
	c.Net.SetFilter(nil)
	want := slices.Sorted(slices.Values(append([]uint64{1, 2, 3}, promote...)))
	learners := slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool { return slices.Contains(promote, id) })
	// The next leader chooses relays of its own: a promoted standby, a
	// follower voter now, relays for a standby.
	st = waitStatus(ctx, t, nl.Node, "the change completed, the standbys relayed again", func(s raft.Status) bool {
		if s.Joint() || !slices.Equal(s.Voters, want) || !fedOrRelay(learners)(s) {
			return false
		}
		for _, id := range promote {
			if id != nl.ID && len(relaysOf(s)[id]) > 0 {
				return true
			}
		}
		return false
	})
	t.Logf("leader %d crashed joint (term %d); leader %d (term %d) completed it: voters %v, relays %v",
		old, joint.Term, nl.ID, st.Term, st.Voters, relaysOf(st))
	c.Restart(old)
	writeAll(ctx, t, nl.Node, "after", 50, 4, 128, false)
	sameLogs(ctx, t, c)
}

// fedOrRelay reports whether the learners are fed through relays or are
// relays, as RelayFanout 1 leaves them: each follower voter feeds one,
// the others pair up (a caught-up standby fed directly relays for the
// next), and an odd one out is fed directly — at most one learner is
// neither relayed nor a relay.
func fedOrRelay(learners []uint64) func(raft.Status) bool {
	return func(st raft.Status) bool {
		relays := relaysOf(st)
		direct := 0
		for _, id := range learners {
			if st.Progress[id].RelayedBy == 0 && len(relays[id]) == 0 {
				direct++
			}
		}
		return direct <= 1
	}
}

// carriesLeaveJoint reports whether m is an append with an entry that
// leaves a joint configuration.
func carriesLeaveJoint(m *raftpb.Message) bool {
	if m.GetType() != raftpb.MsgApp {
		return false
	}
	for _, e := range m.GetEntries() {
		if e.GetType() != raftpb.EntryConfChangeV2 {
			continue
		}
		cc := &raftpb.ConfChangeV2{}
		if proto.Unmarshal(e.GetData(), cc) == nil && cc.LeaveJoint() {
			return true
		}
	}
	return false
}
