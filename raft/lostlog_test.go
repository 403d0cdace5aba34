package raft_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// A follower whose data is lost and that starts again under its ID, with
// its peers still running, is told by the leader's heartbeat that it
// acknowledged more than its log holds (the leader sends a member at most
// its match as the commit index). raft panics on it ("tocommit out of
// range"); the node stops with ErrReplicaWiped instead, which says what
// to do, and the others serve on.
func TestFollowerThatLostItsLogStopsAsWiped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cluster.New(t, cluster.Options{})
	lead := c.WaitLeader()
	for i := range 20 {
		if _, err := lead.Node.Propose(ctx, kv.Put("k", string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	f := follower(t, c, lead)
	if err := c.WaitApplied(ctx, lead.Node.AppliedIndex()); err != nil {
		t.Fatal(err)
	}
	c.Stop(f.ID)
	if err := os.RemoveAll(f.Dir); err != nil {
		t.Fatal(err)
	}
	again := c.Restart(f.ID) // its usual configuration: a bootstrap
	select {
	case <-again.Node.Done():
	case <-ctx.Done():
		t.Fatal("the follower that lost its log runs on")
	}
	if err := again.Node.Err(); !errors.Is(err, raft.ErrReplicaWiped) {
		t.Fatalf("it stopped with %v, want ErrReplicaWiped", err)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("k", "after")); err != nil {
		t.Fatalf("the others serve no write: %v", err)
	}
}
