package benchmarks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

const understudyClusterID = 0xbe7c4

// UnderstudyTick is understudy's tick: elections after 10 ticks (100ms),
// heartbeats every tick. Short, for a quick start-up.
const UnderstudyTick = 10 * time.Millisecond

type usMember struct {
	id    uint64
	node  *raft.Node
	store *storage.Store
	tr    *transport.Transport
	sm    *countingKV
}

// countingKV is kv's store, counting the snapshots it took and
// restored from.
type countingKV struct {
	*kv.Store
	snapshots, restores atomic.Uint64
}

func (s *countingKV) Snapshot() (raft.Snapshot, error) {
	s.snapshots.Add(1)
	return s.Store.Snapshot()
}

func (s *countingKV) Restore(r io.Reader) error {
	s.restores.Add(1)
	return s.Store.Restore(r)
}

// understudyCluster is three understudy members, each with its own bbolt
// store (fsync on) and TCP transport on 127.0.0.1, and optionally a learner.
type understudyCluster struct {
	profile Profile
	logger  *slog.Logger
	members []*usMember
	leader  *usMember
	learner *usMember
	// proc is the learner when it runs in a process of its own
	// (-understudy.learnerproc).
	proc *learnerProc
	// learnerDir is the learner's data dir when -understudy.learnerdir
	// put it elsewhere (removed on Close).
	learnerDir string
}

// engineFlag is the understudy members' storage engine (every benchmark's,
// and the learner process's). Pebble by default since session 25: what
// understudy.Start and NewHost open a new data dir with, so what users run;
// bolt (the raw storage.Open's default) is what the tables up to session 24
// were taken with.
var engineFlag = flag.String("understudy.engine", "pebble", "understudy members' storage engine: pebble (what understudy.Start and NewHost pick; the default since session 25) or bolt (storage.Open's default; these benchmarks' until session 24)")

// learnerDirFlag puts the learner's data dir under another directory (a
// fresh one in it): on another disk, or tmpfs (/dev/shm), the learner's
// writes of the received snapshot stop sharing the voters' disk, as on a
// machine of its own.
var learnerDirFlag = flag.String("understudy.learnerdir", "", "BenchmarkCatchUp: put understudy's learner's data dir in a fresh directory under this one (e.g. /dev/shm: its snapshot writes then do not share the voters' disk, as on a machine of its own); empty: beside the voters'")

// understudyLearnerID is the ID of the member AddLearner adds.
const understudyLearnerID = 4

// StartUnderstudy starts a three-member understudy cluster configured by p
// under dir.
func StartUnderstudy(dir string, p Profile) (Cluster, error) {
	logger := benchLogger()
	var initial []raft.Member
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns[id] = ln
		initial = append(initial, raft.Member{ID: id, PeerAddr: ln.Addr().String()})
	}
	c := &understudyCluster{profile: p, logger: logger}
	for _, m := range initial {
		mem, err := startUnderstudyMember(m.ID, filepath.Join(dir, fmt.Sprint(m.ID)), lns[m.ID], initial, p, logger)
		if err != nil {
			for id, l := range lns {
				if id > m.ID {
					l.Close()
				}
			}
			c.Close()
			return nil, err
		}
		c.members = append(c.members, mem)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.findLeader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	// One committed write, so that connections are up and the leader's
	// first-term entry is committed before anything is timed.
	if err := c.Write(ctx, Command("warmup")); err != nil {
		c.Close()
		return nil, fmt.Errorf("understudy: warm-up write: %w", err)
	}
	return c, nil
}

// benchLogger discards, unless BENCH_LOG is set: then understudy's logs go
// to stderr (BENCH_LOG=debug for debug level).
func benchLogger() *slog.Logger {
	switch os.Getenv("BENCH_LOG") {
	case "":
		return slog.New(slog.DiscardHandler)
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	default:
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
}

// understudyConfig is member id's configuration under profile p: initial
// nil joins an existing cluster.
func understudyConfig(id uint64, initial []raft.Member, p Profile, logger *slog.Logger) raft.Config {
	cfg := raft.Config{ID: id, InitialMembers: initial, Logger: logger}
	if p == Tuned {
		cfg.TickInterval = UnderstudyTick
		cfg.SnapshotCount = 1 << 40 // no snapshot during a run
	}
	return cfg
}

// startUnderstudyMember starts member id listening on ln (which it closes
// on failure): a member of a new cluster (initial), or a joiner (initial
// nil) whose transport is given the seeds' addresses so that it accepts
// their connections.
func startUnderstudyMember(id uint64, dir string, ln net.Listener, initial []raft.Member, p Profile, logger *slog.Logger, seeds ...raft.Member) (*usMember, error) {
	opts := storage.Options{NoSync: false, Logger: logger}
	switch *engineFlag {
	case "bolt":
		opts.Backend = storage.BackendBolt
	case "pebble":
		opts.Backend = storage.BackendPebble
	default:
		ln.Close()
		return nil, fmt.Errorf("-understudy.engine: %q is neither bolt nor pebble", *engineFlag)
	}
	store, err := storage.Open(dir, opts)
	if err != nil {
		ln.Close()
		return nil, err
	}
	sm := &countingKV{Store: kv.New()}
	node, err := raft.NewNode(understudyConfig(id, initial, p, logger), sm, store)
	if err != nil {
		ln.Close()
		store.Close()
		return nil, err
	}
	tr, err := transport.New(transport.Config{
		ID: id, ClusterID: understudyClusterID, Listener: ln,
		Handler: node.PeerHandler(), Snapshots: store, Logger: logger,
		SnapshotBytesPerSec:        *snapshotRate,
		LearnerSnapshotBytesPerSec: *learnerSnapshotRate,
		LearnerBatchDelay:          *learnerDelay,
	})
	if err != nil {
		ln.Close()
		store.Close()
		return nil, err
	}
	for _, s := range seeds {
		tr.AddPeer(s.ID, s.PeerAddr)
	}
	if err := node.Start(tr); err != nil {
		tr.Close()
		store.Close()
		return nil, err
	}
	return &usMember{id: id, node: node, store: store, tr: tr, sm: sm}, nil
}

func (c *understudyCluster) findLeader(ctx context.Context) error {
	for {
		for _, m := range c.members {
			st, err := m.node.Status(ctx)
			if err != nil {
				return err
			}
			if st.Role == raft.RoleLeader {
				c.leader = m
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("understudy: no leader elected: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Write proposes cmd on the member that was leader at start (were
// leadership to move, it would forward the command to the new leader).
func (c *understudyCluster) Write(ctx context.Context, cmd []byte) error {
	_, err := c.leader.node.Propose(ctx, cmd)
	return err
}

func (c *understudyCluster) Read(ctx context.Context, key string) (string, bool, error) {
	if err := c.findLeader(ctx); err != nil {
		return "", false, err
	}
	v, err := c.leader.node.Read(ctx, []byte(key))
	if err != nil {
		return "", false, err
	}
	return string(v), len(v) > 0, nil
}

// Leader returns the leader's node and state machine (for tests).
func (c *understudyCluster) Leader() (*raft.Node, *kv.Store) {
	return c.leader.node, c.leader.sm.Store
}

func (c *understudyCluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	// The learner, then the followers, so that the leader's hand-off on Stop
	// is not attempted towards members that are about to stop too.
	if c.proc != nil {
		errs = append(errs, c.proc.stop(ctx))
	}
	var ms []*usMember
	if c.learner != nil {
		ms = append(ms, c.learner)
	}
	for _, m := range c.members {
		if m != c.leader {
			ms = append(ms, m)
		}
	}
	if c.leader != nil {
		ms = append(ms, c.leader)
	}
	for _, m := range ms {
		errs = append(errs, m.stop(ctx))
	}
	if c.learnerDir != "" {
		errs = append(errs, os.RemoveAll(c.learnerDir))
	}
	return errors.Join(errs...)
}

func (m *usMember) stop(ctx context.Context) error {
	if os.Getenv("BENCH_STORAGE") != "" {
		// The member's storage counters over its whole run: commits (a
		// bbolt transaction, two fdatasyncs each), entries per commit,
		// snapshots.
		fmt.Fprintf(os.Stderr, "understudy member %d storage: %v\n", m.id, m.store.Metrics())
	}
	var errs []error
	if err := m.node.Stop(ctx); err != nil && !errors.Is(err, raft.ErrStopped) && !errors.Is(err, raft.ErrRemoved) {
		errs = append(errs, fmt.Errorf("understudy member %d: stop: %w", m.id, err))
	}
	<-m.node.Done() // the storage stays open until the node has stopped
	if err := m.tr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("understudy member %d: transport: %w", m.id, err))
	}
	if err := m.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("understudy member %d: storage: %w", m.id, err))
	}
	return errors.Join(errs...)
}

// AddLearner adds member 4 as a learner through the leader, then starts it
// in join mode (empty storage, no InitialMembers; its transport is given
// the members' addresses, as examples/demo does).
func (c *understudyCluster) AddLearner(ctx context.Context, dir string) (uint64, error) {
	if c.learner != nil || c.proc != nil {
		return 0, errors.New("understudy: a learner was already added")
	}
	if *learnerDirFlag != "" {
		d, err := os.MkdirTemp(*learnerDirFlag, "understudy-learner-")
		if err != nil {
			return 0, fmt.Errorf("-understudy.learnerdir: %w", err)
		}
		c.learnerDir, dir = d, d
	}
	if *learnerProcess {
		return c.addLearnerProc(ctx, dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	rec := raft.Member{ID: understudyLearnerID, PeerAddr: ln.Addr().String()}
	if err := c.leader.node.AddLearner(ctx, rec); err != nil {
		ln.Close()
		return 0, fmt.Errorf("understudy: AddLearner: %w", err)
	}
	st, err := c.leader.node.Status(ctx)
	if err != nil {
		ln.Close()
		return 0, err
	}
	mem, err := startUnderstudyMember(understudyLearnerID, dir, ln, nil, c.profile, c.logger, c.seeds()...)
	if err != nil {
		return 0, fmt.Errorf("understudy: starting the learner: %w", err)
	}
	c.learner = mem
	return st.Commit, nil
}

// seeds are the members' addresses, for a joiner's transport.
func (c *understudyCluster) seeds() []raft.Member {
	var seeds []raft.Member
	for _, m := range c.members {
		seeds = append(seeds, raft.Member{ID: m.id, PeerAddr: m.tr.Addr().String()})
	}
	return seeds
}

// addLearnerProc is AddLearner with the learner in a child process: the
// child listens, the leader adds it, then the child starts its member.
func (c *understudyCluster) addLearnerProc(ctx context.Context, dir string) (uint64, error) {
	p, err := startLearnerProc(dir)
	if err != nil {
		return 0, err
	}
	c.proc = p
	if err := c.leader.node.AddLearner(ctx, raft.Member{ID: understudyLearnerID, PeerAddr: p.addr}); err != nil {
		return 0, fmt.Errorf("understudy: AddLearner: %w", err)
	}
	st, err := c.leader.node.Status(ctx)
	if err != nil {
		return 0, err
	}
	line := "start"
	for _, s := range c.seeds() {
		line += fmt.Sprintf(" %d=%s", s.ID, s.PeerAddr)
	}
	if err := p.send(line); err != nil {
		return 0, fmt.Errorf("understudy: starting the learner process: %w", err)
	}
	return st.Commit, nil
}

func (c *understudyCluster) SnapshotsTaken() uint64 { return c.leader.sm.snapshots.Load() }

func (c *understudyCluster) LearnerApplied() uint64 {
	if c.proc != nil {
		return c.proc.applied.Load()
	}
	if c.learner == nil {
		return 0
	}
	return c.learner.node.AppliedIndex()
}

// SnapshotsToLearner sums every member's transport counters for the
// learner (transport.Stats, per peer; sent and bytes count the snapshots the
// learner acknowledged).
func (c *understudyCluster) SnapshotsToLearner() SnapshotStats {
	s := SnapshotStats{How: "transport.Transport.Stats per-peer counters, summed over the members"}
	for _, m := range c.members {
		for _, p := range m.tr.Stats().Peers {
			if p.ID == understudyLearnerID {
				s.Sent += p.SnapshotsSent
				s.Failed += p.SnapshotsFailed
				s.Bytes += p.SnapshotBytesSent
				s.SendTime += p.SnapshotSendDuration.Sum
			}
		}
	}
	if c.learner != nil {
		s.Restored = c.learner.sm.restores.Load()
	}
	if c.proc != nil {
		s.Restored = c.proc.restores.Load()
	}
	return s
}

func (c *understudyCluster) CheckLearner(ctx context.Context) error {
	if c.proc != nil {
		if err := c.leader.node.ReadBarrier(ctx); err != nil {
			return fmt.Errorf("understudy: leader read barrier: %w", err)
		}
		want := stateHash(c.leader.sm.Clone())
		return waitSameState(ctx, c.leader.node.AppliedIndex(), c.proc.applied.Load, func() error {
			_, h, err := c.proc.state(ctx)
			if err == nil && h != want {
				err = fmt.Errorf("the learner's state hash %x, the leader's %x", h, want)
			}
			return err
		})
	}
	if c.learner == nil {
		return errors.New("understudy: no learner")
	}
	if err := c.leader.node.ReadBarrier(ctx); err != nil {
		return fmt.Errorf("understudy: leader read barrier: %w", err)
	}
	want := c.leader.node.AppliedIndex()
	return waitSameState(ctx, want, c.learner.node.AppliedIndex, func() error {
		return diffStates(c.leader.sm.Clone(), c.learner.sm.Clone())
	})
}

func (c *understudyCluster) RemoveLearner(ctx context.Context) error {
	if c.learner == nil && c.proc == nil {
		return nil
	}
	if err := c.leader.node.RemoveMember(ctx, understudyLearnerID); err != nil {
		return fmt.Errorf("understudy: RemoveMember: %w", err)
	}
	if c.proc != nil {
		err := c.proc.stop(ctx)
		c.proc = nil
		return err
	}
	err := c.learner.stop(ctx)
	c.learner = nil
	return err
}

// snapshotRate is transport.Config.SnapshotBytesPerSec for understudy's
// members (0, the default: no limit).
var snapshotRate = flag.Int64("understudy.snaprate", 0, "understudy members' transport.Config.SnapshotBytesPerSec (0: no limit)")

// learnerSnapshotRate is transport.Config.LearnerSnapshotBytesPerSec for
// understudy's members (0: the default; negative: no pacing).
var learnerSnapshotRate = flag.Int64("understudy.learnersnaprate", 0, "understudy members' transport.Config.LearnerSnapshotBytesPerSec (0: the default, negative: no pacing)")

// learnerDelay is transport.Config.LearnerBatchDelay for understudy's
// members (0: the default; negative: no gathering).
var learnerDelay = flag.Duration("understudy.learnerdelay", 0, "understudy members' transport.Config.LearnerBatchDelay (0: the default, negative: none)")

// TakeSnapshot snapshots the leader (Node.Snapshot), which also compacts
// its log.
func (c *understudyCluster) TakeSnapshot(ctx context.Context) error {
	_, err := c.leader.node.Snapshot(ctx)
	return err
}
