package raft

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/storage"
)

// receivedSnapshot stores in st a snapshot at index 10 (term 1) as one
// received from a leader, and returns it.
func receivedSnapshot(t *testing.T, st *storage.Store) *raftpb.Snapshot {
	t.Helper()
	leader, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = leader.Close() }()
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 10; i++ {
		ents = append(ents, &raftpb.Entry{Term: proto.Uint64(1), Index: proto.Uint64(i)})
	}
	if err := leader.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(10)}, ents, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := leader.CreateSnapshot(10, &raftpb.ConfState{Voters: []uint64{1, 2}}, func(w io.Writer) error {
		_, err := w.Write(bytes.Repeat([]byte("state"), 100))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := leader.OpenSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if err := st.ReceiveSnapshot(snap, rc); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestAppendsPersistedAfterASnapshotSavedAtStop: a node that stops while
// its append goroutine saves a received snapshot cannot queue the restore
// any more; it must still persist the appends the run loop handed over
// after the snapshot, and the held-back commit index (issue 27: the append
// goroutine returned at once, skipping its final drain). The goroutine
// runs here on its own, with the appends queued and the node stopped: its
// selects pick at random, so each round gives the old code a chance to
// return early (one in four).
func TestAppendsPersistedAfterASnapshotSavedAtStop(t *testing.T) {
	for round := range 24 {
		n := newTestNode(t, 2, nopSM{})
		st := n.store.(*storage.Store)
		snap := receivedSnapshot(t, st)
		hs := func(commit uint64) (*uint64, *uint64, *uint64) {
			return proto.Uint64(2), proto.Uint64(0), proto.Uint64(commit)
		}
		snapMsg := &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), Snapshot: snap}
		snapMsg.Term, snapMsg.Vote, snapMsg.Commit = hs(10)
		entsMsg := &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum()}
		entsMsg.Term, entsMsg.Vote, entsMsg.Commit = hs(10)
		for i := uint64(11); i <= 13; i++ {
			entsMsg.Entries = append(entsMsg.Entries, &raftpb.Entry{Term: proto.Uint64(2), Index: proto.Uint64(i)})
		}
		commitMsg := &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum()}
		commitMsg.Term, commitMsg.Vote, commitMsg.Commit = hs(13)
		n.appends.push(snapMsg)
		n.appends.push(entsMsg)
		n.appends.push(commitMsg)
		// The loop has exited and the node stops: the append and apply
		// tasks are left.
		n.loopDone.Store(true)
		n.closeStopc()
		n.running.Store(true)
		n.loopExited = true
		n.live.Store(2)
		n.sched.enter() // as Start does
		n.runAppend()
		<-n.Done() // the apply task closed the queued restore's files
		n.closeOwnScheduler()

		last, err := st.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := st.InitialState()
		if err != nil {
			t.Fatal(err)
		}
		if last != 13 || got.GetCommit() != 13 {
			t.Fatalf("round %d: after a stop during a snapshot's save, the log ends at %d with commit %d; want 13 and 13 (the appends handed over were not persisted)", round, last, got.GetCommit())
		}
	}
}
