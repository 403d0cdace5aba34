package raft_test

import (
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// TestStatusShowsPeerHostLiveness: the leader's Status says, for each
// peer, what its transport knows of the peer's host (a LivenessTransport):
// nothing at first, live while live, and, once not live, when it was last
// live. The reports of the changes are counted; nothing else changes: a
// peer whose host is not live but whose group talks is still recently
// active (readiness and failover read the group's own contact).
func TestStatusShowsPeerHostLiveness(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 20*time.Second)
	lead := c.WaitLeader()
	propose(ctx, t, lead.Node, kv.Put("k", "v"))
	var peers []uint64
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			peers = append(peers, m.ID)
		}
	}
	st, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range peers {
		if pp := st.Progress[id]; pp.HostLive || !pp.HostContact.IsZero() {
			t.Fatalf("peer %d before any host liveness: HostLive %t, HostContact %v; want nothing known", id, pp.HostLive, pp.HostContact)
		}
	}

	for _, id := range peers {
		c.Net.SetHostLive(id, true)
	}
	down := peers[0]
	before := time.Now()
	c.Net.SetHostLive(down, false) // its last moment live: now
	after := time.Now()
	st, err = lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range peers {
		pp := st.Progress[id]
		switch {
		case id == down && (pp.HostLive || pp.HostContact.Before(before) || pp.HostContact.After(after)):
			t.Fatalf("peer %d, host not live: HostLive %t, HostContact %v; want false, its last moment live (%v to %v)", id, pp.HostLive, pp.HostContact, before, after)
		case id != down && (!pp.HostLive || pp.HostContact.Before(after)):
			t.Fatalf("peer %d, host live: HostLive %t, HostContact %v; want true, now", id, pp.HostLive, pp.HostContact)
		}
	}
	if !st.Progress[down].RecentActive {
		t.Fatalf("peer %d whose group talks is not recently active once its host is not live: host liveness must not touch readiness yet", down)
	}
	if want := uint64(len(peers) + 1); st.HostLivenessReports != want {
		t.Fatalf("leader got %d host liveness reports; want %d (each peer's host live, one not live)", st.HostLivenessReports, want)
	}
}
