package transport

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestWipedPeerRefused: a member that presents another incarnation than
// the one recorded for its ID (its data was lost, it started afresh) gets
// none of its messages through — whether the incarnation was recorded
// before it connected (its attachment is refused) or after (its admitted
// attachment is revoked at its next message) — and learns why, as
// ErrWiped, with what to do. Its requests are refused too. The member
// whose incarnation matches is accepted, and one recorded as unknown (0)
// accepts any.
func TestWipedPeerRefused(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run(when, func(t *testing.T) {
			ha, hb := &fakeHandler{}, &fakeHandler{}
			a := newTestTransport(t, 1, ha, func(c *Config) { c.Incarnation = 0xa })
			b := newTestTransport(t, 2, hb, func(c *Config) { c.Incarnation = 0xb2 }) // b's data is new
			addPeers(a, b)
			a.SetPeerIncarnation(2, 0) // unknown: nothing recorded
			if when == "before" {
				a.SetPeerIncarnation(2, 0xb1) // what a knew of member 2
			} else {
				sendUntil(t, b, appMsgs(2, 1), "b's message arrives while nothing is recorded", func() bool { return ha.count() > 0 })
				a.SetPeerIncarnation(2, 0xb1)
			}
			// What b sends from now on is marked: none of it may arrive.
			marked := func() int {
				n := 0
				for _, m := range ha.received() {
					if m.GetIndex() == 98 { // appMsg(…, 99, …): entry 99 after index 98
						n++
					}
				}
				return n
			}
			sendUntil(t, b, []*raftpb.Message{appMsg(2, 1, 99, 8)}, "b is refused as wiped", func() bool { return hb.refusedWith(ErrWiped) })
			if n := marked(); n != 0 {
				t.Errorf("%d messages of the wiped member got through", n)
			}
			if a.Stats().Refused[ReasonWiped] == 0 {
				t.Errorf("refusals not counted: %v", a.Stats().Refused)
			}
			hb.mu.Lock()
			var detail string
			for _, r := range hb.refused {
				var re *RefusedError
				if errors.As(r.err, &re) && errors.Is(re, ErrWiped) {
					detail = re.Detail
				}
			}
			hb.mu.Unlock()
			if !strings.Contains(detail, "new ID") || !strings.Contains(detail, "b1") || !strings.Contains(detail, "b2") {
				t.Errorf("the refusal does not say what happened and what to do: %q", detail)
			}
			if _, err := b.Call(context.Background(), 1, []byte("x")); !errors.Is(err, ErrWiped) {
				t.Errorf("request of a wiped member: %v, want ErrWiped", err)
			}
			// A recorded incarnation is not replaced (a wiped member cannot
			// publish its new one); a's own messages still reach b.
			a.SetPeerIncarnation(2, 0xb2)
			sendUntil(t, a, appMsgs(1, 2), "a reaches b", func() bool { return hb.count() > 0 })
			b.Send([]*raftpb.Message{appMsg(2, 1, 99, 8)})
			if _, err := b.Call(context.Background(), 1, []byte("x")); !errors.Is(err, ErrWiped) {
				t.Errorf("request of a wiped member after a second record: %v, want ErrWiped", err)
			}
			if n := marked(); n != 0 {
				t.Errorf("%d messages of the wiped member got through", n)
			}
		})
	}
}
