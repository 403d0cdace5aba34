package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/understudy-raft/understudy/benchmarks"
)

// hcMember is a hashicorp/raft member configured as benchmarks' Tuned
// profile (benchmarks/hashicorp.go): raft-boltdb for the log and stable
// store behind LogCache(512), a file snapshot store, TCP on 127.0.0.1 (pool
// 3), the Tuned timeouts, no snapshots during a run. The stream layer is
// TCP too, with every byte the member writes counted.
type hcMember struct {
	raft    *hraft.Raft
	store   *raftboltdb.BoltStore
	tr      *hraft.NetworkTransport
	stream  *countingStream
	rpcs    atomic.Uint64
	samples *applySamples
}

// sampledFSM applies nothing (the command's bytes are what matters for the
// transport) but records the apply times of sampled indexes.
type sampledFSM struct{ m *hcMember }

func (f sampledFSM) Apply(l *hraft.Log) any {
	f.m.samples.record(func(yield func(uint64) bool) { yield(l.Index) })
	return nil
}

func (sampledFSM) Snapshot() (hraft.FSMSnapshot, error) { return emptySnapshot{}, nil }
func (sampledFSM) Restore(rc io.ReadCloser) error       { return rc.Close() }

type emptySnapshot struct{}

func (emptySnapshot) Persist(sink hraft.SnapshotSink) error { return sink.Close() }
func (emptySnapshot) Release()                              {}

// countingStream is a TCP StreamLayer that counts the bytes written on
// every connection, dialed or accepted.
type countingStream struct {
	net.Listener
	written atomic.Uint64
}

func (s *countingStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &s.written}, nil
}

func (s *countingStream) Dial(addr hraft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &s.written}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(uint64(n))
	return n, err
}

// countingTransport counts the RPCs the member makes (its messages):
// appends (pipelined or not, heartbeats included), votes, snapshots.
type countingTransport struct {
	*hraft.NetworkTransport
	n *atomic.Uint64
}

func (t *countingTransport) AppendEntries(id hraft.ServerID, target hraft.ServerAddress, args *hraft.AppendEntriesRequest, resp *hraft.AppendEntriesResponse) error {
	t.n.Add(1)
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

func (t *countingTransport) AppendEntriesPipeline(id hraft.ServerID, target hraft.ServerAddress) (hraft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &countingPipeline{AppendPipeline: p, n: t.n}, nil
}

func (t *countingTransport) RequestVote(id hraft.ServerID, target hraft.ServerAddress, args *hraft.RequestVoteRequest, resp *hraft.RequestVoteResponse) error {
	t.n.Add(1)
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

func (t *countingTransport) RequestPreVote(id hraft.ServerID, target hraft.ServerAddress, args *hraft.RequestPreVoteRequest, resp *hraft.RequestPreVoteResponse) error {
	t.n.Add(1)
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

func (t *countingTransport) InstallSnapshot(id hraft.ServerID, target hraft.ServerAddress, args *hraft.InstallSnapshotRequest, resp *hraft.InstallSnapshotResponse, data io.Reader) error {
	t.n.Add(1)
	return t.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
}

func (t *countingTransport) TimeoutNow(id hraft.ServerID, target hraft.ServerAddress, args *hraft.TimeoutNowRequest, resp *hraft.TimeoutNowResponse) error {
	t.n.Add(1)
	return t.NetworkTransport.TimeoutNow(id, target, args, resp)
}

type countingPipeline struct {
	hraft.AppendPipeline
	n *atomic.Uint64
}

func (p *countingPipeline) AppendEntries(args *hraft.AppendEntriesRequest, resp *hraft.AppendEntriesResponse) (hraft.AppendFuture, error) {
	p.n.Add(1)
	return p.AppendPipeline.AppendEntries(args, resp)
}

func startHashicorp(f *memberFlags, samples *applySamples) (*hcMember, error) {
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr})
	conf := hraft.DefaultConfig()
	conf.LocalID = hraft.ServerID(strconv.FormatUint(f.id, 10))
	conf.HeartbeatTimeout = benchmarks.HashicorpHeartbeatTimeout
	conf.ElectionTimeout = benchmarks.HashicorpElectionTimeout
	conf.LeaderLeaseTimeout = benchmarks.HashicorpLeaderLeaseTimeout
	conf.SnapshotThreshold = 1 << 40 // no snapshot during a run
	conf.SnapshotInterval = 24 * time.Hour
	conf.Logger = logger
	conf.LogLevel = "WARN"
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(f.dir, "raft.db"), NoSync: !f.fsync})
	if err != nil {
		return nil, fmt.Errorf("hashicorp member %d: bolt store: %w", f.id, err)
	}
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(f.dir, 2, logger)
	if err != nil {
		store.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		store.Close()
		return nil, err
	}
	m := &hcMember{store: store, samples: samples, stream: &countingStream{Listener: ln}}
	m.tr = hraft.NewNetworkTransport(m.stream, 3, 10*time.Second, io.Discard)
	logs, err := hraft.NewLogCache(benchmarks.HashicorpLogCacheSize, store)
	if err != nil {
		m.tr.Close()
		store.Close()
		return nil, err
	}
	m.raft, err = hraft.NewRaft(conf, sampledFSM{m}, logs, store, snaps, &countingTransport{NetworkTransport: m.tr, n: &m.rpcs})
	if err != nil {
		m.tr.Close()
		store.Close()
		return nil, fmt.Errorf("hashicorp member %d: %w", f.id, err)
	}
	if !f.standby {
		// Every voter bootstraps with the same configuration; a restarted
		// one has it already (ErrCantBootstrap).
		var servers []hraft.Server
		for i, a := range f.voters {
			servers = append(servers, hraft.Server{Suffrage: hraft.Voter, ID: hraft.ServerID(strconv.Itoa(i + 1)), Address: hraft.ServerAddress(a)})
		}
		if err := m.raft.BootstrapCluster(hraft.Configuration{Servers: servers}).Error(); err != nil && err != hraft.ErrCantBootstrap {
			_ = m.close(context.Background())
			return nil, fmt.Errorf("hashicorp member %d: bootstrap: %w", f.id, err)
		}
	}
	return m, nil
}

func (m *hcMember) status(context.Context) (memberStatus, error) {
	commit, _ := strconv.ParseUint(m.raft.Stats()["commit_index"], 10, 64)
	return memberStatus{Leader: m.raft.State() == hraft.Leader, Applied: m.raft.AppliedIndex(), Commit: commit}, nil
}

func (m *hcMember) add(_ context.Context, id uint64, addr string) error {
	return m.raft.AddNonvoter(hraft.ServerID(strconv.FormatUint(id, 10)), hraft.ServerAddress(addr), 0, time.Minute).Error()
}

func (m *hcMember) write(_ context.Context, cmd []byte) error {
	return m.raft.Apply(cmd, time.Minute).Error()
}

// sent is the RPCs the member made and every byte it wrote on its raft
// connections (its answers to others' RPCs included, as understudy's
// counters include its responses).
func (m *hcMember) sent() (msgs, bytes uint64) {
	return m.rpcs.Load(), m.stream.written.Load()
}

func (m *hcMember) close(context.Context) error {
	err := m.raft.Shutdown().Error()
	m.tr.Close()
	m.store.Close()
	return err
}
