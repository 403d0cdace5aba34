package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// roundTrip encodes container c into a relay frame, delta-coded or not,
// and parses it back.
func roundTrip(t *testing.T, c *raftpb.Message, delta bool) (*raftpb.Message, int) {
	t.Helper()
	b, err := AppendRelayFrame(nil, 9, c, delta)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewReader(bytes.NewReader(b), 1<<24).Next()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseRelay(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return m, len(b)
}

// A leader's envelope to a relay of 24 standbys, all caught up: the
// headers differ only in To. Delta-coded, it decodes to the same plain
// container as the full coding, and each standby past the first costs a
// few bytes instead of a whole header.
func TestRelayDeltaFleetEnvelope(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	c := &raftpb.Message{From: u(1), To: u(2), Context: nil}
	c.Entries = []*raftpb.Entry{{Term: u(3), Index: u(1001), Data: bytes.Repeat([]byte{7}, 512)}}
	for id := uint64(4); id < 28; id++ {
		c.Responses = append(c.Responses, &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: u(1), To: u(id), Term: u(3),
			LogTerm: u(3), Index: u(1000), Commit: u(999)})
		c.Context = append(c.Context, 1)
	}
	full, fullSize := roundTrip(t, c, false)
	delta, deltaSize := roundTrip(t, c, true)
	if !proto.Equal(full, delta) || !proto.Equal(full, c) {
		t.Fatalf("delta-coded container %v\\nfull %v\\nsent %v", delta, full, c)
	}
	perFull, perDelta := float64(fullSize-512)/24, float64(deltaSize-512)/24
	t.Logf("bytes a standby: %.1f full, %.1f delta-coded", perFull, perDelta)
	if perDelta*2 > perFull {
		t.Fatalf("delta coding: %.1f bytes a standby against %.1f full", perDelta, perFull)
	}
}

// Random containers of headers that share some fields and not others
// (set, absent, set again; contexts long enough for a header over 127
// bytes) decode from the delta coding to what was sent.
func TestRelayDeltaRandomHeaders(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	field := func() *uint64 {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			v := uint64(r.IntN(3))
			return &v
		default:
			v := r.Uint64() >> r.IntN(64)
			return &v
		}
	}
	for range 2000 {
		n := 1 + r.IntN(8)
		c := &raftpb.Message{From: field(), To: field()}
		for range n {
			h := &raftpb.Message{From: field(), To: field(), Term: field(), LogTerm: field(), Index: field(), Commit: field(),
				Vote: field(), RejectHint: field()}
			if r.IntN(3) > 0 {
				h.Type = raftpb.MessageType(r.IntN(4)).Enum()
			}
			if r.IntN(3) == 0 {
				b := r.IntN(2) == 0
				h.Reject = &b
			}
			if r.IntN(4) == 0 {
				h.Context = bytes.Repeat([]byte{byte(r.IntN(2))}, r.IntN(300))
			}
			if r.IntN(3) == 0 && len(c.Responses) > 0 {
				h = proto.Clone(c.Responses[len(c.Responses)-1]).(*raftpb.Message) // a repeat
				h.To = field()
			}
			c.Responses = append(c.Responses, h)
			c.Context = append(c.Context, 0)
		}
		if r.IntN(2) == 0 {
			flags := relayTakesAnswers
			c.RejectHint = &flags
		}
		got, _ := roundTrip(t, c, true)
		want, _ := roundTrip(t, c, false)
		if !proto.Equal(got, want) {
			t.Fatalf("delta-coded container decodes to\\n%v\\nsent\\n%v", got, want)
		}
	}
}

// A delta-coded frame whose first header is a delta, or whose counts do
// not match its headers, is refused.
func TestRelayDeltaMalformed(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	flags := relayDelta
	h := func() *raftpb.Message { return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: u(3), Term: u(1)} }
	for name, c := range map[string]*raftpb.Message{
		"first is a delta": {RejectHint: &flags, Responses: []*raftpb.Message{h(), h()}, Context: []byte{1, 0}},
		"too few counts":   {RejectHint: &flags, Responses: []*raftpb.Message{h(), h()}, Context: []byte{0}},
		"too many counts":  {RejectHint: &flags, Responses: []*raftpb.Message{h()}, Context: []byte{0, 1}},
		"bad count":        {RejectHint: &flags, Responses: []*raftpb.Message{h()}, Context: []byte{0x80}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseRelay(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzRelayDelta: whatever a peer sends as a TypeRelay payload parses or
// is refused as malformed, without a panic; what parses encodes again,
// delta-coded, to a frame that parses to the same container.
func FuzzRelayDelta(f *testing.F) {
	c := RelayCarrier(1, 2, relayTestEnvelope())
	b, _ := AppendRelayFrame(nil, 9, c, true)
	f.Add(b[HeaderSize:])
	b, _ = AppendRelayFrame(nil, 9, c, false)
	f.Add(b[HeaderSize:])
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := ParseRelay(p)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		again, _ := roundTrip(t, m, true)
		if !proto.Equal(known(again), known(m)) {
			t.Fatalf("re-encoded container %v, parsed %v", again, m)
		}
	})
}

// known is container c as a relay reads it: the fields it reads, of the
// container and of each header (a container's other fields and unknown
// ones are not written again).
func known(c *raftpb.Message) *raftpb.Message {
	k := &raftpb.Message{From: c.From, To: c.To, Entries: c.Entries}
	if c.GetRejectHint() != 0 { // the flags: a zero present means none
		k.RejectHint = c.RejectHint
	}
	// The counts, each in its shortest varint (a longer one reads the
	// same, and is written short again).
	for b := c.Context; len(b) > 0; {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			k.Context = append(k.Context, b...)
			break
		}
		k.Context = protowire.AppendVarint(k.Context, v)
		b = b[n:]
	}
	for _, h := range c.Responses {
		k.Responses = append(k.Responses, &raftpb.Message{Type: h.Type, To: h.To, From: h.From, Term: h.Term,
			LogTerm: h.LogTerm, Index: h.Index, Commit: h.Commit, Vote: h.Vote, Reject: h.Reject,
			RejectHint: h.RejectHint, Context: h.Context})
	}
	return k
}

// parseRelayProto is ParseRelay through proto.Unmarshal only: the
// reference the fast container decoder must match.
func parseRelayProto(p []byte) (*raftpb.Message, error) { return parseRelay(p, UnmarshalProto) }

// FuzzRelayDecoders: ParseRelay (the fast decoder, headers included)
// accepts exactly what the proto.Unmarshal path accepts and returns the
// same container.
func FuzzRelayDecoders(f *testing.F) {
	u := func(v uint64) *uint64 { return &v }
	answers := &raftio.RelayEnvelope{Msgs: []*raftpb.Message{
		{Type: raftpb.MsgAppResp.Enum(), From: u(7), To: u(1), Term: u(2), Index: u(9)},
		{Type: raftpb.MsgHeartbeatResp.Enum(), From: u(8), To: u(1), Term: u(2), Context: []byte("r")},
	}, Counts: []uint32{0, 0}}
	for _, env := range []*raftio.RelayEnvelope{relayTestEnvelope(), answers} {
		c := RelayCarrier(1, 2, env)
		for _, delta := range []bool{true, false} {
			b, _ := AppendRelayFrame(nil, 9, c, delta)
			f.Add(b[HeaderSize:])
		}
	}
	f.Add([]byte{0x72, 0x00})             // an empty header
	f.Add([]byte{0x72, 0x02, 0x08, 0x40}) // a header with an unknown message type
	f.Add([]byte{0x72, 0x03, 0x3a, 0x01}) // a header whose entry overruns it
	f.Fuzz(func(t *testing.T, p []byte) {
		fast, errFast := ParseRelay(p)
		ref, errRef := parseRelayProto(p)
		if (errFast == nil) != (errRef == nil) {
			t.Fatalf("decoders disagree on %x: fast %v, proto %v", p, errFast, errRef)
		}
		if errFast == nil && !proto.Equal(fast, ref) {
			t.Fatalf("decoders disagree on %x:\nfast  %v\nproto %v", p, fast, ref)
		}
	})
}
