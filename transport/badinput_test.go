package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// rawPeer is a hand-driven client of a transport, for feeding it bad input.
type rawPeer struct {
	t *testing.T
	c net.Conn
}

func dialRaw(t *testing.T, addr string) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawPeer{t: t, c: c}
}

func (p *rawPeer) write(b []byte) {
	p.t.Helper()
	_ = p.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

// hello sends a hello and returns the reply.
func (p *rawPeer) hello(h wire.Hello) wire.HelloReply {
	p.t.Helper()
	p.write(wire.AppendFrame(nil, wire.TypeHello, h.Group, wire.AppendHello(nil, h)))
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := wire.NewReader(p.c, 4096).Next()
	if err != nil {
		p.t.Fatalf("reading hello reply: %v", err)
	}
	r, err := wire.ParseHelloReply(f.Payload)
	if err != nil {
		p.t.Fatal(err)
	}
	return r
}

// waitClosed waits for the transport to close the connection, discarding
// anything it sends first.
func (p *rawPeer) waitClosed() {
	p.t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, p.c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.t.Fatal("the transport did not close the connection")
	}
}

func goodHello(kind wire.Kind) wire.Hello {
	return wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Kind: kind, Group: 1, Cluster: testCluster, From: 1, To: 2}
}

func TestBadInputIsRefusedAndCounted(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb, func(c *Config) {
		c.HandshakeTimeout = 200 * time.Millisecond
		c.PingInterval = 100 * time.Millisecond
		c.ReadTimeout = 300 * time.Millisecond
	})
	connect(a, b)
	// The raw client is member 4, so that its streams do not replace a's.
	b.AddPeer(4, "127.0.0.1:1")
	addr := b.Addr().String()
	hello := goodHello(wire.KindStream)
	hello.From = 4

	msgFrame := func(m *raftpb.Message) []byte {
		f, err := wire.AppendMessageFrame(nil, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	corrupt := func(f []byte) []byte {
		f = bytes.Clone(f)
		f[len(f)-1] ^= 1
		return f
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, byte(wire.TypeMessage), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	helloFrame := wire.AppendFrame(nil, wire.TypeHello, 1, wire.AppendHello(nil, hello))

	tests := []struct {
		name      string
		handshake bool   // complete a valid stream handshake as member 4 first
		send      []byte // then send this, and half-close if close is set
		close     bool
		reason    string // the ConnErrors counter that must grow
	}{
		{"garbage", false, []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"), false, ReasonMalformed},
		{"4 GiB length prefix", false, huge, false, ReasonFrameTooLarge},
		{"hello with a bad checksum", false, corrupt(helloFrame), false, ReasonChecksum},
		{"truncated hello", false, helloFrame[:30], true, ReasonUnexpectedEOF},
		{"silent before the handshake", false, nil, false, ReasonTimeout},
		{"message with a bad checksum", true, corrupt(msgFrame(heartbeat(4, 2))), false, ReasonChecksum},
		{"4 GiB length prefix on a stream", true, huge, false, ReasonFrameTooLarge},
		{"garbage on a stream", true, []byte("\x00\x00\x00\x10garbage garbage garbage"), false, ReasonMalformed},
		{"truncated message", true, msgFrame(heartbeat(4, 2))[:25], true, ReasonUnexpectedEOF},
		{"message claiming another sender", true, msgFrame(heartbeat(3, 2)), false, ReasonProtocol},
		{"message for another member", true, msgFrame(heartbeat(4, 3)), false, ReasonProtocol},
		{"MsgSnap on a stream", true, msgFrame(snapMsg(4, 2, 0)), false, ReasonProtocol},
		{"undecodable message", true, wire.AppendFrame(nil, wire.TypeMessage, 1, []byte{0xff}), false, ReasonMalformed},
		{"silent after the handshake", true, nil, false, ReasonTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := b.Stats().ConnErrors[tt.reason]
			p := dialRaw(t, addr)
			if tt.handshake {
				if r := p.hello(hello); r.Code != wire.CodeAccepted {
					t.Fatalf("handshake refused: %+v", r)
				}
			}
			if tt.send != nil {
				p.write(tt.send)
			}
			if tt.close {
				_ = p.c.(*net.TCPConn).CloseWrite()
			}
			p.waitClosed()
			waitFor(t, "the error counted as "+tt.reason, func() bool { return b.Stats().ConnErrors[tt.reason] > before })
		})
	}
	if n := hb.count(); n != 0 {
		t.Fatalf("bad input delivered %d messages", n)
	}
	// b kept serving its real peer throughout.
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "delivery from the real peer", func() bool { return hb.count() > 0 })
}

func TestBadHellosAreRefused(t *testing.T) {
	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb)
	b.AddPeer(1, "127.0.0.1:1")
	tests := []struct {
		name   string
		h      func(*wire.Hello)
		code   wire.Code
		reason string
	}{
		{"future version", func(h *wire.Hello) { h.MinVersion, h.MaxVersion = 9, 12 }, wire.CodeVersion, ReasonVersion},
		{"inverted versions", func(h *wire.Hello) { h.MinVersion, h.MaxVersion = 1, 0 }, wire.CodeVersion, ReasonVersion},
		{"unknown kind", func(h *wire.Hello) { h.Kind = 99 }, wire.CodeBadHello, ReasonBadHello},
		{"wrong cluster", func(h *wire.Hello) { h.Cluster = 5 }, wire.CodeClusterMismatch, ReasonClusterMismatch},
		{"raft stream without a cluster", func(h *wire.Hello) { h.Cluster = 0 }, wire.CodeClusterMismatch, ReasonClusterMismatch},
		{"wrong group", func(h *wire.Hello) { h.Group = 2 }, wire.CodeGroupMismatch, ReasonGroupMismatch},
		{"wrong receiver", func(h *wire.Hello) { h.To = 7 }, wire.CodeWrongReceiver, ReasonWrongReceiver},
		{"no receiver on a stream", func(h *wire.Hello) { h.To = 0 }, wire.CodeWrongReceiver, ReasonWrongReceiver},
		{"unknown sender", func(h *wire.Hello) { h.From = 8 }, wire.CodeUnknownSender, ReasonUnknownSender},
		{"sender ID 0", func(h *wire.Hello) { h.From = 0 }, wire.CodeUnknownSender, ReasonUnknownSender},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := goodHello(wire.KindStream)
			tt.h(&h)
			p := dialRaw(t, b.Addr().String())
			r := p.hello(h)
			if r.Code != tt.code || r.Member != 2 || r.Reason == "" {
				t.Fatalf("reply %+v, want code %d", r, tt.code)
			}
			p.waitClosed()
			if b.Stats().Refused[tt.reason] == 0 {
				t.Fatalf("not counted under %q: %v", tt.reason, b.Stats().Refused)
			}
		})
	}
	// A malformed hello payload gets a reply too, then the connection closes.
	p := dialRaw(t, b.Addr().String())
	p.write(wire.AppendFrame(nil, wire.TypeHello, 1, []byte("short")))
	p.waitClosed()
	waitFor(t, "malformed hello counted", func() bool { return b.Stats().ConnErrors[ReasonMalformed] > 0 })
	// A hello that is not the first frame.
	p = dialRaw(t, b.Addr().String())
	p.write(wire.AppendFrame(nil, wire.TypePing, 1, wire.AppendPing(nil, 1)))
	p.waitClosed()
	waitFor(t, "protocol error counted", func() bool { return b.Stats().ConnErrors[ReasonProtocol] > 0 })
	if hb.count() != 0 {
		t.Fatal("a refused connection delivered messages")
	}
}

func TestCorruptSnapshotStream(t *testing.T) {
	hb := &fakeHandler{}
	sb := &patternStore{}
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
	b.AddPeer(1, "127.0.0.1:1")
	msg, _ := wire.AppendMessage(nil, snapMsg(1, 2, 10))
	header := wire.AppendFrame(nil, wire.TypeSnapshot, 1, wire.AppendSnapshotHeader(nil, 10, msg))
	chunk := wire.AppendFrame(nil, wire.TypeSnapshotChunk, 1, []byte("0123456789"))
	crc := wire.CRC(0, []byte("0123456789"))

	tests := []struct {
		name string
		body []byte
	}{
		{"whole-file CRC mismatch", append(bytes.Clone(chunk), wire.AppendFrame(nil, wire.TypeSnapshotEnd, 1, wire.AppendSnapshotEnd(nil, 10, crc+1))...)},
		{"short stream", wire.AppendFrame(nil, wire.TypeSnapshotEnd, 1, wire.AppendSnapshotEnd(nil, 0, 0))},
		{"long stream", append(bytes.Clone(chunk), chunk...)},
		{"cut stream", chunk[:15]},
		{"message frame inside", append(bytes.Clone(chunk), wire.AppendFrame(nil, wire.TypePing, 1, wire.AppendPing(nil, 1))...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := dialRaw(t, b.Addr().String())
			if r := p.hello(goodHello(wire.KindSnapshot)); r.Code != wire.CodeAccepted {
				t.Fatalf("refused: %+v", r)
			}
			p.write(header)
			p.write(tt.body)
			_ = p.c.(*net.TCPConn).CloseWrite()
			p.waitClosed()
		})
	}
	if hb.count() != 0 || len(sb.received) != 0 {
		t.Fatalf("a corrupt snapshot was delivered (%d) or stored (%d)", hb.count(), len(sb.received))
	}
	// A good one still goes through.
	p := dialRaw(t, b.Addr().String())
	p.hello(goodHello(wire.KindSnapshot))
	p.write(header)
	p.write(append(chunk, wire.AppendFrame(nil, wire.TypeSnapshotEnd, 1, wire.AppendSnapshotEnd(nil, 10, crc))...))
	f, err := wire.NewReader(p.c, 4096).Next()
	if err != nil || f.Type != wire.TypeSnapshotAck {
		t.Fatalf("ack: %v %v", f.Type, err)
	}
	if ok, text, _ := wire.ParseStatus(f.Payload); !ok {
		t.Fatalf("good snapshot refused: %s", text)
	}
	waitFor(t, "delivery", func() bool { return hb.count() == 1 })
}

func TestTLSAgainstPlainPeers(t *testing.T) {
	pki := newTestPKI(t, "ca")
	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb, func(c *Config) { c.TLS = pki.tlsConfig(t, "member-2") })
	b.AddPeer(1, "127.0.0.1:1")
	// A plain TCP client speaking our protocol to a TLS port.
	p := dialRaw(t, b.Addr().String())
	p.write(wire.AppendFrame(nil, wire.TypeHello, 1, wire.AppendHello(nil, goodHello(wire.KindStream))))
	p.waitClosed()
	waitFor(t, "TLS error counted", func() bool { return b.Stats().ConnErrors[ReasonTLS] > 0 })
	// A TLS client with no certificate.
	c, err := tls.Dial("tcp", b.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err == nil {
		_, err = c.Read(make([]byte, 1)) // TLS 1.3 reports the server's refusal on the first read
		_ = c.Close()
	}
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	waitFor(t, "second TLS error counted", func() bool { return b.Stats().ConnErrors[ReasonTLS] > 1 })
	if hb.count() != 0 {
		t.Fatal("messages delivered")
	}
}
