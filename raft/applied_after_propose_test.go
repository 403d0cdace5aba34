package raft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestAppliedIndexCoversAnsweredProposal: once a call that waits for its
// entry's apply returns, the member's AppliedIndex covers the entry — it
// applied it, and says so — whatever the entry: a command, a client's
// registration, a command of a session and its retry (answered from the
// session, not applied again), a settings update. The apply task used to
// answer proposers before it published the applied index, so a caller that
// read AppliedIndex right after its Propose could see the index before its
// own write (a test that waited for another member to reach "the leader's
// applied index" then waited for less than the write it had made: CI failed
// TestHostReachedThroughProxies so).
func TestAppliedIndexCoversAnsweredProposal(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 1, SnapshotCount: 1 << 40, ManualMembership: true})
	n := c.WaitLeader().Node
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := n.RegisterClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(i int) error{
		"Propose": func(i int) error {
			_, err := n.Propose(ctx, kv.Put(fmt.Sprint("k", i%8), "v"))
			return err
		},
		"RegisterClient": func(int) error {
			_, err := n.RegisterClient(ctx)
			return err
		},
		"ProposeWithID and its retry": func(i int) error {
			id := raft.RequestID{Client: client, Seq: uint64(i + 1)}
			if _, err := n.ProposeWithID(ctx, id, kv.Put("s", "v")); err != nil {
				return err
			}
			_, err := n.ProposeWithID(ctx, id, kv.Put("s", "v")) // answered from the session
			return err
		},
		"UpdateSettings": func(int) error { return n.UpdateSettings(ctx, n.Settings()) },
	}
	const rounds = 600
	stale := map[string]int{}
	for i := range rounds {
		for name, call := range calls {
			before := n.AppliedIndex()
			if err := call(i); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if n.AppliedIndex() <= before {
				stale[name]++
			}
		}
	}
	for name, k := range stale {
		t.Errorf("%s: %d of %d answered calls left AppliedIndex where it was before them", name, k, rounds)
	}
}
