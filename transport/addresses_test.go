package transport

import (
	"net"
	"sync"
	"testing"
)

// newHostMux starts a mux for host ID id on 127.0.0.1.
func newHostMux(t *testing.T, id uint64) *Mux {
	t.Helper()
	m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", HostID: id, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestMovedHostIsDialedAtItsNewAddress: host a records host b's members,
// in three groups, at an address b no longer listens on (b moved). As soon
// as one of b's groups attaches to a, saying where b is now, a dials b
// there in every group — the two groups b never attached in included —
// without any member record changing; the book survives a restart of a
// (MuxConfig.Addresses, as OnAddressesChanged reported it).
func TestMovedHostIsDialedAtItsNewAddress(t *testing.T) {
	old := deadAddr(t)
	var (
		mu    sync.Mutex
		saved map[uint64]HostAddress
	)
	a := &host{tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
	var err error
	a.m, err = NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", HostID: 0xa, OnAddressesChanged: func(book map[uint64]HostAddress) {
		mu.Lock()
		saved = book
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.m.Close() })
	b := &host{m: newHostMux(t, 0xb), tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
	for _, g := range []uint64{1, 2, 3} {
		a.h[g], b.h[g] = &fakeHandler{}, &fakeHandler{}
		a.tr[g] = groupOn(t, a.m, g, 1, a.h[g])
		b.tr[g] = groupOn(t, b.m, g, 2, b.h[g])
		a.tr[g].AddPeer(2, old) // b as recorded before it moved
		b.tr[g].AddPeer(1, a.m.Addr().String())
		b.tr[g].SetAdvertiseAddr(b.m.Addr().String())
	}
	// b's group 1 speaks first: its attachment says where b is.
	sendUntil(t, b.tr[1], appMsgs(2, 1), "a hears b's group 1", func() bool { return a.h[1].(*fakeHandler).count() > 0 })
	for _, g := range []uint64{2, 3} {
		sendUntil(t, a.tr[g], appMsgs(1, 2), "b hears a in another group", func() bool { return b.h[g].(*fakeHandler).count() > 0 })
		if ps := a.tr[g].peer(2).stats(); ps.Addr != b.m.Addr().String() {
			t.Fatalf("group %d dials b at %s", g, ps.Addr)
		}
	}
	if got := a.m.Addresses()[0xb]; got.Addr != b.m.Addr().String() || len(got.Recorded) != 1 || got.Recorded[0] != old {
		t.Fatalf("address book %v", a.m.Addresses())
	}
	if n := a.m.Stats().AddressesLearned; n != 1 {
		t.Fatalf("AddressesLearned = %d, want 1 (one update for every group)", n)
	}
	// The record changing later wins over the book only if it names
	// another address: re-adding the old one keeps dialing b where it is.
	a.tr[2].AddPeer(2, old)
	if ps := a.tr[2].peer(2).stats(); ps.Addr != b.m.Addr().String() {
		t.Fatalf("re-recorded at the old address, group 2 dials %s", ps.Addr)
	}

	// A restarted host starts from the saved book.
	mu.Lock()
	book := saved
	mu.Unlock()
	a2, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", HostID: 0xa, Addresses: book}) // a restart: the same host ID
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a2.Close() })
	h := &fakeHandler{}
	tr := groupOn(t, a2, 3, 1, h)
	tr.AddPeer(2, old)
	b.tr[3].AddPeer(1, a2.Addr().String())
	n := b.h[3].(*fakeHandler).count()
	sendUntil(t, tr, appMsgs(1, 2), "b hears the restarted host at once", func() bool { return b.h[3].(*fakeHandler).count() > n })

	// Addresses nobody can dial are never learned.
	for _, bad := range []string{"0.0.0.0:7001", "[::]:7001", "127.0.0.1:0", "nonsense"} {
		if a.m.learnAddress(0xb, old, bad) {
			t.Fatalf("learned %q", bad)
		}
	}
}

// TestAddressBookKeyedByHost: the book keeps one entry per host and
// resolves a record in one step. Host 2 moving B→C and then host 1 moving
// A→B sends host 1's members recorded at A to B, not on to C (the chain
// the book once followed); two hosts that swap addresses are both kept; a
// host's entry moves only by its own moves; and a member whose host is
// known is routed by that host's entry alone.
func TestAddressBookKeyedByHost(t *testing.T) {
	A, B, C := deadAddr(t), deadAddr(t), deadAddr(t)
	const s1, s2 = 0x51, 0x52

	m := newTestMux(t)
	m.learnAddress(s2, B, C)
	m.learnAddress(s1, A, B)
	if got := m.resolve(s1, A); got != B {
		t.Errorf("host 1's member recorded at A resolves to %s, want B (%s); C is %s", got, B, C)
	}
	if got := m.resolve(0, A); got != B {
		t.Errorf("a member of an unknown host recorded at A resolves to %s, want B", got)
	}
	if got := m.resolve(s2, B); got != C {
		t.Errorf("host 2's member recorded at B resolves to %s, want C", got)
	}
	if got := m.resolve(s1, B); got != B {
		t.Errorf("host 1's member recorded at B (its new record) resolves to %s", got)
	}
	if got := m.resolve(s1, C); got != C {
		t.Errorf("a record of another address than host 1 was known at resolves to %s", got)
	}

	m = newTestMux(t)
	m.learnAddress(s1, A, B)
	m.learnAddress(s2, B, A)
	if m.resolve(s1, A) != B || m.resolve(s2, B) != A || len(m.Addresses()) != 2 {
		t.Errorf("swapped hosts: book %v", m.Addresses())
	}
	// Host 1 moves back where it was recorded: its entry goes.
	m.learnAddress(s1, A, A)
	if _, ok := m.Addresses()[s1]; ok || m.resolve(s1, A) != A {
		t.Errorf("host 1 back at A: book %v", m.Addresses())
	}
	if m.resolve(s2, B) != A {
		t.Errorf("host 2's entry changed with host 1's move: %v", m.Addresses())
	}
}
