package transport

import "testing"

// TestRefusalForgottenOnceConnected: a refusal is what a peer said to the
// last attempts, not for ever. A peer that refused this member once (it
// did not know it yet, as at start-up) and then accepted it, and later went
// down, reads as unreachable — not as "refused: unknown sender", which the
// leader would show an operator as the reason a member is not ready.
func TestRefusalForgottenOnceConnected(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	a.AddPeer(2, b.Addr().String()) // b does not know a yet
	a.Send(appMsgs(1, 2))
	waitFor(t, "a refused as unknown", func() bool { return a.peer(2).c.read().lastRefusal.Load() != nil })
	b.AddPeer(1, a.Addr().String())
	waitFor(t, "a connected", func() bool {
		a.Send(appMsgs(1, 2))
		return a.peer(2).c.connected.Load()
	})
	_ = b.Close()
	waitFor(t, "the stream to b down", func() bool { return !a.peer(2).c.connected.Load() })
	if got := a.Refusal(2); got != "" {
		t.Fatalf("Refusal(2) = %q after a connection that was accepted, want \"\"", got)
	}
	if ps := a.Stats().Peers[0]; ps.LastRefusal != "" || ps.Refusals == 0 {
		t.Fatalf("peer stats %+v: want the refusal counted, not current", ps)
	}
}
