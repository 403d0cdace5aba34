package benchmarks

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Hashicorp timeouts of the Tuned profile: lowered from the defaults (1s,
// 1s, 500ms) for a quick start-up, as understudy's tick is. Everything else
// but the snapshot settings, batching included (MaxAppendEntries 64,
// CommitTimeout 50ms), is hashicorp's default. With 100ms heartbeat and
// election timeouts the leader lost its leadership in the middle of a run
// under load on a 2-core machine (writes then fail with "node is not the
// leader"), hence 200ms.
const (
	HashicorpHeartbeatTimeout   = 200 * time.Millisecond
	HashicorpElectionTimeout    = 200 * time.Millisecond
	HashicorpLeaderLeaseTimeout = 100 * time.Millisecond
)

// applyTimeout bounds the wait to enqueue one Apply.
const applyTimeout = time.Minute

// kvFSM is a map[string][]byte under a mutex that applies kv's put
// commands (the same bytes understudy's kv applies).
type kvFSM struct {
	mu        sync.RWMutex
	data      map[string][]byte
	snapshots atomic.Uint64 // snapshots taken
	restores  atomic.Uint64 // snapshots restored from
}

var errBadCommand = errors.New("kvFSM: bad command")

// decodePut decodes kv's put encoding: an op byte (1 = put), then
// uvarint-length-prefixed key, value and expected value.
func decodePut(b []byte) (key string, value []byte, err error) {
	if len(b) == 0 || b[0] != 1 {
		return "", nil, errBadCommand
	}
	b = b[1:]
	var parts [3][]byte
	for i := range parts {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", nil, errBadCommand
		}
		parts[i] = b[k : k+int(n)]
		b = b[k+int(n):]
	}
	return string(parts[0]), parts[1], nil
}

func (f *kvFSM) Apply(l *hraft.Log) any {
	key, value, err := decodePut(l.Data)
	if err != nil {
		return err
	}
	v := make([]byte, len(value))
	copy(v, value)
	f.mu.Lock()
	f.data[key] = v
	f.mu.Unlock()
	return nil
}

func (f *kvFSM) get(key string) ([]byte, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	v, ok := f.data[key]
	return v, ok
}

// Snapshot returns a copy of the map (values are never modified in place,
// so a shallow copy is a point-in-time view, as kv's); Persist writes it
// while Apply continues.
func (f *kvFSM) Snapshot() (hraft.FSMSnapshot, error) {
	f.snapshots.Add(1)
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fsmSnapshot(maps.Clone(f.data)), nil
}

// Restore reads the stream written by Persist: a uvarint count, then
// uvarint-length-prefixed keys and values.
func (f *kvFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.restores.Add(1)
	br := bufio.NewReader(rc)
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("kvFSM: restore: %w", err)
	}
	data := make(map[string][]byte, n)
	read := func() ([]byte, error) {
		l, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, err
		}
		if l > 1<<30 {
			return nil, errBadCommand
		}
		b := make([]byte, l)
		_, err = io.ReadFull(br, b)
		return b, err
	}
	for range n {
		k, err := read()
		if err != nil {
			return fmt.Errorf("kvFSM: restore: %w", err)
		}
		v, err := read()
		if err != nil {
			return fmt.Errorf("kvFSM: restore: %w", err)
		}
		data[string(k)] = v
	}
	f.mu.Lock()
	f.data = data
	f.mu.Unlock()
	return nil
}

func (f *kvFSM) clone() map[string][]byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.data)
}

type fsmSnapshot map[string][]byte

func (s fsmSnapshot) Persist(sink hraft.SnapshotSink) error {
	bw := bufio.NewWriter(sink)
	b := binary.AppendUvarint(nil, uint64(len(s)))
	_, err := bw.Write(b)
	for k, v := range s {
		if err != nil {
			break
		}
		b = binary.AppendUvarint(b[:0], uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
		_, err = bw.Write(b)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// snapCounter counts the InstallSnapshot RPCs the members' transports made,
// by target (hashicorp/raft has no per-peer counter of its own: its
// go-metrics timer raft.replication.installSnapshot needs a global sink).
type snapCounter struct {
	mu sync.Mutex
	by map[hraft.ServerID]SnapshotStats
}

func (c *snapCounter) record(id hraft.ServerID, n uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[hraft.ServerID]SnapshotStats{}
	}
	s := c.by[id]
	if ok {
		s.Sent++
		s.Bytes += n
	} else {
		s.Failed++
	}
	c.by[id] = s
}

func (c *snapCounter) get(id hraft.ServerID) SnapshotStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[id]
}

// countingTransport is hashicorp's NetworkTransport (every method, so that
// raft sees the same optional interfaces: WithPreVote, WithClose, WithPeers)
// with InstallSnapshot counted.
type countingTransport struct {
	*hraft.NetworkTransport
	snaps *snapCounter
}

func (t *countingTransport) InstallSnapshot(id hraft.ServerID, target hraft.ServerAddress, args *hraft.InstallSnapshotRequest, resp *hraft.InstallSnapshotResponse, data io.Reader) error {
	cr := &countingReader{r: data}
	err := t.NetworkTransport.InstallSnapshot(id, target, args, resp, cr)
	t.snaps.record(id, cr.n, err == nil && resp.Success)
	return err
}

type countingReader struct {
	r io.Reader
	n uint64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += uint64(n)
	return n, err
}

type hcMember struct {
	id    hraft.ServerID
	raft  *hraft.Raft
	tr    *hraft.NetworkTransport
	store *raftboltdb.BoltStore
	fsm   *kvFSM
}

// hashicorpCluster is three hashicorp/raft members, each with its own
// raft-boltdb store (log and stable store, fsync on), file snapshot store
// and TCP transport on 127.0.0.1, and optionally a non-voter.
type hashicorpCluster struct {
	profile Profile
	snaps   *snapCounter
	members []*hcMember
	leader  *hcMember
	learner *hcMember
}

// HashicorpLogCacheSize is the entries hashicorp/raft's LogCache keeps in
// front of the bolt store: Consul's and Nomad's raftLogCacheSize.
const HashicorpLogCacheSize = 512

// hashicorpLearnerID is the ID of the member AddLearner adds.
const hashicorpLearnerID hraft.ServerID = "4"

// StartHashicorp starts a three-member hashicorp/raft cluster configured by
// p under dir.
func StartHashicorp(dir string, p Profile) (Cluster, error) {
	c := &hashicorpCluster{profile: p, snaps: &snapCounter{}}
	var servers []hraft.Server
	for i := 1; i <= 3; i++ {
		m, err := newHashicorpMember(hraft.ServerID(fmt.Sprint(i)), filepath.Join(dir, fmt.Sprint(i)), p, c.snaps)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.members = append(c.members, m)
		servers = append(servers, hraft.Server{Suffrage: hraft.Voter, ID: m.id, Address: m.tr.LocalAddr()})
	}
	// Every member bootstraps with the same configuration (allowed, and
	// symmetric with understudy's InitialMembers).
	for _, m := range c.members {
		if err := m.raft.BootstrapCluster(hraft.Configuration{Servers: servers}).Error(); err != nil {
			c.Close()
			return nil, fmt.Errorf("hashicorp member %s: bootstrap: %w", m.id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.findLeader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.Write(ctx, Command("warmup")); err != nil {
		c.Close()
		return nil, fmt.Errorf("hashicorp: warm-up write: %w", err)
	}
	return c, nil
}

// hashicorpConfig is member id's configuration under profile p.
func hashicorpConfig(id hraft.ServerID, p Profile, logger hclog.Logger) *hraft.Config {
	conf := hraft.DefaultConfig()
	conf.LocalID = id
	if p == Tuned {
		conf.HeartbeatTimeout = HashicorpHeartbeatTimeout
		conf.ElectionTimeout = HashicorpElectionTimeout
		conf.LeaderLeaseTimeout = HashicorpLeaderLeaseTimeout
		conf.SnapshotThreshold = 1 << 40 // no snapshot during a run
		conf.SnapshotInterval = 24 * time.Hour
	}
	conf.Logger = logger
	conf.LogLevel = "ERROR"
	return conf
}

func newHashicorpMember(id hraft.ServerID, dir string, p Profile, snaps *snapCounter) (*hcMember, error) {
	logger := hclog.NewNullLogger()
	conf := hashicorpConfig(id, p, logger)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), NoSync: false})
	if err != nil {
		return nil, fmt.Errorf("hashicorp member %s: bolt store: %w", id, err)
	}
	snapStore, err := hraft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: snapshot store: %w", id, err)
	}
	tr, err := hraft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: transport: %w", id, err)
	}
	// As Consul and Nomad run it: the last entries cached in memory in front
	// of the bolt store (Consul's raftLogCacheSize, 512), so replicating an
	// entry does not read it back from bbolt.
	logs, err := hraft.NewLogCache(HashicorpLogCacheSize, store)
	if err != nil {
		tr.Close()
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: log cache: %w", id, err)
	}
	fsm := &kvFSM{data: map[string][]byte{}}
	r, err := hraft.NewRaft(conf, fsm, logs, store, snapStore, &countingTransport{NetworkTransport: tr, snaps: snaps})
	if err != nil {
		tr.Close()
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: %w", id, err)
	}
	return &hcMember{id: id, raft: r, tr: tr, store: store, fsm: fsm}, nil
}

func (c *hashicorpCluster) findLeader(ctx context.Context) error {
	for {
		for _, m := range c.members {
			if m.raft.State() == hraft.Leader {
				c.leader = m
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hashicorp: no leader elected: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Write applies cmd on the member that was leader at start and waits for
// the leader's FSM to have applied it.
func (c *hashicorpCluster) Write(ctx context.Context, cmd []byte) error {
	f := c.leader.raft.Apply(cmd, applyTimeout)
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// Read issues a Barrier on the leader (every earlier entry is then applied
// to its FSM) and looks key up in the leader's FSM.
func (c *hashicorpCluster) Read(ctx context.Context, key string) (string, bool, error) {
	if err := c.findLeader(ctx); err != nil {
		return "", false, err
	}
	if err := c.leader.raft.Barrier(applyTimeout).Error(); err != nil {
		return "", false, err
	}
	v, ok := c.leader.fsm.get(key)
	return string(v), ok, nil
}

func (c *hashicorpCluster) Close() error {
	ms := c.members
	if c.learner != nil {
		ms = append([]*hcMember{c.learner}, ms...)
	}
	var errs []error
	for _, m := range ms {
		if err := m.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("hashicorp member %s: shutdown: %w", m.id, err))
		}
	}
	for _, m := range ms {
		errs = append(errs, m.closeTransportAndStore())
	}
	return errors.Join(errs...)
}

func (m *hcMember) closeTransportAndStore() error {
	var errs []error
	if err := m.tr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("hashicorp member %s: transport: %w", m.id, err))
	}
	if err := m.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("hashicorp member %s: storage: %w", m.id, err))
	}
	return errors.Join(errs...)
}

// AddLearner starts member 4 with empty storage (no bootstrap), then adds it
// as a non-voter through the leader (AddNonvoter): hashicorp's leader
// starts replicating at once, so the member must be up first.
func (c *hashicorpCluster) AddLearner(ctx context.Context, dir string) (uint64, error) {
	if c.learner != nil {
		return 0, errors.New("hashicorp: a non-voter was already added")
	}
	m, err := newHashicorpMember(hashicorpLearnerID, dir, c.profile, c.snaps)
	if err != nil {
		return 0, err
	}
	c.learner = m
	if err := c.leader.raft.AddNonvoter(m.id, m.tr.LocalAddr(), 0, applyTimeout).Error(); err != nil {
		return 0, fmt.Errorf("hashicorp: AddNonvoter: %w", err)
	}
	return c.leader.raft.CommitIndex(), nil
}

func (c *hashicorpCluster) SnapshotsTaken() uint64 { return c.leader.fsm.snapshots.Load() }

// LearnerApplied is the non-voter's AppliedIndex (the last index handed to
// its FSM, which may be a moment ahead of the FSM itself).
func (c *hashicorpCluster) LearnerApplied() uint64 {
	if c.learner == nil {
		return 0
	}
	return c.learner.raft.AppliedIndex()
}

func (c *hashicorpCluster) SnapshotsToLearner() SnapshotStats {
	s := c.snaps.get(hashicorpLearnerID)
	s.How = "InstallSnapshot RPCs counted by a wrapper around each member's NetworkTransport"
	if c.learner != nil {
		s.Restored = c.learner.fsm.restores.Load()
	}
	return s
}

func (c *hashicorpCluster) CheckLearner(ctx context.Context) error {
	if c.learner == nil {
		return errors.New("hashicorp: no non-voter")
	}
	if err := c.leader.raft.Barrier(applyTimeout).Error(); err != nil {
		return fmt.Errorf("hashicorp: leader barrier: %w", err)
	}
	want := c.leader.raft.AppliedIndex()
	return waitSameState(ctx, want, c.learner.raft.AppliedIndex, func() error {
		return diffStates(c.leader.fsm.clone(), c.learner.fsm.clone())
	})
}

func (c *hashicorpCluster) RemoveLearner(context.Context) error {
	if c.learner == nil {
		return nil
	}
	if err := c.leader.raft.RemoveServer(c.learner.id, 0, applyTimeout).Error(); err != nil {
		return fmt.Errorf("hashicorp: RemoveServer: %w", err)
	}
	m := c.learner
	c.learner = nil
	if err := m.raft.Shutdown().Error(); err != nil {
		return fmt.Errorf("hashicorp member %s: shutdown: %w", m.id, err)
	}
	return m.closeTransportAndStore()
}

// TakeSnapshot snapshots the leader (Raft.Snapshot), which also truncates
// its log to TrailingLogs entries behind the snapshot.
func (c *hashicorpCluster) TakeSnapshot(context.Context) error {
	return c.leader.raft.Snapshot().Error()
}
