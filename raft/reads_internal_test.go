package raft

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// startLeaderless starts member 1 of a three-member cluster whose other
// members never answer: it never knows a leader.
func startLeaderless(t *testing.T) *Node {
	t.Helper()
	n := newTestNode(t, 3, nopSM{})
	if err := n.Start(loneTransport{}); err != nil {
		t.Fatal(err)
	}
	return n
}

// heldReads counts the reads the node holds: queued, in rounds, and in
// the channel to the loop.
func heldReads(t *testing.T, n *Node) int {
	t.Helper()
	var held int
	if err := n.do(context.Background(), func() {
		held = len(n.loop.readQueue) + n.reads.len()
		for _, r := range n.loop.readRounds {
			held += len(r.reqs)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return held
}

// Finding 4: reads whose callers gave up are not held, and the reads held
// while no leader is known are bounded.
func TestAbandonedReadsAreNotHeld(t *testing.T) {
	n := startLeaderless(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20000 / 8 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				_ = n.ReadBarrier(ctx)
				cancel()
			}
			_ = w
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	held := heldReads(t, n)
	for held > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a few ticks: the loop drops abandoned reads on its ticks
		held = heldReads(t, n)
	}
	if held > 0 {
		t.Fatalf("%d abandoned reads still held after their callers gave up", held)
	}
}

// selfNamingTransport answers every forwarded request with "not the
// leader; member 1 leads" — the caller itself.
type selfNamingTransport struct {
	loneTransport
	calls atomic.Int64
}

func (s *selfNamingTransport) Call(ctx context.Context, to uint64, req []byte) ([]byte, error) {
	s.calls.Add(1)
	return json.Marshal(rpcResponse{V: peerRPCVersion, Err: &rpcError{Code: "not_leader", Message: "not the leader", Leader: 1}})
}

// Finding 9: a forwarded change answered with "you are the leader" is
// retried (locally once this member leads) instead of failing with an
// error no caller can classify.
func TestForwardNamingSelfIsRetried(t *testing.T) {
	n := newTestNode(t, 3, nopSM{})
	tr := &selfNamingTransport{}
	if err := n.Start(tr); err != nil {
		t.Fatal(err)
	}
	// This member believes member 2 leads (as after a stale heartbeat).
	if err := n.do(context.Background(), func() { n.loop.leader = 2; n.publishState() }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := n.AddLearner(ctx, Member{ID: 4, PeerAddr: "127.0.0.1:7004"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AddLearner while the leader names this member: %v, want the caller's deadline (it keeps asking)", err)
	}
	if tr.calls.Load() < 2 {
		t.Fatalf("forwarded %d times, want a retry", tr.calls.Load())
	}
}

// The peer inbox never makes its sender wait: beyond its bound it drops
// (and counts) what raft retransmits, never a snapshot.
func TestInboxDropsBeyondItsBound(t *testing.T) {
	var b inbox
	for i := 0; i < maxQueuedPeerMessages+10; i++ {
		b.put(&raftpb.Message{Type: raftpb.MsgApp.Enum()})
	}
	if !b.put(&raftpb.Message{Type: raftpb.MsgSnap.Enum()}) {
		t.Fatal("a snapshot message was dropped")
	}
	if got := b.droppedCount(); got != 10 {
		t.Fatalf("dropped %d, want 10", got)
	}
	got := b.take(nil, loopInputBatch)
	if len(got) != loopInputBatch || b.len() != maxQueuedPeerMessages+1-loopInputBatch {
		t.Fatalf("took %d, %d left", len(got), b.len())
	}
}
