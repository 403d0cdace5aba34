package understudy_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// TestHostJoinerInterruptedBeforeTheClusterState: a joiner that stopped
// after recording its identity — and perhaps a term, once the leader's
// first message arrived — but before the cluster's state reached it, joins
// again when started with the same configuration. Before, it restarted
// knowing no peer at all, refused the leader as an unknown sender and
// never caught up.
func TestHostJoinerInterruptedBeforeTheClusterState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("k", "v"))
	require.NoError(t, err)

	// interrupted adds member id and leaves its data dir as a join stopped
	// early would: an identity, and hs if not nil.
	interrupted := func(id, cluster uint64, hs *raftpb.HardState) (net.Listener, string) {
		t.Helper()
		ln := listen(t)
		dir := filepath.Join(tc.dir, fmt.Sprint(id))
		store, err := storage.Open(dir, storage.Options{NoSync: true})
		require.NoError(t, err)
		require.NoError(t, store.SetIdentity(storage.Identity{ClusterID: cluster, MemberID: id}))
		if hs != nil {
			require.NoError(t, store.Save(hs, nil, nil))
		}
		require.NoError(t, store.Close())
		return ln, dir
	}
	read := func(h *understudy.Group) {
		t.Helper()
		v, err := h.Read(ctx, []byte("k"))
		require.NoError(t, err)
		require.Equal(t, "v", string(v))
	}

	// Only the identity: no member yet (a host's bootstrap settings apply),
	// and Start joins again, through a follower.
	ln4, dir4 := interrupted(4, l.ClusterID(), nil)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	has, err := understudy.HasMember(dir4)
	require.NoError(t, err)
	require.False(t, has, "an identity alone is a join that did not finish")
	var follower uint64
	for id, h := range tc.hosts {
		if !h.IsLeader() {
			follower = id
		}
	}
	h4, err := tc.join(ctx, 4, ln4, tc.addrs[follower])
	require.NoError(t, err)
	read(h4)

	// A term recorded too: the data dir holds a member, one that knows no
	// peer. Without Join it cannot find its cluster and says so; with
	// Join it learns its peers again and catches up.
	term := l.Term()
	ln5, dir5 := interrupted(5, l.ClusterID(), &raftpb.HardState{Term: &term})
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 5, PeerAddr: ln5.Addr().String()}))
	has, err = understudy.HasMember(dir5)
	require.NoError(t, err)
	require.True(t, has)
	_, err = understudy.Start(ctx, tc.cfg(5, ln5), kv.New())
	require.ErrorIs(t, err, understudy.ErrNoBootstrap)
	ln5, err = net.Listen("tcp", ln5.Addr().String()) // a failed Start closed it: nothing stays open
	require.NoError(t, err)
	h5, err := tc.join(ctx, 5, ln5, tc.addrs[l.ID()])
	require.NoError(t, err)
	read(h5)

	// An interrupted join into another cluster is still refused as such.
	ln6, _ := interrupted(6, l.ClusterID()+1, nil)
	defer ln6.Close()
	jctx, jcancel := context.WithTimeout(ctx, 5*time.Second)
	defer jcancel()
	_, err = tc.join(jctx, 6, ln6, tc.addrs[l.ID()])
	require.ErrorIs(t, err, understudy.ErrIdentityMismatch)

	// Both restart as ordinary members now, without Join.
	for _, id := range []uint64{4, 5} {
		h, err := tc.restart(ctx, id, nil)
		require.NoError(t, err)
		read(h)
	}
}

// TestHostRestartKnowsRemovedMembers: a restarted member's transport
// refuses the members removed in its log (not only those in its snapshot)
// from its first moment, so a removed member that is still running learns
// it was removed instead of being refused as unknown.
func TestHostRestartKnowsRemovedMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	ln4 := listen(t)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	ln4.Close()
	require.NoError(t, l.RemoveMember(ctx, 4)) // in the log, after the last snapshot
	var other uint64
	for id, h := range tc.hosts {
		if !h.IsLeader() {
			other = id
		}
	}
	require.NoError(t, tc.hosts[other].ReadBarrier(ctx))
	require.NoError(t, tc.hosts[other].Close(ctx))
	delete(tc.hosts, other)

	store, err := storage.Open(filepath.Join(tc.dir, fmt.Sprint(other)), storage.Options{})
	require.NoError(t, err)
	peers, removed, err := raft.StoredPeers(store)
	require.NoError(t, err)
	require.NoError(t, store.Close())
	require.Equal(t, []uint64{4}, removed)
	require.NotContains(t, peers, uint64(4))

	h, err := tc.restart(ctx, other, nil)
	require.NoError(t, err)
	require.NoError(t, h.WaitReady(ctx))
}

// TestHostBootstrapInterruptedAfterItsIdentity: a member of a new cluster
// that stopped after recording its identity but before its first write
// bootstraps again with the same configuration (not "a member with no
// peers"); started with another cluster's members, it is refused.
func TestHostBootstrapInterruptedAfterItsIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	ln := listen(t)
	initial := []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}}
	store, err := storage.Open(dir, storage.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, store.SetIdentity(storage.Identity{ClusterID: understudy.ClusterIDFor(initial, ""), MemberID: 1}))
	require.NoError(t, store.Close())

	cfg := understudy.Config{ID: 1, DataDir: dir, Listener: ln, Raft: fastRaft(), Storage: storage.Options{NoSync: true}}
	cfg.InitialMembers = append(initial, raft.Member{ID: 2, PeerAddr: "127.0.0.1:1"}) // another cluster's list
	_, err = understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, understudy.ErrIdentityMismatch)

	cfg.Listener = listen(t)
	cfg.InitialMembers = initial
	h, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	defer h.Close(ctx)
	_, err = h.Propose(ctx, kv.Put("k", "v"))
	require.NoError(t, err)
}
