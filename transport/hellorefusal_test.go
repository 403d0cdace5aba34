package transport

import (
	"errors"
	"net"
	"testing"

	"github.com/understudy-raft/understudy/internal/wire"
)

// refusingListener answers every hello with a refusal of the given code,
// then closes the connection. It returns its address.
func refusingListener(t *testing.T, code wire.Code) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				f, err := wire.NewReader(c, helloLimit).Next()
				if err != nil {
					return
				}
				r := wire.HelloReply{Code: code, Cluster: testCluster, Reason: "refused by the test"}
				_, _ = c.Write(wire.AppendFrame(nil, wire.TypeHelloReply, f.Group, wire.AppendHelloReply(nil, r)))
			}()
		}
	}()
	return ln.Addr().String()
}

// TestLinkHelloRefusalTombstonesNothing: a listener that answers a host
// link's hello with "removed" (or any other per-group reason) refuses the
// link, not any group's member: no group on the dialing host is told it
// was removed (which would stop its replica for good), and none is told
// anything but that the peer cannot be reached. Per-group refusals come in
// attach replies only.
func TestLinkHelloRefusalTombstonesNothing(t *testing.T) {
	for _, code := range []wire.Code{wire.CodeRemoved, wire.CodeClusterMismatch, wire.CodeUnknownSender, wire.CodeWrongReceiver} {
		t.Run(codeErrors[code].reason, func(t *testing.T) {
			addr := refusingListener(t, code)
			m := newTestMux(t)
			hs := map[uint64]*fakeHandler{}
			for _, g := range []uint64{1, 2, 3} {
				hs[g] = &fakeHandler{}
				groupOn(t, m, g, 1, hs[g]).AddPeer(2, addr)
			}
			for _, g := range []uint64{1, 2, 3} {
				waitFor(t, "the refused link reported unreachable", func() bool { return hs[g].unreachableCount(2) > 0 })
			}
			for g, h := range hs {
				h.mu.Lock()
				for _, r := range h.refused {
					if errors.Is(r.err, ErrRemoved) || errors.Is(r.err, codeErrors[code].err) {
						t.Errorf("group %d was told %v by a link hello's refusal", g, r.err)
					}
				}
				h.mu.Unlock()
			}
		})
	}
}
