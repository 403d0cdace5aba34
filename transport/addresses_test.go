package transport

import (
	"net"
	"sync"
	"testing"
)

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
		saved map[string]string
	)
	a := &host{tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
	var err error
	a.m, err = NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", OnAddressesChanged: func(book map[string]string) {
		mu.Lock()
		saved = book
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.m.Close() })
	b := &host{m: newTestMux(t), tr: map[uint64]*Transport{}, h: map[uint64]Handler{}}
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
	if got := a.m.Addresses()[old]; got != b.m.Addr().String() {
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
	a2, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", Addresses: book})
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
		if a.m.learnAddress(old, bad) {
			t.Fatalf("learned %q", bad)
		}
	}
}
