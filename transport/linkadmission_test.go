package transport

import (
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// linkHello opens a host link from a raw client.
func (p *rawPeer) linkHello() wire.HelloReply {
	p.t.Helper()
	h := goodHello(wire.KindLink)
	return p.hello(h)
}

func (p *rawPeer) frame(typ wire.Type, group uint64, payload []byte) {
	p.t.Helper()
	p.write(wire.AppendFrame(nil, typ, group, payload))
}

func (p *rawPeer) attach(group, from, to uint64) {
	p.t.Helper()
	p.frame(wire.TypeAttach, group, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: from, To: to}))
}

func (p *rawPeer) message(group uint64, m *raftpb.Message) {
	p.t.Helper()
	f, err := wire.AppendMessageFrame(nil, group, m)
	if err != nil {
		p.t.Fatal(err)
	}
	p.write(f)
}

// attachReply reads frames up to the next attach reply.
func (p *rawPeer) attachReply() (uint64, wire.AttachReply) {
	p.t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := wire.NewReader(p.c, 1<<16)
	for {
		f, err := r.Next()
		if err != nil {
			p.t.Fatalf("reading an attach reply: %v", err)
		}
		if f.Type != wire.TypeAttachReply {
			continue
		}
		ar, err := wire.ParseAttachReply(f.Payload)
		if err != nil {
			p.t.Fatal(err)
		}
		return f.Group, ar
	}
}

// TestLinkAdmission: on a host link, each (group, sender, receiver) is
// admitted by its group's transport with a raft stream's checks, in-band:
// a group the host does not run is refused (and never created) and its
// messages dropped and counted; so are an unknown sender's; an admitted
// sender's messages are delivered; a message of another sender on the link
// is dropped. A MsgSnap closes the link, and so does a malformed frame,
// after what was read before it was delivered.
func TestLinkAdmission(t *testing.T) {
	m := newTestMux(t)
	h := &fakeHandler{}
	tr := groupOn(t, m, 1, 2, h)
	tr.AddPeer(1, "127.0.0.1:1")
	tr.AddPeer(4, "127.0.0.1:1")

	p := dialRaw(t, m.Addr().String())
	if r := p.linkHello(); r.Code != wire.CodeAccepted || r.Version != wire.Version {
		t.Fatalf("link hello: %+v", r)
	}
	// A stray group.
	p.attach(99, 1, 2)
	if g, r := p.attachReply(); g != 99 || r.Code != wire.CodeGroupMismatch || r.From != 1 || r.To != 2 || r.Reason == "" {
		t.Fatalf("attachment in group 99: group %d %+v", g, r)
	}
	for i := 0; i < 3; i++ {
		p.message(99, heartbeat(1, 2))
	}
	// An unknown sender in a group the host runs.
	p.attach(1, 8, 2)
	if _, r := p.attachReply(); r.Code != wire.CodeUnknownSender {
		t.Fatalf("unknown sender: %+v", r)
	}
	p.message(1, heartbeat(8, 2))
	// A known one.
	p.attach(1, 1, 2)
	if _, r := p.attachReply(); r.Code != wire.CodeAccepted || r.Cluster != testCluster {
		t.Fatalf("member 1: %+v", r)
	}
	p.message(1, heartbeat(1, 2))
	p.message(1, heartbeat(4, 2)) // 4 is known, but not attached
	p.message(1, heartbeat(1, 3)) // not for this member
	waitFor(t, "member 1's message delivered", func() bool { return h.count() == 1 })
	waitFor(t, "the others dropped and counted", func() bool { return m.Stats().DroppedUnadmitted == 6 })
	if got := m.Groups(); len(got) != 1 {
		t.Fatalf("groups %v: a message created one", got)
	}
	if m.Stats().Refused[ReasonGroupMismatch] != 1 || tr.Stats().Refused[ReasonUnknownSender] != 1 {
		t.Fatalf("refusals: mux %v, group %v", m.Stats().Refused, tr.Stats().Refused)
	}

	// A malformed frame closes the link; what came before it is delivered.
	before := m.Stats().ConnErrors[ReasonChecksum]
	good, _ := wire.AppendMessageFrame(nil, 1, heartbeat(1, 2))
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	p.write(append(good, bad...))
	p.waitClosed()
	waitFor(t, "the good message delivered", func() bool { return h.count() == 2 })
	waitFor(t, "the bad frame counted", func() bool { return m.Stats().ConnErrors[ReasonChecksum] > before })

	// A MsgSnap on a link is a protocol violation.
	p = dialRaw(t, m.Addr().String())
	p.linkHello()
	p.attach(1, 1, 2)
	p.message(1, snapMsg(1, 2, 0))
	p.waitClosed()
	waitFor(t, "the MsgSnap counted", func() bool { return m.Stats().ConnErrors[ReasonProtocol] > 0 })
	if h.count() != 2 {
		t.Fatalf("%d messages delivered", h.count())
	}
}

// TestRefusedAttachmentsLeaveMemoryBounded: attachments claiming 10,000
// distinct unknown senders on one link are all refused and counted; the
// log remembers none of them (the link keeps only what it admitted).
func TestRefusedAttachmentsLeaveMemoryBounded(t *testing.T) {
	m := newTestMux(t)
	tr := groupOn(t, m, 1, 2, &fakeHandler{})
	tr.AddPeer(1, "127.0.0.1:1")
	before := tr.loggedEntries()
	p := dialRaw(t, m.Addr().String())
	p.linkHello()
	const n = 10000
	var wg sync.WaitGroup
	wg.Add(1)
	refused := 0
	go func() { // read the replies as they come
		defer wg.Done()
		_ = p.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		r := wire.NewReader(p.c, 1<<16)
		for refused < n {
			f, err := r.Next()
			if err != nil {
				return
			}
			if ar, err := wire.ParseAttachReply(f.Payload); err == nil && ar.Code == wire.CodeUnknownSender {
				refused++
			}
		}
	}()
	var buf []byte
	for i := 0; i < n; i++ {
		buf = wire.AppendFrame(buf, wire.TypeAttach, 1, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: uint64(1_000_000 + i), To: 2}))
	}
	p.write(buf)
	wg.Wait()
	if refused != n || tr.Stats().Refused[ReasonUnknownSender] != n {
		t.Fatalf("%d refusals read, %d counted; want %d", refused, tr.Stats().Refused[ReasonUnknownSender], n)
	}
	if grown := tr.loggedEntries() - before; grown > 4 {
		t.Fatalf("%d refused attachments left %d log entries", n, grown)
	}
}
