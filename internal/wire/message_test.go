package wire

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func u64(v uint64) *uint64 { return &v }

func appMsg(n, size int) *raftpb.Message {
	ents := make([]*raftpb.Entry, n)
	for i := range ents {
		data := bytes.Repeat([]byte{byte(i)}, size)
		ents[i] = &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Term: u64(7), Index: u64(uint64(1000 + i)), Data: data}
	}
	return &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), To: u64(2), From: u64(1), Term: u64(7),
		LogTerm: u64(7), Index: u64(999), Entries: ents, Commit: u64(998),
	}
}

func testMessages() []*raftpb.Message {
	ms := []*raftpb.Message{
		{},
		appMsg(0, 0),
		appMsg(1, 256),
		appMsg(16, 100),
		{Type: raftpb.MsgAppResp.Enum(), To: u64(1), From: u64(2), Term: u64(7), Index: u64(1015)},
		{Type: raftpb.MsgAppResp.Enum(), To: u64(1), From: u64(2), Term: u64(7), Index: u64(10), Reject: proto.Bool(true), RejectHint: u64(5), LogTerm: u64(3)},
		{Type: raftpb.MsgHeartbeat.Enum(), To: u64(2), From: u64(1), Term: u64(7), Commit: u64(998), Context: []byte("read-index-ctx")},
		{Type: raftpb.MsgHeartbeatResp.Enum(), To: u64(1), From: u64(2), Term: u64(7), Context: []byte{}},
		{Type: raftpb.MsgVote.Enum(), To: u64(1), From: u64(2), Term: u64(0), Reject: proto.Bool(false), Vote: u64(0)},
		{Type: raftpb.MsgApp.Enum(), Entries: []*raftpb.Entry{{}, {Data: []byte{}}, {Type: raftpb.EntryConfChangeV2.Enum(), Data: []byte{1, 2}}}},
		{Type: raftpb.MsgSnap.Enum(), To: u64(2), From: u64(1), Term: u64(3), Snapshot: &raftpb.Snapshot{
			Data: []byte("descriptor"),
			Metadata: &raftpb.SnapshotMetadata{Index: u64(50), Term: u64(3),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}},
		}},
		{Type: raftpb.MsgStorageAppend.Enum(), Responses: []*raftpb.Message{{Type: raftpb.MsgStorageAppendResp.Enum()}}},
		{Type: raftpb.MsgForgetLeader.Enum(), To: u64(^uint64(0)), From: u64(1 << 63)},
	}
	return ms
}

func TestMessageRoundTrip(t *testing.T) {
	for i, m := range testMessages() {
		fast, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatalf("%d: AppendMessage: %v", i, err)
		}
		ref, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("%d: proto.Marshal: %v", i, err)
		}
		if !bytes.Equal(fast, ref) {
			t.Errorf("%d: fast encoding differs from proto.Marshal\nfast  %x\nproto %x", i, fast, ref)
		}
		got, err := UnmarshalMessage(fast)
		if err != nil {
			t.Fatalf("%d: UnmarshalMessage: %v", i, err)
		}
		if !proto.Equal(got, m) {
			t.Errorf("%d: round trip changed the message\n got %v\nwant %v", i, got, m)
		}
	}
}

func TestUnmarshalFallsBackOnUnknownFields(t *testing.T) {
	b, _ := AppendMessage(nil, appMsg(2, 8))
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	got, err := UnmarshalMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown field lost")
	}
	// Re-encoding keeps the unknown field (through proto.Marshal).
	again, err := AppendMessage(nil, got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("re-encoding lost data:\n%x\n%x", again, b)
	}
	// An enum value raft does not define goes to proto.Unmarshal, whatever
	// it makes of it.
	bad := protowire.AppendTag(nil, msgType, protowire.VarintType)
	bad = protowire.AppendVarint(bad, 200)
	got, err = UnmarshalMessage(bad)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := UnmarshalProto(bad)
	if !proto.Equal(got, want) {
		t.Fatalf("enum 200: got %v, want %v", got, want)
	}
}

func TestUnmarshalDoesNotShareBetweenEntries(t *testing.T) {
	b, _ := AppendMessage(nil, appMsg(3, 4))
	m, err := UnmarshalMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	*m.Entries[0].Index = 1
	m.Entries[0].Data = append(m.Entries[0].Data, 'x') // must not overwrite entry 1
	if m.Entries[1].GetIndex() != 1001 || m.Entries[1].Data[0] != 1 {
		t.Fatalf("entries share storage: %v", m.Entries)
	}
}

func TestMessageAllocations(t *testing.T) {
	m := appMsg(8, 256)
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = AppendMessageFrame(buf[:0], 1, m)
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendMessageFrame: %v allocations, want 0", n)
	}
	payload, _ := AppendMessage(nil, m)
	// The message with its scalars, the entries with theirs, the []*Entry.
	if n := testing.AllocsPerRun(100, func() {
		if _, err := UnmarshalMessage(payload); err != nil {
			t.Fatal(err)
		}
	}); n > 3 {
		t.Errorf("UnmarshalMessage of 8 entries: %v allocations, want at most 3", n)
	}
	for _, m := range []*raftpb.Message{appMsg(1, 256), testMessages()[4]} {
		payload, _ := AppendMessage(nil, m)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := UnmarshalMessage(payload); err != nil {
				t.Fatal(err)
			}
		}); n != 1 {
			t.Errorf("UnmarshalMessage of %v: %v allocations, want 1", m.GetType(), n)
		}
	}
}

// FuzzMessageCodec checks that the fast decoder and proto.Unmarshal agree
// on arbitrary input, and that both encoders produce bytes that decode to
// the same message.
func FuzzMessageCodec(f *testing.F) {
	for _, m := range testMessages() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x80, 0x80, 0x80, 0x80, 0x10}) // enum varint beyond int32
	f.Add([]byte{0x3a, 0x02, 0x08, 0x05})             // entry with an unknown enum value
	f.Add([]byte{0x3a, 0x03, 0x22, 0x05, 0x00})       // entry data overruns
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, errFast := UnmarshalMessage(b)
		ref, errRef := UnmarshalProto(b)
		if (errFast == nil) != (errRef == nil) {
			t.Fatalf("decoders disagree on %x: fast %v, proto %v", b, errFast, errRef)
		}
		if errFast != nil {
			return
		}
		if !proto.Equal(fast, ref) {
			t.Fatalf("decoders disagree on %x:\nfast  %v\nproto %v", b, fast, ref)
		}
		enc1, err := AppendMessage(nil, ref)
		if err != nil {
			t.Fatal(err)
		}
		enc2, err := MarshalProto(nil, ref)
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range [][]byte{enc1, enc2} {
			for _, dec := range []func([]byte) (*raftpb.Message, error){UnmarshalMessage, UnmarshalProto} {
				got, err := dec(enc)
				if err != nil {
					t.Fatalf("decoding %x: %v", enc, err)
				}
				if !proto.Equal(got, ref) {
					t.Fatalf("re-encoding changed the message:\n got %v\nwant %v", got, ref)
				}
			}
		}
		if fastEncodable(ref) && !bytes.Equal(enc1, enc2) {
			t.Fatalf("encoders disagree:\nfast  %x\nproto %x", enc1, enc2)
		}
	})
}

// UnmarshalMessageShared says a message shares its buffer exactly when it
// refers to it: entries or a context (or the general decoder); a message
// without reads back the same once its buffer is overwritten.
func TestUnmarshalMessageShared(t *testing.T) {
	answer := &raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), To: proto.Uint64(1), From: proto.Uint64(2), Term: proto.Uint64(7), Commit: proto.Uint64(9)}
	for _, tc := range []struct {
		name   string
		m      *raftpb.Message
		shared bool
	}{
		{"answer", answer, false},
		{"entries", &raftpb.Message{Type: raftpb.MsgApp.Enum(), Entries: []*raftpb.Entry{{Index: proto.Uint64(1), Data: []byte("x")}}}, true},
		{"empty entry", &raftpb.Message{Type: raftpb.MsgApp.Enum(), Entries: []*raftpb.Entry{{Index: proto.Uint64(1)}}}, true},
		{"context", &raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), Context: []byte("ctx")}, true},
		{"snapshot (general decoder)", &raftpb.Message{Type: raftpb.MsgSnap.Enum(), Snapshot: &raftpb.Snapshot{Data: []byte("s")}}, true},
	} {
		b, err := AppendMessage(nil, tc.m)
		if err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(tc.m)
		m, shared, err := UnmarshalMessageShared(b)
		if err != nil || shared != tc.shared {
			t.Fatalf("%s: shared %v, err %v; want shared %v", tc.name, shared, err, tc.shared)
		}
		if !shared {
			for i := range b {
				b[i] = 0xff
			}
		}
		if !proto.Equal(m, want) {
			t.Fatalf("%s: read back %v, want %v", tc.name, m, want)
		}
	}
}
