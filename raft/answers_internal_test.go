package raft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestDropSupersededAnswers: of the answers one persisted batch sends, an
// acceptance a later one covers is left out; the rest keep their order.
func TestDropSupersededAnswers(t *testing.T) {
	msg := func(typ raftpb.MessageType, to, term, index uint64, reject bool) *raftpb.Message {
		from := uint64(4)
		m := &raftpb.Message{Type: &typ, From: &from, To: &to, Term: &term, Index: &index}
		if reject {
			m.Reject = &reject
		}
		return m
	}
	a1 := msg(raftpb.MsgAppResp, 1, 2, 10, false)
	a2 := msg(raftpb.MsgAppResp, 1, 2, 11, false)
	rej := msg(raftpb.MsgAppResp, 1, 2, 7, true)
	a3 := msg(raftpb.MsgAppResp, 1, 2, 12, false)
	vote := msg(raftpb.MsgVoteResp, 2, 3, 0, false)
	a4 := msg(raftpb.MsgAppResp, 2, 3, 12, false) // a new term's leader
	out := []*raftpb.Message{a1, a2, rej, a3, vote, a4}
	got := dropSupersededAnswers(out)
	want := []*raftpb.Message{rej, a3, vote, a4}
	if len(got) != len(want) {
		t.Fatalf("kept %d answers, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("answer %d kept is %v, want %v", i, got[i], want[i])
		}
	}
	for i := len(got); i < len(out); i++ {
		if out[i] != nil {
			t.Fatalf("slot %d past the kept answers still holds %v", i, out[i])
		}
	}
}
