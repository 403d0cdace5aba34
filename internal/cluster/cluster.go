// Package cluster is the in-process test cluster: N members in one process,
// each with real durable storage in a temporary directory, a test key-value
// state machine, and a fault-injecting network (partitions, one-way blocks,
// drops, delays, duplicates) — plus crash and restart from the same storage.
// Every run logs its random seed; set CLUSTER_SEED to replay one.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// Options configures a Cluster. Zero values are defaults.
type Options struct {
	// Members is the number of initial voters (IDs 1..Members). Default 3.
	Members int
	// Seed seeds the network's random decisions. 0: CLUSTER_SEED from the
	// environment, else the clock. The seed is logged.
	Seed int64
	// TickInterval is short in tests. Default 10ms.
	TickInterval time.Duration
	// SnapshotCount and SnapshotCatchUpEntries as in raft.Config (defaults
	// are raft's).
	SnapshotCount          uint64
	SnapshotCatchUpEntries uint64
	// SnapshotLogRatio as in raft.Config (0: raft's default).
	SnapshotLogRatio float64
	// Sync turns fsync on (off by default in tests: crash tests stop nodes,
	// they do not cut power).
	Sync bool
	// Backend is the members' storage backend (storage.Options.Backend;
	// empty: the storage's default for a new data dir, bbolt).
	Backend storage.Backend
	// WrapStorage, if set, wraps each member's storage (e.g. to inject faults).
	WrapStorage func(id uint64, s *storage.Store) raft.Storage
	// WrapStateMachine, if set, wraps each member's state machine (e.g. to
	// stall its applies). Member.SM stays the kv.Store underneath.
	WrapStateMachine func(id uint64, sm *kv.Store) raft.StateMachine
	// Logger for the nodes. Default: discard (set CLUSTER_LOG=1 for stderr).
	Logger *slog.Logger
	// RequestTimeout as in raft.Config (default raft's).
	RequestTimeout time.Duration
	// MaxClientSessions as in raft.Config (default raft's).
	MaxClientSessions int
	// Membership, Policy and ManualMembership as in raft.Config.
	Membership       confchange.Settings
	Policy           confchange.Policy
	ManualMembership bool
	// Quiesce as in raft.Config.
	Quiesce bool
	// Relay, RelayFanout and RelayAnswers as in raft.Config.
	Relay        bool
	RelayFanout  int
	RelayAnswers bool
	// InlineApply as in raft.Config.
	InlineApply bool
	// MaxSizePerMsg and MaxCommandSize as in raft.Config (default raft's).
	MaxSizePerMsg  uint64
	MaxCommandSize int
}

// Cluster is a set of members over one Network.
type Cluster struct {
	t    testing.TB
	opts Options
	Net  *Network
	Seed int64
	dir  string

	mu      sync.Mutex
	members map[uint64]*Member
	initial []raft.Member
	joined  map[uint64]bool
}

// Member is one member of a Cluster. Node and SM change on Restart.
type Member struct {
	ID    uint64
	Dir   string
	Node  *raft.Node
	SM    *kv.Store
	Store *storage.Store
	// Storage is what the node uses: Store, or its wrapper.
	Storage raft.Storage
	running atomic.Bool
}

// IsRunning reports whether the member is running (not stopped or crashed).
func (m *Member) IsRunning() bool { return m.running.Load() }

// New starts a cluster of opts.Members voters and registers its cleanup
// (stop every member, close the network) with t.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 10 * time.Millisecond
	}
	if opts.Seed == 0 {
		if s, err := strconv.ParseInt(os.Getenv("CLUSTER_SEED"), 10, 64); err == nil {
			opts.Seed = s
		} else {
			opts.Seed = time.Now().UnixNano()
		}
	}
	if opts.Logger == nil {
		if os.Getenv("CLUSTER_LOG") != "" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
	}
	t.Logf("cluster seed %d (replay with CLUSTER_SEED=%d)", opts.Seed, opts.Seed)
	c := &Cluster{
		t:       t,
		opts:    opts,
		Net:     NewNetwork(opts.Seed),
		Seed:    opts.Seed,
		dir:     t.TempDir(),
		members: make(map[uint64]*Member),
		joined:  make(map[uint64]bool),
	}
	for i := 1; i <= opts.Members; i++ {
		c.initial = append(c.initial, c.Record(uint64(i)))
	}
	for _, m := range c.initial {
		c.start(m.ID, c.initial)
	}
	t.Cleanup(c.Close)
	return c
}

// Config returns the raft.Config the cluster gives member id.
func (c *Cluster) Config(id uint64, initial []raft.Member) raft.Config {
	return raft.Config{
		ID:                     id,
		InitialMembers:         initial,
		TickInterval:           c.opts.TickInterval,
		SnapshotCount:          c.opts.SnapshotCount,
		SnapshotCatchUpEntries: c.opts.SnapshotCatchUpEntries,
		SnapshotLogRatio:       c.opts.SnapshotLogRatio,
		RequestTimeout:         c.opts.RequestTimeout,
		MaxClientSessions:      c.opts.MaxClientSessions,
		Logger:                 c.opts.Logger,
		Membership:             c.opts.Membership,
		Policy:                 c.opts.Policy,
		ManualMembership:       c.opts.ManualMembership,
		Quiesce:                c.opts.Quiesce,
		Relay:                  c.opts.Relay,
		RelayFanout:            c.opts.RelayFanout,
		RelayAnswers:           c.opts.RelayAnswers,
		InlineApply:            c.opts.InlineApply,
		MaxSizePerMsg:          c.opts.MaxSizePerMsg,
		MaxCommandSize:         c.opts.MaxCommandSize,
	}
}

// Record returns the member record the cluster uses for id. The network
// routes by ID; the address is only recorded.
func (c *Cluster) Record(id uint64) raft.Member {
	return raft.Member{ID: id, PeerAddr: fmt.Sprintf("127.0.0.1:%d", 7000+id)}
}

// Join starts member id with empty storage and no initial members: it
// joins the cluster, which must have added it (e.g. Node.AddLearner with
// Record(id)).
func (c *Cluster) Join(id uint64) *Member {
	c.t.Helper()
	if m := c.Member(id); m != nil {
		c.t.Fatalf("member %d exists", id)
	}
	c.mu.Lock()
	c.joined[id] = true
	c.mu.Unlock()
	return c.start(id, nil)
}

func (c *Cluster) start(id uint64, initial []raft.Member) *Member {
	c.t.Helper()
	dir := filepath.Join(c.dir, fmt.Sprintf("m%d", id))
	st, err := storage.Open(dir, storage.Options{NoSync: !c.opts.Sync, Backend: c.opts.Backend, Logger: c.opts.Logger})
	if err != nil {
		c.t.Fatalf("member %d: opening storage: %v", id, err)
	}
	var s raft.Storage = st
	if c.opts.WrapStorage != nil {
		s = c.opts.WrapStorage(id, st)
	}
	sm := kv.New()
	var fsm raft.StateMachine = sm
	if c.opts.WrapStateMachine != nil {
		fsm = c.opts.WrapStateMachine(id, sm)
	}
	n, err := raft.NewNode(c.Config(id, initial), fsm, s)
	if err != nil {
		c.t.Fatalf("member %d: %v", id, err)
	}
	ep := c.Net.attach(id, n.PeerHandler(), s)
	if err := n.Start(ep); err != nil {
		c.t.Fatalf("member %d: start: %v", id, err)
	}
	m := &Member{ID: id, Dir: dir, Node: n, SM: sm, Store: st, Storage: s}
	m.running.Store(true)
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return m
}

// Member returns member id.
func (c *Cluster) Member(id uint64) *Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// Members returns the IDs of every member, running or not.
func (c *Cluster) Members() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.members))
}

// Running returns the running members.
func (c *Cluster) Running() []*Member {
	var out []*Member
	for _, id := range c.Members() {
		if m := c.Member(id); m.running.Load() {
			out = append(out, m)
		}
	}
	return out
}

// Crash stops member id at once, as a crash would (no leadership hand-off;
// what was persisted stays, what was not is lost), and closes its storage.
func (c *Cluster) Crash(id uint64) {
	c.t.Helper()
	m := c.Member(id)
	if m == nil || !m.running.CompareAndSwap(true, false) {
		return
	}
	c.Net.detach(id)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = m.Node.Stop(ctx) // a done context: no hand-off, and no wait
	c.waitDone(m)
	if err := m.Store.Close(); err != nil {
		c.t.Errorf("member %d: closing storage: %v", id, err)
	}
}

// Stop stops member id cleanly (a leader hands leadership over first).
func (c *Cluster) Stop(id uint64) {
	c.t.Helper()
	m := c.Member(id)
	if m == nil || !m.running.CompareAndSwap(true, false) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Node.Stop(ctx); err != nil {
		c.t.Errorf("member %d: stop: %v", id, err)
	}
	c.waitDone(m)
	c.Net.detach(id)
	if err := m.Store.Close(); err != nil {
		c.t.Errorf("member %d: closing storage: %v", id, err)
	}
}

// waitDone waits until m's node has stopped every goroutine: its storage
// can be closed then.
func (c *Cluster) waitDone(m *Member) {
	select {
	case <-m.Node.Done():
	case <-time.After(30 * time.Second):
		c.t.Errorf("member %d: node goroutines did not exit within 30s", m.ID)
		<-m.Node.Done()
	}
}

// Restart starts a stopped or crashed member again from its storage.
func (c *Cluster) Restart(id uint64) *Member {
	c.t.Helper()
	if m := c.Member(id); m != nil && m.running.Load() {
		c.t.Fatalf("member %d is running", id)
	}
	c.mu.Lock()
	joined := c.joined[id]
	c.mu.Unlock()
	if joined {
		return c.start(id, nil)
	}
	return c.start(id, c.initial)
}

// Close stops every running member and the network.
func (c *Cluster) Close() {
	for _, m := range c.Running() {
		c.Crash(m.ID)
	}
	c.Net.Close()
}

// Leader waits until the running members agree on a leader and returns it.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for {
		var lead uint64
		agree := true
		for _, m := range c.Running() {
			st, err := m.Node.Status(ctx)
			if err != nil {
				return nil, err
			}
			// Status is the loop's view as of now; Leader() is what the
			// loop last published (after the Ready that made the change):
			// wait for both, so a caller's next Leader()/IsLeader() agrees.
			if st.Leader == 0 || (lead != 0 && st.Leader != lead) || m.Node.Leader() != st.Leader {
				agree = false
				break
			}
			lead = st.Leader
		}
		if agree && lead != 0 {
			if m := c.Member(lead); m != nil && m.running.Load() {
				return m, nil
			}
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			return nil, fmt.Errorf("no agreed leader: %w", err)
		}
	}
}

// WaitLeader is Leader with a 10 s limit that fails the test.
func (c *Cluster) WaitLeader() *Member {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Leader(ctx)
	if err != nil {
		c.t.Fatalf("waiting for a leader: %v", err)
	}
	return m
}

// WaitApplied waits until every running member has applied index.
func (c *Cluster) WaitApplied(ctx context.Context, index uint64) error {
	for _, m := range c.Running() {
		for m.Node.AppliedIndex() < index {
			if err := pause(ctx, 5*time.Millisecond); err != nil {
				return fmt.Errorf("member %d applied %d, want %d: %w", m.ID, m.Node.AppliedIndex(), index, err)
			}
		}
	}
	return nil
}

// Converge waits until every running member has applied the leader's commit
// index and fails the test unless all their state machines are equal.
func (c *Cluster) Converge(ctx context.Context) error {
	lead, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	st, err := lead.Node.Status(ctx)
	if err != nil {
		return err
	}
	if err := c.WaitApplied(ctx, st.Commit); err != nil {
		return err
	}
	want := lead.SM.Clone()
	for _, m := range c.Running() {
		got := m.SM.Clone()
		if len(got) != len(want) {
			return fmt.Errorf("member %d has %d keys, leader %d has %d", m.ID, len(got), lead.ID, len(want))
		}
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("member %d: key %q = %q, leader %d has %q", m.ID, k, got[k], lead.ID, v)
			}
		}
	}
	return nil
}

// pause waits for d, or returns ctx's error.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
