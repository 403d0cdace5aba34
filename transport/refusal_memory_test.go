package transport

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// loggedEntries counts what the transport remembers about logged reasons.
func (t *Transport) loggedEntries() int {
	n := 0
	t.more().logged.Range(func(any, any) bool { n++; return true })
	t.more().refusalLog.mu.Lock()
	for e := t.more().refusalLog.last; e != nil; e = e.next {
		n++
	}
	t.more().refusalLog.mu.Unlock()
	return n
}

// TestRefusedHellosLeaveMemoryBounded: anyone who reaches the peer port can
// claim any sender ID in a hello. 10,000 hellos claiming distinct unknown
// IDs are all refused and counted, and what the transport remembers to log
// each refusal once stays bounded (issue 27: one entry per claimed ID,
// never forgotten). A known member's refusals are still logged once each.
func TestRefusedHellosLeaveMemoryBounded(t *testing.T) {
	tr := newTestTransport(t, 2, &fakeHandler{})
	tr.AddPeer(1, "127.0.0.1:1")
	addr := tr.Addr().String()
	before := tr.loggedEntries()

	const hellos, workers = 10000, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < hellos; i += workers {
				h := goodHello(wire.KindStream)
				h.From = uint64(1_000_000 + i)
				if err := helloOnce(addr, h, wire.CodeUnknownSender); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := tr.Stats().Refused[ReasonUnknownSender]; got != hellos {
		t.Fatalf("Stats.Refused[%s] = %d, want %d", ReasonUnknownSender, got, hellos)
	}
	if grown := tr.loggedEntries() - before; grown > 4 {
		t.Fatalf("%d hellos with distinct claimed IDs left %d entries of log memory behind: keyed on unauthenticated input", hellos, grown)
	}

	// A known member (its hello names another cluster) is remembered by ID.
	h := goodHello(wire.KindStream)
	h.Cluster++
	if err := helloOnce(addr, h, wire.CodeClusterMismatch); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.more().logged.Load(logKey{1, "refused_" + ReasonClusterMismatch}); !ok {
		t.Fatal("the refusal of known member 1 is not remembered as logged")
	}
}

// helloOnce dials addr, sends h and checks that the reply carries code.
func helloOnce(addr string, h wire.Hello, code wire.Code) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(wire.AppendFrame(nil, wire.TypeHello, h.Group, wire.AppendHello(nil, h))); err != nil {
		return err
	}
	f, err := wire.NewReader(c, 4096).Next()
	if err != nil {
		return err
	}
	r, err := wire.ParseHelloReply(f.Payload)
	if err != nil {
		return err
	}
	if r.Code != code {
		return fmt.Errorf("hello reply code %d (%s), want %d", r.Code, r.Reason, code)
	}
	return nil
}
