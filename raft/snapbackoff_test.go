package raft_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// failingSnapSM is a kv.Store whose snapshots fail to be written while
// fail is set (as a full disk or a broken exporter would), counting the
// attempts.
type failingSnapSM struct {
	*kv.Store
	fail     *atomic.Bool
	attempts *atomic.Int64
}

var errSnapWrite = errors.New("injected: snapshot write failed")

func (s failingSnapSM) Snapshot() (raft.Snapshot, error) {
	snap, err := s.Store.Snapshot()
	if err != nil {
		return nil, err
	}
	return failingSnap{Snapshot: snap, sm: s}, nil
}

type failingSnap struct {
	raft.Snapshot
	sm failingSnapSM
}

func (s failingSnap) Write(w io.Writer) error {
	if s.sm.fail.Load() {
		s.sm.attempts.Add(1)
		return errSnapWrite
	}
	return s.Snapshot.Write(w)
}

// startTCPMemberSM is startTCPMember with the state machine given.
func startTCPMemberSM(t *testing.T, dir string, id uint64, cfg raft.Config, initial []raft.Member, ln net.Listener, seeds []raft.Member, sm raft.StateMachine, store *kv.Store) *tcpMember {
	t.Helper()
	st, err := storage.Open(dir, storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg
	c.ID, c.InitialMembers, c.TickInterval = id, initial, 10*time.Millisecond
	node, err := raft.NewNode(c, sm, st)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.New(transport.Config{ID: id, ClusterID: 7, Listener: ln, Handler: node.PeerHandler(), Snapshots: st})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range seeds {
		tr.AddPeer(p.ID, p.PeerAddr)
	}
	if err := node.Start(tr); err != nil {
		t.Fatal(err)
	}
	m := &tcpMember{node: node, store: st, tr: tr, sm: store}
	t.Cleanup(m.stop)
	return m
}

// TestFailingSnapshotBacksOff: a snapshot that a joining member needs and
// that cannot be written (the state machine's Write fails) is retried
// after a backoff, not at once in a loop (issue 27: tens of thousands of
// attempts a second, each with a temp file and an Error line); once writes
// work again, the joiner gets its snapshot and catches up.
func TestFailingSnapshotBacksOff(t *testing.T) {
	cfg := raft.Config{SnapshotCount: 100, SnapshotCatchUpEntries: 10, ManualMembership: true}
	var fail atomic.Bool
	var attempts atomic.Int64
	var initial []raft.Member
	var lns []net.Listener
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		initial = append(initial, raft.Member{ID: id, PeerAddr: ln.Addr().String()})
	}
	dir := t.TempDir()
	var ms []*tcpMember
	for i, rec := range initial {
		store := kv.New()
		sm := failingSnapSM{Store: store, fail: &fail, attempts: &attempts}
		ms = append(ms, startTCPMemberSM(t, filepath.Join(dir, fmt.Sprint(rec.ID)), rec.ID, cfg, initial, lns[i], nil, sm, store))
	}
	ctx := ctxT(t, 60*time.Second)
	lead := tcpLeader(ctx, t, ms)
	// Snapshots (that work) and a compacted log: a joiner needs a snapshot.
	writeN(ctx, t, lead.node, "k", 300, 8, "v")
	if _, err := lead.node.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}

	fail.Store(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.node.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	joiner := startTCPMember(t, filepath.Join(dir, "4"), 4, cfg, nil, ln, tcpSeeds(ms))
	// Over a window of 2 s, the leader keeps wanting the snapshot the
	// joiner needs and cannot write it: the attempts are counted, not
	// timed.
	for attempts.Load() == 0 {
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("the leader never tried to write the snapshot the joiner needs")
		}
	}
	start := attempts.Load()
	if err := pause(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load() - start; n >= 50 {
		t.Fatalf("%d attempts to write a failing snapshot in 2 s: it is retried in a loop, not after a backoff", n)
	} else {
		t.Logf("%d attempts in 2 s", n)
	}

	fail.Store(false)
	st, err := lead.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for joiner.node.AppliedIndex() < st.Commit {
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("the joiner applied %d of %d after snapshot writes work again", joiner.node.AppliedIndex(), st.Commit)
		}
	}
	if got := joiner.sm.Len(); got != 300 {
		t.Fatalf("the joiner has %d keys, want 300", got)
	}
}
