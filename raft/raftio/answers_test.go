package raftio_test

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft/raftio"
)

func answer(typ raftpb.MessageType, from, to, term, index uint64, reject bool, ctx string) *raftpb.Message {
	m := &raftpb.Message{Type: &typ, From: &from, To: &to, Term: &term, Index: &index}
	if reject {
		m.Reject = &reject
	}
	if ctx != "" {
		m.Context = []byte(ctx)
	}
	return m
}

// TestAnswerSuperseded: an acceptance is covered by a later acceptance
// between the same members in the same term that reaches its index; a
// plain heartbeat answer by a later one; nothing else is ever covered.
func TestAnswerSuperseded(t *testing.T) {
	app := func(from, to, term, index uint64) *raftpb.Message {
		return answer(raftpb.MsgAppResp, from, to, term, index, false, "")
	}
	beat := func(from, to, term uint64, ctx string) *raftpb.Message {
		return answer(raftpb.MsgHeartbeatResp, from, to, term, 0, false, ctx)
	}
	reject := answer(raftpb.MsgAppResp, 4, 1, 2, 9, true, "")
	vote := answer(raftpb.MsgVoteResp, 4, 1, 2, 0, false, "")
	for _, tc := range []struct {
		name  string
		a     *raftpb.Message
		later []*raftpb.Message
		want  bool
	}{
		{"a later acceptance reaches it", app(4, 1, 2, 10), []*raftpb.Message{app(4, 1, 2, 12)}, true},
		{"a later acceptance of the same index", app(4, 1, 2, 10), []*raftpb.Message{app(4, 1, 2, 10)}, true},
		{"a later acceptance short of it", app(4, 1, 2, 10), []*raftpb.Message{app(4, 1, 2, 9)}, false},
		{"nothing later", app(4, 1, 2, 10), nil, false},
		{"another term", app(4, 1, 2, 10), []*raftpb.Message{app(4, 1, 3, 12)}, false},
		{"another recipient", app(4, 1, 2, 10), []*raftpb.Message{app(4, 5, 2, 12)}, false},
		{"another sender", app(4, 1, 2, 10), []*raftpb.Message{app(6, 1, 2, 12)}, false},
		{"a later rejection covers nothing", app(4, 1, 2, 10), []*raftpb.Message{reject}, false},
		{"a rejection is never covered", reject, []*raftpb.Message{app(4, 1, 2, 12)}, false},
		{"a vote answer is never covered", vote, []*raftpb.Message{vote}, false},
		{"a plain heartbeat answer by a later one", beat(4, 1, 2, ""), []*raftpb.Message{beat(4, 1, 2, "")}, true},
		{"a read round's heartbeat answer never", beat(4, 1, 2, "read"), []*raftpb.Message{beat(4, 1, 2, "")}, false},
		{"a heartbeat answer by an acceptance: no", beat(4, 1, 2, ""), []*raftpb.Message{app(4, 1, 2, 12)}, false},
		{"one covering answer among others", app(4, 1, 2, 10), []*raftpb.Message{vote, app(4, 1, 3, 1), app(4, 1, 2, 11)}, true},
	} {
		if got := raftio.AnswerSuperseded(tc.a, tc.later); got != tc.want {
			t.Errorf("%s: AnswerSuperseded = %v, want %v", tc.name, got, tc.want)
		}
	}
}
