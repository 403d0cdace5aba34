package raft_test

import (
	"context"
	"testing"
	"time"
)

// A follower's and a standby's Membership (asked of the leader) say which
// member relays to each standby, as the leader's Status does.
func TestMembershipSaysEachStandbysRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead, ids := withStandbys(ctx, t, relayOptions(true, 4), 4)
	st := waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	var follower uint64
	for id := uint64(1); id <= 3; id++ {
		if id != lead.ID {
			follower = id
			break
		}
	}
	for _, asker := range []uint64{lead.ID, follower, ids[0]} {
		for {
			m, err := c.Member(asker).Node.Membership(ctx)
			if err != nil {
				t.Fatalf("Membership on %d: %v", asker, err)
			}
			got := make(map[uint64]uint64)
			for _, ms := range m.Members {
				got[ms.ID] = ms.RelayedBy
			}
			same := true
			for _, id := range ids {
				if got[id] == 0 || got[id] != st.Progress[id].RelayedBy {
					same = false
				}
			}
			if same {
				break
			}
			// The leader may have moved a standby since: compare with now.
			st = waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
			if ctx.Err() != nil {
				t.Fatalf("Membership on %d says relays %v, the leader's status %+v", asker, got, st.Progress)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
