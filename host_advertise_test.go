package understudy_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/netproxy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// TestHostReachedThroughProxies: every member listens on one address and
// is reached through another (a proxy per member, as behind a NAT, a load
// balancer or a container's port mapping); the cluster knows each by its
// proxy. Before, each member published its listen address at start and
// every other member dialed that from then on, bypassing the address the
// operator configured. Now a member advertises the address it is recorded
// with: cutting one member's proxy makes it unreachable to the others —
// proof that all traffic goes where the records say — and restoring it
// lets it catch up. A member that joins through a proxy, and one restarted,
// keep their proxied address too.
func TestHostReachedThroughProxies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	proxies := map[uint64]*netproxy.Proxy{}
	lns := map[uint64]net.Listener{}
	var initial []raft.Member
	newMember := func(id uint64) {
		lns[id] = listen(t)
		p, err := netproxy.New(lns[id].Addr().String())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		proxies[id] = p
	}
	for id := uint64(1); id <= 3; id++ {
		newMember(id)
		initial = append(initial, raft.Member{ID: id, PeerAddr: proxies[id].Addr()})
	}
	cfg := func(id uint64) understudy.Config {
		return understudy.Config{
			ID: id, DataDir: filepath.Join(dir, fmt.Sprint(id)), Listener: lns[id],
			Metadata: map[string]string{"client_addr": fmt.Sprintf("client-%d", id)},
			Raft:     fastRaft(), Storage: storage.Options{NoSync: true},
		}
	}
	hosts := map[uint64]*understudy.Group{}
	defer func() {
		for _, h := range hosts {
			_ = h.Close(ctx)
		}
	}()
	for id := uint64(1); id <= 3; id++ {
		c := cfg(id)
		c.InitialMembers = initial
		h, err := understudy.Start(ctx, c, kv.New())
		require.NoError(t, err)
		require.Equal(t, proxies[id].Addr(), h.PeerAddr(), "member %d advertises its recorded address", id)
		hosts[id] = h
	}
	leader := func() *understudy.Group {
		for {
			for _, h := range hosts {
				if h.IsLeader() {
					return h
				}
			}
			select {
			case <-ctx.Done():
				t.Fatal("no leader")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// A fourth member joins through member 1's proxy, added with its own.
	newMember(4)
	require.NoError(t, leader().AddLearner(ctx, raft.Member{ID: 4, PeerAddr: proxies[4].Addr()}))
	c4 := cfg(4)
	c4.Join = []string{proxies[1].Addr()}
	h4, err := understudy.Start(ctx, c4, kv.New())
	require.NoError(t, err)
	hosts[4] = h4
	require.Equal(t, proxies[4].Addr(), h4.PeerAddr())

	// Every member has published its metadata (the publish ran), and every
	// record still names the proxy.
	require.Eventually(t, func() bool {
		m, err := leader().Membership(ctx)
		if err != nil || len(m.Members) != 4 {
			return false
		}
		for _, ms := range m.Members {
			if ms.Metadata["client_addr"] != fmt.Sprintf("client-%d", ms.ID) {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	for _, h := range hosts {
		for id, p := range proxies {
			rec, ok := h.Member(id)
			require.True(t, ok)
			require.Equal(t, p.Addr(), rec.PeerAddr, "member %d's record of %d", h.ID(), id)
		}
	}

	// Cut the proxy of a voter that does not lead: nothing reaches it.
	l := leader()
	var cut *understudy.Group
	for id, h := range hosts {
		if h != l && id != 4 {
			cut = h
		}
	}
	proxies[cut.ID()].Cut()
	_, err = l.Propose(ctx, kv.Put("after-cut", "1"))
	require.NoError(t, err)
	idx := l.AppliedIndex()
	time.Sleep(time.Second) // ten election timeouts: time enough to reach it by any other route
	if got := cut.AppliedIndex(); got >= idx {
		// What each member saw, for the failure's message (who led, in
		// which term, and what the cut one's transport read from whom).
		var sb strings.Builder
		for id, h := range hosts {
			st, err := h.Status(ctx)
			fmt.Fprintf(&sb, "member %d: leader %d term %d applied %d (%v)\n", id, st.Leader, st.Term, h.AppliedIndex(), err)
		}
		for _, p := range cut.Transport().Stats().Peers {
			fmt.Fprintf(&sb, "cut member %d's peer %d (%s): received %d messages, sent %d, connected %v\n", cut.ID(), p.ID, p.Addr, p.MessagesReceived, p.MessagesSent, p.Connected)
		}
		t.Fatalf("member %d applied %d, an entry sent after its proxy was cut (the leader %d applied %d): the others reach it by another address\n%s", cut.ID(), got, l.ID(), idx, sb.String())
	}

	// Restored, it catches up.
	require.NoError(t, proxies[cut.ID()].Restore())
	require.Eventually(t, func() bool { return cut.AppliedIndex() >= idx }, 20*time.Second, 10*time.Millisecond)

	// Restarted on a new listener (its proxy now forwards there), it keeps
	// its recorded address.
	id := cut.ID()
	require.NoError(t, cut.Close(ctx))
	delete(hosts, id)
	proxies[id].Close()
	newMember(id)
	c := cfg(id)
	h, err := understudy.Start(ctx, c, kv.New())
	require.NoError(t, err)
	hosts[id] = h
	rec, _ := h.Member(id)
	require.NotEqual(t, proxies[id].Addr(), rec.PeerAddr, "the old proxy's address, until moved")
	require.Equal(t, rec.PeerAddr, h.PeerAddr(), "a restarted member advertises its record")
}

// TestHostNeverAdvertisesAnUnspecifiedAddress: a listen-everywhere address
// is refused as a member's record, with a reason that names what to set.
func TestHostNeverAdvertisesAnUnspecifiedAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	ln := listen(t)
	defer ln.Close()
	_, err := understudy.Start(ctx, understudy.Config{
		ID: 1, DataDir: filepath.Join(dir, "1"), Listener: ln, AdvertisePeer: "0.0.0.0:7001",
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: "127.0.0.1:7001"}},
	}, kv.New())
	require.ErrorIs(t, err, raft.ErrInvalidConfig)
	require.ErrorContains(t, err, "AdvertisePeer")
	require.ErrorContains(t, err, "unspecified")

	_, err = understudy.Start(ctx, understudy.Config{
		ID: 1, DataDir: filepath.Join(dir, "1"), Listener: ln,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: "[::]:7001"}},
	}, kv.New())
	require.ErrorIs(t, err, raft.ErrInvalidConfig)
	require.ErrorContains(t, err, "unspecified")

	// A member's add and update are refused alike.
	tc := newTestCluster(t, 1)
	l := tc.leader(ctx)
	require.ErrorIs(t, l.AddLearner(ctx, raft.Member{ID: 2, PeerAddr: "0.0.0.0:7002"}), confchange.ErrInvalidMember)
	require.ErrorIs(t, l.UpdateMember(ctx, raft.Member{ID: 1, PeerAddr: "[::]:7001"}), confchange.ErrInvalidMember)
}

// TestHostMovedMemberUpdatesItsRecord: a member restarted on another peer
// address (AdvertisePeer) updates its own record through the members it
// can reach — no leader reaches it at its old address, so before it never
// learned a leader, never published, and never rejoined — and then catches
// up at the new address.
func TestHostMovedMemberUpdatesItsRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	var id uint64
	for i, h := range tc.hosts {
		if h != l {
			id = i
		}
	}
	require.NoError(t, tc.hosts[id].Close(ctx))
	delete(tc.hosts, id)
	_, err := l.Propose(ctx, kv.Put("while-away", "1"))
	require.NoError(t, err)

	ln := listen(t) // a new port
	cfg := tc.cfg(id, ln)
	cfg.AdvertisePeer = ln.Addr().String()
	h, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	tc.hosts[id] = h
	tc.addrs[id] = ln.Addr().String()
	require.Eventually(t, func() bool {
		m, err := tc.leader(ctx).Membership(ctx)
		if err != nil {
			return false
		}
		for _, ms := range m.Members {
			if ms.ID == id {
				return ms.PeerAddr == ln.Addr().String()
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the moved member's record")
	require.Eventually(t, func() bool {
		v, err := h.Read(ctx, []byte("while-away"))
		return err == nil && string(v) == "1"
	}, 30*time.Second, 20*time.Millisecond, "the moved member catches up")
	_, err = h.Propose(ctx, kv.Put("from-moved", "1"))
	require.NoError(t, err)
}
