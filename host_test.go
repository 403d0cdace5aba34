package understudy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// testCluster starts hosts on loopback with fast timers.
type testCluster struct {
	t     *testing.T
	dir   string
	hosts map[uint64]*understudy.Group
	addrs map[uint64]string
}

func fastRaft() raft.Config {
	return raft.Config{
		TickInterval:  10 * time.Millisecond,
		ElectionTicks: 10,
		Membership:    confchange.Settings{Stabilization: 100 * time.Millisecond},
	}
}

func (tc *testCluster) cfg(id uint64, ln net.Listener) understudy.Config {
	return understudy.Config{
		ID:       id,
		DataDir:  filepath.Join(tc.dir, fmt.Sprint(id)),
		Listener: ln,
		Metadata: map[string]string{"client_addr": fmt.Sprintf("client-%d", id)},
		Raft:     fastRaft(),
		Storage:  storage.Options{NoSync: true},
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// newTestCluster bootstraps n voters.
func newTestCluster(t *testing.T, n int, edit ...func(*understudy.Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, dir: t.TempDir(), hosts: map[uint64]*understudy.Group{}, addrs: map[uint64]string{}}
	lns := map[uint64]net.Listener{}
	var initial []raft.Member
	for id := uint64(1); id <= uint64(n); id++ {
		lns[id] = listen(t)
		tc.addrs[id] = lns[id].Addr().String()
		initial = append(initial, raft.Member{ID: id, PeerAddr: tc.addrs[id]})
	}
	for id := uint64(1); id <= uint64(n); id++ {
		cfg := tc.cfg(id, lns[id])
		cfg.InitialMembers = initial
		for _, e := range edit {
			e(&cfg)
		}
		h, err := understudy.Start(context.Background(), cfg, kv.New())
		require.NoError(t, err)
		tc.hosts[id] = h
	}
	t.Cleanup(tc.closeAll)
	return tc
}

func (tc *testCluster) closeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range tc.hosts {
		_ = h.Close(ctx)
	}
}

func (tc *testCluster) leader(ctx context.Context) *understudy.Group {
	tc.t.Helper()
	for {
		for _, h := range tc.hosts {
			if h.IsLeader() {
				return h
			}
		}
		select {
		case <-ctx.Done():
			tc.t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// restart closes host id and starts it again from its data dir with cfg
// changed by edit.
func (tc *testCluster) restart(ctx context.Context, id uint64, edit func(*understudy.Config)) (*understudy.Group, error) {
	if h := tc.hosts[id]; h != nil {
		require.NoError(tc.t, h.Close(ctx))
		delete(tc.hosts, id)
	}
	ln, err := net.Listen("tcp", tc.addrs[id])
	require.NoError(tc.t, err)
	cfg := tc.cfg(id, ln)
	if edit != nil {
		edit(&cfg)
	}
	h, err := understudy.Start(ctx, cfg, kv.New())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	tc.hosts[id] = h
	return h, nil
}

// join starts member id with empty storage, joining through addrs.
func (tc *testCluster) join(ctx context.Context, id uint64, ln net.Listener, addrs ...string) (*understudy.Group, error) {
	cfg := tc.cfg(id, ln)
	cfg.Join = addrs
	h, err := understudy.Start(ctx, cfg, kv.New())
	if err != nil {
		return nil, err
	}
	tc.hosts[id] = h
	tc.addrs[id] = ln.Addr().String()
	return h, nil
}

func TestHostBootstrapsWritesAndRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	for _, h := range tc.hosts {
		require.NoError(t, h.WaitReady(ctx))
		v, err := h.Read(ctx, []byte("a"))
		require.NoError(t, err)
		require.Equal(t, "1", string(v))
	}
	// Every member of a new cluster derived the same cluster ID.
	require.Equal(t, tc.hosts[1].ClusterID(), tc.hosts[2].ClusterID())
	require.NotZero(t, tc.hosts[1].ClusterID())

	// A restart with no InitialMembers resumes from the data dir, and
	// HasMember says so.
	ok, err := understudy.HasMember(filepath.Join(tc.dir, "4"))
	require.NoError(t, err)
	require.False(t, ok)
	h2, err := tc.restart(ctx, 2, nil)
	require.NoError(t, err)
	v, err := h2.Read(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))

	// Every member published its metadata through the log.
	require.Eventually(t, func() bool {
		m, err := tc.leader(ctx).Membership(ctx)
		if err != nil {
			return false
		}
		for _, ms := range m.Members {
			if ms.Metadata["client_addr"] != fmt.Sprintf("client-%d", ms.ID) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

// TestHostJoinByAddress: a new member given only one member's address —
// a follower's, then a learner's — learns the cluster and catches up.
func TestHostJoinByAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("k", "v"))
	require.NoError(t, err)
	var follower uint64
	for id := range tc.hosts {
		if id != l.ID() {
			follower = id
		}
	}

	ln4 := listen(t)
	require.NoError(t, tc.hosts[follower].AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	h4, err := tc.join(ctx, 4, ln4, tc.addrs[follower])
	require.NoError(t, err)
	require.Equal(t, l.ClusterID(), h4.ClusterID())
	v, err := h4.Read(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))

	// Member 5 joins through the learner's address only.
	ln5 := listen(t)
	require.NoError(t, h4.AddLearner(ctx, raft.Member{ID: 5, PeerAddr: ln5.Addr().String()}))
	h5, err := tc.join(ctx, 5, ln5, tc.addrs[4])
	require.NoError(t, err)
	v, err = h5.Read(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	st, err := h5.Status(ctx)
	require.NoError(t, err)
	require.Contains(t, append(st.Learners, st.Voters...), uint64(5))

	// A restarted joiner needs no Join any more.
	h4, err = tc.restart(ctx, 4, func(c *understudy.Config) { c.Join = []string{"127.0.0.1:1"} })
	require.NoError(t, err)
	_, err = h4.Read(ctx, []byte("k"))
	require.NoError(t, err)
}

// TestHostJoinRefused: a member that was not added, or that expects another
// cluster, is refused with a typed error, and nothing is left open.
func TestHostJoinRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 1)
	tc.leader(ctx)

	jctx, jcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer jcancel()
	_, err := tc.join(jctx, 7, listen(t), tc.addrs[1])
	require.ErrorIs(t, err, raft.ErrNotMember)

	ln8 := listen(t)
	require.NoError(t, tc.hosts[1].AddLearner(ctx, raft.Member{ID: 8, PeerAddr: ln8.Addr().String()}))
	cfg := tc.cfg(8, ln8)
	cfg.Join = []string{tc.addrs[1]}
	cfg.ClusterID = tc.hosts[1].ClusterID() + 1
	_, err = understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, raft.ErrClusterMismatch)
	// The refused start recorded nothing: the right cluster is accepted.
	cfg.ClusterID = 0
	ln8b, err := net.Listen("tcp", ln8.Addr().String())
	require.NoError(t, err)
	cfg.Listener = ln8b
	h8, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	tc.hosts[8] = h8
	require.NoError(t, h8.WaitReady(ctx))

	// A member added here but started as a cluster of its own: the
	// leader's view says why it cannot reach it.
	ln10 := listen(t)
	require.NoError(t, tc.hosts[1].AddLearner(ctx, raft.Member{ID: 10, PeerAddr: ln10.Addr().String()}))
	cfg = tc.cfg(10, ln10)
	cfg.InitialMembers = []raft.Member{{ID: 10, PeerAddr: ln10.Addr().String()}}
	h10, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	tc.hosts[10] = h10
	require.Eventually(t, func() bool {
		m, err := tc.hosts[1].Membership(ctx)
		if err != nil {
			return false
		}
		for _, ms := range m.Members {
			if ms.ID == 10 {
				return ms.Refused == "cluster_mismatch"
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)

	// No bootstrap information at all.
	cfg = tc.cfg(9, listen(t))
	_, err = understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, understudy.ErrNoBootstrap)
}

// TestHostSwappedDataDirsRefused: a data dir started under another member
// ID, or for another cluster, is refused naming both.
func TestHostSwappedDataDirsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	tc.leader(ctx)
	for _, id := range []uint64{2, 3} {
		require.NoError(t, tc.hosts[id].Close(ctx))
		delete(tc.hosts, id)
	}
	ln := listen(t)
	cfg := tc.cfg(3, ln)
	cfg.DataDir = filepath.Join(tc.dir, "2") // member 2's data dir, started as 3
	_, err := understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, understudy.ErrIdentityMismatch)
	var ie *storage.IdentityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, uint64(2), ie.Stored.MemberID)
	require.Equal(t, uint64(3), ie.Requested.MemberID)

	cfg = tc.cfg(2, ln)
	cfg.ClusterID = 42
	_, err = understudy.Start(ctx, cfg, kv.New())
	require.ErrorIs(t, err, understudy.ErrIdentityMismatch)

	// With the right ID it resumes.
	h2, err := tc.restart(ctx, 2, nil)
	require.NoError(t, err)
	require.NoError(t, h2.WaitReady(ctx))
}

// TestHostStopInQuickSuccession: stopping the members one after the other
// never hands leadership to a member that has already stopped (that made
// each Stop wait two election timeouts, with proposals refused): every
// hand-off the members log names a member still running then.
func TestHostStopInQuickSuccession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		stopped  = map[uint64]bool{}
		handoffs []string
		bad      []string
	)
	rec := &recordHandler{record: func(r slog.Record) {
		if r.Message != "stopping: handing leadership over" {
			return
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "to" {
				mu.Lock()
				handoffs = append(handoffs, a.Value.String())
				if stopped[a.Value.Uint64()] {
					bad = append(bad, a.Value.String())
				}
				mu.Unlock()
			}
			return true
		})
	}}
	tc := newTestCluster(t, 3, func(c *understudy.Config) { c.Logger = slog.New(rec) })
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	for _, id := range []uint64{l.ID(), l.ID()%3 + 1, (l.ID()+1)%3 + 1} {
		require.NoError(t, tc.hosts[id].Close(ctx))
		mu.Lock()
		stopped[id] = true
		mu.Unlock()
		delete(tc.hosts, id)
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, handoffs, "the first leader handed leadership over")
	require.Empty(t, bad, "leadership handed to a member that had stopped (hand-offs %v)", handoffs)
}

// recordHandler passes every log record to record.
type recordHandler struct{ record func(slog.Record) }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.record(r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestHostForceNewCluster: after the permanent loss of a quorum, the
// surviving data dir becomes a one-member cluster that keeps every
// acknowledged write and serves new ones.
func TestHostForceNewCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	acked := map[string]string{}
	for i := range 200 {
		k, v := fmt.Sprintf("k%d", i%50), fmt.Sprint(i)
		_, err := l.Propose(ctx, kv.Put(k, v))
		require.NoError(t, err)
		acked[k] = v
	}
	survivor := l.ID()%3 + 1
	// The operator recovers from the most up-to-date surviving member (a
	// follower may trail the quorum: what it never received is lost).
	require.Eventually(t, func() bool {
		return tc.hosts[survivor].AppliedIndex() >= l.AppliedIndex()
	}, 10*time.Second, 5*time.Millisecond)
	// Every member goes down; two never come back.
	for id, h := range tc.hosts {
		require.NoError(t, h.Close(ctx))
		delete(tc.hosts, id)
	}
	_, err := understudy.HasMember(filepath.Join(tc.dir, fmt.Sprint(survivor)))
	require.NoError(t, err)
	h, err := tc.restart(ctx, survivor, func(c *understudy.Config) { c.ForceNewCluster = true })
	require.NoError(t, err)
	for k, v := range acked {
		got, err := h.Read(ctx, []byte(k))
		require.NoError(t, err)
		require.Equal(t, v, string(got), "key %s", k)
	}
	_, err = h.Propose(ctx, kv.Put("after", "yes"))
	require.NoError(t, err)
	st, err := h.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint64{survivor}, st.Voters)
	require.Empty(t, st.Learners)

	// A removed member's data dir refuses to start, and the survivor
	// restarts normally (ForceNewCluster is not needed again).
	h, err = tc.restart(ctx, survivor, nil)
	require.NoError(t, err)
	got, err := h.Read(ctx, []byte("after"))
	require.NoError(t, err)
	require.Equal(t, "yes", string(got))
	lost := survivor%3 + 1
	_, err = tc.restart(ctx, lost, nil)
	if err == nil {
		// It started (it has not learned of its removal yet): the survivor
		// refuses it, and it stops as removed.
		select {
		case <-tc.hosts[lost].Done():
		case <-ctx.Done():
			t.Fatal("a member removed by ForceNewCluster kept running")
		}
		require.True(t, errors.Is(tc.hosts[lost].Err(), raft.ErrRemoved), "%v", tc.hosts[lost].Err())
	}
}

// TestHostBackupRestoredIntoNewMember: a backup taken while the cluster
// runs becomes a new one-member cluster with every write acknowledged
// before the backup, which then grows as usual.
func TestHostBackupRestoredIntoNewMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	for i := range 100 {
		_, err := l.Propose(ctx, kv.Put(fmt.Sprintf("k%d", i), fmt.Sprint(i)))
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	var follower *understudy.Group
	for _, h := range tc.hosts {
		if h != l {
			follower = h
		}
	}
	require.NoError(t, follower.ReadBarrier(ctx))
	idx, err := follower.Backup(ctx, &buf)
	require.NoError(t, err)
	require.NotZero(t, idx)
	backup := buf.Bytes()

	// A corrupt backup installs nothing.
	bad := bytes.Clone(backup)
	bad[len(bad)/2] ^= 0xff
	ln := listen(t)
	dir := filepath.Join(tc.dir, "10")
	err = understudy.RestoreBackup(bytes.NewReader(bad), dir, raft.Member{ID: 10, PeerAddr: ln.Addr().String()})
	require.ErrorIs(t, err, raft.ErrCorruptBackup)
	has, err := understudy.HasMember(dir)
	require.NoError(t, err)
	require.False(t, has)

	require.NoError(t, understudy.RestoreBackup(bytes.NewReader(backup), dir, raft.Member{ID: 10, PeerAddr: ln.Addr().String()}))
	has, err = understudy.HasMember(dir)
	require.NoError(t, err)
	require.True(t, has)
	cfg := tc.cfg(10, ln)
	h, err := understudy.Start(ctx, cfg, kv.New())
	require.NoError(t, err)
	tc.hosts[10] = h
	require.NotEqual(t, l.ClusterID(), h.ClusterID())
	for i := range 100 {
		v, err := h.Read(ctx, []byte(fmt.Sprintf("k%d", i)))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(v))
	}
	_, err = h.Propose(ctx, kv.Put("new", "cluster"))
	require.NoError(t, err)
	st, err := h.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint64{10}, st.Voters)

	// It grows: a member joins it by address.
	ln11 := listen(t)
	require.NoError(t, h.AddLearner(ctx, raft.Member{ID: 11, PeerAddr: ln11.Addr().String()}))
	h11, err := tc.join(ctx, 11, ln11, h.PeerAddr())
	require.NoError(t, err)
	v, err := h11.Read(ctx, []byte("new"))
	require.NoError(t, err)
	require.Equal(t, "cluster", string(v))
}

// TestStoredPeersBeforeReplay: a stopped member's storage tells its peers —
// from the snapshot and from the log after it, removals included — so a
// restarted member's transport knows them before the log is replayed.
func TestStoredPeersBeforeReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	l := tc.leader(ctx)
	ln4, ln5 := listen(t), listen(t)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln4.Addr().String()}))
	_, err := tc.hosts[2].Snapshot(ctx) // 4 is in member 2's snapshot
	require.NoError(t, err)
	require.NoError(t, l.AddLearner(ctx, raft.Member{ID: 5, PeerAddr: ln5.Addr().String()})) // 5 only in its log
	require.NoError(t, l.RemoveMember(ctx, 4))                                               // removed in the log
	require.NoError(t, tc.hosts[2].ReadBarrier(ctx))
	require.NoError(t, tc.hosts[2].Close(ctx))
	delete(tc.hosts, 2)
	ln4.Close()
	ln5.Close()

	store, err := storage.Open(filepath.Join(tc.dir, "2"), storage.Options{})
	require.NoError(t, err)
	peers, removed, err := raft.StoredPeers(store)
	require.NoError(t, err)
	require.NoError(t, store.Close())
	require.Equal(t, map[uint64]string{1: tc.addrs[1], 2: tc.addrs[2], 3: tc.addrs[3], 5: ln5.Addr().String()}, peers)
	require.Equal(t, []uint64{4}, removed, "a removal in the log is a removal too")
}

// TestHostRestartServesReplayedState: Start on a restarted member returns
// once the log is replayed up to the commit index the member persisted, so
// that its stale reads do not go back to the state the replay starts from.
func TestHostRestartServesReplayedState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 1)
	h := tc.hosts[1]
	for i := range 500 {
		_, err := h.Propose(ctx, kv.Put(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
		require.NoError(t, err)
	}
	require.NoError(t, h.Close(ctx))
	delete(tc.hosts, 1)
	h, err := tc.restart(ctx, 1, nil)
	require.NoError(t, err)
	v, err := h.StaleRead([]byte("k9"))
	require.NoError(t, err)
	require.Equal(t, "499", string(v), "a stale read right after Start")
}
