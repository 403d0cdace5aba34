package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/plugin/tan"
)

// numHosts is the number of NodeHosts (machines) simulated: every shard
// has one replica, a voter, on each.
const numHosts = 3

// Log DBs (-logdb): the NodeHost's storage of raft logs and state.
const (
	// logdbPebble is dragonboat's default LogDB ("sharded-pebble": 16
	// Pebble instances per NodeHost), used when
	// NodeHostConfig.Expert.LogDBFactory is nil.
	logdbPebble = "pebble"
	// logdbTan is dragonboat's Tan LogDB (plugin/tan: a log-structured
	// store for raft logs, "experimental" in v4's CHANGELOG, to be the
	// default in a future release per docs/storage.md).
	logdbTan = "tan"
)

// clusterOptions configure the NodeHosts and every replica. Every field is
// a setting dragonboat does not default (README.md says why each value).
type clusterOptions struct {
	// logdb is logdbPebble or logdbTan.
	logdb string
	// rttMillisecond is NodeHostConfig.RTTMillisecond, dragonboat's tick.
	rttMillisecond uint64
	// electionRTT and heartbeatRTT are Config.ElectionRTT / HeartbeatRTT,
	// in ticks.
	electionRTT, heartbeatRTT uint64
	// snapshotEntries and compactionOverhead are Config.SnapshotEntries /
	// CompactionOverhead.
	snapshotEntries, compactionOverhead uint64
	// quiesce is Config.Quiesce.
	quiesce bool
	// logdbMem names the NodeHostConfig.Expert.LogDB preset (logdbMems;
	// "" or "large": dragonboat's default).
	logdbMem string
}

// logdbMems are dragonboat's LogDBConfig presets by name (config.go: the
// default, large, "use up to 8GBytes memory" per NodeHost; medium 4 GB,
// small 1 GB, tiny 256 MB: KVWriteBufferSize 128, 64, 16 and 4 MiB).
var logdbMems = map[string]func() config.LogDBConfig{
	"large":  config.GetLargeMemLogDBConfig,
	"medium": config.GetMediumMemLogDBConfig,
	"small":  config.GetSmallMemLogDBConfig,
	"tiny":   config.GetTinyMemLogDBConfig,
}

// nodeHostConfig is host i's NodeHostConfig: its own dir, its raft address
// on loopback and the tick; everything else dragonboat's default.
func (o clusterOptions) nodeHostConfig(dir, addr string) config.NodeHostConfig {
	c := config.NodeHostConfig{
		NodeHostDir:    dir,
		RTTMillisecond: o.rttMillisecond,
		RaftAddress:    addr,
	}
	if o.logdb == logdbTan {
		c.Expert.LogDBFactory = tan.Factory
	}
	if o.logdbMem != "" && o.logdbMem != "large" {
		c.Expert.LogDB = logdbMems[o.logdbMem]()
	}
	return c
}

// quiesceAfter is how long a shard with Config.Quiesce waits without
// activity before it quiesces: dragonboat's quiesceState threshold, 10
// times its electionTick, which node.go sets to 2 x ElectionRTT.
func quiesceAfter(o clusterOptions) time.Duration {
	return time.Duration(10*2*o.electionRTT*o.rttMillisecond) * time.Millisecond
}

// replicaConfig is shard g's replica on host i.
func (o clusterOptions) replicaConfig(g, i int) config.Config {
	return config.Config{
		ShardID:            shardID(g),
		ReplicaID:          replicaID(i),
		ElectionRTT:        o.electionRTT,
		HeartbeatRTT:       o.heartbeatRTT,
		CheckQuorum:        true,
		PreVote:            true,
		SnapshotEntries:    o.snapshotEntries,
		CompactionOverhead: o.compactionOverhead,
		Quiesce:            o.quiesce,
	}
}

// cluster is N shards of three replicas on three NodeHosts on loopback.
type cluster struct {
	hosts  []*dragonboat.NodeHost
	shards int
	// started is how long the StartReplica calls took, leaders how long
	// until every shard had a leader, both from the first call.
	started, leaders time.Duration
}

// replicaID is host i's replica ID, the same in every shard.
func replicaID(i int) uint64 { return uint64(i) + 1 }

// shardID is the shard ID of shard index g.
func shardID(g int) uint64 { return uint64(g) + 1 }

// loopbackAddrs returns n free loopback addresses. The ports are free when
// it returns; dragonboat listens on its own (NodeHostConfig.RaftAddress),
// so a port can be taken in between, which fails NewNodeHost plainly.
func loopbackAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// startCluster opens three NodeHosts under dir, starts n shards with a
// replica on each, and waits (within ctx) until every shard has a leader.
// On error everything it started is closed.
func startCluster(ctx context.Context, n int, dir string, o clusterOptions) (*cluster, error) {
	c := &cluster{shards: n}
	if err := c.start(ctx, n, dir, o); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) start(ctx context.Context, n int, dir string, o clusterOptions) error {
	addrs, err := loopbackAddrs(numHosts)
	if err != nil {
		return err
	}
	members := make(map[uint64]dragonboat.Target, numHosts)
	for i, addr := range addrs {
		nh, err := dragonboat.NewNodeHost(o.nodeHostConfig(filepath.Join(dir, fmt.Sprintf("host%d", i)), addr))
		if err != nil {
			return fmt.Errorf("NodeHost %d: %w", i, err)
		}
		c.hosts = append(c.hosts, nh)
		members[replicaID(i)] = addr
	}
	t0 := time.Now()
	// StartReplica does not wait for the replica to be ready (WaitReady
	// off, the default): one caller per host.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, nh := range c.hosts {
		wg.Go(func() {
			for g := range n {
				if ctx.Err() != nil {
					return
				}
				if err := nh.StartReplica(members, false, newStore, o.replicaConfig(g, i)); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("starting shard %d on host %d (%d shards per host asked): %w", shardID(g), i, n, err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	c.started = time.Since(t0)
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return first
	}
	return c.waitLeaders(ctx, t0)
}

// leader returns the index of the host whose replica of shard g knows it
// leads, or -1.
func (c *cluster) leader(g int) int {
	id, _, ok, err := c.hosts[0].GetLeaderID(shardID(g))
	if err != nil || !ok || id < 1 || id > numHosts {
		return -1
	}
	i := int(id - 1)
	if i != 0 {
		if self, _, ok, err := c.hosts[i].GetLeaderID(shardID(g)); err != nil || !ok || self != id {
			return -1
		}
	}
	return i
}

// waitLeaders waits until every shard has a replica that leads, and
// records the time since t0.
func (c *cluster) waitLeaders(ctx context.Context, t0 time.Time) error {
	pending := make([]int, c.shards)
	for g := range pending {
		pending[g] = g
	}
	for {
		rest := pending[:0]
		for _, g := range pending {
			if c.leader(g) < 0 {
				rest = append(rest, g)
			}
		}
		pending = rest
		if len(pending) == 0 {
			c.leaders = time.Since(t0)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d shards without a leader (shard %d first): %w", len(pending), c.shards, shardID(pending[0]), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// leadersPerHost counts the shards each host leads.
func (c *cluster) leadersPerHost() []int {
	per := make([]int, numHosts)
	for g := range c.shards {
		if i := c.leader(g); i >= 0 {
			per[i]++
		}
	}
	return per
}

// close closes every NodeHost, at once, and returns how long it took.
func (c *cluster) close() time.Duration {
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, nh := range c.hosts {
		wg.Go(nh.Close)
	}
	wg.Wait()
	return time.Since(t0)
}

// errRetry says whether a SyncPropose error leaves the write to be tried
// again: the shard had no leader or dropped the proposal (ErrShardNotReady),
// its queues were full (ErrSystemBusy), the proposal was aborted or timed
// out with an unknown outcome (a put of the same value is idempotent).
func errRetry(err error) bool {
	return errors.Is(err, dragonboat.ErrShardNotReady) ||
		errors.Is(err, dragonboat.ErrSystemBusy) ||
		errors.Is(err, dragonboat.ErrAborted) ||
		errors.Is(err, dragonboat.ErrTimeout)
}
