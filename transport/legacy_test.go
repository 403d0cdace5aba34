package transport

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// oldMember is a member of the previous release (commit f0b01cb), reduced
// to what its listener does with a raft stream: it serves one group; a
// hello for another group is refused as group_mismatch before anything
// else (its mux looks the group up first), one of a kind it does not know
// as bad_hello ("unknown connection kind"), one from a sender it does not
// know as unknown_sender; an accepted raft stream carries messages from
// the hello's sender and pings, each answered by a pong in the group, and
// any other frame — such as a frame type that release does not know —
// ends the connection.
type oldMember struct {
	t                  *testing.T
	ln                 net.Listener
	group, id, cluster uint64
	peers              map[uint64]bool

	mu      sync.Mutex
	msgs    []*raftpb.Message
	hellos  map[wire.Kind]int
	refused map[wire.Code]int
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

func newOldMember(t *testing.T, addr string, group, id uint64, peers ...uint64) *oldMember {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	o := &oldMember{t: t, ln: ln, group: group, id: id, cluster: testCluster, peers: map[uint64]bool{},
		hellos: map[wire.Kind]int{}, refused: map[wire.Code]int{}, conns: map[net.Conn]bool{}}
	for _, p := range peers {
		o.peers[p] = true
	}
	o.wg.Add(1)
	go o.accept()
	t.Cleanup(o.stop)
	return o
}

func (o *oldMember) addr() string { return o.ln.Addr().String() }

// stop closes the listener and every connection.
func (o *oldMember) stop() {
	_ = o.ln.Close()
	o.mu.Lock()
	for c := range o.conns {
		_ = c.Close()
	}
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *oldMember) accept() {
	defer o.wg.Done()
	for {
		c, err := o.ln.Accept()
		if err != nil {
			return
		}
		o.mu.Lock()
		o.conns[c] = true
		o.mu.Unlock()
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			defer func() {
				_ = c.Close()
				o.mu.Lock()
				delete(o.conns, c)
				o.mu.Unlock()
			}()
			o.serve(c)
		}()
	}
}

func (o *oldMember) serve(c net.Conn) {
	r := wire.NewReader(bufio.NewReader(c), 64<<20)
	f, err := r.Next()
	if err != nil || f.Type != wire.TypeHello {
		return
	}
	h, err := wire.ParseHello(f.Payload)
	if err != nil {
		return
	}
	o.mu.Lock()
	o.hellos[h.Kind]++
	o.mu.Unlock()
	refuse := func(code wire.Code, why string) {
		o.mu.Lock()
		o.refused[code]++
		o.mu.Unlock()
		_, _ = c.Write(wire.AppendFrame(nil, wire.TypeHelloReply, h.Group, wire.AppendHelloReply(nil, wire.HelloReply{Code: code, Cluster: o.cluster, Member: o.id, Reason: why})))
	}
	switch {
	case h.Group != o.group:
		refuse(wire.CodeGroupMismatch, fmt.Sprintf("group %d, this member serves group %d", h.Group, o.group))
		return
	case h.Kind != wire.KindStream && h.Kind != wire.KindSnapshot && h.Kind != wire.KindRequest:
		refuse(wire.CodeBadHello, fmt.Sprintf("unknown connection kind %d", h.Kind))
		return
	case h.Kind != wire.KindStream:
		refuse(wire.CodeBadHello, "this fake serves raft streams only")
		return
	case !o.peers[h.From]:
		refuse(wire.CodeUnknownSender, fmt.Sprintf("member %x is not a member known to member %x", h.From, o.id))
		return
	}
	if _, err := c.Write(wire.AppendFrame(nil, wire.TypeHelloReply, o.group, wire.AppendHelloReply(nil, wire.HelloReply{Version: wire.Version, Cluster: o.cluster, Member: o.id}))); err != nil {
		return
	}
	for {
		f, err := r.Next()
		if err != nil || f.Group != o.group || f.Type > wire.TypeResponse { // the types that release knows
			return
		}
		switch f.Type {
		case wire.TypeMessage:
			m, err := wire.UnmarshalMessage(f.Payload)
			if err != nil || m.GetFrom() != h.From || m.GetTo() != o.id {
				return
			}
			o.mu.Lock()
			o.msgs = append(o.msgs, m)
			o.mu.Unlock()
		case wire.TypePing:
			if _, err := c.Write(wire.AppendFrame(nil, wire.TypePong, o.group, f.Payload)); err != nil {
				return
			}
		default:
			return
		}
	}
}

func (o *oldMember) received() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.msgs)
}

func (o *oldMember) count(k wire.Kind, code wire.Code) (hellos, refused int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hellos[k], o.refused[code]
}

// TestLinkFallsBackToStreamsOfThePreviousRelease: a member of the previous
// release refuses a host link's hello (it knows no such kind); this host
// then reaches it as that release did, with a raft stream per group —
// messages and pings flow, the stream's refusals are the group's — and
// counts it as a legacy link.
func TestLinkFallsBackToStreamsOfThePreviousRelease(t *testing.T) {
	old := newOldMember(t, "127.0.0.1:0", 1, 2, 1)
	m := newTestMux(t)
	h1, h2 := &fakeHandler{}, &fakeHandler{}
	g1 := groupOn(t, m, 1, 1, h1)
	g2 := groupOn(t, m, 2, 1, h2) // a group the old member does not run
	g1.AddPeer(2, old.addr())
	g2.AddPeer(2, old.addr())

	sendUntil(t, g1, appMsgs(1, 2), "delivery to the member of the previous release", func() bool { return old.received() > 0 })
	waitFor(t, "a round trip on the stream", func() bool { return g1.Stats().Peers[0].RTTHistory.Count > 0 })
	if s := m.Stats(); s.LegacyLinks != 1 || s.Links != 0 {
		t.Fatalf("mux stats: %+v", s)
	}
	if links, _ := old.count(wire.KindLink, 0); links == 0 {
		t.Fatal("the old member saw no link hello")
	}
	if ps := g1.Stats().Peers[0]; !ps.Connected || ps.LastRefusal != "" {
		t.Fatalf("group 1's peer: %+v", ps)
	}
	// The old member runs group 1 only: group 2's stream is refused, in
	// group 2 only.
	sendUntil(t, g2, appMsgs(1, 2), "group 2 refused", func() bool { return h2.refusedWith(ErrGroupMismatch) })
	if h1.refusedWith(ErrRefused) || g1.Refusal(2) != "" {
		t.Fatalf("group 1 was refused: %q", g1.Refusal(2))
	}
	n := old.received()
	sendUntil(t, g1, appMsgs(1, 2), "group 1 still delivers", func() bool { return old.received() > n })
}

// TestLegacyLinkUpgrades: when the member of the previous release is
// replaced by a host of this one at the same address (an upgrade), its
// fallback streams break and the host link is tried again and used.
func TestLegacyLinkUpgrades(t *testing.T) {
	old := newOldMember(t, "127.0.0.1:0", 1, 2, 1)
	addr := old.addr()
	m := newTestMux(t)
	m.legacyHold = 0
	g1 := groupOn(t, m, 1, 1, &fakeHandler{})
	g1.AddPeer(2, addr)
	sendUntil(t, g1, appMsgs(1, 2), "delivery to the old member", func() bool { return old.received() > 0 })

	old.stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	nm, err := NewMux(MuxConfig{Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nm.Close() })
	hb := &fakeHandler{}
	groupOn(t, nm, 1, 2, hb).AddPeer(1, m.Addr().String())
	sendUntil(t, g1, appMsgs(1, 2), "delivery to the upgraded host", func() bool { return hb.count() > 0 })
	waitFor(t, "a host link", func() bool { s := m.Stats(); return s.Links == 1 && s.LegacyLinks == 0 })
	if s := nm.Stats(); s.InboundLinks != 1 {
		t.Fatalf("upgraded host: %+v", s)
	}
}
