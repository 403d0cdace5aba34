package raft_test

import (
	"errors"
	"testing"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// TestNodeRefusesAnotherMembersStorage: the node itself (not only
// understudy.Start) refuses a storage that records another member ID or
// another cluster, with a *storage.IdentityError naming both, and records
// its identity in a storage that has none.
func TestNodeRefusesAnotherMembersStorage(t *testing.T) {
	start := func(store *storage.Store, id, cluster uint64) error {
		t.Helper()
		n, err := raft.NewNode(raft.Config{ID: id, ClusterID: cluster, InitialMembers: []raft.Member{{ID: id, PeerAddr: "127.0.0.1:1"}}}, kv.New(), store)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := transport.New(transport.Config{ID: id, ClusterID: cluster, ListenAddr: "127.0.0.1:0", Handler: n.PeerHandler()})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		return n.Start(tr)
	}
	store, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.SetIdentity(storage.Identity{ClusterID: 7, MemberID: 2}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, cluster uint64 }{{1, 7}, {2, 8}} {
		err := start(store, c.id, c.cluster)
		var ie *storage.IdentityError
		if !errors.Is(err, raft.ErrIdentityMismatch) || !errors.As(err, &ie) ||
			ie.Stored != (storage.Identity{ClusterID: 7, MemberID: 2}) || ie.Requested != (storage.Identity{ClusterID: c.cluster, MemberID: c.id}) {
			t.Fatalf("member %d of cluster %d on member 2's storage of cluster 7: %v", c.id, c.cluster, err)
		}
	}

	empty, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	n, err := raft.NewNode(raft.Config{ID: 3, ClusterID: 9, InitialMembers: []raft.Member{{ID: 3, PeerAddr: "127.0.0.1:1"}}}, kv.New(), empty)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(transport.Config{ID: 3, ClusterID: 9, ListenAddr: "127.0.0.1:0", Handler: n.PeerHandler()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := n.Start(tr); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Stop(t.Context()); <-n.Done() }()
	// ... with this copy's incarnation, made once.
	if id, err := empty.Identity(); err != nil || id != (storage.Identity{ClusterID: 9, MemberID: 3, Incarnation: n.Incarnation()}) || id.Incarnation == 0 {
		t.Fatalf("recorded identity %+v, %v (incarnation %x)", id, err, n.Incarnation())
	}
}
