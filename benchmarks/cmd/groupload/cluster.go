package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// Layouts: how the 3 x N replicas are placed in the process.
const (
	// layoutHost is one understudy.Host per (simulated) machine: 3 hosts,
	// each with one data dir, one port and one storage engine, running a
	// replica of every group (StartGroup).
	layoutHost = "host"
	// layoutProcess is the baseline, today's layout: every replica its own
	// understudy.Start (own data dir, port, storage file and fsync stream),
	// all in this one OS process.
	layoutProcess = "process"
)

// numHosts is the number of hosts (machines) simulated: every group has
// one replica, a voter, on each.
const numHosts = 3

// clusterOptions configure a cluster's replicas.
type clusterOptions struct {
	// tick is raft.Config.TickInterval (0: the library's default).
	tick time.Duration
	// quiesce is raft.Config.Quiesce (a host's default; false sets
	// DisableQuiescence): idle groups stop ticking.
	quiesce bool
	// inlineApply is raft.Config.InlineApply.
	inlineApply bool
	// syncWait is storage.EngineOptions.SyncWait (host layout).
	syncWait storage.SyncWait
	// tailCache is storage.GroupOptions.TailCacheBytes (0: the default).
	tailCache int64
	// backend is storage.EngineOptions.Backend (empty: the default).
	backend storage.Backend
	// sched is the hosts' raft.SchedulerConfig (zero: the defaults).
	sched raft.SchedulerConfig
	// startParallel bounds the StartGroup / Start calls in flight per host.
	startParallel int
	// noBalance disables the hosts' leader balancing
	// (HostConfig.LeaderBalance).
	noBalance bool
	logger    *slog.Logger
}

// cluster is N groups of three replicas on loopback, in either layout.
type cluster struct {
	layout string
	opts   clusterOptions
	// hosts are the three hosts (layoutHost only); nil while killed.
	hosts []*understudy.Host
	// hostDirs and members (layoutHost only) are each host's data dir, and
	// the hosts as every group's initial members (PeerAddr: the address
	// each host listens on), for a restart.
	hostDirs []string
	members  []raft.Member
	// groups[g][i] is group g's replica on host i.
	groups [][]*understudy.Group
	// started is how long the start calls took, leaders how long until
	// every group had a leader, both from the first start call.
	started, leaders time.Duration
}

// replicaID is host i's replica ID, the same in every group.
func replicaID(i int) uint64 { return uint64(i) + 1 }

// groupID is the raft group ID of group index g.
func groupID(g int) uint64 { return uint64(g) + 1 }

// listenLoopback listens on a free loopback port.
func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// startCluster starts n groups in the given layout under dir, and waits
// (within ctx) until every group has a leader. On error everything it
// started is closed.
func startCluster(ctx context.Context, layout string, n int, dir string, o clusterOptions) (*cluster, error) {
	c := &cluster{layout: layout, opts: o, groups: make([][]*understudy.Group, n)}
	for g := range c.groups {
		c.groups[g] = make([]*understudy.Group, numHosts)
	}
	var err error
	switch layout {
	case layoutHost:
		err = c.startHosts(ctx, n, dir, o)
	case layoutProcess:
		err = c.startProcesses(ctx, n, dir, o)
	default:
		err = fmt.Errorf("unknown layout %q", layout)
	}
	if err != nil {
		c.close(10 * time.Second)
		return nil, err
	}
	return c, nil
}

func (c *cluster) raftConfig(o clusterOptions) raft.Config {
	return raft.Config{TickInterval: o.tick, Quiesce: o.quiesce, InlineApply: o.inlineApply}
}

// startHosts opens three hosts and starts every group's replica on each,
// o.startParallel StartGroup calls at a time per host.
func (c *cluster) startHosts(ctx context.Context, n int, dir string, o clusterOptions) error {
	for i := range numHosts {
		ln, err := listenLoopback()
		if err != nil {
			return err
		}
		c.hostDirs = append(c.hostDirs, filepath.Join(dir, fmt.Sprintf("host%d", i)))
		h, err := c.openHost(i, ln)
		if err != nil {
			return fmt.Errorf("host %d: %w", i, err)
		}
		c.hosts = append(c.hosts, h)
		c.members = append(c.members, raft.Member{ID: replicaID(i), PeerAddr: ln.Addr().String()})
	}
	t0 := time.Now()
	var err error
	c.started, err = c.startAll(ctx, n, o.startParallel, allHosts(), c.startGroup(ctx))
	if err != nil {
		return err
	}
	c.leaders, err = c.waitLeaders(ctx, t0)
	return err
}

// openHost opens host i on its data dir, listening on ln.
func (c *cluster) openHost(i int, ln net.Listener) (*understudy.Host, error) {
	return understudy.NewHost(understudy.HostConfig{
		DataDir:       c.hostDirs[i],
		Listener:      ln,
		AdvertisePeer: ln.Addr().String(),
		Logger:        c.opts.logger,
		Storage:       storage.EngineOptions{Backend: c.opts.backend, SyncWait: c.opts.syncWait},
		Scheduler:     c.opts.sched,
		LeaderBalance: understudy.LeaderBalance{Disabled: c.opts.noBalance},
	})
}

// startGroup returns the start call of group g's replica on host i (a
// bootstrap on an empty data dir, a restart on one that holds it).
func (c *cluster) startGroup(ctx context.Context) func(g, i int) (*understudy.Group, error) {
	return func(g, i int) (*understudy.Group, error) {
		return c.hosts[i].StartGroup(ctx, understudy.GroupConfig{
			GroupID:        groupID(g),
			ID:             replicaID(i),
			InitialMembers: c.members,
			ClusterToken:   fmt.Sprintf("groupload-%d", groupID(g)),
			Raft:           c.raftConfig(c.opts),
			Storage:        storage.GroupOptions{TailCacheBytes: c.opts.tailCache},
			// The host quiesces its groups by default: -quiesce=false
			// keeps them ticking.
			DisableQuiescence: !c.opts.quiesce,
		}, kv.New())
	}
}

// allHosts is every host's index.
func allHosts() []int {
	hs := make([]int, numHosts)
	for i := range hs {
		hs[i] = i
	}
	return hs
}

// startProcesses starts every replica with its own understudy.Start (its
// own data dir, listener and storage file), o.startParallel at a time per
// host.
func (c *cluster) startProcesses(ctx context.Context, n int, dir string, o clusterOptions) error {
	// Every listener first: the initial members' addresses are needed by
	// every member's Start.
	lns := make([][]net.Listener, n)
	closeRest := func() {
		for _, row := range lns {
			for _, ln := range row {
				if ln != nil {
					_ = ln.Close()
				}
			}
		}
	}
	for g := range lns {
		lns[g] = make([]net.Listener, numHosts)
		for i := range numHosts {
			ln, err := listenLoopback()
			if err != nil {
				closeRest()
				return fmt.Errorf("listener of group %d's member %d: %w", groupID(g), replicaID(i), err)
			}
			lns[g][i] = ln
		}
	}
	members := make([][]raft.Member, n)
	for g, row := range lns {
		for i, ln := range row {
			members[g] = append(members[g], raft.Member{ID: replicaID(i), PeerAddr: ln.Addr().String()})
		}
	}
	t0 := time.Now()
	var mu sync.Mutex
	started, err := c.startAll(ctx, n, o.startParallel, allHosts(), func(g, i int) (*understudy.Group, error) {
		mu.Lock()
		ln := lns[g][i]
		lns[g][i] = nil // Start owns it now, and closes it on error
		mu.Unlock()
		return understudy.Start(ctx, understudy.Config{
			ID:                replicaID(i),
			DataDir:           filepath.Join(dir, fmt.Sprintf("g%d", groupID(g)), fmt.Sprintf("m%d", replicaID(i))),
			Listener:          ln,
			AdvertisePeer:     ln.Addr().String(),
			InitialMembers:    members[g],
			ClusterToken:      fmt.Sprintf("groupload-%d", groupID(g)),
			Logger:            o.logger,
			Raft:              c.raftConfig(o),
			Storage:           storage.Options{TailCacheBytes: o.tailCache, Backend: o.backend},
			DisableQuiescence: !o.quiesce,
		}, kv.New())
	})
	mu.Lock()
	closeRest() // the listeners of members never started
	mu.Unlock()
	c.started = started
	if err != nil {
		return err
	}
	c.leaders, err = c.waitLeaders(ctx, t0)
	return err
}

// startAll calls start(g, i) for every group g and host i of hosts,
// parallel calls in flight per host, and records each replica. It returns
// how long the calls took and the first error, once every call in flight
// returned.
func (c *cluster) startAll(ctx context.Context, n, parallel int, hosts []int, start func(g, i int) (*understudy.Group, error)) (time.Duration, error) {
	t0 := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, i := range hosts {
		sem := make(chan struct{}, max(parallel, 1))
		wg.Go(func() {
			var hw sync.WaitGroup
			for g := range n {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
				}
				if ctx.Err() != nil {
					break
				}
				hw.Go(func() {
					defer func() { <-sem }()
					grp, err := start(g, i)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						if first == nil {
							first = fmt.Errorf("starting group %d on host %d (%d groups per host asked): %w", groupID(g), i, n, err)
						}
						cancel()
						return
					}
					c.groups[g][i] = grp
				})
			}
			hw.Wait()
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return time.Since(t0), first
}

// waitLeaders waits until every group has a replica that leads, and
// returns the time since t0.
func (c *cluster) waitLeaders(ctx context.Context, t0 time.Time) (time.Duration, error) {
	pending := make([]int, len(c.groups))
	for g := range pending {
		pending[g] = g
	}
	for {
		rest := pending[:0]
		for _, g := range pending {
			if c.leader(g) == nil {
				rest = append(rest, g)
			}
		}
		pending = rest
		if len(pending) == 0 {
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%d of %d groups without a leader after %s: %w",
				len(pending), len(c.groups), time.Since(t0).Round(time.Millisecond), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// leader returns group g's replica that leads, nil if none knows it
// leads.
func (c *cluster) leader(g int) *understudy.Group {
	for _, r := range c.groups[g] {
		if r != nil && r.IsLeader() {
			return r
		}
	}
	return nil
}

// leadersPerHost counts, for each host, the groups whose replica there
// leads.
func (c *cluster) leadersPerHost() []int {
	n := make([]int, numHosts)
	for g := range c.groups {
		for i, r := range c.groups[g] {
			if r != nil && r.IsLeader() {
				n[i]++
			}
		}
	}
	return n
}

// storageCounts are storage counters summed over the hosts.
type storageCounts struct {
	// commits are bbolt transactions (each two fdatasyncs); writes the
	// groups' writes they carried (one per group and commit).
	commits, writes uint64
	// commitTime and syncTime are the commits' total durations, and their
	// disk part (pages written and fdatasynced).
	commitTime, syncTime time.Duration
	// pages and bytes are what the commits wrote (host layout); free is
	// bbolt's free pages now, summed over the hosts.
	pages, bytes uint64
	free         int
}

// storage returns the storage counters so far, summed over the hosts (the
// host layout: each engine's; the process layout: each replica's store's).
func (c *cluster) storage() storageCounts {
	var s storageCounts
	if c.layout == layoutHost {
		for _, h := range c.hosts {
			m := h.Engine().Metrics()
			s.commits += m.Commits
			s.writes += m.Writes
			s.commitTime += m.CommitDuration.Sum
			s.syncTime += m.SyncDuration.Sum
			s.pages += m.PagesWritten
			s.bytes += m.BytesWritten
			s.free += m.FreePages
		}
		return s
	}
	for _, row := range c.groups {
		for _, r := range row {
			if r != nil {
				m := r.Storage().Metrics()
				s.commits += m.Commits
				s.writes += m.Commits // one group per storage file: one per commit
				s.commitTime += m.CommitDuration.Sum
				s.syncTime += m.SyncDuration.Sum
			}
		}
	}
	return s
}

// close stops every replica and host, all hosts at once, each bounded by
// timeout, and returns how long it took.
func (c *cluster) close(timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		if err != nil && !errors.Is(err, raft.ErrStopTimeout) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	if c.layout == layoutHost {
		for _, h := range c.hosts {
			if h != nil {
				wg.Go(func() { fail(h.Close(ctx)) })
			}
		}
	} else {
		sem := make(chan struct{}, 64)
		for _, row := range c.groups {
			for _, r := range row {
				if r == nil {
					continue
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					fail(r.Close(ctx))
				})
			}
		}
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}
