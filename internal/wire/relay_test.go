package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/raft/raftio"
)

func relayTestEnvelope() *raftio.RelayEnvelope {
	u := func(v uint64) *uint64 { return &v }
	ent := func(i uint64) *raftpb.Entry { return &raftpb.Entry{Term: u(2), Index: u(i), Data: []byte{byte(i)}} }
	return &raftio.RelayEnvelope{
		Entries: []*raftpb.Entry{ent(5), ent(6), ent(7)},
		Msgs: []*raftpb.Message{
			{Type: raftpb.MsgApp.Enum(), From: u(1), To: u(2), Term: u(2), LogTerm: u(2), Index: u(4), Commit: u(4)},
			{Type: raftpb.MsgApp.Enum(), From: u(1), To: u(7), Term: u(2), LogTerm: u(2), Index: u(5), Commit: u(4)},
			{Type: raftpb.MsgHeartbeat.Enum(), From: u(1), To: u(8), Term: u(2), Commit: u(3)},
		},
		Counts: []uint32{3, 2, 0},
	}
}

// A relay frame decodes to the container it encoded, and each message of
// its envelope to the leader's message: header and entries.
func TestRelayFrameRoundTrip(t *testing.T) {
	for _, delta := range []bool{false, true} {
		testRelayFrameRoundTrip(t, delta)
	}
}

func testRelayFrameRoundTrip(t *testing.T, delta bool) {
	env := relayTestEnvelope()
	b, err := AppendRelayFrame(nil, 9, RelayCarrier(1, 2, env), delta)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(b), 1<<20)
	f, err := r.Next()
	if err != nil || f.Type != TypeRelay || f.Group != 9 {
		t.Fatalf("frame: %v %v %d", err, f.Type, f.Group)
	}
	c, err := ParseRelay(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !IsRelayCarrier(c) || c.GetFrom() != 1 || c.GetTo() != 2 {
		t.Fatalf("container from %d to %d (carrier %v)", c.GetFrom(), c.GetTo(), IsRelayCarrier(c))
	}
	got, err := RelayEnvelopeOf(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range env.Msgs {
		want, err := env.Message(i)
		if err != nil {
			t.Fatal(err)
		}
		m, err := got.Message(i)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(m, want) {
			t.Fatalf("message %d: %v, want %v", i, m, want)
		}
	}
}

// Malformed containers are refused: counts that do not match, entries out
// of order, a header with entries, a typed message; and an envelope whose
// message names entries it lacks does not reassemble.
func TestRelayFrameMalformed(t *testing.T) {
	bad := map[string]func(c *raftpb.Message){
		"counts":          func(c *raftpb.Message) { c.Context = c.Context[:1] },
		"order":           func(c *raftpb.Message) { c.Entries[0], c.Entries[1] = c.Entries[1], c.Entries[0] },
		"header body":     func(c *raftpb.Message) { c.Responses[0].Entries = c.Entries[:1] },
		"typed container": func(c *raftpb.Message) { c.Type = raftpb.MsgApp.Enum() },
	}
	for name, edit := range bad {
		c := proto.Clone(RelayCarrier(1, 2, relayTestEnvelope())).(*raftpb.Message)
		edit(c)
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseRelay(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	env := relayTestEnvelope()
	env.Entries = env.Entries[1:] // message 0 needs entry 5
	if _, err := env.Message(0); !errors.Is(err, raftio.ErrBadRelayEnvelope) {
		t.Fatalf("reassembling without entry 5: %v, want ErrBadRelayEnvelope", err)
	}
}

// A relay's TakesAnswers flag and an envelope of answers cross a frame:
// the flag as it was set, the answers' container recognized as answers
// only (RelayAnswers), a leader's envelope not.
func TestRelayAnswersRoundTrip(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name    string
		env     *raftio.RelayEnvelope
		answers bool
	}{
		{"handed on, takes answers", &raftio.RelayEnvelope{Msgs: relayTestEnvelope().Msgs[2:], Counts: []uint32{0}, TakesAnswers: true}, false},
		{"answers", &raftio.RelayEnvelope{Msgs: []*raftpb.Message{
			{Type: raftpb.MsgAppResp.Enum(), From: u(7), To: u(1), Term: u(2), Index: u(9)},
			{Type: raftpb.MsgHeartbeatResp.Enum(), From: u(8), To: u(1), Term: u(2)},
		}, Counts: []uint32{0, 0}}, true},
		{"leader's", relayTestEnvelope(), false},
	} {
		for _, delta := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delta=%v", tc.name, delta), func(t *testing.T) {
				b, err := AppendRelayFrame(nil, 9, RelayCarrier(1, 2, tc.env), delta)
				if err != nil {
					t.Fatal(err)
				}
				f, err := NewReader(bytes.NewReader(b), 1<<20).Next()
				if err != nil {
					t.Fatal(err)
				}
				m, err := ParseRelay(f.Payload)
				if err != nil {
					t.Fatal(err)
				}
				env, err := RelayEnvelopeOf(m)
				if err != nil {
					t.Fatal(err)
				}
				if env.TakesAnswers != tc.env.TakesAnswers {
					t.Fatalf("TakesAnswers %v, sent %v", env.TakesAnswers, tc.env.TakesAnswers)
				}
				if got := RelayAnswers(m); got != tc.answers {
					t.Fatalf("RelayAnswers = %v, want %v", got, tc.answers)
				}
				for i := range tc.env.Msgs {
					got, err := env.Message(i)
					if err != nil {
						t.Fatal(err)
					}
					if want, _ := tc.env.Message(i); !proto.Equal(got, want) {
						t.Fatalf("message %d: %v, want %v", i, got, want)
					}
				}
			})
		}
	}
}
