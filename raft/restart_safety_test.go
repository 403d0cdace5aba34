package raft_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// Regression tests for the read and restart safety review (issue 15). Each
// reproduces one finding on the in-process cluster.

// slowDisks wraps every member's storage in a faultstore, kept by ID across
// restarts (a restarted member gets a new wrapper with the same settings
// applied by the test).
type slowDisks struct {
	mu    sync.Mutex
	disks map[uint64]*faultstore.Store
	delay time.Duration
}

func (d *slowDisks) wrap(id uint64, s *storage.Store) raft.Storage {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.disks == nil {
		d.disks = map[uint64]*faultstore.Store{}
	}
	f := faultstore.Wrap(s)
	f.SetSaveDelay(d.delay)
	d.disks[id] = f
	return f
}

func (d *slowDisks) setDelay(v time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = v
	for _, f := range d.disks {
		f.SetSaveDelay(v)
	}
}

// Finding 1: a one-voter cluster restarted (after a clean Stop, or a crash)
// with a slow disk must not answer a linearizable read from its persisted
// commit index, which can trail acknowledged writes.
func TestOneVoterReadAfterRestartSeesAcknowledgedWrites(t *testing.T) {
	for _, stop := range []string{"clean", "crash"} {
		t.Run(stop, func(t *testing.T) {
			disks := &slowDisks{}
			c := cluster.New(t, cluster.Options{Members: 1, WrapStorage: disks.wrap})
			ctx := ctxT(t, 20*time.Second)
			lead := c.WaitLeader()
			for round := range 3 {
				want := fmt.Sprintf("v%d", round)
				propose(ctx, t, lead.Node, kv.Put("x", "older"))
				propose(ctx, t, lead.Node, kv.Put("x", want))
				disks.setDelay(0)
				if stop == "clean" {
					c.Stop(lead.ID)
				} else {
					c.Crash(lead.ID)
				}
				disks.setDelay(30 * time.Millisecond)
				lead = c.Restart(lead.ID)
				// Reads start at once, racing the new leader's first entry.
				for i := range 50 {
					v, err := lead.Node.Read(ctx, []byte("x"))
					if err != nil {
						t.Fatalf("round %d read %d: %v", round, i, err)
					}
					if string(v) != want {
						t.Fatalf("round %d read %d after restart: x = %q, want %q (acknowledged before the restart)", round, i, v, want)
					}
				}
				disks.setDelay(0)
			}
		})
	}
}

// Finding 2: an answer to a ReadIndex request a member sent before it
// restarted must not answer a read of its next run.
func TestReadIndexAnswerDoesNotCrossRestart(t *testing.T) {
	// Long ticks: the leader must keep leading (CheckQuorum) while its read
	// confirmations are held back.
	c := cluster.New(t, cluster.Options{TickInterval: 100 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	fID, leadID := f.ID, lead.ID // the filter runs on other goroutines; f is replaced at the restart
	propose(ctx, t, lead.Node, kv.Put("x", "1"))
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}

	// The leader cannot confirm reads (heartbeat answers carrying a read
	// context are lost), and f receives no more entries.
	var readsFromF atomic.Int64
	var hold atomic.Bool
	hold.Store(true)
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		if !hold.Load() {
			return false
		}
		switch {
		case from == fID && m.GetType() == raftpb.MsgReadIndex:
			readsFromF.Add(1)
		case m.GetType() == raftpb.MsgHeartbeatResp && len(m.GetContext()) > 0:
			return true
		case from == leadID && m.GetTo() == fID && m.GetType() == raftpb.MsgApp:
			return true
		}
		return false
	})
	waitReads := func(n int64) {
		t.Helper()
		for readsFromF.Load() < n {
			if err := pause(ctx, 2*time.Millisecond); err != nil {
				t.Fatalf("member %d sent %d reads, want %d", fID, readsFromF.Load(), n)
			}
		}
	}
	oldRead := make(chan error, 1)
	go func() {
		_, err := f.Node.Read(ctx, []byte("x"))
		oldRead <- err
	}()
	waitReads(1) // pending on the leader at the commit index of x=1
	propose(ctx, t, lead.Node, kv.Put("x", "2"))

	c.Crash(f.ID)
	if err := <-oldRead; !errors.Is(err, raft.ErrStopped) {
		t.Fatalf("the read of the crashed run: %v", err)
	}
	f = c.Restart(f.ID)
	type answer struct {
		v   string
		err error
	}
	newRead := make(chan answer, 1)
	go func() {
		v, err := f.Node.Read(ctx, []byte("x"))
		newRead <- answer{string(v), err}
	}()
	waitReads(2)
	hold.Store(false)
	a := <-newRead
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.v != "2" {
		t.Fatalf("read after restart: x = %q, want \"2\" (acknowledged before the read began)", a.v)
	}
}

// Finding 3: a leader that appended a conf change it could not commit, lost
// leadership (its tail overwritten) and leads again takes new changes at
// once, even on an idle cluster.
func TestConfGateAfterOverwrittenConfChange(t *testing.T) {
	c := cluster.New(t, cluster.Options{ManualMembership: true})
	ctx := ctxT(t, 30*time.Second)
	old := c.WaitLeader()
	propose(ctx, t, old.Node, kv.Put("x", "1"))
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}

	c.Net.Isolate(old.ID)
	// A tail the others never see: writes, then a conf change.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = old.Node.Propose(short, kv.Put(fmt.Sprintf("lost%d", i), "v"))
		}()
	}
	// The writes reach raft before the conf change (the leader appends them
	// at once); the leader steps down only an election timeout later.
	for {
		st, err := old.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.LastIndex >= 20 {
			break
		}
		if err := pause(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Node.AddLearner(short, c.Record(4)); err == nil {
		t.Fatal("an isolated leader's conf change was applied")
	} else {
		t.Logf("the isolated leader's change: %v", err)
	}
	wg.Wait()
	cancel()

	// The others elect a leader, whose log ends before that tail.
	var next *cluster.Member
	for next == nil {
		for _, m := range c.Running() {
			if m.ID == old.ID {
				continue
			}
			if st, err := m.Node.Status(ctx); err == nil && st.Role == raft.RoleLeader {
				next = m
			}
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("no new leader")
		}
	}
	c.Net.Heal()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Node.TransferLeadership(ctx, old.ID); err != nil {
		t.Fatalf("transfer back to %d: %v", old.ID, err)
	}
	// Idle: no writes. A change must go through.
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if err := old.Node.AddLearner(cctx, c.Record(5)); err != nil {
		t.Fatalf("adding a learner on the leader that leads again: %v", err)
	}
}

// Finding 5: a request retried with the same RequestID — through another
// member, after a crash and restart, after a snapshot — is applied once,
// and answered with its first answer. Plain proposals of a restarted
// member are never taken for duplicates.
func TestProposeWithIDAppliesRetriesOnce(t *testing.T) {
	c := cluster.New(t, cluster.Options{SnapshotCount: 20, SnapshotCatchUpEntries: 5})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	client, err := f.Node.RegisterClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := raft.RequestID{Client: client, Seq: 1}
	if _, err := f.Node.ProposeWithID(ctx, id, kv.CAS("k", "", "first")); err != nil {
		t.Fatal(err)
	}
	// The retry finds "first" there: a CAS applied twice would fail the
	// compare; a duplicate is not applied at all, and answered as the
	// first attempt was.
	for _, m := range []*cluster.Member{f, lead} {
		if _, err := m.Node.ProposeWithID(ctx, id, kv.CAS("k", "", "first")); err != nil {
			t.Fatalf("retry through member %d: %v, want the first answer (nil)", m.ID, err)
		}
	}
	if _, err := lead.Node.ProposeWithID(ctx, raft.RequestID{Client: 0, Seq: 1}, kv.Put("k", "v")); !errors.Is(err, raft.ErrInvalidRequest) {
		t.Fatalf("client ID 0: %v, want ErrInvalidRequest", err)
	}
	// Enough writes for snapshots and compaction, then a crash and restart
	// of every member in turn: the window survives in snapshots, and each
	// restarted member's own proposals are applied (never taken for
	// duplicates of its earlier runs).
	for _, mid := range c.Members() {
		for i := range 30 {
			propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("fill%d", i), "v"))
		}
		c.Crash(mid)
		m := c.Restart(mid)
		lead = c.WaitLeader()
		key := fmt.Sprintf("after-restart-%d", mid)
		propose(ctx, t, m.Node, kv.Put(key, "1"))
		if _, err := m.Node.ProposeWithID(ctx, id, kv.CAS("k", "", "first")); err != nil {
			t.Fatalf("retry through restarted member %d: %v, want the first answer (nil)", mid, err)
		}
		if v, err := m.Node.Read(ctx, []byte(key)); err != nil || string(v) != "1" {
			t.Fatalf("member %d's write after its restart: %q, %v", mid, v, err)
		}
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}

// Finding 6: a leader-changed event carries the new leader's term, also
// when the leader and the term change in one Ready (a member that was cut
// off during the election hears from the new leader at a higher term).
func TestLeaderChangedEventCarriesNewTerm(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	var x, y *cluster.Member
	for _, m := range c.Running() {
		switch {
		case m.ID == lead.ID:
		case x == nil:
			x = m
		default:
			y = m
		}
	}
	events, cancel := x.Node.Subscribe(64)
	defer cancel()
	c.Net.Isolate(x.ID)
	if err := lead.Node.TransferLeadership(ctx, y.ID); err != nil {
		t.Fatal(err)
	}
	c.Net.Heal()
	st, err := y.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-events:
			if e.Type == raft.EventLeaderChanged && e.Leader == y.ID {
				if e.Term != st.Term {
					t.Fatalf("member %d announced leader %d with term %d; it leads in term %d", x.ID, e.Leader, e.Term, st.Term)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("member %d: no leader-changed event for %d", x.ID, y.ID)
		}
	}
}

// Finding 8: leadership never moves to a voter that a joint configuration
// is removing (only in its outgoing half) — the same rule as the dry run.
func TestNoTransferToLeavingVoter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership})
	old := follower(t, c, lead)
	refusesTransferToLeaving(ctx, t, c, lead, old.ID)
	c.Net.Heal()
}

// refusesTransferToLeaving replaces voter old by learner 4, holds the
// group in the joint configuration (the leader's leave is dropped), waits
// until raft's configuration (Status) is joint, and checks that a dry run
// and a real transfer of leadership to old are refused: old is leaving.
func refusesTransferToLeaving(ctx context.Context, t *testing.T, c *cluster.Cluster, lead *cluster.Member, old uint64) {
	t.Helper()
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool { return from == lead.ID && isLeaveJoint(m) })
	go func() { _, _ = lead.Node.ChangeMembership(ctx, confchange.Replace(old, 4)) }()
	for {
		st, err := lead.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Joint() {
			break
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatal("raft never took the joint configuration")
		}
	}
	if _, err := lead.Node.CheckMembership(ctx, confchange.TransferLeader(old)); !errors.Is(err, confchange.ErrLearnerCannotLead) {
		t.Fatalf("dry run of a transfer to leaving member %d: %v", old, err)
	}
	if err := lead.Node.TransferLeadership(ctx, old); !errors.Is(err, raft.ErrLearnerCannotLead) {
		t.Fatalf("transfer to leaving member %d: %v, want ErrLearnerCannotLead", old, err)
	}
}

// stalledApplies is a kv.Store whose Apply waits while stalled is set: the
// apply task stops there, and raft goes on handing it committed entries.
type stalledApplies struct {
	*kv.Store
	stalled atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *stalledApplies) Apply(cmds []raft.Command, results []raft.Result) {
	if s.stalled.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		<-s.release
	}
	s.Store.Apply(cmds, results)
}

// The checks read the configuration raft has taken, not only the applied
// member table: with the leader's apply task stalled on an earlier write,
// raft takes a joint configuration as soon as the loop hands its entry to
// the apply task, and a dry run of a transfer to the voter it is removing
// must be refused at once (before, the check read the member table, still
// the old configuration until the apply task caught up, and passed).
func TestNoTransferToLeavingVoterWhileApplyLags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sms := map[uint64]*stalledApplies{}
	var mu sync.Mutex
	c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership,
		WrapStateMachine: func(id uint64, sm *kv.Store) raft.StateMachine {
			s := &stalledApplies{Store: sm, entered: make(chan struct{}, 1), release: make(chan struct{})}
			mu.Lock()
			sms[id] = s
			mu.Unlock()
			return s
		}})
	old := follower(t, c, lead)
	mu.Lock()
	gate := sms[lead.ID]
	mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	defer release()
	gate.stalled.Store(true)
	go func() { _, _ = lead.Node.Propose(ctx, kv.Put("stall", "apply")) }()
	select {
	case <-gate.entered:
	case <-ctx.Done():
		t.Fatal("the write never reached the leader's state machine")
	}
	refusesTransferToLeaving(ctx, t, c, lead, old.ID)
	release()
	c.Net.Heal()
}

// Finding 12: a forwarded proposal, or a leadership transfer, that raft
// drops silently ends with ErrTimeout, even under context.Background().
func TestDroppedForwardsTimeOut(t *testing.T) {
	c := cluster.New(t, cluster.Options{RequestTimeout: 300 * time.Millisecond})
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		return (from == f.ID && m.GetType() == raftpb.MsgProp) || m.GetType() == raftpb.MsgTimeoutNow
	})
	if _, err := f.Node.Propose(context.Background(), kv.Put("k", "v")); !errors.Is(err, raft.ErrTimeout) {
		t.Fatalf("a forwarded proposal the leader never got: %v, want ErrTimeout", err)
	}
	if err := lead.Node.TransferLeadership(context.Background(), f.ID); !errors.Is(err, raft.ErrTimeout) {
		t.Fatalf("a transfer whose MsgTimeoutNow is lost: %v, want ErrTimeout", err)
	}
}

// A clean Stop persists a commit index that covers every applied entry, even
// when the append goroutine is busy with a slow Save as the node stops: the
// appends the loop handed over are drained, not dropped. (A restarted host
// replays its log up to that index before Start returns, so its stale reads
// must not go back past writes acknowledged before the Stop; seen as
// TestHostRestartServesReplayedState failing under load.)
func TestCleanStopPersistsTheAppliedCommit(t *testing.T) {
	for round := range 10 {
		disks := &slowDisks{delay: 3 * time.Millisecond}
		c := cluster.New(t, cluster.Options{Members: 1, WrapStorage: disks.wrap})
		ctx := ctxT(t, 20*time.Second)
		lead := c.WaitLeader()
		var acked atomic.Int64
		writes, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; writes.Err() == nil; i++ {
					if _, err := lead.Node.Propose(writes, kv.Put(fmt.Sprintf("w%d", w), fmt.Sprint(i))); err == nil {
						acked.Add(1)
					}
				}
			}()
		}
		for acked.Load() < 50 {
			if err := pause(ctx, time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		c.Stop(lead.ID)
		stop()
		wg.Wait()
		applied := lead.Node.AppliedIndex()
		st, err := storage.Open(lead.Dir, storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		hs, _, err := st.InitialState()
		_ = st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if hs.GetCommit() < applied {
			t.Fatalf("round %d: the persisted commit index %d trails the applied index %d after a clean stop", round, hs.GetCommit(), applied)
		}
	}
}
