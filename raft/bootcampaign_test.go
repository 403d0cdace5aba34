package raft_test

import (
	"context"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// TestNewClusterFirstLeaderIsFirstRanked: a new cluster's first leader is
// the initial voter that ranks first by the hash of the cluster and member
// IDs (it campaigns once the bootstrap is applied, before any election
// timeout), not whichever member's randomized timeout fires first — so
// that a host's groups' leaders spread over the hosts as the hash does.
// Left to election timeouts the expected member would lead 1 time in 3, 4
// and 5 here.
func TestNewClusterFirstLeaderIsFirstRanked(t *testing.T) {
	for _, size := range []int{3, 4, 5} {
		c := cluster.New(t, cluster.Options{Members: size})
		lead := c.WaitLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := lead.Node.Status(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]uint64, size)
		for i := range ids {
			ids[i] = uint64(i + 1)
		}
		if want := raft.VoterOrder(lead.Node.ClusterID(), ids)[0]; lead.ID != want || st.Term != 2 {
			t.Errorf("%d members: member %d leads in term %d, want member %d (first in %v) in term 2 (the first election: a bootstrap starts at term 1)", size, lead.ID, st.Term, want, raft.VoterOrder(lead.Node.ClusterID(), ids))
		}
		c.Close()
	}
}
