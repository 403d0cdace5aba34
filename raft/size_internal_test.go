package raft

import (
	"log/slog"
	"testing"
	"unsafe"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/storage"
)

// TestNodeSizeClass: a Node, with the 8-byte header the Go runtime puts
// before an object of more than 512 bytes that holds pointers, fits the
// 1,408-byte size class. A host holds one per replica of its many groups
// (see "Memory of an idle group" in docs/architecture.md): it was 2,224
// bytes, in the 2,304 class; the leader's bookkeeping, the relay state and
// the apply task's buffers now live apart, made on use (1,784, in the
// 1,792 class); its Config is shared by the nodes of a scheduler
// configured alike (nodeConfig: 288 bytes in each Node before: 1,528, in
// the 1,536 class); and what a quiesced leader keeps of lagging members,
// the snapshot backoff and the event subscribers are made on use, its
// stop flags and error are atomics (1,392).
func TestNodeSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(Node{}) + 8; size > 1408 {
		t.Fatalf("a Node takes %d bytes with its allocation header: over the 1,408-byte size class", size)
	}
}

// TestNodesShareTheirConfig: the nodes of one scheduler whose Configs
// differ only in what is each member's own (ID, ClusterID, InitialMembers,
// OnStopped, Logger) share one Config and keep their own fields; a node
// configured otherwise, or with its own scheduler, does not share it.
func TestNodesShareTheirConfig(t *testing.T) {
	s := NewScheduler(SchedulerConfig{Workers: 1, IOWorkers: 1, ApplyWorkers: 1})
	defer s.Close()
	stopped := 0
	node := func(id uint64, mod func(*Config)) *Node {
		t.Helper()
		cfg := Config{
			ID: id, ClusterID: 100 + id, Scheduler: s,
			Logger:         slog.New(slog.DiscardHandler).With("group", id),
			InitialMembers: []confchange.Member{{ID: id, PeerAddr: "127.0.0.1:1"}},
			OnStopped:      func(error) { stopped++ },
		}
		if mod != nil {
			mod(&cfg)
		}
		st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		n, err := NewNode(cfg, nopSM{}, st)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := node(1, nil), node(2, nil)
	if a.cfg.Config != b.cfg.Config {
		t.Fatal("two nodes of a scheduler configured alike do not share their Config")
	}
	if a.ID() != 1 || b.ID() != 2 || a.cfg.ID != 1 || b.cfg.ID != 2 {
		t.Fatalf("IDs %d and %d, want 1 and 2", a.ID(), b.ID())
	}
	for i, n := range []*Node{a, b} {
		cluster, initial := n.cfg.bootConfig()
		if id := uint64(i + 1); cluster != 100+id || len(initial) != 1 || initial[0].ID != id {
			t.Errorf("node %d: configured cluster %d and initial members %v, want %d and its own", id, cluster, initial, 100+id)
		}
		n.cfg.OnStopped(nil)
	}
	if stopped != 2 {
		t.Errorf("%d OnStopped called, want 2", stopped)
	}
	if sh := a.cfg.Config; sh.ID != 0 || sh.ClusterID != 0 || sh.InitialMembers != nil || sh.OnStopped != nil || sh.Logger != nil {
		t.Errorf("the shared Config holds a member's own fields: %+v", sh)
	}
	if c := node(3, func(c *Config) { c.ElectionTicks = 20 }); c.cfg.Config == a.cfg.Config || c.cfg.ElectionTicks != 20 {
		t.Error("a node configured otherwise shares the others' Config")
	}
	if d := node(4, func(c *Config) { c.Scheduler = nil }); d.cfg.Config == a.cfg.Config {
		t.Error("a node with its own scheduler shares a Config")
	}
}
