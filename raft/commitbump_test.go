package raft_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// TestLeaderSendsNoCommitOnlyAppends counts, over writes made one at a
// time, the empty MsgApps the leader sends: etcd raft broadcasts one to
// every follower each time the commit index moves, and to a follower
// that has acknowledged every entry it only carries the commit index,
// which the next append or heartbeat carries (commitbump.go). Each write
// cost two of them (one to each follower), and their answers; the one to
// the follower that acknowledged the write first is no longer sent, so
// fewer than 1.5 a write are left (the one to the follower still to
// answer: it goes, it may be all that follower hears of a lost append).
// The followers still apply every write: the heartbeats carry the commit
// index once the writes stop.
func TestLeaderSendsNoCommitOnlyAppends(t *testing.T) {
	// The library's tick: at the cluster's 10 ms, heartbeats would be a
	// good part of what is counted.
	c := cluster.New(t, cluster.Options{TickInterval: 100 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("warm", "v"))
	var mu sync.Mutex
	empty, withEntries := 0, 0
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		if from == lead.ID && m.GetType() == raftpb.MsgApp {
			mu.Lock()
			if len(m.GetEntries()) == 0 {
				empty++
			} else {
				withEntries++
			}
			mu.Unlock()
		}
		return false
	})
	const writes = 60
	for i := range writes {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprint("k", i), "v"))
	}
	c.Net.SetFilter(nil)
	mu.Lock()
	perWrite := float64(empty) / writes
	t.Logf("per write: %.2f empty MsgApps from the leader, %.2f with entries", perWrite, float64(withEntries)/writes)
	mu.Unlock()
	if perWrite >= 1.5 {
		t.Fatalf("%.2f empty MsgApps a write from the leader, want < 1.5 (one to each follower per commit: 2)", perWrite)
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}
