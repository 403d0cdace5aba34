package raft_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// fastMembership makes learners ready quickly in tests.
var fastMembership = confchange.Settings{Stabilization: 100 * time.Millisecond}

// follower returns a running voter that does not lead.
func follower(t *testing.T, c *cluster.Cluster, lead *cluster.Member) *cluster.Member {
	t.Helper()
	for _, m := range c.Running() {
		if m.ID != lead.ID {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// waitMembership polls the membership (asked of node) until ok holds.
func waitMembership(ctx context.Context, t *testing.T, node *raft.Node, what string, ok func(raft.Membership) bool) raft.Membership {
	t.Helper()
	var last raft.Membership
	var lastErr error
	for {
		m, err := node.Membership(ctx)
		if err == nil && ok(m) {
			return m
		}
		last, lastErr = m, err
		select {
		case <-ctx.Done():
			var desc []string
			for _, s := range last.Members {
				desc = append(desc, fmt.Sprintf("%d %v lag %d %s", s.ID, s.Role, s.Lag, s.Readiness))
			}
			t.Fatalf("waiting for %s: %v (last membership: %v %v; err %v)", what, ctx.Err(), last.Config, desc, lastErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func memberStatus(m raft.Membership, id uint64) (raft.MemberStatus, bool) {
	for _, s := range m.Members {
		if s.ID == id {
			return s, true
		}
	}
	return raft.MemberStatus{}, false
}

func ready(id uint64) func(raft.Membership) bool {
	return func(m raft.Membership) bool {
		s, ok := memberStatus(m, id)
		return ok && s.Readiness.Ready()
	}
}

// addLearner adds member id as a learner through node and starts it.
func addLearner(ctx context.Context, t *testing.T, c *cluster.Cluster, via *raft.Node, id uint64) *cluster.Member {
	t.Helper()
	for {
		err := via.AddLearner(ctx, c.Record(id))
		if err == nil {
			break
		}
		// Another change went first (the policy's, or the previous add's
		// not applied yet on a loaded machine): nothing was done, try again.
		if (!errors.Is(err, raft.ErrChangeDropped) && !errors.Is(err, confchange.ErrChangeInProgress)) || ctx.Err() != nil {
			t.Fatalf("adding learner %d: %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c.Join(id)
}

// withReadyLearner starts a 3-voter cluster with opts, adds member 4 as a
// learner and waits until the leader finds it ready.
func withReadyLearner(ctx context.Context, t *testing.T, opts cluster.Options) (*cluster.Cluster, *cluster.Member) {
	t.Helper()
	c := cluster.New(t, opts)
	lead := c.WaitLeader()
	addLearner(ctx, t, c, lead.Node, 4)
	waitMembership(ctx, t, lead.Node, "learner 4 ready", ready(4))
	return c, lead
}

// countingPolicy is the default policy, counting how often the leader asks.
type countingPolicy struct {
	inner confchange.Policy
	asked atomic.Int64
}

func (p *countingPolicy) Next(v confchange.View) (confchange.Request, bool) {
	p.asked.Add(1)
	return p.inner.Next(v)
}

// waitRounds waits until the leader asked the policy n more times: a
// condition, not a sleep, for "the policy had its chance and did nothing".
func (p *countingPolicy) waitRounds(ctx context.Context, t *testing.T, n int64) {
	t.Helper()
	target := p.asked.Load() + n
	for p.asked.Load() < target {
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("the policy was asked %d times, want %d: %v", p.asked.Load(), target, err)
		}
	}
}

// A learner added through a follower (forwarded to the leader) catches up,
// serves proposals (forwarded) and linearizable reads, and never votes.
func TestLearnerProposesAndReads(t *testing.T) {
	policy := &countingPolicy{inner: confchange.DefaultPolicy{Settings: fastMembership}}
	c := cluster.New(t, cluster.Options{Membership: fastMembership, Policy: policy})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	if _, err := lead.Node.Propose(ctx, kv.Put("before", "1")); err != nil {
		t.Fatal(err)
	}
	f := follower(t, c, lead)
	l := addLearner(ctx, t, c, f.Node, 4)

	// The learner's own write, forwarded to the leader, resolved on it.
	if _, err := l.Node.Propose(ctx, kv.Put("from-learner", "4")); err != nil {
		t.Fatalf("propose on the learner: %v", err)
	}
	// A write through a voter, then a linearizable read on the learner.
	if _, err := lead.Node.Propose(ctx, kv.Put("after", "2")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"before", "from-learner", "after"} {
		v, err := l.Node.Read(ctx, []byte(k))
		if err != nil || v == nil {
			t.Fatalf("linearizable read of %q on the learner: %q, %v", k, v, err)
		}
	}
	st, err := l.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != raft.RoleLearner || !slices.Contains(st.Learners, 4) || slices.Contains(st.Voters, 4) {
		t.Fatalf("learner status: role %v voters %v learners %v", st.Role, st.Voters, st.Learners)
	}
	// The membership, asked of the learner (forwarded), shows it with its
	// catch-up; with 3 voters the target is met, so it stays a standby.
	m := waitMembership(ctx, t, l.Node, "learner 4 ready", ready(4))
	s, _ := memberStatus(m, 4)
	if s.Role != confchange.RoleLearner || s.Progress == nil || s.PeerAddr != c.Record(4).PeerAddr {
		t.Fatalf("member 4 in the membership: %+v", s)
	}
	if m.Leader != lead.ID || len(m.Config.Voters) != 3 {
		t.Fatalf("membership: %+v", m)
	}
	policy.waitRounds(ctx, t, 10) // the policy sees a ready standby: nothing to do
	if m, _ := lead.Node.Membership(ctx); len(m.Config.Voters) != 3 || m.Joint() || m.Pending {
		t.Fatalf("the policy changed a full cluster: %v", m.Config)
	}
	// A learner cannot lead.
	if err := lead.Node.TransferLeadership(ctx, 4); !errors.Is(err, raft.ErrLearnerCannotLead) {
		t.Fatalf("transfer to a learner: %v", err)
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}

// Unsafe requests are refused with a typed reason before anything is
// proposed, on the leader and forwarded from a follower alike.
func TestMembershipRefusals(t *testing.T) {
	c := cluster.New(t, cluster.Options{ManualMembership: true, Membership: confchange.Settings{MaxLearners: 1, Stabilization: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	addLearner(ctx, t, c, lead.Node, 4)
	before, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []*raft.Node{lead.Node, f.Node} {
		cases := []struct {
			name string
			req  confchange.Request
			want error
		}{
			{"promote a learner that is not stable yet", confchange.Promote(4), confchange.ErrLearnerNotReady},
			{"add an existing ID", confchange.AddLearner(c.Record(2)), confchange.ErrMemberExists},
			{"add a second learner over MaxLearners=1", confchange.AddLearner(c.Record(5)), confchange.ErrTooManyLearners},
			{"reuse an address", confchange.AddLearner(raft.Member{ID: 6, PeerAddr: c.Record(1).PeerAddr}), confchange.ErrMemberExists},
			{"remove an unknown member", confchange.Remove(9), confchange.ErrUnknownMember},
			{"a bad address", confchange.AddLearner(raft.Member{ID: 7, PeerAddr: "nowhere"}), confchange.ErrInvalidMember},
		}
		for _, tc := range cases {
			_, err := node.ChangeMembership(ctx, tc.req)
			if !errors.Is(err, tc.want) {
				t.Errorf("member %d: %s: err = %v, want %v", node.ID(), tc.name, err, tc.want)
			}
			var ref *confchange.Refusal
			if !errors.As(err, &ref) || ref.Code() == "" {
				t.Errorf("member %d: %s: %v is not a *confchange.Refusal", node.ID(), tc.name, err)
			}
			if _, err := node.CheckMembership(ctx, tc.req); !errors.Is(err, tc.want) {
				t.Errorf("member %d: dry run of %s: err = %v", node.ID(), tc.name, err)
			}
		}
		var ref *confchange.Refusal
		_, err := node.ChangeMembership(ctx, confchange.Promote(4))
		if !errors.As(err, &ref) || ref.ID != 4 || ref.Readiness.Ready() || ref.Readiness.String() == "" {
			t.Errorf("member %d: a not-ready refusal carries its readiness: %+v", node.ID(), ref)
		}
	}
	// A dry run of an acceptable change plans it and changes nothing.
	res, err := f.Node.CheckMembership(ctx, confchange.Remove(4))
	if err != nil || res.Description == "" || res.Index != 0 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	after, err := lead.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requireNoConfChange(t, lead, before.LastIndex, after.LastIndex)
}

// requireNoConfChange fails if m's log holds a conf change in (from, to]:
// a refused request must not reach the log. (The leader appends entries of
// its own meanwhile — a learner's readiness, the cluster settings — so the
// last index alone does not tell.)
func requireNoConfChange(t *testing.T, m *cluster.Member, from, to uint64) {
	t.Helper()
	if to <= from {
		return
	}
	// to is raft's last index (Status): its storage writes are
	// asynchronous, so the last entries may not be stored yet.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		last, err := m.Store.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if last >= to {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log's last stored index is %d, raft's %d", last, to)
		}
	}
	ents, err := m.Store.Entries(from+1, to+1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.GetType() != raftpb.EntryNormal {
			t.Fatalf("a refused request reached the log: %v at %d", e.GetType(), e.GetIndex())
		}
	}
}

// The default policy promotes ready learners to fill the voter seats, two
// at once through a joint configuration so that the count stays odd; a
// removed member learns it and its ID is never reused.
func TestPolicyGrowsOneVoterToThree(t *testing.T) {
	policy := &countingPolicy{inner: confchange.DefaultPolicy{Settings: fastMembership}}
	c := cluster.New(t, cluster.Options{Members: 1, Membership: fastMembership, Policy: policy})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	events, unsubscribe := lead.Node.Subscribe(64)
	defer unsubscribe()
	addLearner(ctx, t, c, lead.Node, 2)
	// One voter and one ready learner: promoting it alone would make two
	// voters, so the policy waits for a second one.
	waitMembership(ctx, t, lead.Node, "learner 2 ready", ready(2))
	policy.waitRounds(ctx, t, 10)
	if m, _ := lead.Node.Membership(ctx); len(m.Config.Voters) != 1 || m.Pending {
		t.Fatalf("the policy made the voter count even: %v", m.Config)
	}
	addLearner(ctx, t, c, lead.Node, 3)
	m := waitMembership(ctx, t, lead.Node, "three voters", func(m raft.Membership) bool {
		return len(m.Config.Voters) == 3 && !m.Joint() && !m.Pending
	})
	if !slices.Equal(m.Config.Voters, []uint64{1, 2, 3}) || len(m.Config.Learners) != 0 {
		t.Fatalf("config %v", m.Config)
	}
	// It went through a joint configuration: (1 2 3)&&(1), then (1 2 3).
	var changes int
	for len(events) > 0 {
		if e := <-events; e.Type == raft.EventMembershipChanged {
			changes++
		}
	}
	if changes < 4 { // add 2, add 3, enter joint, leave joint
		t.Fatalf("%d membership changes seen, want at least 4", changes)
	}

	// Remove 3: it learns it was removed; its ID cannot come back.
	removed, unsub3 := c.Member(3).Node.Subscribe(16)
	defer unsub3()
	if err := lead.Node.RemoveMember(ctx, 3); err != nil {
		t.Fatalf("remove 3: %v", err)
	}
	waitEvent(ctx, t, removed, raft.EventRemoved)
	if err := lead.Node.AddLearner(ctx, c.Record(3)); !errors.Is(err, confchange.ErrMemberExists) {
		t.Fatalf("re-adding removed ID 3: %v", err)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("k", "v")); err != nil {
		t.Fatalf("write with voters (1 2): %v", err)
	}
}

func waitEvent(ctx context.Context, t *testing.T, ch <-chan raft.Event, typ raft.EventType) raft.Event {
	t.Helper()
	for {
		select {
		case e := <-ch:
			if e.Type == typ {
				return e
			}
		case <-ctx.Done():
			t.Fatalf("no %v event: %v", typ, ctx.Err())
		}
	}
}

// A voter that is unreachable for FailoverAfter is swapped for a ready
// standby in one joint change; the voter count stays three, and the
// cluster keeps writing. The lost voter rejoins as a standby.
func TestPolicyFailsOverToStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{Membership: confchange.Settings{Stabilization: 100 * time.Millisecond, FailoverAfter: 500 * time.Millisecond}})
	lost := follower(t, c, lead).ID
	c.Crash(lost)
	m := waitMembership(ctx, t, lead.Node, fmt.Sprintf("4 replacing %d", lost), func(m raft.Membership) bool {
		return slices.Contains(m.Config.Voters, 4) && !m.Joint() && !m.Pending
	})
	if len(m.Config.Voters) != 3 || slices.Contains(m.Config.Voters, lost) || !slices.Contains(m.Config.Learners, lost) {
		t.Fatalf("after failover: %v", m.Config)
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("after-failover", "x")); err != nil {
		t.Fatal(err)
	}
	c.Restart(lost)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Member(lost).Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != raft.RoleLearner {
		t.Fatalf("the lost voter came back as %v, want a learner (standby)", st.Role)
	}
}

// Swapping a voter for a learner explicitly goes through a joint
// configuration that the leader leaves on its own; the caller returns once
// it is left.
func TestExplicitJointSwap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership})
	old := follower(t, c, lead)
	res, err := old.Node.ChangeMembership(ctx, confchange.Swap(old.ID, 4))
	if err != nil {
		t.Fatalf("swap: %v", err)
	}
	if res.Index == 0 || res.Description == "" {
		t.Fatalf("result %+v", res)
	}
	// Answered once applied on the member that asked (old, a follower).
	st, err := old.Node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Applied < res.Index || st.Joint() || !slices.Contains(st.Voters, 4) || !slices.Contains(st.Learners, old.ID) {
		t.Fatalf("member %d after the swap: applied %d (result %d) voters %v outgoing %v learners %v",
			old.ID, st.Applied, res.Index, st.Voters, st.VotersOutgoing, st.Learners)
	}
	if st.Role != raft.RoleLearner {
		t.Fatalf("demoted member's role %v", st.Role)
	}
	if _, err := c.Member(4).Node.Propose(ctx, kv.Put("by-new-voter", "4")); err != nil {
		t.Fatal(err)
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}

// isLeaveJoint reports whether m carries the entry that leaves a joint
// configuration (a ConfChangeV2 without changes).
func isLeaveJoint(m *raftpb.Message) bool {
	for _, e := range m.GetEntries() {
		if e.GetType() != raftpb.EntryConfChangeV2 {
			continue
		}
		var cc raftpb.ConfChangeV2
		if proto.Unmarshal(e.GetData(), &cc) == nil && len(cc.GetChanges()) == 0 {
			return true
		}
	}
	return false
}

// A leader that entered a joint configuration and crashed before leaving it
// leaves the cluster consistent: the next leader completes the change.
func TestNextLeaderCompletesJointChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership})
	old := follower(t, c, lead)

	// The leader's attempt to leave never reaches anyone.
	var leaves atomic.Int64
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		if from == lead.ID && isLeaveJoint(m) {
			leaves.Add(1)
			return true
		}
		return false
	})
	errc := make(chan error, 1)
	go func() {
		_, err := lead.Node.ChangeMembership(ctx, confchange.Swap(old.ID, 4))
		errc <- err
	}()
	for leaves.Load() == 0 {
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("the leader never tried to leave the joint configuration: %v", err)
		}
	}
	// The follower learns that the joint configuration committed from the
	// leader's next append (the leave, dropped) or its heartbeats: a
	// leader does not send a MsgApp that only carries the commit index to
	// a follower with every entry (redundant.go).
	for {
		st, err := old.Node.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Joint() {
			break
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("member %d never entered the joint configuration: voters %v", old.ID, st.Voters)
		}
	}
	c.Crash(lead.ID)
	if err := <-errc; !errors.Is(err, raft.ErrStopped) && !errors.Is(err, raft.ErrLeaderChanged) {
		t.Fatalf("the crashed leader's caller got %v", err)
	}

	next := c.WaitLeader()
	m := waitMembership(ctx, t, next.Node, "the joint configuration left", func(m raft.Membership) bool {
		return !m.Joint() && !m.Pending
	})
	if !slices.Contains(m.Config.Voters, 4) || slices.Contains(m.Config.Voters, old.ID) || !slices.Contains(m.Config.Learners, old.ID) {
		t.Fatalf("after completion: %v", m.Config)
	}
	if _, err := next.Node.Propose(ctx, kv.Put("k", "v")); err != nil {
		t.Fatal(err)
	}
	c.Restart(lead.ID)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// A removed member learns it and stops with ErrRemoved, and its storage
// refuses to start it again — whether it applies its own removal, or was
// down while removed and is told so by the others when it comes back.
func TestRemovedMemberStopsAndIsTombstoned(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 5, ManualMembership: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	var others []uint64
	for _, id := range c.Members() {
		if id != lead.ID {
			others = append(others, id)
		}
	}
	live, down := c.Member(others[0]), c.Member(others[1])

	// Applies its own removal.
	if err := lead.Node.RemoveMember(ctx, live.ID); err != nil {
		t.Fatalf("remove %d: %v", live.ID, err)
	}
	select {
	case <-live.Node.Done():
	case <-ctx.Done():
		t.Fatalf("member %d did not stop after its removal", live.ID)
	}
	if err := live.Node.Err(); !errors.Is(err, raft.ErrRemoved) {
		t.Fatalf("member %d stopped with %v, want ErrRemoved", live.ID, err)
	}

	// Removed while down: told so when it comes back.
	c.Crash(down.ID)
	if err := lead.Node.RemoveMember(ctx, down.ID); err != nil {
		t.Fatalf("remove %d: %v", down.ID, err)
	}
	back := c.Restart(down.ID)
	select {
	case <-back.Node.Done():
	case <-ctx.Done():
		t.Fatalf("member %d, removed while down, did not stop when it came back", down.ID)
	}
	if err := back.Node.Err(); !errors.Is(err, raft.ErrRemoved) {
		t.Fatalf("member %d stopped with %v, want ErrRemoved", down.ID, err)
	}

	for _, m := range []*cluster.Member{live, back} {
		c.Crash(m.ID) // closes its storage
		if _, err := storage.Open(m.Dir, storage.Options{}); !errors.Is(err, storage.ErrRemoved) {
			t.Fatalf("reopening removed member %d's storage: %v, want storage.ErrRemoved", m.ID, err)
		}
	}
	if _, err := lead.Node.Propose(ctx, kv.Put("k", "v")); err != nil {
		t.Fatalf("write with three voters left: %v", err)
	}
}

// A network that reorders messages sends the leader's replication to a
// learner back to probing again and again (a reordered append is rejected):
// the learner must still become ready, since each episode lasts a round
// trip. Before probing kept the stabilization clock, it never did while
// writes flowed.
func TestLearnerReadyDespiteReordering(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := cluster.New(t, cluster.Options{ManualMembership: true,
		Membership: confchange.Settings{Stabilization: 2 * time.Second}})
	lead := c.WaitLeader()
	c.Net.SetDelay(20 * time.Millisecond)
	var wg sync.WaitGroup
	writes, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; writes.Err() == nil; i++ {
				short, cancel := context.WithTimeout(writes, time.Second)
				_, _ = lead.Node.Propose(short, kv.Put(fmt.Sprintf("w%d", w), fmt.Sprint(i)))
				cancel()
			}
		}()
	}
	addLearner(ctx, t, c, lead.Node, 4)
	waitMembership(ctx, t, lead.Node, "learner 4 ready while messages are reordered", ready(4))
}

// A leader that leaving the joint configuration would demote (a swap) or
// remove (a replacement) hands leadership to an incoming voter first, which
// leaves it: the leader never proposes the leave itself (it would step
// down on applying it, maybe before the others learned that it committed;
// with an outgoing voter down, they could then elect nobody).
func TestLeaderLeavingTheVotersHandsOffBeforeLeavingJoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(leader uint64) confchange.Request
		demote bool // the leader stays, as a learner
	}{
		{"swap", func(l uint64) confchange.Request { return confchange.Swap(l, 4) }, true},
		{"replace", func(l uint64) confchange.Request { return confchange.Replace(l, 4) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, lead := withReadyLearner(ctx, t, cluster.Options{ManualMembership: true, Membership: fastMembership})
			var leavesFrom sync.Map
			c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
				if isLeaveJoint(m) {
					leavesFrom.Store(from, true)
				}
				return false
			})
			_, err := lead.Node.ChangeMembership(ctx, tc.change(lead.ID))
			if err != nil && !errors.Is(err, raft.ErrLeaderChanged) && !errors.Is(err, raft.ErrRemoved) && !errors.Is(err, raft.ErrStopped) {
				t.Fatalf("%s of the leader %d and learner 4: %v", tc.name, lead.ID, err)
			}
			var st raft.Status
			for {
				var err error
				st, err = c.Member(4).Node.Status(ctx)
				if err == nil && !st.Joint() && slices.Contains(st.Voters, 4) && st.Leader != 0 && st.Leader != lead.ID {
					break
				}
				if err := pause(ctx, 5*time.Millisecond); err != nil {
					t.Fatalf("the %s did not complete under a new leader: %v (last status %+v)", tc.name, err, st)
				}
			}
			if tc.demote != slices.Contains(st.Learners, lead.ID) || slices.Contains(st.Voters, lead.ID) {
				t.Fatalf("after the %s: voters %v learners %v (the old leader was %d)", tc.name, st.Voters, st.Learners, lead.ID)
			}
			if _, ok := leavesFrom.Load(lead.ID); ok {
				t.Fatalf("the old leader %d proposed the leave itself", lead.ID)
			}
			if _, err := c.Member(st.Leader).Node.Propose(ctx, kv.Put("after", "1")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
