package raft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/storage"
)

// nopSM is a state machine that keeps nothing.
type nopSM struct{}

func (nopSM) Apply(cmds []Command, results []Result) {}
func (nopSM) Lookup(q []byte) ([]byte, error)        { return nil, nil }
func (nopSM) Snapshot() (Snapshot, error)            { return nopSnap{}, nil }
func (nopSM) Restore(r io.Reader) error              { _, err := io.Copy(io.Discard, r); return err }

type nopSnap struct{}

func (nopSnap) Write(w io.Writer) error { return nil }
func (nopSnap) Release()                {}

// loneTransport connects a single member to no one.
type loneTransport struct{}

func (loneTransport) Send([]*raftpb.Message)    {}
func (loneTransport) AddPeer(uint64, string)    {}
func (loneTransport) UpdatePeer(uint64, string) {}
func (loneTransport) RemovePeer(uint64)         {}
func (loneTransport) SetLearner(uint64, bool)   {}
func (loneTransport) Call(context.Context, uint64, []byte) ([]byte, error) {
	return nil, errors.New("no peers")
}

// newTestNode returns member 1 of a cluster of members 1..size on real
// storage, not started; the cleanup stops it (if started) and closes the
// storage once it is done.
func newTestNode(t testing.TB, size int, sm StateMachine) *Node {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var members []Member
	for id := uint64(1); id <= uint64(size); id++ {
		members = append(members, Member{ID: id, PeerAddr: fmt.Sprintf("127.0.0.1:%d", 7000+id)})
	}
	n, err := NewNode(Config{ID: 1, TickInterval: 10 * time.Millisecond, InitialMembers: members}, sm, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.Stop(context.Background())
		<-n.Done()
		_ = st.Close()
	})
	return n
}

// startLone starts a one-member cluster on real storage and waits until it
// leads.
func startLone(t testing.TB) *Node {
	t.Helper()
	n := newTestNode(t, 1, nopSM{})
	if err := n.Start(loneTransport{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.state.wait(ctx, n.stopc, func(s nodeState) bool { return s.role == RoleLeader }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Raft replaces a conf change it cannot take by an empty entry, without an
// error: the node sees that its change ID is not in the append and says so.
func TestDroppedConfChangeIsDetected(t *testing.T) {
	n := startLone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := n.AppliedIndex()
	var err error
	// Leaving a joint configuration when there is none: raft drops it.
	if derr := n.do(ctx, func() { err = n.proposeChange(confchange.LeaveJointChange(42), 42, nil) }); derr != nil {
		t.Fatal(derr)
	}
	if !errors.Is(err, ErrChangeDropped) {
		t.Fatalf("err = %v, want ErrChangeDropped", err)
	}
	// The node is fine afterwards: a valid change goes through.
	if err := n.AddLearner(ctx, Member{ID: 2, PeerAddr: "127.0.0.1:7002"}); err != nil {
		t.Fatalf("a valid change after a dropped one: %v", err)
	}
	m, err := n.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Config.Contains(2) || m.Config.Contains(42) || n.AppliedIndex() <= before {
		t.Fatalf("membership %v", m.Config)
	}
}

// A change waiter is told when the leader's term moves on.
func TestChangeWaitersFailOnTermChange(t *testing.T) {
	var s changeSet
	w := &changeWaiter{term: 3, done: make(chan changeResult, 1)}
	s.add(7, w)
	s.failOlder(3, ErrLeaderChanged)
	select {
	case r := <-w.done:
		t.Fatalf("failed in its own term: %v", r.err)
	default:
	}
	s.failOlder(4, ErrLeaderChanged)
	if r := <-w.done; !errors.Is(r.err, ErrLeaderChanged) {
		t.Fatalf("err = %v", r.err)
	}
	s.resolve(7, changeResult{index: 1}) // gone: nothing more is delivered
	select {
	case r := <-w.done:
		t.Fatalf("a second result was delivered: %+v", r)
	default:
	}
}

type panickyPolicy struct{ asked chan struct{} }

func (p panickyPolicy) Next(confchange.View) (confchange.Request, bool) {
	select {
	case p.asked <- struct{}{}:
	default:
	}
	panic("host policy bug")
}

// A host policy that panics does not take the node down.
func TestPanickingPolicyIsIgnored(t *testing.T) {
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := panickyPolicy{asked: make(chan struct{}, 1)}
	n, err := NewNode(Config{ID: 1, TickInterval: 10 * time.Millisecond, Policy: p, InitialMembers: []Member{{ID: 1, PeerAddr: "127.0.0.1:7001"}}}, nopSM{}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(loneTransport{}); err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	<-p.asked
	<-p.asked
	if err := n.Err(); err != nil {
		t.Fatalf("node stopped: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.ReadBarrier(ctx); err != nil {
		t.Fatalf("node unusable after a policy panic: %v", err)
	}
}
