package transport

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
	"github.com/understudy-raft/understudy/raft/raftio"
)

func answer(typ raftpb.MessageType, from, index uint64, reject bool, ctx []byte) *raftpb.Message {
	return &raftpb.Message{Type: typ.Enum(), From: u64(from), To: u64(1), Term: u64(3), Index: u64(index), Reject: &reject, Context: ctx}
}

func answersCarrier(answers ...*raftpb.Message) *raftpb.Message {
	return wire.RelayCarrier(2, 1, &raftio.RelayEnvelope{Msgs: answers, Counts: make([]uint32, len(answers))})
}

// A relay's queued envelopes of answers to the leader leave as one, at
// the first one's place, the other messages keeping theirs; an
// acknowledgement followed by a later one of the same standby, or a plain
// heartbeat answer followed by another, is left out; rejections and
// heartbeat answers with a context (a read round's, a quiesce refusal)
// never are.
func TestGatherAnswers(t *testing.T) {
	own := heartbeat(2, 1)
	leaders := wire.RelayCarrier(2, 1, &raftio.RelayEnvelope{Msgs: []*raftpb.Message{heartbeat(1, 5)}, Counts: []uint32{0}})
	batch := []*raftpb.Message{
		own,
		answersCarrier(answer(raftpb.MsgAppResp, 5, 10, false, nil), answer(raftpb.MsgHeartbeatResp, 6, 0, false, nil)),
		leaders,
		answersCarrier(answer(raftpb.MsgAppResp, 5, 12, false, nil), answer(raftpb.MsgAppResp, 7, 9, true, nil)),
		answersCarrier(answer(raftpb.MsgHeartbeatResp, 6, 0, false, []byte("read")), answer(raftpb.MsgHeartbeatResp, 6, 0, false, nil)),
	}
	got := gatherAnswers(batch)
	if len(got) != 3 || got[0] != own || got[2] != leaders || !wire.RelayAnswers(got[1]) {
		t.Fatalf("gathered into %d messages: %v", len(got), got)
	}
	type key struct {
		typ    raftpb.MessageType
		from   uint64
		index  uint64
		reject bool
		ctx    string
	}
	var keys []key
	for _, a := range got[1].Responses {
		keys = append(keys, key{a.GetType(), a.GetFrom(), a.GetIndex(), a.GetReject(), string(a.GetContext())})
	}
	want := []key{
		{raftpb.MsgAppResp, 5, 12, false, ""},
		{raftpb.MsgAppResp, 7, 9, true, ""},
		{raftpb.MsgHeartbeatResp, 6, 0, false, "read"},
		{raftpb.MsgHeartbeatResp, 6, 0, false, ""},
	}
	if len(keys) != len(want) {
		t.Fatalf("gathered answers %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("gathered answers %v, want %v", keys, want)
		}
	}
	if env, err := wire.RelayEnvelopeOf(got[1]); err != nil || len(env.Counts) != len(want) {
		t.Fatalf("the gathered container: %v", err)
	}
	one := []*raftpb.Message{own, answersCarrier(answer(raftpb.MsgAppResp, 5, 10, false, nil))}
	if got := gatherAnswers(one); len(got) != 2 || got[1] != one[1] {
		t.Fatal("a lone envelope of answers was rebuilt")
	}
}
