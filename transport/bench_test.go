package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// countingHandler counts delivered messages and wakes a waiting sender.
type countingHandler struct {
	n    atomic.Int64
	wake chan struct{}
}

func (h *countingHandler) Process(*raftpb.Message) {
	h.n.Add(1)
	select {
	case h.wake <- struct{}{}:
	default:
	}
}
func (h *countingHandler) ReportUnreachable(uint64) {}

// countingBatchHandler is a countingHandler that takes a link's messages
// in batches (BatchHandler), as a raft node that does not block would.
type countingBatchHandler struct{ *countingHandler }

func (h countingBatchHandler) ProcessBatch(ms []*raftpb.Message) {
	h.n.Add(int64(len(ms)))
	select {
	case h.wake <- struct{}{}:
	default:
	}
}
func (h *countingHandler) ReportSnapshot(uint64, raft.SnapshotStatus) {}
func (h *countingHandler) ReportRefused(uint64, error)                {}
func (h *countingHandler) ServeRequest(context.Context, uint64, []byte) ([]byte, error) {
	return nil, nil
}

// BenchmarkTransport measures one-way throughput of MsgApp messages, each
// carrying one entry of 256 bytes, from one transport to another over
// loopback TCP, plain and with mutual TLS 1.3, and plain to a BatchHandler
// (no inbox between the link and the handler). The sender hands Send
// batches of 64 messages (as a raft Ready would) and keeps at most 16384
// messages in flight, so nothing is dropped; bytes/s counts entry data.
//
//	go test -run '^$' -bench BenchmarkTransport -benchmem ./transport/
func BenchmarkTransport(b *testing.B) {
	for _, tc := range []struct {
		name       string
		tls, batch bool
	}{{"plain", false, false}, {"tls", true, false}, {"batch-handler", false, true}} {
		b.Run(tc.name+"/256B", func(b *testing.B) { benchStream(b, tc.tls, tc.batch, 256) })
	}
}

func benchStream(b *testing.B, useTLS, batchHandler bool, size int) {
	const batch, window = 64, 16384
	h := &countingHandler{wake: make(chan struct{}, 1)}
	var hh Handler = h
	if batchHandler {
		hh = countingBatchHandler{h}
	}
	var optA, optB []func(*Config)
	if useTLS {
		pki := newTestPKI(b, "bench CA")
		ta, tb := pki.tlsConfig(b, "member-1"), pki.tlsConfig(b, "member-2")
		optA = append(optA, func(c *Config) { c.TLS = ta })
		optB = append(optB, func(c *Config) { c.TLS = tb })
	}
	big := func(c *Config) { c.MaxQueueMessages = 2 * window; c.Logger = nil }
	a := newTestTransport(b, 1, &countingHandler{wake: make(chan struct{}, 1)}, append(optA, big)...)
	rb := newTestTransport(b, 2, hh, append(optB, big)...)
	connect(a, rb)
	sendUntil(b, a, []*raftpb.Message{heartbeat(1, 2)}, "a connected stream", func() bool { return h.n.Load() > 0 })

	msgs := make([]*raftpb.Message, batch)
	for i := range msgs {
		msgs[i] = appMsg(1, 2, uint64(i+1), size) // immutable: resent as is
	}
	base := h.n.Load()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		for int64(sent)-(h.n.Load()-base) > window-batch {
			select {
			case <-h.wake:
			case <-time.After(time.Millisecond):
			}
		}
		n := min(batch, b.N-sent)
		a.Send(msgs[:n])
		sent += n
	}
	for h.n.Load()-base < int64(sent) {
		select {
		case <-h.wake:
		case <-time.After(time.Millisecond):
		}
		if s := a.Stats().Peers[0]; s.DroppedQueueFull+s.DroppedDisconnected > 0 {
			b.Fatalf("messages dropped: %+v", s)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
