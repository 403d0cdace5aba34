package benchmarks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Hashicorp timeouts: lowered from the defaults (1s, 1s, 500ms) for a quick
// start-up, as understudy's tick is. Everything else, batching included
// (MaxAppendEntries 64, CommitTimeout 50ms), is hashicorp's default. With
// 100ms heartbeat and election timeouts the leader lost its leadership in
// the middle of a run under load on a 2-core machine (writes then fail with
// "node is not the leader"), hence 200ms.
const (
	HashicorpHeartbeatTimeout   = 200 * time.Millisecond
	HashicorpElectionTimeout    = 200 * time.Millisecond
	HashicorpLeaderLeaseTimeout = 100 * time.Millisecond
)

// applyTimeout bounds the wait to enqueue one Apply.
const applyTimeout = time.Minute

// kvFSM is a map[string][]byte under a mutex that applies testkv's put
// commands (the same bytes understudy's testkv applies).
type kvFSM struct {
	mu   sync.RWMutex
	data map[string][]byte
}

var errBadCommand = errors.New("kvFSM: bad command")

// decodePut decodes testkv's put encoding: an op byte (1 = put), then
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

// Snapshot and Restore are never used in a run (SnapshotThreshold is out of
// reach) but are implemented, minimally, for completeness.
func (f *kvFSM) Snapshot() (hraft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf []byte
	for k, v := range f.data {
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return fsmSnapshot(buf), nil
}

func (f *kvFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	for len(b) > 0 {
		var parts [2][]byte
		for i := range parts {
			n, k := binary.Uvarint(b)
			if k <= 0 || n > uint64(len(b)-k) {
				return errBadCommand
			}
			parts[i] = b[k : k+int(n)]
			b = b[k+int(n):]
		}
		data[string(parts[0])] = append([]byte(nil), parts[1]...)
	}
	f.mu.Lock()
	f.data = data
	f.mu.Unlock()
	return nil
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink hraft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

type hcMember struct {
	id    hraft.ServerID
	raft  *hraft.Raft
	tr    *hraft.NetworkTransport
	store *raftboltdb.BoltStore
	fsm   *kvFSM
}

// hashicorpCluster is three hashicorp/raft members, each with its own
// raft-boltdb store (log and stable store, fsync on), file snapshot store
// and TCP transport on 127.0.0.1.
type hashicorpCluster struct {
	members []*hcMember
	leader  *hcMember
}

// StartHashicorp starts a three-member hashicorp/raft cluster under dir.
func StartHashicorp(dir string) (Cluster, error) {
	c := &hashicorpCluster{}
	var servers []hraft.Server
	for i := 1; i <= 3; i++ {
		m, err := newHashicorpMember(hraft.ServerID(fmt.Sprint(i)), filepath.Join(dir, fmt.Sprint(i)))
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

func newHashicorpMember(id hraft.ServerID, dir string) (*hcMember, error) {
	logger := hclog.NewNullLogger()
	conf := hraft.DefaultConfig()
	conf.LocalID = id
	conf.HeartbeatTimeout = HashicorpHeartbeatTimeout
	conf.ElectionTimeout = HashicorpElectionTimeout
	conf.LeaderLeaseTimeout = HashicorpLeaderLeaseTimeout
	conf.SnapshotThreshold = 1 << 40 // no snapshot during a run
	conf.SnapshotInterval = 24 * time.Hour
	conf.Logger = logger
	conf.LogLevel = "ERROR"

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), NoSync: false})
	if err != nil {
		return nil, fmt.Errorf("hashicorp member %s: bolt store: %w", id, err)
	}
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: snapshot store: %w", id, err)
	}
	tr, err := hraft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("hashicorp member %s: transport: %w", id, err)
	}
	fsm := &kvFSM{data: map[string][]byte{}}
	r, err := hraft.NewRaft(conf, fsm, store, store, snaps, tr)
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
	var errs []error
	for _, m := range c.members {
		if err := m.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("hashicorp member %s: shutdown: %w", m.id, err))
		}
	}
	for _, m := range c.members {
		if err := m.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("hashicorp member %s: transport: %w", m.id, err))
		}
		if err := m.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("hashicorp member %s: storage: %w", m.id, err))
		}
	}
	return errors.Join(errs...)
}
