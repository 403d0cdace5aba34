package transport

import (
	"encoding/binary"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// TestLinkFlowInDebtIsScheduledAgain: a flow that wrote one message larger
// than two quanta (a catch-up append) is in debt for more than a round; as
// long as another flow shares the writer's rounds it sits them out while
// its debt is repaid, then writes again. It used to be dropped from the
// rounds for good (its queue marked as on the active list, so that no send
// put it back): its messages piled up while the link stayed up.
func TestLinkFlowInDebtIsScheduledAgain(t *testing.T) {
	g, hr, st := heldTwoGroups(t)
	send := st[1].mux
	// Queued while the handshake is held, so that the writer's first round
	// sees both flows: group 1 a message of more than three quanta and a
	// heartbeat behind it, group 2 a backlog of several rounds.
	q := send.quantum
	st[1].Send([]*raftpb.Message{appMsg(1, 2, 1, 3*q+q/2), heartbeat(1, 2)})
	const backlog = 40
	var msgs []*raftpb.Message
	for i := uint64(1); i <= backlog; i++ {
		msgs = append(msgs, appMsg(1, 2, i, q/2))
	}
	st[2].Send(msgs)
	g.release()
	waitFor(t, "group 2's backlog delivered", func() bool { return hr[2].count() == backlog })
	waitFor(t, "group 1's heartbeat behind its large append delivered", func() bool { return hr[1].count() == 2 })
	// And the flow goes on: a later message is written too.
	st[1].Send([]*raftpb.Message{heartbeat(1, 2)})
	waitFor(t, "group 1's next message delivered", func() bool { return hr[1].count() == 3 })
}

// muxWith is newTestMux with a frame limit.
func muxWith(t *testing.T, maxFrame int) *Mux {
	t.Helper()
	m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", MaxFrameSize: maxFrame})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestLinkMessageOverPeerLimitDropped: a host whose frame limit is
// smaller than the messages one group sends it. The sender learns the
// limit from the link's hello reply and drops those messages itself,
// counted in the group's peer stats; the link never breaks, and another
// group's messages, written right behind each of them, all arrive. A frame
// over the limit used to break the link for every group, again at each
// retransmission.
func TestLinkMessageOverPeerLimitDropped(t *testing.T) {
	recv, send := muxWith(t, 64<<10), newTestMux(t)
	hr := map[uint64]*fakeHandler{}
	st := map[uint64]*Transport{}
	for _, grp := range []uint64{1, 2} {
		hr[grp] = &fakeHandler{}
		groupOn(t, recv, grp, 2, hr[grp]).AddPeer(1, send.Addr().String())
		st[grp] = groupOn(t, send, grp, 1, &fakeHandler{})
		st[grp].AddPeer(2, recv.Addr().String())
	}
	for _, grp := range []uint64{1, 2} {
		waitFor(t, "attached", func() bool { return st[grp].peer(2).c.connected.Load() })
	}
	const rounds = 10
	for i := 1; i <= rounds; i++ {
		st[1].Send([]*raftpb.Message{appMsg(1, 2, uint64(i), 100<<10)})
		st[2].Send([]*raftpb.Message{heartbeat(1, 2)})
		waitFor(t, fmt.Sprintf("group 2's heartbeat %d", i), func() bool { return hr[2].count() == i })
	}
	st[1].Send([]*raftpb.Message{appMsg(1, 2, 1, 1<<10)})
	waitFor(t, "group 1's small append", func() bool { return hr[1].count() == 1 })
	if s := st[1].Stats().Peers[0]; s.DroppedTooLarge != rounds || s.Dials != 1 || !s.Connected {
		t.Fatalf("group 1's peer: %d dropped too large, %d dials, connected %v; want %d, 1, true", s.DroppedTooLarge, s.Dials, s.Connected, rounds)
	}
	if s := send.Stats(); len(s.ConnErrors) != 0 {
		t.Fatalf("the sender's link broke: %v", s.ConnErrors)
	}
	if s := recv.Stats(); len(s.ConnErrors) != 0 || s.DroppedTooLarge != 0 {
		t.Fatalf("the receiver: %v, %d dropped too large", s.ConnErrors, s.DroppedTooLarge)
	}
}

// TestLinkSkipsMessageOverLimit: a sender that did not learn the limit
// (a raw client here, a build before the hello reply said it) sends a
// message over the host's frame limit: the host skips it, counts it, and
// reads on; the messages behind it are delivered on the same link.
func TestLinkSkipsMessageOverLimit(t *testing.T) {
	m := muxWith(t, 64<<10)
	h := &fakeHandler{}
	groupOn(t, m, 1, 2, h).AddPeer(1, "127.0.0.1:1")
	p := dialRaw(t, m.Addr().String())
	if r := p.linkHello(); r.Code != wire.CodeAccepted || r.MaxFrame != 64<<10 {
		t.Fatalf("link hello: %+v, want the frame limit", r)
	}
	p.attach(1, 1, 2)
	if _, r := p.attachReply(); r.Code != wire.CodeAccepted {
		t.Fatalf("attachment: %+v", r)
	}
	p.message(1, appMsg(1, 2, 1, 100<<10))
	p.message(1, heartbeat(1, 2))
	waitFor(t, "the heartbeat behind the large message", func() bool { return h.count() == 1 })
	if s := m.Stats(); s.DroppedTooLarge != 1 || s.InboundLinks != 1 || len(s.ConnErrors) != 0 {
		t.Fatalf("mux stats %+v: want one message dropped too large, the link up", s)
	}
	p.message(1, heartbeat(1, 2))
	waitFor(t, "a later heartbeat", func() bool { return h.count() == 2 })
}

// TestLinkUnadmittedFrameNotAllocated: what a peer that was not admitted
// sends costs the host what it needs to read it, not what its frame
// headers declare: a message frame of 16 MiB for a group with no
// admission on the link is skipped without being allocated, and one
// declaring 64 MiB followed by the end of the connection costs a chunk.
// Frames but messages are small: a larger one breaks the link.
func TestLinkUnadmittedFrameNotAllocated(t *testing.T) {
	m := newTestMux(t)
	groupOn(t, m, 1, 2, &fakeHandler{}).AddPeer(1, "127.0.0.1:1")
	big, err := wire.AppendMessageFrame(nil, 1, appMsg(1, 2, 1, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	ping := wire.AppendFrame(nil, wire.TypePing, 0, wire.AppendPing(nil, 7))
	p := dialRaw(t, m.Addr().String())
	p.linkHello()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p.write(big)
	p.write(ping)
	_ = p.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if f, err := wire.NewReader(p.c, 64).Next(); err != nil || f.Type != wire.TypePong {
		t.Fatalf("pong after the unadmitted frame: %v %v", f.Type, err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("a 16 MiB message for a group not admitted on the link: the process allocated %d bytes reading it", got)
	}
	if s := m.Stats(); s.DroppedUnadmitted != 1 {
		t.Fatalf("%d dropped unadmitted, want 1", s.DroppedUnadmitted)
	}

	// A header declaring 64 MiB, then the end of the connection.
	p = dialRaw(t, m.Addr().String())
	p.linkHello()
	hdr := wire.AppendFrame(nil, wire.TypeMessage, 1, nil)
	binary.BigEndian.PutUint32(hdr[0:4], 64<<20)
	errs := m.Stats().ConnErrors[ReasonUnexpectedEOF]
	runtime.GC()
	runtime.ReadMemStats(&before)
	p.write(hdr)
	_ = p.c.Close()
	waitFor(t, "the truncated frame counted", func() bool { return m.Stats().ConnErrors[ReasonUnexpectedEOF] > errs })
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("a header declaring 64 MiB: the process allocated %d bytes", got)
	}

	// An attachment of 64 KiB breaks the link.
	p = dialRaw(t, m.Addr().String())
	p.linkHello()
	errs = m.Stats().ConnErrors[ReasonFrameTooLarge]
	p.frame(wire.TypeAttach, 1, make([]byte, 64<<10))
	p.waitClosed()
	waitFor(t, "the large attachment counted", func() bool { return m.Stats().ConnErrors[ReasonFrameTooLarge] > errs })
}

// TestClosedGroupLeavesTheLinks: a group closed on both hosts leaves
// nothing on the host links between them, which live on for another
// group: the inbound links forget its admissions, and its transports (and
// with them its handler: a host's node and state machine) are garbage.
// The inbound links used to keep every admission they made until they
// closed themselves.
func TestClosedGroupLeavesTheLinks(t *testing.T) {
	a, b := newTestMux(t), newTestMux(t)
	ha, hb := &fakeHandler{}, &fakeHandler{}
	ta, tb := groupOn(t, a, 2, 1, ha), groupOn(t, b, 2, 2, hb)
	ta.AddPeer(2, b.Addr().String())
	tb.AddPeer(1, a.Addr().String())
	gone := closedGroup(t, a, b, 1)
	// The links carry group 2 on.
	sendUntil(t, ta, []*raftpb.Message{heartbeat(1, 2)}, "group 2 from a to b", func() bool { return hb.count() > 0 })
	sendUntil(t, tb, []*raftpb.Message{heartbeat(2, 1)}, "group 2 from b to a", func() bool { return ha.count() > 0 })
	for _, m := range []*Mux{a, b} {
		m.mu.Lock()
		links := slices.Collect(maps.Keys(m.inLinks))
		m.mu.Unlock()
		if len(links) != 1 {
			t.Fatalf("%d inbound links, want 1", len(links))
		}
		for _, il := range links {
			il.amu.Lock()
			n, g1, last := len(il.admitted), il.groups[1], uint64(0)
			if il.last.t != nil {
				last = il.last.t.cfg.GroupID
			}
			il.amu.Unlock()
			if n != 1 || g1 != 0 || last == 1 {
				t.Fatalf("an inbound link keeps %d admissions (%d of group 1; the last message's admission in group %d); want group 2's only", n, g1, last)
			}
		}
	}
	waitFor(t, "group 1's transports collected", func() bool {
		runtime.GC()
		for _, w := range gone {
			if w.Value() != nil {
				return false
			}
		}
		return true
	})
}

// closedGroup runs group g on muxes a and b (members 1 and 2), sends
// messages both ways, closes it on both, and returns weak pointers to its
// transports.
func closedGroup(t *testing.T, a, b *Mux, g uint64) []weak.Pointer[Transport] {
	t.Helper()
	mk := func(m *Mux, id uint64, h Handler) *Transport {
		tr, err := New(Config{ID: id, ClusterID: testCluster, Handler: h, Mux: m, GroupID: g,
			MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	ha, hb := &fakeHandler{}, &fakeHandler{}
	ta, tb := mk(a, 1, ha), mk(b, 2, hb)
	ta.AddPeer(2, b.Addr().String())
	tb.AddPeer(1, a.Addr().String())
	sendUntil(t, ta, []*raftpb.Message{heartbeat(1, 2)}, "from a to b", func() bool { return hb.count() > 0 })
	sendUntil(t, tb, []*raftpb.Message{heartbeat(2, 1)}, "from b to a", func() bool { return ha.count() > 0 })
	if err := ta.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	return []weak.Pointer[Transport]{weak.Make(ta), weak.Make(tb)}
}
