package understudy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/internal/wire"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// hostsCluster is n hosts on loopback, each running replicas of groups.
type hostsCluster struct {
	t     *testing.T
	dir   string
	hosts []*understudy.Host
	addrs []string
	// tune, if set, changes the groups' raft.Config (after fastRaft).
	tune func(*raft.Config)
}

func newHosts(t *testing.T, n int) *hostsCluster {
	return newHostsWith(t, n, raft.SchedulerConfig{})
}

// newHostsWith is newHosts with the hosts' scheduler bounds.
func newHostsWith(t *testing.T, n int, sc raft.SchedulerConfig) *hostsCluster {
	return newHostsOn(t, n, sc, "")
}

// newHostsOn is newHostsWith on a storage backend ("": the default).
func newHostsOn(t *testing.T, n int, sc raft.SchedulerConfig, backend storage.Backend) *hostsCluster {
	t.Helper()
	hc := &hostsCluster{t: t, dir: t.TempDir()}
	for i := range n {
		ln := listen(t)
		h, err := understudy.NewHost(understudy.HostConfig{
			DataDir: filepath.Join(hc.dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
			Storage: storage.EngineOptions{NoSync: true, Backend: backend}, Scheduler: sc,
		})
		require.NoError(t, err)
		hc.hosts = append(hc.hosts, h)
		hc.addrs = append(hc.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, h := range hc.hosts {
			_ = h.Close(ctx)
		}
	})
	return hc
}

// replicaID is host i's replica ID in group g: IDs differ between groups,
// as they may.
func replicaID(g uint64, i int) uint64 { return 100*g + uint64(i) + 1 }

func (hc *hostsCluster) groupConfig(g uint64, i int) understudy.GroupConfig {
	var initial []raft.Member
	for j, a := range hc.addrs {
		initial = append(initial, raft.Member{ID: replicaID(g, j), PeerAddr: a})
	}
	rc := fastRaft()
	if hc.tune != nil {
		hc.tune(&rc)
	}
	return understudy.GroupConfig{
		GroupID: g, ID: replicaID(g, i), InitialMembers: initial, Raft: rc,
		Storage: storage.GroupOptions{TailCacheBytes: 256 << 10},
	}
}

// start starts group g on every host with state machines from sm.
func (hc *hostsCluster) start(ctx context.Context, g uint64, sm func() raft.StateMachine) []*understudy.Group {
	hc.t.Helper()
	gs := make([]*understudy.Group, len(hc.hosts))
	for i, h := range hc.hosts {
		grp, err := h.StartGroup(ctx, hc.groupConfig(g, i), sm())
		require.NoError(hc.t, err, "group %d on host %d", g, i)
		gs[i] = grp
	}
	return gs
}

// ownRecordsPublished reports whether each replica of gs sees its own member
// record with its incarnation: the host proposes it once after start, a
// write (and a wake) a test of counts or quiescence must not catch.
func ownRecordsPublished(gs ...*understudy.Group) bool {
	for _, g := range gs {
		if m, ok := g.Member(g.ID()); !ok || m.Incarnation != g.Incarnation() {
			return false
		}
	}
	return true
}

func leaderOf(ctx context.Context, t *testing.T, gs []*understudy.Group) *understudy.Group {
	t.Helper()
	for {
		for _, g := range gs {
			if g != nil && g.IsLeader() {
				return g
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader in group %d", gs[0].GroupID())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// put writes k=v through the group's leader, again after a leadership
// change (a put of the same value is idempotent: an unknown outcome is
// retried).
func put(ctx context.Context, t *testing.T, gs []*understudy.Group, k, v string) error {
	for {
		_, err := leaderOf(ctx, t, gs).Propose(ctx, kv.Put(k, v))
		if !errors.Is(err, raft.ErrLeaderChanged) && !errors.Is(err, raft.ErrProposalDropped) {
			return err
		}
	}
}

// panicky is a kv store whose Apply panics on the command "boom".
type panicky struct{ *kv.Store }

func (p panicky) Apply(cmds []raft.Command, res []raft.Result) {
	for _, c := range cmds {
		if string(c.Data) == string(kv.Put("boom", "1")) {
			panic("the state machine failed")
		}
	}
	p.Store.Apply(cmds, res)
}

func (p panicky) Restore(r io.Reader) error { return p.Store.Restore(r) }

// TestHostRunsManyGroups: three hosts, each one listener and one storage
// engine, run 20 groups together. Every group elects a leader and serves
// writes and linearizable reads on every host; a hello for a group a host
// does not run is refused and creates nothing; a group whose state machine
// panics stops on its own while the others keep serving; a group stopped
// and started again on a running host catches up. It runs on each storage
// backend.
func TestHostRunsManyGroups(t *testing.T) {
	for _, b := range []storage.Backend{storage.BackendBolt, storage.BackendPebble} {
		t.Run(string(b), func(t *testing.T) { testHostRunsManyGroups(t, b) })
	}
}

func testHostRunsManyGroups(t *testing.T, backend storage.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	hc := newHostsOn(t, 3, raft.SchedulerConfig{}, backend)
	require.Equal(t, backend, hc.hosts[0].Engine().Backend())
	const groups = 20
	all := map[uint64][]*understudy.Group{}
	for g := uint64(1); g <= groups; g++ {
		sm := func() raft.StateMachine { return kv.New() }
		if g == 3 {
			sm = func() raft.StateMachine { return panicky{kv.New()} }
		}
		all[g] = hc.start(ctx, g, sm)
	}
	require.Equal(t, groups, len(hc.hosts[0].Groups()))

	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := uint64(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 20 {
				if err := put(ctx, t, all[g], fmt.Sprintf("k%d", k), fmt.Sprintf("g%d-%d", g, k)); err != nil {
					errs <- fmt.Errorf("group %d: %w", g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for g := uint64(1); g <= groups; g++ {
		for i, r := range all[g] {
			v, err := r.Read(ctx, []byte("k19"))
			require.NoError(t, err, "group %d host %d", g, i)
			require.Equal(t, fmt.Sprintf("g%d-19", g), string(v))
		}
	}
	// Whether a commit carried several groups' writes here depends on
	// timing (with NoSync a Pebble commit takes microseconds): the storage
	// package's group-commit tests assert it with a held commit.
	t.Logf("host 0's engine: %s", hc.hosts[0].Engine().Metrics())

	// A stray hello for a group no host runs: refused, nothing created.
	refused := hc.hosts[1].Mux().Stats().Refused["group_mismatch"]
	c, err := net.Dial("tcp", hc.addrs[1])
	require.NoError(t, err)
	_, _ = c.Write(strayHello(999))
	_, _ = io.ReadAll(c)
	_ = c.Close()
	require.Greater(t, hc.hosts[1].Mux().Stats().Refused["group_mismatch"], refused)
	require.Len(t, hc.hosts[1].Groups(), groups)
	stored, err := hc.hosts[1].StoredGroups()
	require.NoError(t, err)
	require.Len(t, stored, groups)
	for _, sg := range stored {
		require.Equal(t, understudy.GroupMember, sg.State, "group %d", sg.ID)
		require.True(t, sg.Running, "group %d", sg.ID)
	}

	// Group 3's state machine panics: group 3 stops, the others serve.
	// Every replica that learns the entry committed stops applying it: the
	// leader, and a quorum in all. The last may never learn it: the leader
	// stops (and leaves its links) as it applies the entry, and the one
	// follower that also applied it was the quorum, so the last holds it
	// uncommitted with no quorum left to commit it. Its commit index
	// travels in the leader's last message, in a race with the leader's
	// stop (1 run in 4 once the other groups quiesce, their host links
	// idle).
	_, _ = leaderOf(ctx, t, all[3]).Propose(ctx, kv.Put("boom", "1"))
	require.Eventually(t, func() bool {
		stopped := 0
		for _, r := range all[3] {
			select {
			case <-r.Done():
				stopped++
			default:
			}
		}
		return stopped >= 2
	}, 30*time.Second, 10*time.Millisecond, "group 3 did not stop on a quorum after its state machine panicked")
	for i, r := range all[3] {
		select {
		case <-r.Done():
			require.Error(t, r.Err(), "group 3 on host %d stopped", i)
		default:
		}
	}
	for g := uint64(1); g <= groups; g++ {
		if g == 3 {
			continue
		}
		require.NoError(t, put(ctx, t, all[g], "after", "1"), "group %d after group 3 stopped", g)
	}

	// Group 5 stops on host 2 and starts again there: it catches up.
	require.NoError(t, all[5][2].Close(ctx))
	require.NotContains(t, hc.hosts[2].Groups(), uint64(5))
	require.NoError(t, put(ctx, t, all[5][:2], "while-stopped", "1"))
	again, err := hc.hosts[2].StartGroup(ctx, hc.groupConfig(5, 2), kv.New())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := again.Read(ctx, []byte("while-stopped"))
		return err == nil && string(v) == "1"
	}, 20*time.Second, 10*time.Millisecond)
	_, err = hc.hosts[2].StartGroup(ctx, hc.groupConfig(5, 2), kv.New())
	require.ErrorIs(t, err, understudy.ErrGroupRunning)
}

// TestHostOpensASingleGroupDataDir: a data dir written by Start (one group,
// the layout of the previous release) is opened by a Host, whose group 1
// is that member.
func TestHostOpensASingleGroupDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := newTestCluster(t, 1)
	l := tc.leader(ctx)
	_, err := l.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	require.NoError(t, l.Close(ctx))
	delete(tc.hosts, 1)

	ln, err := net.Listen("tcp", tc.addrs[1])
	require.NoError(t, err)
	h, err := understudy.NewHost(understudy.HostConfig{DataDir: filepath.Join(tc.dir, "1"), Listener: ln, Storage: storage.EngineOptions{NoSync: true}})
	require.NoError(t, err)
	defer h.Close(ctx)
	stored, err := h.StoredGroups()
	require.NoError(t, err)
	require.Equal(t, []understudy.StoredGroup{{ID: 1, MemberID: 1, ClusterID: stored[0].ClusterID, State: understudy.GroupMember}}, stored)
	require.NotZero(t, stored[0].ClusterID)
	g, err := h.StartGroup(ctx, understudy.GroupConfig{ID: 1, Raft: fastRaft()}, kv.New())
	require.NoError(t, err)
	v, err := g.Read(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	require.Equal(t, tc.addrs[1], g.PeerAddr())
}

// strayHello is a raft stream's hello for group g.
func strayHello(g uint64) []byte {
	h := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Kind: wire.KindStream, Group: g, Cluster: 1, From: 1, To: 2}
	return wire.AppendFrame(nil, wire.TypeHello, g, wire.AppendHello(nil, h))
}
