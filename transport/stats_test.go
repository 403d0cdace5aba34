package transport

import (
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

func TestHistogram(t *testing.T) {
	h := newHistogram([]time.Duration{time.Millisecond, 10 * time.Millisecond})
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, time.Second} {
		h.observe(d)
	}
	s := h.snapshot()
	if s.Count != 4 || s.Sum != 1006500*time.Microsecond {
		t.Fatalf("count %d sum %v", s.Count, s.Sum)
	}
	want := []Bucket{{time.Millisecond, 2}, {10 * time.Millisecond, 3}} // cumulative; 1s only in Count
	for i, b := range want {
		if s.Buckets[i] != b {
			t.Fatalf("bucket %d: %+v, want %+v", i, s.Buckets[i], b)
		}
	}
	if !strings.Contains(s.String(), "n=4") {
		t.Fatalf("String: %s", s)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		d := b.next()
		if d < c/2 || d > c {
			t.Fatalf("attempt %d: %v, want within [%v, %v]", i, d, c/2, c)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}

// TestHealthyPeerHoldsNoRareCounters: peers that only exchange messages
// hold none of the counters of drops, failures, refusals and snapshots
// (each peer of a host's many idle groups carried them all); the first
// drop makes them, and Stats counts it.
//
// Setting up two transports can itself refuse a stream: each dials the
// other as it adds it, and one may dial before the other knows it
// (connect's comment). Such a pair holds rare counters before any
// message, for a reason the test is not about: it is set up again.
func TestHealthyPeerHoldsNoRareCounters(t *testing.T) {
	var (
		ha, hb *fakeHandler
		a, b   *Transport
	)
	for attempt := 1; ; attempt++ {
		ha, hb = &fakeHandler{}, &fakeHandler{}
		a, b = newTestTransport(t, 1, ha), newTestTransport(t, 2, hb)
		connect(a, b)
		if !refusedInSetup(a.peer(2)) && !refusedInSetup(b.peer(1)) {
			break
		}
		if attempt == 10 {
			t.Fatal("every setup of the two transports had a stream refused")
		}
		t.Logf("setup refused (attempt %d)", attempt)
		_, _ = a.Close(), b.Close()
	}
	if a.peer(2).c.rare.Load() != nil || b.peer(1).c.rare.Load() != nil {
		t.Fatal("a peer connected without a refusal holds the rare counters")
	}
	a.Send([]*raftpb.Message{heartbeat(1, 2)})
	waitFor(t, "b receives the heartbeat", func() bool { return hb.count() == 1 })
	b.Send([]*raftpb.Message{heartbeat(2, 1)})
	waitFor(t, "a receives the heartbeat", func() bool { return ha.count() == 1 })
	if a.peer(2).c.rare.Load() != nil || b.peer(1).c.rare.Load() != nil {
		t.Fatal("a peer that only exchanged messages holds the rare counters")
	}
	// A write is counted once it returns, which may be after the peer read it.
	waitFor(t, "a's heartbeat counted", func() bool { return a.Stats().Peers[0].MessagesSent > 0 })
	if s := a.Stats().Peers[0]; s.MessagesSent != 1 || s.MessagesReceived != 1 || s.DroppedDisconnected != 0 || s.SnapshotSendDuration.Count != 0 {
		t.Fatalf("a's stats of b: %+v", s)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2)}, "a drop counted", func() bool {
		return a.Stats().Peers[0].DroppedDisconnected > 0
	})
	if a.peer(2).c.rare.Load() == nil {
		t.Fatal("a drop was counted without the rare counters")
	}
}

// refusedInSetup reports whether p's stream was refused or failed to dial
// (the rare counters say so, if it has them).
func refusedInSetup(p *peer) bool {
	r := p.c.rare.Load()
	return r != nil && (r.refusals.Load() > 0 || r.dialFailures.Load() > 0)
}
