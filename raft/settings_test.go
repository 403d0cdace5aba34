package raft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// waitSettings waits until every running member applied settings
// satisfying ok.
func waitSettings(ctx context.Context, t *testing.T, c *cluster.Cluster, what string, ok func(confchange.ClusterSettings) bool) {
	t.Helper()
	for {
		all := true
		for _, m := range c.Running() {
			all = all && ok(m.Node.Settings())
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("settings never %s: %v", what, c.Running()[0].Node.Settings())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestReplicatedSettingsScaleUpAndDown: the cluster settings travel through
// the log; raising the target promotes two ready standbys at once, lowering
// it demotes two voters at once (never the leader), and the voter count is
// odd in every configuration outside a joint one.
func TestReplicatedSettingsScaleUpAndDown(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 3, Membership: fastMembership, SnapshotCount: 100, SnapshotCatchUpEntries: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	// The first leader replicates the seed settings.
	waitSettings(ctx, t, c, "replicated", func(cs confchange.ClusterSettings) bool { return cs.TargetVoters == 3 && cs.AutoPromote })

	// Every applied configuration, checked for an odd voter count.
	events, unsub := lead.Node.Subscribe(1024)
	defer unsub()
	even := make(chan string, 16)
	go func() {
		for e := range events {
			if e.Type != raft.EventMembershipChanged {
				continue
			}
			st, err := lead.Node.Status(ctx)
			if err == nil && !st.Joint() && len(st.Voters)%2 == 0 {
				even <- fmt.Sprintf("voters %v learners %v", st.Voters, st.Learners)
			}
		}
	}()

	for _, id := range []uint64{4, 5} {
		if err := lead.Node.AddLearner(ctx, c.Record(id)); err != nil {
			t.Fatal(err)
		}
		c.Join(id)
	}
	f := follower(t, c, lead)
	if err := f.Node.UpdateSettings(ctx, confchange.ClusterSettings{TargetVoters: 4, MaxLearners: 2, AutoPromote: true, FailoverAfter: time.Minute}); !errors.Is(err, confchange.ErrInvalidSettings) {
		t.Fatalf("an even target: %v, want ErrInvalidSettings", err)
	}
	cs := f.Node.Settings()
	cs.TargetVoters = 5
	if err := f.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatalf("raising the target through a follower: %v", err)
	}
	waitSettings(ctx, t, c, "at target 5", func(cs confchange.ClusterSettings) bool { return cs.TargetVoters == 5 })
	waitMembership(ctx, t, lead.Node, "five voters", func(m raft.Membership) bool { return len(m.Config.Voters) == 5 && !m.Joint() })

	cs.TargetVoters = 3
	cs.FailoverAfter = 77 * time.Second // a value no member's Config seeds
	if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
		t.Fatal(err)
	}
	m := waitMembership(ctx, t, lead.Node, "three voters", func(m raft.Membership) bool { return len(m.Config.Voters) == 3 && !m.Joint() })
	if !slices.Contains(m.Config.Voters, m.Leader) || len(m.Config.Learners) != 2 {
		t.Fatalf("after scaling down: leader %d, %v", m.Leader, m.Config)
	}
	select {
	case s := <-even:
		t.Fatalf("an even voter count was applied: %s", s)
	default:
	}

	// The settings survive a restart and travel in snapshots: a member that
	// joins after compaction learns them from the snapshot.
	for i := range 300 {
		if _, err := lead.Node.Propose(ctx, kv.Put("k", string(rune('a'+i%26)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lead.Node.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(f.ID)
	c.Restart(f.ID)
	if err := lead.Node.RemoveMember(ctx, m.Config.Learners[0]); err != nil {
		t.Fatal(err)
	}
	if err := lead.Node.AddLearner(ctx, c.Record(6)); err != nil {
		t.Fatal(err)
	}
	c.Join(6)
	waitSettings(ctx, t, c, "the same everywhere after a restart and a snapshot", func(cs confchange.ClusterSettings) bool {
		return cs.TargetVoters == 3 && cs.FailoverAfter == 77*time.Second
	})
	if c.Net.SnapshotsTo(6) == 0 {
		t.Fatal("member 6 caught up without a snapshot: the test does not cover settings in snapshots")
	}
}
