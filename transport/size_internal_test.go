package transport

import (
	"io"
	"log/slog"
	"testing"
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"
)

// TestGroupSizeClasses: a group's Transport fits the 288-byte size class
// (it took 896, then 640 with the 8-byte header the Go runtime puts before
// an object of more than 512 bytes that holds pointers, before its Config
// was shared — transportConfig — and its removed members joined its rare
// state), and each of its peers the 256-byte class
// (288 plus 176 for its counters before, then 288 until what a peer keeps
// of refusals, snapshots and too large messages joined its rare counters),
// and each peer's flow on its host
// link the 80-byte class (96 before). A host holds one Transport and a
// peer and a flow per other member for each replica of its many groups
// (see "Memory of an idle group" in docs/architecture.md).
func TestGroupSizeClasses(t *testing.T) {
	if size := unsafe.Sizeof(Transport{}); size > 288 {
		t.Errorf("a Transport takes %d bytes: over the 288-byte size class", size)
	}
	if size := unsafe.Sizeof(peer{}); size > 256 {
		t.Errorf("a peer takes %d bytes: over the 256-byte size class", size)
	}
	// A peer's rare counters, made with its first refusal (about half of
	// a host's peers, refused while the groups start), fit the 96-byte
	// class: the snapshot counters are apart, made with the first snapshot
	// (144 with them, and 136 with what a peer keeps of rare events).
	if size := unsafe.Sizeof(rareCounters{}); size > 96 {
		t.Errorf("a peer's rare counters take %d bytes: over the 96-byte size class", size)
	}
	if size := unsafe.Sizeof(flow{}); size > 80 {
		t.Errorf("a flow takes %d bytes: over the 80-byte size class", size)
	}
}

// TestTransportsShareTheirConfig: the transports of a Mux whose Configs
// differ only in what is each group's own (IDs, cluster, address,
// incarnation, handler, snapshots, logger, peers) share one Config and
// keep their own fields; one configured otherwise, or with a private mux,
// does not share it.
func TestTransportsShareTheirConfig(t *testing.T) {
	m := newTestMux(t)
	tr := func(id, group uint64, mod func(*Config)) *Transport {
		t.Helper()
		cfg := Config{
			ID: id, GroupID: group, ClusterID: testCluster + group, Mux: m, Handler: &fakeHandler{},
			AdvertiseAddr: m.Addr().String(), Incarnation: 7 * id, Logger: slog.New(slog.DiscardHandler).With("group", group),
			Peers: map[uint64]string{id + 1: "127.0.0.1:1"}, Snapshots: &nopSnapStore{},
		}
		if mod != nil {
			mod(&cfg)
		}
		x, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = x.Close() })
		return x
	}
	a, b := tr(1, 1, nil), tr(2, 2, nil)
	if a.cfg.Config != b.cfg.Config {
		t.Fatal("two transports of a mux configured alike do not share their Config")
	}
	if a.cfg.ID != 1 || a.cfg.GroupID != 1 || b.cfg.ID != 2 || b.cfg.GroupID != 2 || a.cfg.Snapshots == b.cfg.Snapshots {
		t.Fatalf("own fields lost: %+v, %+v", a.cfg, b.cfg)
	}
	if a.ClusterID() != testCluster+1 || b.inc.Load() != 14 || a.peer(2) == nil || b.peer(3) == nil {
		t.Error("a transport lost what New read of its Config")
	}
	if sh := a.cfg.Config; sh.ID != 0 || sh.GroupID != 0 || sh.Handler != nil || sh.Logger != nil || sh.Peers != nil || sh.Snapshots != nil {
		t.Errorf("the shared Config holds a group's own fields: %+v", sh)
	}
	if c := tr(3, 3, func(c *Config) { c.MaxQueueMessages = 7 }); c.cfg.Config == a.cfg.Config || c.cfg.MaxQueueMessages != 7 {
		t.Error("a transport configured otherwise shares the others' Config")
	}
	d := tr(4, 4, func(c *Config) { c.Mux, c.ListenAddr = nil, "127.0.0.1:0" })
	if d.cfg.Config == a.cfg.Config || d.mux.snapSend == m.snapSend {
		t.Error("a transport with a private mux shares a Config or the host's snapshot budget")
	}
}

// nopSnapStore is a SnapshotStore that holds nothing.
type nopSnapStore struct{ _ byte }

func (*nopSnapStore) OpenSnapshot(*raftpb.Snapshot) (io.ReadCloser, int64, error) {
	return nil, 0, io.EOF
}
func (*nopSnapStore) ReceiveSnapshot(*raftpb.Snapshot, io.Reader) error { return io.EOF }
