package understudy_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// A host's groups must not stall or take each other down: a start, a stop
// or a close ends whatever another group's state machine does, and a
// group's state machine that panics stops that group only. These tests
// hold state machines in Apply with blockingKV; a test fails on a call
// that does not return with waitErr (a hang, not a timing).

// blockingKV is a kv store whose Apply, once armed, blocks until unblock
// (called by the test's cleanup at the latest).
type blockingKV struct {
	*kv.Store
	armed     atomic.Bool
	entered   chan struct{}
	enterOnce sync.Once
	release   chan struct{}
	relOnce   sync.Once
}

func newBlockingKV(t *testing.T) *blockingKV {
	b := &blockingKV{Store: kv.New(), entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(b.unblock)
	return b
}

func (b *blockingKV) unblock() { b.relOnce.Do(func() { close(b.release) }) }

func (b *blockingKV) Apply(cmds []raft.Command, res []raft.Result) {
	if b.armed.Load() {
		b.enterOnce.Do(func() { close(b.entered) })
		<-b.release
	}
	b.Store.Apply(cmds, res)
}

// hangLimit is how long a call may take before a test calls it a hang.
const hangLimit = 30 * time.Second

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(hangLimit):
		t.Fatal(what)
	}
}

func waitErr(t *testing.T, c <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(hangLimit):
		t.Fatal(what)
		return nil
	}
}

// openHost opens a host on dir listening on addr ("": a free port),
// closed by the test's cleanup.
func openHost(t *testing.T, dir, addr string, sc raft.SchedulerConfig) *understudy.Host {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	h, err := understudy.NewHost(understudy.HostConfig{
		DataDir: dir, Listener: ln, AdvertisePeer: ln.Addr().String(),
		Storage: storage.EngineOptions{NoSync: true}, Scheduler: sc,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		_ = h.Close(ctx)
	})
	return h
}

// soloConfig is group g of one member (ID 1) on h.
func soloConfig(h *understudy.Host, g uint64) understudy.GroupConfig {
	return understudy.GroupConfig{
		GroupID: g, ID: 1, Raft: fastRaft(),
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: h.Addr().String()}},
	}
}

// seedGroup leaves group 1 in dir with a few committed commands, and
// returns the address its host listened on.
func seedGroup(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	h := openHost(t, dir, "", raft.SchedulerConfig{})
	g, err := h.StartGroup(ctx, soloConfig(h, 1), kv.New())
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := g.Propose(ctx, kv.Put(k, "1"))
		require.NoError(t, err)
	}
	addr := h.Addr().String()
	require.NoError(t, h.Close(ctx))
	return addr
}

// Item 2: a restart whose replay is stuck in Apply ends with its context,
// and the host runs on.
func TestStartGroupStuckReplayEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	addr := seedGroup(t, dir)
	h := openHost(t, dir, addr, raft.SchedulerConfig{})
	sm := newBlockingKV(t)
	sm.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.StartGroup(ctx, soloConfig(h, 1), sm)
		done <- err
	}()
	waitClosed(t, sm.entered, "the replay never reached Apply")
	cancel()
	err := waitErr(t, done, "StartGroup did not return after its context ended")
	require.ErrorIs(t, err, context.Canceled)

	ctx2, cancel2 := context.WithTimeout(context.Background(), hangLimit)
	defer cancel2()
	g2, err := h.StartGroup(ctx2, soloConfig(h, 2), kv.New())
	require.NoError(t, err)
	_, err = g2.Propose(ctx2, kv.Put("x", "1"))
	require.NoError(t, err)
}

// Item 1: Host.Close racing a StartGroup returns: the start gives up with
// ErrHostClosed, Close returns once its context ends although the replay
// is still stuck in Apply, and every goroutine is gone once Apply returns.
func TestHostCloseRacingStartGroupReturns(t *testing.T) {
	dir := t.TempDir()
	addr := seedGroup(t, dir)
	leaks := goleak.IgnoreCurrent()
	h := openHost(t, dir, addr, raft.SchedulerConfig{})
	sm := newBlockingKV(t)
	sm.armed.Store(true)
	started := make(chan error, 1)
	go func() {
		_, err := h.StartGroup(context.Background(), soloConfig(h, 1), sm)
		started <- err
	}()
	waitClosed(t, sm.entered, "the replay never reached Apply")
	closeCtx, cancelClose := context.WithCancel(context.Background())
	defer cancelClose()
	closed := make(chan error, 1)
	go func() { closed <- h.Close(closeCtx) }()
	err := waitErr(t, started, "StartGroup did not return after Host.Close")
	require.ErrorIs(t, err, understudy.ErrHostClosed)
	cancelClose() // the replay is still in Apply: Close stops waiting for it
	err = waitErr(t, closed, "Host.Close did not return")
	require.ErrorIs(t, err, raft.ErrStopTimeout)
	sm.unblock()
	goleak.VerifyNone(t, leaks, goleak.IgnoreAnyFunction("github.com/understudy-raft/understudy/internal/aiosync.(*aioCtx).reap"))
}

// Item 3: a healthy group stops while another group's stuck state machine
// holds the host's every apply worker.
func TestHealthyGroupStopsWhileApplyWorkersAreHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	h := openHost(t, t.TempDir(), "", raft.SchedulerConfig{ApplyWorkers: 1})
	healthy, err := h.StartGroup(ctx, soloConfig(h, 2), kv.New())
	require.NoError(t, err)
	_, err = healthy.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	sm := newBlockingKV(t)
	stuck, err := h.StartGroup(ctx, soloConfig(h, 1), sm)
	require.NoError(t, err)
	_, err = stuck.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
	sm.armed.Store(true)
	go func() { _, _ = stuck.Propose(ctx, kv.Put("b", "1")) }()
	waitClosed(t, sm.entered, "Apply never called")

	require.NoError(t, healthy.Close(ctx))
	_, running := h.Group(2)
	require.False(t, running)
}

// faultySM is a kv store that panics, once armed, in the call named by
// where: "Lookup", "Snapshot", "Snapshot.Write", "Snapshot.Release" or
// "Restore".
type faultySM struct {
	*kv.Store
	where string
	armed atomic.Bool
}

func (f *faultySM) fault(where string) {
	if f.armed.Load() && f.where == where {
		panic("the state machine failed in " + where)
	}
}

func (f *faultySM) Lookup(q []byte) ([]byte, error) { f.fault("Lookup"); return f.Store.Lookup(q) }

func (f *faultySM) Restore(r io.Reader) error { f.fault("Restore"); return f.Store.Restore(r) }

func (f *faultySM) Snapshot() (raft.Snapshot, error) {
	f.fault("Snapshot")
	s, err := f.Store.Snapshot()
	if err != nil || !f.armed.Load() {
		return s, err
	}
	return faultySnap{Snapshot: s, f: f}, nil
}

type faultySnap struct {
	raft.Snapshot
	f *faultySM
}

func (s faultySnap) Write(w io.Writer) error { s.f.fault("Snapshot.Write"); return s.Snapshot.Write(w) }

func (s faultySnap) Release() { s.Snapshot.Release(); s.f.fault("Snapshot.Release") }

// Item 4: a panic in any call into a group's state machine stops that
// group with an error; the process and the host's other groups run on.
func TestStateMachinePanicStopsItsGroupOnly(t *testing.T) {
	for _, where := range []string{"Lookup", "Snapshot", "Snapshot.Write", "Snapshot.Release", "Restore"} {
		t.Run(where, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
			defer cancel()
			h := openHost(t, t.TempDir(), "", raft.SchedulerConfig{})
			other, err := h.StartGroup(ctx, soloConfig(h, 2), kv.New())
			require.NoError(t, err)
			sm := &faultySM{Store: kv.New(), where: where}
			g, err := h.StartGroup(ctx, soloConfig(h, 1), sm)
			require.NoError(t, err)
			_, err = g.Propose(ctx, kv.Put("k", "v"))
			require.NoError(t, err)

			if where == "Restore" {
				// A restart restores the snapshot: the start fails.
				_, err = g.Snapshot(ctx)
				require.NoError(t, err)
				require.NoError(t, g.Close(ctx))
				sm = &faultySM{Store: kv.New(), where: where}
				sm.armed.Store(true)
				_, err = h.StartGroup(ctx, soloConfig(h, 1), sm)
				require.ErrorContains(t, err, "panicked")
			} else {
				sm.armed.Store(true)
				switch where {
				case "Lookup":
					_, err := g.Read(ctx, []byte("k"))
					require.ErrorIs(t, err, raft.ErrStopped)
					_, err = g.StaleRead([]byte("k"))
					require.ErrorIs(t, err, raft.ErrStopped)
				case "Snapshot", "Snapshot.Write":
					_, err := g.Snapshot(ctx)
					require.Error(t, err)
				default:
					_, _ = g.Snapshot(ctx) // written: Release panics after
				}
				select {
				case <-g.Done():
				case <-ctx.Done():
					t.Fatal("the group did not stop after its state machine panicked")
				}
				var fe *raft.FatalError
				require.ErrorAs(t, g.Err(), &fe)
				require.ErrorContains(t, g.Err(), "panicked in "+where)
			}
			_, err = other.Propose(ctx, kv.Put("after", "1"))
			require.NoError(t, err, "the other group after group 1's panic")
		})
	}
}

// Item 5: a StartGroup refused before its group recorded anything leaves
// nothing in the data dir; the group then starts as if never tried.
func TestRefusedStartGroupLeavesNothingStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	h := openHost(t, t.TempDir(), "", raft.SchedulerConfig{})
	dead := listen(t) // accepts, never answers
	defer dead.Close()
	for _, c := range []struct {
		name string
		cfg  func(*understudy.GroupConfig)
		want error
	}{
		{"InitialMembers without ID", func(c *understudy.GroupConfig) { c.InitialMembers[0].ID = 2 }, raft.ErrInvalidConfig},
		{"no bootstrap", func(c *understudy.GroupConfig) { c.InitialMembers = nil }, understudy.ErrNoBootstrap},
		{"join nobody answers", func(c *understudy.GroupConfig) {
			c.InitialMembers, c.Join, c.JoinTimeout = nil, []string{dead.Addr().String()}, 100*time.Millisecond
		}, context.DeadlineExceeded},
	} {
		cfg := soloConfig(h, 7)
		c.cfg(&cfg)
		_, err := h.StartGroup(ctx, cfg, kv.New())
		require.ErrorIs(t, err, c.want, c.name)
		stored, err := h.StoredGroups()
		require.NoError(t, err)
		require.Empty(t, stored, c.name)
	}
	g, err := h.StartGroup(ctx, soloConfig(h, 7), kv.New())
	require.NoError(t, err)
	_, err = g.Propose(ctx, kv.Put("a", "1"))
	require.NoError(t, err)
}

// Item 5: StoredGroups tells a member, a removed replica and a start that
// never wrote apart.
func TestStoredGroupsTellsTheirState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	dir := t.TempDir()
	e, err := storage.OpenEngine(dir, storage.EngineOptions{NoSync: true})
	require.NoError(t, err)
	removed, err := e.Group(2, storage.GroupOptions{})
	require.NoError(t, err)
	require.NoError(t, removed.SetIdentity(storage.Identity{ClusterID: 9, MemberID: 5}))
	require.NoError(t, removed.MarkRemoved())
	require.NoError(t, removed.Close())
	unstarted, err := e.Group(3, storage.GroupOptions{})
	require.NoError(t, err)
	require.NoError(t, unstarted.SetIdentity(storage.Identity{ClusterID: 9, MemberID: 7}))
	require.NoError(t, unstarted.Close())
	require.NoError(t, e.Close())

	h := openHost(t, dir, "", raft.SchedulerConfig{})
	g, err := h.StartGroup(ctx, soloConfig(h, 1), kv.New())
	require.NoError(t, err)
	_, err = g.Propose(ctx, kv.Put("a", "1")) // committed: written
	require.NoError(t, err)
	stored, err := h.StoredGroups()
	require.NoError(t, err)
	require.Equal(t, []understudy.StoredGroup{
		{ID: 1, MemberID: 1, ClusterID: g.ClusterID(), State: understudy.GroupMember, Running: true},
		{ID: 2, MemberID: 5, ClusterID: 9, State: understudy.GroupRemoved},
		{ID: 3, MemberID: 7, ClusterID: 9, State: understudy.GroupNotStarted},
	}, stored)

	// A start that does not say how to start the unstarted group keeps
	// its identity; a removed one is refused; deleted, it is gone.
	_, err = h.StartGroup(ctx, understudy.GroupConfig{GroupID: 3, ID: 7}, kv.New())
	require.ErrorIs(t, err, understudy.ErrNoBootstrap)
	_, err = h.StartGroup(ctx, understudy.GroupConfig{GroupID: 2, ID: 5}, kv.New())
	require.ErrorIs(t, err, understudy.ErrRemoved)
	require.NoError(t, h.DeleteGroup(2))
	require.NoError(t, g.Close(ctx))
	stored, err = h.StoredGroups()
	require.NoError(t, err)
	require.Len(t, stored, 2)
	require.Equal(t, understudy.GroupMember, stored[0].State)
	require.False(t, stored[0].Running)
	require.Equal(t, understudy.GroupNotStarted, stored[1].State)
}

// Item 6: a configuration that contradicts itself is refused before
// anything is stored, with the reason.
func TestGroupConfigRefusedUpFront(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	h := openHost(t, t.TempDir(), "", raft.SchedulerConfig{})
	self := h.Addr().String()
	for _, c := range []struct {
		name   string
		cfg    func(*understudy.GroupConfig)
		reason string
		want   error
	}{
		{"ID zero", func(c *understudy.GroupConfig) { c.ID = 0 }, "ID must be non-zero", nil},
		{"InitialMembers and Join", func(c *understudy.GroupConfig) { c.Join = []string{"127.0.0.1:1"} }, "both set", nil},
		{"two initial members at one address", func(c *understudy.GroupConfig) {
			c.InitialMembers = append(c.InitialMembers, raft.Member{ID: 2, PeerAddr: self})
		}, "same PeerAddr", nil},
		{"initial member twice", func(c *understudy.GroupConfig) {
			c.InitialMembers = append(c.InitialMembers, raft.Member{ID: 1, PeerAddr: "127.0.0.1:1"})
		}, "duplicate member ID 1", nil},
		{"InitialMembers without ID", func(c *understudy.GroupConfig) { c.ID = 3 }, "must contain this member's ID", nil},
		{"ClusterID contradicts the members", func(c *understudy.GroupConfig) { c.ClusterID = 12345 }, "is not the ID of InitialMembers", nil},
		{"ClusterID of another token", func(c *understudy.GroupConfig) {
			c.ClusterID = understudy.ClusterIDFor(c.InitialMembers, "a")
			c.ClusterToken = "b"
		}, "is not the ID of InitialMembers", nil},
		{"negative JoinTimeout", func(c *understudy.GroupConfig) {
			c.InitialMembers, c.Join, c.JoinTimeout = nil, []string{"127.0.0.1:1"}, -time.Second
		}, "JoinTimeout", nil},
		{"bad Join address", func(c *understudy.GroupConfig) { c.InitialMembers, c.Join = nil, []string{"nowhere"} }, "Join[0]", nil},
		{"negative raft setting", func(c *understudy.GroupConfig) { c.Raft.MaxInflightMsgs = -1 }, "MaxInflightMsgs", nil},
		{"negative KeepSnapshots", func(c *understudy.GroupConfig) { c.Storage.KeepSnapshots = -1 }, "KeepSnapshots", nil},
		{"negative transport queue", func(c *understudy.GroupConfig) { c.Transport.MaxQueueMessages = -1 }, "MaxQueueMessages", transport.ErrInvalidConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := soloConfig(h, 4)
			c.cfg(&cfg)
			_, err := h.StartGroup(ctx, cfg, kv.New())
			want := c.want
			if want == nil {
				want = raft.ErrInvalidConfig
			}
			require.ErrorIs(t, err, want)
			require.ErrorContains(t, err, c.reason)
			stored, err := h.StoredGroups()
			require.NoError(t, err)
			require.Empty(t, stored)
		})
	}
	// A ClusterID that is the members' is taken.
	cfg := soloConfig(h, 4)
	cfg.ClusterToken = "t"
	cfg.ClusterID = understudy.ClusterIDFor(cfg.InitialMembers, "t")
	g, err := h.StartGroup(ctx, cfg, kv.New())
	require.NoError(t, err)
	require.Equal(t, cfg.ClusterID, g.ClusterID())
	_, err = g.Propose(ctx, kv.Put("a", "1")) // committed: written
	require.NoError(t, err)

	// A restart ignores the initial members, as etcd does: a list that no
	// longer names the member is no contradiction then.
	require.NoError(t, g.Close(ctx))
	cfg.InitialMembers = []raft.Member{{ID: 2, PeerAddr: "127.0.0.1:1"}, {ID: 3, PeerAddr: "127.0.0.1:1"}}
	g, err = h.StartGroup(ctx, cfg, kv.New())
	require.NoError(t, err)
	v, err := g.Read(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
}

// Item 6: negative scheduler sizes are refused by NewHost.
func TestNewHostRefusesNegativeSchedulerSizes(t *testing.T) {
	for _, sc := range []raft.SchedulerConfig{{Workers: -1}, {IOWorkers: -1}, {ApplyWorkers: -1}} {
		_, err := understudy.NewHost(understudy.HostConfig{
			DataDir: filepath.Join(t.TempDir(), "d"), ListenPeer: "127.0.0.1:0", Scheduler: sc,
		})
		require.ErrorIs(t, err, raft.ErrInvalidConfig, "%+v", sc)
		require.ErrorContains(t, err, "must not be negative")
	}
}
