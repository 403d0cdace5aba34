package transport

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// FuzzServeConn feeds arbitrary bytes to the server side of a connection,
// as a peer would send them: whatever they are, the transport must not
// panic, must finish with the connection, and may deliver only messages
// from the member the handshake (or a host link's attachment) named — the
// only peer it knows — to itself.
func FuzzServeConn(f *testing.F) {
	hello := func(kind wire.Kind) []byte {
		h := goodHello(kind)
		h.From = 4
		return wire.AppendFrame(nil, wire.TypeHello, 1, wire.AppendHello(nil, h))
	}
	msg := func(b []byte, from, to uint64) []byte {
		b, _ = wire.AppendMessageFrame(b, 1, appMsg(from, to, 7, 16))
		return b
	}
	stream := hello(wire.KindStream)
	f.Add(msg(msg(stream, 4, 2), 4, 2))
	f.Add(wire.AppendFrame(stream, wire.TypePing, 1, wire.AppendPing(nil, 9)))
	f.Add(msg(stream, 3, 2))
	f.Add(wire.AppendFrame(hello(wire.KindRequest), wire.TypeRequest, 1, wire.AppendRequest(nil, 0, []byte("q"))))
	snapHdr, _ := wire.AppendMessage(nil, snapMsg(4, 2, 3))
	snap := wire.AppendFrame(hello(wire.KindSnapshot), wire.TypeSnapshot, 1, wire.AppendSnapshotHeader(nil, 3, snapHdr))
	snap = wire.AppendFrame(snap, wire.TypeSnapshotChunk, 1, []byte("abc"))
	f.Add(wire.AppendFrame(snap, wire.TypeSnapshotEnd, 1, wire.AppendSnapshotEnd(nil, 3, wire.CRC(0, []byte("abc")))))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	// A host link: attachments (admitted, refused, another group), messages,
	// a ping.
	link := hello(wire.KindLink)
	link = wire.AppendFrame(link, wire.TypeAttach, 1, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: 4, To: 2}))
	link = wire.AppendFrame(link, wire.TypeAttach, 1, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: 3, To: 2}))
	link = wire.AppendFrame(link, wire.TypeAttach, 9, wire.AppendAttach(nil, wire.Attach{Cluster: testCluster, From: 4, To: 2}))
	link = msg(msg(link, 4, 2), 3, 2)
	link = wire.AppendFrame(link, wire.TypePing, 0, wire.AppendPing(nil, 9))
	f.Add(msg(link, 4, 2))

	f.Fuzz(func(t *testing.T, in []byte) {
		h := &fakeHandler{}
		tr := newTestTransport(t, 2, h, func(c *Config) {
			c.Logger = nil
			c.HandshakeTimeout = time.Second
			c.ReadTimeout = time.Second
			c.PingInterval = 100 * time.Millisecond
			c.MaxFrameSize = 1 << 20
			c.Snapshots = &patternStore{}
		})
		tr.AddPeer(4, "127.0.0.1:1")
		client, server := net.Pipe()
		tr.mux.track(server)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.mux.serveConn(server) // hands the connection to tr, which Close waits for
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, client)
		}()
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Write(in)
		_ = client.Close()
		<-done
		<-drained
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range h.received() {
			if m.GetFrom() != 4 || m.GetTo() != 2 {
				t.Fatalf("delivered a message from %d to %d", m.GetFrom(), m.GetTo())
			}
		}
	})
}
