package raft

import (
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/storage"
)

// Finding 11: a snapshot queued for restore is restored even if two newer
// snapshots arrived first and the storage pruned its file: its data is
// opened when it is saved.
func TestQueuedSnapshotSurvivesPruning(t *testing.T) {
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := Config{ID: 1}.WithDefaults()
	n := &Node{store: st, cfg: nodeConfig{Config: &cfg, ID: 1}, sm: nopSM{}}
	n.log = cfg.Logger
	n.apply.init(n)
	n.tr = loneTransport{}
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	create := func(index uint64) *raftpb.Snapshot {
		t.Helper()
		snap, err := st.CreateSnapshot(index, cs, func(w io.Writer) error {
			return (&snapHeader{}).writeTo(w)
		})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	// The log must reach the snapshots' indexes.
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 30; i++ {
		ents = append(ents, &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Data: []byte{}})
	}
	if err := st.Save(&raftpb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(30))}, ents, nil); err != nil {
		t.Fatal(err)
	}
	first := create(10)
	files, err := n.openSnapFiles(first)
	if err != nil {
		t.Fatal(err)
	}
	create(20)
	create(30) // prunes the file of snapshot 10
	if rc, _, err := st.OpenSnapshot(first); err == nil {
		rc.Close()
		t.Skip("the storage kept the file of snapshot 10; nothing to test")
	}
	if err := n.restoreSnapshot(first, files); err != nil {
		t.Fatalf("restoring a queued snapshot whose file was pruned: %v", err)
	}
	if n.apply.applied != 10 {
		t.Fatalf("applied %d after the restore, want 10", n.apply.applied)
	}
}
