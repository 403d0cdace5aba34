package raft

import "testing"

// TestVoterOrderSpreadsFirstPlaces: over many clusters (consecutive
// cluster IDs, the least random case) each of three or five members is
// first about as often as the others, so that the leaders a new cluster's
// first election and a dead leader's replacement pick spread over hosts.
// FNV over the two IDs put member 1 first in half of all clusters.
func TestVoterOrderSpreadsFirstPlaces(t *testing.T) {
	for _, members := range []uint64{3, 5} {
		ids := make([]uint64, members)
		for i := range ids {
			ids[i] = uint64(i + 1)
		}
		const clusters = 6000
		first := make(map[uint64]int)
		for c := uint64(1); c <= clusters; c++ {
			first[voterOrder(c, ids)[0]]++
		}
		fair := clusters / int(members)
		for _, id := range ids {
			if n := first[id]; n < fair*8/10 || n > fair*12/10 {
				t.Errorf("%d members: member %d first in %d of %d clusters, want about %d", members, id, n, clusters, fair)
			}
		}
	}
}
