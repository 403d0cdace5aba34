package transport

import (
	"testing"

	"github.com/understudy-raft/understudy/internal/wire"
)

// TestOnlyTheOwnerSpeaksForAMember: host b speaks for member 2 of group 1
// on host a first, so b owns it there. Host c then attaches in group 1 as
// member 2, saying it is at c: the attachment is refused (c does not own
// the member), a's address book learns nothing, and a's groups — the one c
// spoke in and the others — keep dialing member 2 at b. Before host
// identity, that one attachment made a dial c in every group, and saved it.
// An attachment whose host ID is not its link's is refused too.
func TestOnlyTheOwnerSpeaksForAMember(t *testing.T) {
	a := &host{m: newHostMux(t, 0xa), tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
	b := &host{m: newHostMux(t, 0xb), tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
	bAddr := b.m.Addr().String()
	for _, g := range []uint64{1, 2} {
		a.h[g], b.h[g] = &fakeHandler{}, &fakeHandler{}
		a.tr[g] = groupOn(t, a.m, g, 1, a.h[g])
		b.tr[g] = groupOn(t, b.m, g, 2, b.h[g])
		a.tr[g].AddPeer(2, bAddr)
		b.tr[g].AddPeer(1, a.m.Addr().String())
		b.tr[g].SetAdvertiseAddr(bAddr)
	}
	sendUntil(t, b.tr[1], appMsgs(2, 1), "a hears b in group 1", func() bool { return a.h[1].(*fakeHandler).count() > 0 })

	c := newHostMux(t, 0xc)
	hc := &fakeHandler{}
	tc := groupOn(t, c, 1, 2, hc) // claims member 2 of group 1
	tc.AddPeer(1, a.m.Addr().String())
	tc.SetAdvertiseAddr(c.Addr().String())
	n := a.h[1].(*fakeHandler).count()
	sendUntil(t, tc, appMsgs(2, 1), "c's claim refused", func() bool { return hc.refusedWith(ErrUnknownSender) })
	if got := a.m.Addresses(); len(got) != 0 {
		t.Fatalf("a learned %v from a host that does not own the member", got)
	}
	for _, g := range []uint64{1, 2} {
		if addr := a.tr[g].peer(2).stats().Addr; addr != bAddr {
			t.Fatalf("group %d dials member 2 at %s, not at b (%s)", g, addr, bAddr)
		}
	}
	if got := a.h[1].(*fakeHandler).count(); got != n {
		t.Fatalf("%d messages of c's were delivered as member 2's", got-n)
	}

	// A raw link whose attachment names another host than its hello.
	p := dialRaw(t, a.m.Addr().String())
	h := goodHello(wire.KindLink)
	h.HostID = 0xd
	if r := p.hello(h); r.Code != wire.CodeAccepted {
		t.Fatalf("link hello: %+v", r)
	}
	p.frame(wire.TypeAttach, 2, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: 2, To: 1, HostID: 0xe, Addr: "127.0.0.1:1"}))
	if _, r := p.attachReply(); r.Code != wire.CodeBadHello {
		t.Fatalf("attachment of another host ID: %+v", r)
	}
	if got := a.m.Addresses(); len(got) != 0 {
		t.Fatalf("a learned %v", got)
	}
}

// TestGoneOwnerOfAnUnstartedMemberIsReplaced: host b speaks for member 2
// on host a, then b stops (its link closes). Member 2 never published an
// incarnation (none is recorded on a): it was killed after it joined, and
// comes back with an empty data dir — a new host ID, c. c may speak for
// it: a delivers its messages. With an incarnation recorded, a gone owner
// is not replaced: the incarnation check is then what admits or refuses
// the member, and the binding stays (d is refused).
func TestGoneOwnerOfAnUnstartedMemberIsReplaced(t *testing.T) {
	a := newHostMux(t, 0xa)
	ha := &fakeHandler{}
	ta := groupOn(t, a, 1, 1, ha)
	b := newHostMux(t, 0xb)
	tb := groupOn(t, b, 1, 2, &fakeHandler{})
	tb.AddPeer(1, a.Addr().String())
	ta.AddPeer(2, b.Addr().String())
	sendUntil(t, tb, appMsgs(2, 1), "a hears b", func() bool { return ha.count() > 0 })
	_ = tb.Close()
	_ = b.Close()
	noLinks := func(who string) {
		t.Helper()
		waitFor(t, who+"'s link gone from a", func() bool {
			p := ta.peer(2)
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.inLinks) == 0
		})
	}
	noLinks("b")

	c := newHostMux(t, 0xc)
	hc := &fakeHandler{}
	tc := groupOn(t, c, 1, 2, hc)
	tc.AddPeer(1, a.Addr().String())
	n := ha.count()
	sendUntil(t, tc, appMsgs(2, 1), "a hears c as member 2", func() bool { return ha.count() > n })
	if hc.refusedWith(ErrUnknownSender) {
		t.Fatal("c was refused as member 2")
	}

	// The member published an incarnation since: a new owner is not taken
	// while c is gone.
	ta.SetPeerIncarnation(2, 0x77)
	_ = tc.Close()
	_ = c.Close()
	noLinks("c")
	d := newHostMux(t, 0xd)
	hd := &fakeHandler{}
	td := groupOn(t, d, 1, 2, hd, func(c *Config) { c.Incarnation = 0x77 })
	td.AddPeer(1, a.Addr().String())
	sendUntil(t, td, appMsgs(2, 1), "d's claim refused", func() bool { return hd.refusedWith(ErrUnknownSender) })
}

// TestHostIDBoundToCertificate: with mutual TLS, the host ID that owns a
// member is bound to the certificate it was first seen with. A host with
// another certificate presenting that host ID is refused at its link's
// hello, and cannot speak for anyone.
func TestHostIDBoundToCertificate(t *testing.T) {
	pki := newTestPKI(t, "understudy test CA")
	muxTLS := func(id uint64, name string) *Mux {
		m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", HostID: id, TLS: pki.tlsConfig(t, name), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b, c := muxTLS(0xa, "host-a"), muxTLS(0xb, "host-b"), muxTLS(0xb, "host-c") // c copies b's host ID
	ha, hb, hc := &fakeHandler{}, &fakeHandler{}, &fakeHandler{}
	ta := groupOn(t, a, 1, 1, ha)
	ta.AddPeer(2, b.Addr().String())
	ta.AddPeer(3, c.Addr().String())
	tb := groupOn(t, b, 1, 2, hb)
	tb.AddPeer(1, a.Addr().String())
	sendUntil(t, tb, appMsgs(2, 1), "a hears b", func() bool { return ha.count() > 0 })

	tc := groupOn(t, c, 1, 3, hc)
	tc.AddPeer(1, a.Addr().String())
	tc.SetAdvertiseAddr(c.Addr().String())
	waitFor(t, "c's link refused", func() bool {
		tc.Send(appMsgs(3, 1))
		return a.Stats().Refused[ReasonUnknownSender] > 0
	})
	if s := a.Stats(); s.InboundLinks != 1 {
		t.Fatalf("a serves %d inbound links, want b's only", s.InboundLinks)
	}
	if ta.peer(3).owner != 0 {
		t.Fatalf("member 3 owned by %x", ta.peer(3).owner)
	}
}
