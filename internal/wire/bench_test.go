package wire

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft/raftio"
)

func benchMessages() []struct {
	name string
	m    *raftpb.Message
} {
	return []struct {
		name string
		m    *raftpb.Message
	}{
		{"MsgApp/1x256B", appMsg(1, 256)},
		{"MsgApp/64x256B", appMsg(64, 256)},
		{"MsgAppResp", &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), To: u64(1), From: u64(2), Term: u64(7), Index: u64(1015), Commit: u64(1010)}},
		{"MsgHeartbeat", &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: u64(2), From: u64(1), Term: u64(7), Commit: u64(998)}},
		{"MsgHeartbeatResp", &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), To: u64(1), From: u64(2), Term: u64(7)}},
	}
}

// BenchmarkEncode compares the hand-written protowire encoder with
// proto.Marshal, both appending to a reused buffer.
func BenchmarkEncode(b *testing.B) {
	for _, bm := range benchMessages() {
		for _, enc := range []struct {
			name string
			f    func([]byte, *raftpb.Message) ([]byte, error)
		}{{"fast", AppendMessage}, {"proto", MarshalProto}} {
			b.Run(bm.name+"/"+enc.name, func(b *testing.B) {
				buf, _ := enc.f(nil, bm.m)
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					buf, _ = enc.f(buf[:0], bm.m)
				}
			})
		}
	}
}

// BenchmarkDecode compares the hand-written protowire decoder with
// proto.Unmarshal.
func BenchmarkDecode(b *testing.B) {
	for _, bm := range benchMessages() {
		for _, dec := range []struct {
			name string
			f    func([]byte) (*raftpb.Message, error)
		}{{"fast", UnmarshalMessage}, {"proto", UnmarshalProto}} {
			b.Run(bm.name+"/"+dec.name, func(b *testing.B) {
				buf, _ := MarshalProto(nil, bm.m)
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := dec.f(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkFrameRead measures reading and checksumming 256 B message frames.
func BenchmarkFrameRead(b *testing.B) {
	var in []byte
	in, _ = AppendMessageFrame(in, 1, appMsg(1, 256))
	rd := bytes.NewReader(nil)
	r := NewReader(rd, 1<<20)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(in)
		if _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRelay compares ParseRelay (the fast decoder, headers
// included) with the proto.Unmarshal path it replaced, on a leader's
// envelope for a relay's 12 standbys (5 entries of 512 B, delta-coded
// headers) and on a relay's gathered answers of 12 standbys.
func BenchmarkParseRelay(b *testing.B) {
	ents := make([]*raftpb.Entry, 5)
	for i := range ents {
		ents[i] = &raftpb.Entry{Term: u64(3), Index: u64(uint64(100 + i)), Data: bytes.Repeat([]byte{'v'}, 512)}
	}
	leader := &raftio.RelayEnvelope{Entries: ents}
	answers := &raftio.RelayEnvelope{}
	for i := range uint64(12) {
		leader.Msgs = append(leader.Msgs, &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: u64(10 + i), From: u64(1), Term: u64(3), LogTerm: u64(3), Index: u64(99), Commit: u64(98)})
		leader.Counts = append(leader.Counts, 5)
		answers.Msgs = append(answers.Msgs, &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), To: u64(1), From: u64(10 + i), Term: u64(3), Index: u64(104)})
		answers.Counts = append(answers.Counts, 0)
	}
	for _, env := range []struct {
		name string
		env  *raftio.RelayEnvelope
	}{{"12-standbys-5x512B", leader}, {"12-answers", answers}} {
		frame, err := AppendRelayFrame(nil, 1, RelayCarrier(1, 2, env.env), true)
		if err != nil {
			b.Fatal(err)
		}
		p := frame[HeaderSize:]
		for _, dec := range []struct {
			name string
			f    func([]byte) (*raftpb.Message, error)
		}{{"fast", ParseRelay}, {"proto", parseRelayProto}} {
			b.Run(env.name+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(len(p)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := dec.f(p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
