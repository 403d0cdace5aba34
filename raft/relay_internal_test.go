package raft

import (
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

func relayTestApp(to, index, term uint64, ents ...uint64) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: ptr(uint64(1)), To: &to, Term: ptr(uint64(3)), LogTerm: &term, Index: &index, Commit: ptr(uint64(2))}
	for _, i := range ents {
		m.Entries = append(m.Entries, &raftpb.Entry{Term: ptr(term), Index: ptr(i), Data: []byte{byte(i)}})
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// An envelope holds each entry once however many messages carry it (in
// any order), and each message reassembles to the leader's; a message
// whose entries are not contiguous from its index, or that holds an index
// the envelope has in another term, is refused (it goes directly).
func TestRelayBundleEntriesOnce(t *testing.T) {
	b := relayBundle{relay: 2, env: new(RelayEnvelope)}
	msgs := []*raftpb.Message{
		relayTestApp(2, 4, 3, 5, 6, 7),
		relayTestApp(7, 2, 3, 3, 4, 5, 6, 7), // a standby further behind
		relayTestApp(8, 6, 3, 7),
		{Type: raftpb.MsgHeartbeat.Enum(), From: ptr(uint64(1)), To: ptr(uint64(9)), Term: ptr(uint64(3)), Commit: ptr(uint64(2))},
	}
	sent := make([]*raftpb.Message, len(msgs)) // as raft built them: add makes each a header
	for i, m := range msgs {
		sent[i] = proto.Clone(m).(*raftpb.Message)
		if !b.add(m) {
			t.Fatalf("message to %d refused", m.GetTo())
		}
	}
	if len(b.env.Entries) != 5 {
		t.Fatalf("%d entries in the envelope, want 5 (indexes 3-7 once)", len(b.env.Entries))
	}
	for i, m := range sent {
		got, err := b.env.Message(i)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("message %d reassembled as %v, want %v", i, got, m)
		}
	}
	gap := relayTestApp(10, 4, 3, 5, 7)
	if b.add(gap) {
		t.Fatal("an append with a gap was taken")
	}
	other := relayTestApp(11, 4, 3, 5)
	other.Entries[0].Term = ptr(uint64(2))
	if b.add(other) {
		t.Fatal("an entry of another term at an index the envelope holds was taken")
	}
	if len(b.env.Msgs) != len(msgs) {
		t.Fatalf("%d messages, want %d: a refused message left a trace", len(b.env.Msgs), len(msgs))
	}
}

// relayTestNode is a leader's relay state alone: voters 2 and 3 (1
// leads), standbys 4-9 replicating and heard, the commit index at 10 and
// no standby at it (none keeps up: none can be made a relay), fanout 3.
func relayTestNode() *Node {
	n := &Node{log: slog.New(slog.DiscardHandler)}
	n.cfg.Config = &Config{RelayFanout: 3, ElectionTicks: 10}
	r := &relayState{
		via: map[uint64]uint64{}, load: map[uint64]int{}, direct: map[uint64]uint64{}, down: map[uint64]uint64{},
		mark: map[uint64]relayMark{}, keep: map[uint64]relayMark{}, avoid: map[uint64]uint64{},
		orphan: map[uint64]uint64{}, peers: map[uint64]relayPeer{},
	}
	n.loop.relay = r
	n.loop.ticks = 100
	for id := uint64(2); id <= 9; id++ {
		r.peers[id] = relayPeer{learner: id > 3, heard: true, healthy: true, match: 5, state: tracker.StateReplicate}
	}
	return n
}

// A relay that dies while the other has no room and no standby keeps up
// (a host whose standbys are starved): its standbys go to the other voter
// relay beyond its fanout, not to direct sends — which cost the leader a
// copy of every entry each — and back to their voter as soon as it
// answers again.
func TestRelayOrphansOverflowWhenNoneKeepsUp(t *testing.T) {
	n := relayTestNode()
	r := n.loop.relay
	n.assignRelays(10)
	if r.load[2] != 3 || r.load[3] != 3 {
		t.Fatalf("loads %v, want 3 on each voter", r.load)
	}
	// Voter 3 dies: the transport reports it unreachable.
	r.peers[3] = relayPeer{heard: false}
	n.relayDown(3, "unreachable")
	n.assignRelays(10)
	for s := uint64(4); s <= 9; s++ {
		if r.via[s] != 2 {
			t.Fatalf("standby %d relayed by %d after relay 3 died, want 2 (relays %v)", s, r.via[s], r.via)
		}
	}
	// Voter 3 is back: it answers, and is no longer marked down.
	r.peers[3] = relayPeer{heard: true, healthy: true, state: tracker.StateReplicate, match: 10}
	n.loop.ticks += 20
	clear(r.down)
	n.assignRelays(10)
	if r.load[2] != 3 || r.load[3] != 3 {
		t.Fatalf("loads %v after relay 3 came back, want 3 on each voter", r.load)
	}
}
