package raft_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// tcpMember is a member on real storage and the TCP transport (127.0.0.1).
type tcpMember struct {
	node  *raft.Node
	store *storage.Store
	tr    *transport.Transport
	sm    *kv.Store
}

// startTCPCluster starts n members over TCP on 127.0.0.1 with cfg's sizes.
func startTCPCluster(t *testing.T, n int, cfg raft.Config, opts ...func(*transport.Config)) []*tcpMember {
	t.Helper()
	var initial []raft.Member
	var lns []net.Listener
	for id := 1; id <= n; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		initial = append(initial, raft.Member{ID: uint64(id), PeerAddr: ln.Addr().String()})
	}
	dir := t.TempDir()
	var ms []*tcpMember
	for i, rec := range initial {
		ms = append(ms, startTCPMember(t, filepath.Join(dir, fmt.Sprint(rec.ID)), rec.ID, cfg, initial, lns[i], nil, opts...))
	}
	return ms
}

// startTCPMember starts member id on ln with storage in dir: a new cluster
// of initial, or (initial nil) a member joining the peers in seeds.
func startTCPMember(t *testing.T, dir string, id uint64, cfg raft.Config, initial []raft.Member, ln net.Listener, seeds []raft.Member, opts ...func(*transport.Config)) *tcpMember {
	t.Helper()
	st, err := storage.Open(dir, storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg
	c.ID, c.InitialMembers, c.TickInterval = id, initial, 10*time.Millisecond
	sm := kv.New()
	node, err := raft.NewNode(c, sm, st)
	if err != nil {
		t.Fatal(err)
	}
	tcfg := transport.Config{ID: id, ClusterID: 7, Listener: ln, Handler: node.PeerHandler(), Snapshots: st}
	for _, o := range opts {
		o(&tcfg)
	}
	tr, err := transport.New(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range seeds {
		tr.AddPeer(p.ID, p.PeerAddr)
	}
	if err := node.Start(tr); err != nil {
		t.Fatal(err)
	}
	m := &tcpMember{node: node, store: st, tr: tr, sm: sm}
	t.Cleanup(m.stop)
	return m
}

// stop stops the member and closes its transport and storage (idempotent).
func (m *tcpMember) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.node.Stop(ctx)
	<-m.node.Done()
	_ = m.tr.Close()
	_ = m.store.Close()
}

// A command of exactly MaxCommandSize is replicated over the real transport,
// from the leader and forwarded from a follower (one entry larger than
// MaxSizePerMsg still travels, alone in its message); one byte more is
// ErrTooLarge before anything is proposed.
func TestMaxCommandSizeOverTCP(t *testing.T) {
	cfg := raft.Config{MaxSizePerMsg: 256 << 10, MaxCommandSize: 1 << 20}
	ms := startTCPCluster(t, 3, cfg)
	ctx := ctxT(t, 30*time.Second)
	key := func(i int) string { return fmt.Sprintf("big-%d", i) }
	for i, m := range ms {
		// The largest value whose encoded Put is exactly MaxCommandSize.
		n := cfg.MaxCommandSize - len(kv.Put(key(i), ""))
		for len(kv.Put(key(i), string(make([]byte, n)))) > cfg.MaxCommandSize {
			n-- // the value's length prefix grows with it
		}
		cmd := kv.Put(key(i), string(bytes.Repeat([]byte{byte('a' + i)}, n)))
		if len(cmd) != cfg.MaxCommandSize {
			t.Fatalf("command of %d bytes, want %d", len(cmd), cfg.MaxCommandSize)
		}
		if _, err := m.node.Propose(ctx, cmd); err != nil {
			t.Fatalf("member %d: proposing %d bytes: %v", m.node.ID(), len(cmd), err)
		}
		if _, err := m.node.Propose(ctx, append(cmd, 'x')); !errors.Is(err, raft.ErrTooLarge) {
			t.Fatalf("member %d: one byte over MaxCommandSize: %v", m.node.ID(), err)
		}
	}
	for _, m := range ms {
		for i := range ms {
			v, err := m.node.Read(ctx, []byte(key(i)))
			if err != nil || len(v) == 0 || v[0] != byte('a'+i) {
				t.Fatalf("member %d reads %s: %d bytes, %v", m.node.ID(), key(i), len(v), err)
			}
		}
	}
}
