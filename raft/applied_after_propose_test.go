package raft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// TestAppliedIndexCoversAnsweredProposal: once Propose returns, the
// member's AppliedIndex covers the write — it applied it, and says so. The
// apply task used to answer the proposers of a batch before it published
// the batch's applied index, so a caller that read AppliedIndex right after
// its Propose could see the index before its own write (a test that waited
// for another member to reach "the leader's applied index" then waited for
// less than the write it had made: CI failed
// TestHostReachedThroughProxies so).
func TestAppliedIndexCoversAnsweredProposal(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 1, SnapshotCount: 1 << 40, ManualMembership: true})
	lead := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stale := 0
	const writes = 3000
	for i := range writes {
		before := lead.Node.AppliedIndex()
		if _, err := lead.Node.Propose(ctx, kv.Put(fmt.Sprint("k", i%8), "v")); err != nil {
			t.Fatal(err)
		}
		if lead.Node.AppliedIndex() <= before {
			stale++
		}
	}
	if stale > 0 {
		t.Fatalf("%d of %d answered proposals left AppliedIndex where it was before them", stale, writes)
	}
}
