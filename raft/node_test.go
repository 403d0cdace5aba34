package raft_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

func TestMain(m *testing.M) {
	// aiosync's completion reaper lives as long as the process, once a
	// parked fsync started it.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/understudy-raft/understudy/internal/aiosync.(*aioCtx).reap"))
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// propose retries a write until it succeeds (a leader change makes the outcome
// unknown; puts are idempotent).
func propose(ctx context.Context, t *testing.T, n *raft.Node, cmd []byte) {
	t.Helper()
	var last error
	for {
		_, err := n.Propose(ctx, cmd)
		if err == nil {
			return
		}
		if ctx.Err() != nil || !(errors.Is(err, raft.ErrLeaderChanged) || errors.Is(err, raft.ErrProposalDropped)) {
			t.Fatalf("propose: %v (last retried error: %v)", err, last)
		}
		last = err
	}
}

func TestProposeAndReadOnEveryMember(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 20*time.Second)
	c.WaitLeader()
	for _, m := range c.Running() {
		key := fmt.Sprintf("k%d", m.ID)
		propose(ctx, t, m.Node, kv.Put(key, "v"))
		// Read-your-write on the proposing member, without a round trip.
		if v, _ := m.Node.StaleRead([]byte(key)); string(v) != "v" {
			t.Fatalf("member %d: stale read after propose = %q", m.ID, v)
		}
	}
	for _, m := range c.Running() {
		for _, o := range c.Running() {
			v, err := m.Node.Read(ctx, []byte(fmt.Sprintf("k%d", o.ID)))
			if err != nil {
				t.Fatalf("member %d: read: %v", m.ID, err)
			}
			if string(v) != "v" {
				t.Fatalf("member %d: linearizable read of k%d = %q, want v", m.ID, o.ID, v)
			}
		}
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCompareAndSwapResult(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 20*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("x", "1"))
	if _, err := lead.Node.Propose(ctx, kv.CAS("x", "2", "3")); !errors.Is(err, kv.ErrCompareFailed) {
		t.Fatalf("CAS with a wrong expectation: err = %v, want ErrCompareFailed", err)
	}
	if _, err := lead.Node.Propose(ctx, kv.CAS("x", "1", "3")); err != nil {
		t.Fatalf("CAS: %v", err)
	}
	if v, _ := lead.Node.Read(ctx, []byte("x")); string(v) != "3" {
		t.Fatalf("x = %q, want 3", v)
	}
}

func TestLeaderCrashAndRestart(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	for i := range 50 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("a%d", i), "1"))
	}
	c.Crash(lead.ID)
	next := c.WaitLeader()
	if next.ID == lead.ID {
		t.Fatalf("crashed member %d still leads", lead.ID)
	}
	for i := range 50 {
		propose(ctx, t, next.Node, kv.Put(fmt.Sprintf("b%d", i), "1"))
	}
	c.Restart(lead.ID)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Member(lead.ID).SM.Len(); got != 100 {
		t.Fatalf("restarted member has %d keys, want 100", got)
	}
}
