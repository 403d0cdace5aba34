package transport

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// groupOn starts group g's transport for member id on mux m.
func groupOn(t *testing.T, m *Mux, g, id uint64, h Handler, opts ...func(*Config)) *Transport {
	t.Helper()
	return newTestTransport(t, id, h, append([]func(*Config){func(c *Config) { c.ListenAddr, c.Mux, c.GroupID = "", m, g }}, opts...)...)
}

func newTestMux(t *testing.T) *Mux {
	t.Helper()
	m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestMuxServesManyGroups: two hosts, each one listener (a Mux) for two
// raft groups whose member IDs overlap. Every message reaches the handler
// of its own group; a hello for a group a host does not run is refused
// (never creating one) and counted; a group stopped on a running host is
// refused from then on while the other keeps serving, and started again it
// serves again.
func TestMuxServesManyGroups(t *testing.T) {
	ma, mb := newTestMux(t), newTestMux(t)
	h := map[[2]uint64]*fakeHandler{} // (group, member) → handler
	tr := map[[2]uint64]*Transport{}
	for _, g := range []uint64{1, 2} {
		for id, m := range map[uint64]*Mux{1: ma, 2: mb} {
			k := [2]uint64{g, id}
			h[k] = &fakeHandler{}
			tr[k] = groupOn(t, m, g, id, h[k])
		}
		tr[[2]uint64{g, 1}].AddPeer(2, mb.Addr().String())
		tr[[2]uint64{g, 2}].AddPeer(1, ma.Addr().String())
	}
	// Messages sent before a stream is up are dropped (as raft expects of
	// a lossy network): wait for every group's streams first.
	for k, tt := range tr {
		peer := 3 - k[1]
		waitFor(t, fmt.Sprintf("group %d: member %d's stream to %d", k[0], k[1], peer), func() bool { return tt.peer(peer).c.connected.Load() })
	}
	if got := ma.Groups(); len(got) != 2 {
		t.Fatalf("groups on the mux: %v", got)
	}
	for i := 0; i < 5; i++ {
		tr[[2]uint64{1, 1}].Send(appMsgs(1, 2))
		tr[[2]uint64{2, 2}].Send(appMsgs(2, 1))
	}
	waitFor(t, "messages delivered in their own group", func() bool {
		return h[[2]uint64{1, 2}].count() == 5 && h[[2]uint64{2, 1}].count() == 5
	})
	if n := h[[2]uint64{2, 2}].count() + h[[2]uint64{1, 1}].count(); n != 0 {
		t.Fatalf("%d messages reached the other group", n)
	}

	// A group the host does not run: refused, counted, nothing created.
	p := dialRaw(t, mb.Addr().String())
	hello := goodHello(wire.KindStream)
	hello.Group, hello.From, hello.To = 3, 1, 2
	if r := p.hello(hello); r.Code != wire.CodeGroupMismatch {
		t.Fatalf("hello for group 3: %+v", r)
	}
	p.waitClosed()
	if mb.Stats().Refused[ReasonGroupMismatch] == 0 || len(mb.Groups()) != 2 {
		t.Fatalf("mux stats %+v, groups %v", mb.Stats(), mb.Groups())
	}

	// Group 1 stops on host B; group 2 goes on.
	if err := tr[[2]uint64{1, 2}].Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "group 1 refused on host B", func() bool {
		tr[[2]uint64{1, 1}].Send(appMsgs(1, 2))
		return mb.Stats().Refused[ReasonGroupMismatch] >= 2
	})
	before := h[[2]uint64{2, 1}].count()
	tr[[2]uint64{2, 2}].Send(appMsgs(2, 1))
	waitFor(t, "group 2 still served", func() bool { return h[[2]uint64{2, 1}].count() > before })

	// Started again on the running host, group 1 is served again.
	h2 := &fakeHandler{}
	again := groupOn(t, mb, 1, 2, h2)
	again.AddPeer(1, ma.Addr().String())
	waitFor(t, "group 1 served again", func() bool {
		tr[[2]uint64{1, 1}].Send(appMsgs(1, 2))
		return h2.count() > 0
	})

	// Two transports of one group on one mux are refused.
	if _, err := New(Config{ID: 9, ClusterID: testCluster, GroupID: 2, Mux: mb, Handler: &fakeHandler{}}); err == nil {
		t.Fatal("a second transport for group 2 on the same mux was accepted")
	}
}

// TestMuxSharesTheSnapshotBudget: the snapshots a host receives at once are
// bounded for the host, not per group: with a budget of one, a snapshot
// stream open for group 1 makes group 2's refused as busy.
func TestMuxSharesTheSnapshotBudget(t *testing.T) {
	m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", MaxConcurrentSnapshots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	for _, g := range []uint64{1, 2} {
		tr := groupOn(t, m, g, 2, &fakeHandler{})
		tr.AddPeer(1, "127.0.0.1:1")
	}
	hello := func(g uint64) wire.Hello {
		h := goodHello(wire.KindSnapshot)
		h.Group = g
		return h
	}
	p1 := dialRaw(t, m.Addr().String())
	if r := p1.hello(hello(1)); r.Code != wire.CodeAccepted {
		t.Fatalf("group 1's snapshot: %+v", r)
	}
	p2 := dialRaw(t, m.Addr().String())
	if r := p2.hello(hello(2)); r.Code != wire.CodeBusy {
		t.Fatalf("group 2's snapshot while group 1's is open: %+v, want busy", r)
	}
}

// Negative link settings are refused with the fields named, never used (a
// negative ping interval would panic a ticker).
func TestMuxRefusesNegativeLinkSettings(t *testing.T) {
	_, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", PingInterval: -time.Second})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "PingInterval -1s") {
		t.Fatalf("got %v, want ErrInvalidConfig naming PingInterval", err)
	}
}

// A Close that finds another in progress returns once that one is done:
// the group has then left the mux, and a new transport for it registers.
// (A host group that stops on its own closes its transport while the host
// closes the group: the host's Close returned first and the group's next
// start on the host was refused as already running, now and then.) The
// first Close is held where it leaves the mux (the test holds the mux's
// lock).
func TestConcurrentClosesLeaveTheMux(t *testing.T) {
	m := newTestMux(t)
	tr := groupOn(t, m, 1, 1, &fakeHandler{})
	tr.AddPeer(2, "127.0.0.1:1")
	m.mu.Lock()
	first := make(chan struct{})
	go func() { _ = tr.Close(); close(first) }()
	for closing := false; !closing; { // the first Close has begun
		tr.mu.Lock()
		closing = tr.closed
		tr.mu.Unlock()
		runtime.Gosched()
	}
	second := make(chan struct{})
	go func() { _ = tr.Close(); close(second) }()
	select {
	case <-second:
		m.mu.Unlock()
		t.Fatal("a second Close returned while the first had not left the mux")
	case <-time.After(100 * time.Millisecond):
	}
	m.mu.Unlock()
	<-second
	again, err := New(Config{ID: 1, Mux: m, GroupID: 1, Handler: &fakeHandler{}})
	if err != nil {
		t.Fatalf("a new transport for the group once Close returned: %v", err)
	}
	_ = again.Close()
	<-first
}
