package raft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
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
	for _, m := range msgs {
		if !b.add(m) {
			t.Fatalf("message to %d refused", m.GetTo())
		}
	}
	if len(b.env.Entries) != 5 {
		t.Fatalf("%d entries in the envelope, want 5 (indexes 3-7 once)", len(b.env.Entries))
	}
	for i, m := range msgs {
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
