package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/internal/wire"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// TestMixedVersionsRefuseEachOther: a member of another protocol version
// (here one that plays the first release, version 1, whose members stop
// on the entry kinds added since) and a member of this one
// refuse each other's connections at the hello, both ways: each side
// counts the refusal (Stats.Refused, PeerStats.LastRefusal, Refusal), the
// dialer's handler gets ErrVersion, and the reason names both versions. No
// raft message crosses, and a request through Call fails as not sent.
func TestMixedVersionsRefuseEachOther(t *testing.T) {
	const prev uint16 = 1 // the first release
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb, func(c *Config) { c.protocol = [2]uint16{prev, prev} })
	addPeers(a, b)
	a.Send(appMsgs(1, 2))
	b.Send(appMsgs(2, 1))
	waitFor(t, "both sides refused and were refused", func() bool {
		return a.Stats().Refused[ReasonVersion] > 0 && b.Stats().Refused[ReasonVersion] > 0 &&
			ha.refusedWith(ErrVersion) && hb.refusedWith(ErrVersion)
	})
	for _, tr := range []*Transport{a, b} {
		other := 3 - tr.cfg.ID
		if got := tr.Refusal(other); got != ReasonVersion {
			t.Errorf("member %d: Refusal(%d) = %q, want %q", tr.cfg.ID, other, got, ReasonVersion)
		}
		if ps := tr.Stats().Peers[0]; ps.LastRefusal != ReasonVersion || ps.Refusals == 0 || ps.Connected {
			t.Errorf("member %d: peer stats %+v", tr.cfg.ID, ps)
		}
	}
	// The reasons name both versions, on both sides.
	this, old := fmt.Sprintf("%d..%d", wire.MinVersion, wire.MaxVersion), fmt.Sprintf("%d..%d", prev, prev)
	for _, h := range []*fakeHandler{ha, hb} {
		h.mu.Lock()
		var re *RefusedError
		if !errors.As(h.refused[0].err, &re) || !strings.Contains(re.Detail, this) || !strings.Contains(re.Detail, old) {
			t.Errorf("refusal %v: the reason does not name versions %s and %s", h.refused[0].err, this, old)
		}
		h.mu.Unlock()
	}
	if _, err := a.Call(context.Background(), 2, []byte("x")); !errors.Is(err, ErrVersion) || !errors.Is(err, ErrNotSent) {
		t.Errorf("Call to a member of another version: %v, want ErrVersion and ErrNotSent", err)
	}
	if n := ha.count() + hb.count(); n != 0 {
		t.Errorf("%d raft messages crossed between versions", n)
	}

	// A raw hello of the previous version gets the reason in its reply.
	p := dialRaw(t, a.Addr().String())
	h := goodHello(wire.KindStream)
	h.MinVersion, h.MaxVersion, h.From, h.To = prev, prev, 2, 1
	r := p.hello(h)
	if r.Code != wire.CodeVersion || r.Version != 0 || !strings.Contains(r.Reason, this) || !strings.Contains(r.Reason, old) {
		t.Errorf("hello of version %d: %+v", prev, r)
	}
}

func appMsgs(from, to uint64) []*raftpb.Message {
	return []*raftpb.Message{heartbeat(from, to)}
}

// relayHandler is a fakeHandler that counts relay envelopes.
type relayHandler struct {
	fakeHandler
	relays atomic.Int64
	last   atomic.Pointer[raftio.RelayEnvelope]
}

func (h *relayHandler) ProcessRelay(from uint64, env *raftio.RelayEnvelope) {
	h.last.Store(env)
	h.relays.Add(1)
}

// TestPreviousVersionConnectsWithoutRelays: a member of a release before
// relays (protocol version 3, no relay frames) and one of this release
// (3..5) connect at version 3 and exchange messages — a rolling upgrade
// keeps them talking — and a relay envelope for the older one is never
// written: it is dropped (DroppedOldVersion) and the member reported
// unreachable, so that the leader feeds its standbys directly. Between two
// members of this release the same envelope arrives.
func TestPreviousVersionConnectsWithoutRelays(t *testing.T) {
	env := func() *raftio.RelayEnvelope {
		return &raftio.RelayEnvelope{Msgs: []*raftpb.Message{heartbeat(1, 3)}, Counts: []uint32{0}}
	}
	for _, tc := range []struct {
		name  string
		older bool
	}{{"previous release", true}, {"this release", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, ha, hb := connectedPair(t, tc.older, [2]uint16{3, 3})
			if tc.older {
				a.SendRelay(2, env())
				waitFor(t, "the envelope dropped for the older peer", func() bool {
					return a.Stats().Peers[0].DroppedOldVersion > 0
				})
				// Reports reach the handler from the transport's report
				// goroutine, a moment after the drop.
				waitFor(t, "the older peer reported unreachable for the dropped envelope", func() bool {
					ha.mu.Lock()
					defer ha.mu.Unlock()
					return ha.unreachable[2] > 0
				})
				sendUntil(t, a, appMsgs(1, 2), "messages still cross after it", func() bool { return hb.count() > 1 })
				if n := hb.relays.Load(); n != 0 {
					t.Fatalf("the older peer got %d relay envelopes", n)
				}
				return
			}
			waitFor(t, "the envelope arrives", func() bool {
				a.SendRelay(2, env())
				return hb.relays.Load() > 0
			})
			if n := a.Stats().Peers[0].DroppedOldVersion; n != 0 {
				t.Fatalf("%d envelopes dropped between members of this release", n)
			}
		})
	}
}

// answersEnvelope is an envelope of a relayed standby's answer (member 7's,
// to member 9) as a relay hands it on.
func answersEnvelope() *raftio.RelayEnvelope {
	return &raftio.RelayEnvelope{Msgs: []*raftpb.Message{{
		Type: raftpb.MsgAppResp.Enum(), From: u64(7), To: u64(9), Term: u64(1), Index: u64(5),
	}}, Counts: []uint32{0}}
}

// TestPreviousVersionTakesNoRelayedAnswers: a member of the previous
// release (versions 3..4: relay frames, no relayed answers) and one of
// this release connect at version 4. The newer does not say it carries
// relayed answers to it (a relay then tells its standbys to answer
// directly); an envelope of answers for it is dropped
// (DroppedOldVersion) without reporting the member unreachable, while
// a leader's envelope still arrives. Between two members of this release
// both arrive.
func TestPreviousVersionTakesNoRelayedAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older bool
	}{{"previous release", true}, {"this release", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, ha, hb := connectedPair(t, tc.older, [2]uint16{3, 4})
			if got := a.CarriesRelayedAnswers(2); got == tc.older {
				t.Fatalf("CarriesRelayedAnswers = %v to a peer of the %s", got, tc.name)
			}
			// The link is up (a message crossed): one envelope is enough.
			a.SendRelay(2, &raftio.RelayEnvelope{Msgs: []*raftpb.Message{heartbeat(1, 3)}, Counts: []uint32{0}})
			waitFor(t, "a leader's envelope arrives", func() bool { return hb.relays.Load() > 0 })
			before := hb.relays.Load()
			if !tc.older {
				waitFor(t, "an envelope of answers arrives", func() bool {
					a.SendRelay(2, answersEnvelope())
					return hb.relays.Load() > before
				})
				if n := a.Stats().Peers[0].DroppedOldVersion; n != 0 {
					t.Fatalf("%d envelopes dropped between members of this release", n)
				}
				return
			}
			a.SendRelay(2, answersEnvelope())
			waitFor(t, "the envelope of answers dropped for the older peer", func() bool {
				return a.Stats().Peers[0].DroppedOldVersion > 0
			})
			sendUntil(t, a, appMsgs(1, 2), "messages still cross after it", func() bool { return hb.count() > 1 })
			if n := hb.relays.Load(); n != before {
				t.Fatalf("the older peer got %d envelopes of answers", n-before)
			}
			ha.mu.Lock()
			defer ha.mu.Unlock()
			if n := ha.unreachable[2]; n != 0 {
				t.Fatalf("the older peer reported unreachable %d times for dropped answers", n)
			}
		})
	}
}

// connectedPair makes transports 1 and 2 with relay handlers, 2 speaking
// the protocol versions older (lowest, highest) when older is set, and
// returns 1 and the handlers once a message crossed from 1 to 2 and 1 is
// quiet: every message it sent counted and delivered, none queued. 2
// learns of 1 before 1 dials, so 1 is never refused as an unknown sender
// (nor reported unreachable for it).
func connectedPair(t *testing.T, older bool, versions [2]uint16) (a *Transport, ha, hb *relayHandler) {
	t.Helper()
	ha, hb = &relayHandler{}, &relayHandler{}
	a = newTestTransport(t, 1, ha)
	var opts []func(*Config)
	if older {
		opts = append(opts, func(c *Config) { c.protocol = versions })
	}
	b := newTestTransport(t, 2, hb, opts...)
	b.AddPeer(1, a.Addr().String())
	a.AddPeer(2, b.Addr().String())
	sendUntil(t, a, appMsgs(1, 2), "a message crosses", func() bool { return hb.count() > 0 })
	waitFor(t, "the sender quiet", func() bool {
		s := a.Stats().Peers[0]
		return s.QueuedMessages == 0 && s.MessagesSent == uint64(hb.count())
	})
	return a, ha, hb
}

// TestPreviousReleaseGetsRelayHeadersInFull: a leader's envelope of 12
// heartbeats that differ only in To reaches a member of the previous
// release (3..5) with its headers written in full, and one of this
// release delta-coded (wire.DeltaVersion) in fewer bytes; both get the
// messages that were sent.
func TestPreviousReleaseGetsRelayHeadersInFull(t *testing.T) {
	env := &raftio.RelayEnvelope{}
	for to := uint64(3); to < 15; to++ {
		env.Msgs = append(env.Msgs, heartbeat(1, to))
		env.Counts = append(env.Counts, 0)
	}
	sent := map[bool]uint64{}
	for _, older := range []bool{true, false} {
		a, _, hb := connectedPair(t, older, [2]uint16{3, wire.DeltaVersion - 1})
		before := a.Stats().Peers[0].BytesSent
		a.SendRelay(2, env)
		waitFor(t, "the envelope arrives", func() bool { return hb.relays.Load() > 0 })
		waitFor(t, "its bytes are counted", func() bool { return a.Stats().Peers[0].BytesSent > before })
		sent[older] = a.Stats().Peers[0].BytesSent - before
		got := hb.last.Load()
		if len(got.Msgs) != len(env.Msgs) {
			t.Fatalf("older %v: %d messages, sent %d", older, len(got.Msgs), len(env.Msgs))
		}
		for i := range env.Msgs {
			m, err := got.Message(i)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := env.Message(i); !proto.Equal(m, want) {
				t.Fatalf("older %v: message %d is %v, sent %v", older, i, m, want)
			}
		}
	}
	t.Logf("envelope bytes: %d in full, %d delta-coded", sent[true], sent[false])
	if sent[false] >= sent[true] {
		t.Fatalf("delta-coded envelope took %d bytes, in full %d", sent[false], sent[true])
	}
}
