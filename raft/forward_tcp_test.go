package raft_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// Every request a follower or a learner hands to the leader, on the real
// TCP transport — whose anti-spoofing check refuses a raft message whose
// sender is not the member at the other end of the stream (issue 27: a
// leadership transfer asked of a follower stepped raft's MsgTransferLeader,
// whose From is the transferee, and the leader's transport dropped the
// follower's stream; the call timed out after two election timeouts).

// tcpForwardCluster is three voters and learner 4 over TCP, with the
// policy off and short readiness (Promote works a moment after a join).
type tcpForwardCluster struct {
	t      *testing.T
	cfg    raft.Config
	voters []*tcpMember
	byID   map[uint64]*tcpMember
}

func startTCPForwardCluster(ctx context.Context, t *testing.T) *tcpForwardCluster {
	cfg := raft.Config{
		// A transfer must complete within two election timeouts: 600 ms,
		// room for a loaded CI machine under -race (100 ms failed there).
		ElectionTicks:    30,
		ManualMembership: true,
		Membership:       confchange.Settings{Stabilization: 100 * time.Millisecond, MaxLearners: 3},
	}
	ms := startTCPCluster(t, 3, cfg)
	c := &tcpForwardCluster{t: t, cfg: cfg, voters: ms, byID: map[uint64]*tcpMember{}}
	for _, m := range ms {
		c.byID[m.node.ID()] = m
	}
	lead := tcpLeader(ctx, t, ms)
	c.join(ctx, lead.node, 4)
	return c
}

// join adds member id as a learner through via, starts it, and waits until
// it has caught up with the leader.
func (c *tcpForwardCluster) join(ctx context.Context, via *raft.Node, id uint64) *tcpMember {
	t := c.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := via.AddLearner(ctx, raft.Member{ID: id, PeerAddr: ln.Addr().String()}); err != nil {
		_ = ln.Close()
		t.Fatalf("member %d adding learner %d: %v", via.ID(), id, err)
	}
	m := startTCPMember(t, filepath.Join(t.TempDir(), fmt.Sprint(id)), id, c.cfg, nil, ln, tcpSeeds(c.voters))
	c.byID[id] = m
	c.waitReady(ctx, via, id)
	return m
}

// waitReady waits until the leader (asked through via) says id is ready.
func (c *tcpForwardCluster) waitReady(ctx context.Context, via *raft.Node, id uint64) {
	t := c.t
	t.Helper()
	for {
		m, err := via.Membership(ctx)
		if err == nil {
			for _, s := range m.Members {
				if s.ID == id && s.Readiness.Ready() {
					return
				}
			}
		}
		if perr := pause(ctx, 20*time.Millisecond); perr != nil {
			t.Fatalf("member %d never became ready (last: %v)", id, err)
		}
	}
}

// leader is the member every running member names as the leader.
func (c *tcpForwardCluster) leader(ctx context.Context) *tcpMember {
	t := c.t
	t.Helper()
	for {
		var lead uint64
		agree := true
		for _, m := range c.voters {
			l := m.node.Leader()
			if lead == 0 {
				lead = l
			}
			agree = agree && l != 0 && l == lead
		}
		if agree {
			return c.byID[lead]
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("the voters do not agree on a leader")
		}
	}
}

// voterOtherThan is a voter that is none of not.
func (c *tcpForwardCluster) voterOtherThan(not ...uint64) *tcpMember {
	for _, m := range c.voters {
		if !slices.Contains(not, m.node.ID()) {
			return m
		}
	}
	c.t.Fatalf("no voter besides %v", not)
	return nil
}

// transfer asks a to hand leadership to to, and checks that to leads —
// in a's view and in every voter's — once the call returned.
func (c *tcpForwardCluster) transfer(ctx context.Context, a *raft.Node, to uint64) {
	t := c.t
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := a.TransferLeadership(tctx, to); err != nil {
		t.Fatalf("member %d transferring leadership to %d: %v", a.ID(), to, err)
	}
	if l := a.Leader(); l != to {
		t.Fatalf("member %d: TransferLeadership(%d) returned with %d leading", a.ID(), to, l)
	}
	if l := c.leader(ctx).node.ID(); l != to {
		t.Fatalf("after the transfer to %d, the voters agree on %d", to, l)
	}
}

// exercise runs every forwarded request through a (a follower or a
// learner): proposals, a client session and ProposeWithID with its retry,
// a linearizable read,
// Membership, every membership call on a learner it adds itself (joined
// over TCP), the cluster settings, and their dry runs.
func (c *tcpForwardCluster) exercise(ctx context.Context, a *tcpMember, newID uint64) {
	t := c.t
	t.Helper()
	node := a.node
	role := "follower"
	if st, err := node.Status(ctx); err != nil {
		t.Fatal(err)
	} else if st.Role == raft.RoleLearner {
		role = "learner"
	} else if st.Role == raft.RoleLeader {
		t.Fatalf("member %d leads: it forwards nothing", node.ID())
	}
	key := fmt.Sprintf("%s-%d", role, node.ID())
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %d: %s: %v", role, node.ID(), what, err)
		}
	}

	// Proposals.
	_, err := node.Propose(ctx, kv.Put(key, "1"))
	step("Propose", err)
	if v, err := node.StaleRead([]byte(key)); err != nil || string(v) != "1" {
		t.Fatalf("%s: Propose returned before its entry was applied here: %q, %v", role, v, err)
	}
	client, err := node.RegisterClient(ctx)
	step("RegisterClient", err)
	rid := raft.RequestID{Client: client, Seq: 1}
	_, err = node.ProposeWithID(ctx, rid, kv.Put(key, "2"))
	step("ProposeWithID", err)
	// A retry is answered with the first answer and not applied again.
	_, err = node.ProposeWithID(ctx, rid, kv.Put(key, "3"))
	step("ProposeWithID retried", err)

	// A linearizable read (ReadIndex asked of the leader).
	v, err := node.Read(ctx, []byte(key))
	step("Read", err)
	if string(v) != "2" {
		t.Fatalf("%s: Read = %q, want 2", role, v)
	}

	// The leader's view of the membership.
	lead := c.leader(ctx).node.ID()
	m, err := node.Membership(ctx)
	step("Membership", err)
	if m.Leader != lead || !m.Config.Contains(node.ID()) {
		t.Fatalf("%s: Membership says leader %d, config %v (leader %d)", role, m.Leader, m.Config, lead)
	}

	// Membership calls, on a learner this member adds.
	c.join(ctx, node, newID)
	rec, ok := node.Member(newID)
	if !ok {
		t.Fatalf("%s: member %d added through it is not in its applied configuration", role, newID)
	}
	step("Promote", node.Promote(ctx, newID))
	step("Demote", node.Demote(ctx, newID))
	c.waitReady(ctx, node, newID)
	_, err = node.ChangeMembership(ctx, confchange.Promote(newID))
	step("ChangeMembership(promote)", err)
	_, err = node.ChangeMembership(ctx, confchange.Demote(newID))
	step("ChangeMembership(demote)", err)
	rec.Metadata = map[string]string{"via": role}
	step("UpdateMember", node.UpdateMember(ctx, rec))
	if got, _ := node.Member(newID); got.Metadata["via"] != role {
		t.Fatalf("%s: UpdateMember returned before it was applied here: %+v", role, got)
	}
	_, err = node.CheckMembership(ctx, confchange.Remove(newID))
	step("CheckMembership", err)
	_, err = node.CheckMembership(ctx, confchange.Promote(node.ID(), 99))
	if !errors.Is(err, confchange.ErrUnknownMember) {
		t.Fatalf("%s: CheckMembership of an unknown member: %v, want ErrUnknownMember", role, err)
	}
	err = node.Promote(ctx, 99)
	if !errors.Is(err, confchange.ErrUnknownMember) {
		t.Fatalf("%s: Promote of an unknown member: %v, want ErrUnknownMember", role, err)
	}
	step("RemoveMember", node.RemoveMember(ctx, newID))
	if _, ok := node.Member(newID); ok {
		t.Fatalf("%s: RemoveMember returned before it was applied here", role)
	}

	// Cluster settings.
	cs := node.Settings()
	cs.MaxLearners++
	_, err = node.CheckSettings(ctx, cs)
	step("CheckSettings", err)
	step("UpdateSettings", node.UpdateSettings(ctx, cs))
	if got := node.Settings(); got != cs {
		t.Fatalf("%s: UpdateSettings returned before it was applied here: %+v, want %+v", role, got, cs)
	}
}

func TestForwardedRequestsOverTCP(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	c := startTCPForwardCluster(ctx, t)
	learner := c.byID[4]

	t.Run("follower", func(t *testing.T) {
		c.t = t
		lead := c.leader(ctx)
		f := c.voterOtherThan(lead.node.ID())
		c.exercise(ctx, f, 5)

		// Leadership transfers asked of a follower: to the leader (nothing
		// to do), to a learner (refused by the leader, typed), to a third
		// voter, and to the follower itself.
		lead = c.leader(ctx)
		c.transfer(ctx, f.node, lead.node.ID())
		err := f.node.TransferLeadership(ctx, 4)
		if !errors.Is(err, confchange.ErrLearnerCannotLead) {
			t.Fatalf("follower: a transfer to a learner: %v, want ErrLearnerCannotLead", err)
		}
		third := c.voterOtherThan(lead.node.ID(), f.node.ID())
		c.transfer(ctx, f.node, third.node.ID())
		c.transfer(ctx, f.node, f.node.ID())
		// The same through ChangeMembership (what kvserver's
		// POST /leader/transfer calls): from the new follower back to the
		// first leader.
		lead = c.leader(ctx)
		g := c.voterOtherThan(lead.node.ID())
		if _, err := g.node.ChangeMembership(ctx, confchange.TransferLeader(g.node.ID())); err != nil {
			t.Fatalf("follower %d: ChangeMembership(transfer-leader to itself): %v", g.node.ID(), err)
		}
		if l := c.leader(ctx).node.ID(); l != g.node.ID() {
			t.Fatalf("after ChangeMembership(transfer-leader %d), %d leads", g.node.ID(), l)
		}
	})

	t.Run("learner", func(t *testing.T) {
		c.t = t
		// The follower subtest's last transfer: the learner may hear of
		// the new leader after the voters agree on it, and a proposal it
		// made in the old term would end in ErrLeaderChanged.
		for lead := c.leader(ctx).node.ID(); learner.node.Leader() != lead; {
			if err := pause(ctx, 10*time.Millisecond); err != nil {
				t.Fatalf("learner never named leader %d (it names %d)", lead, learner.node.Leader())
			}
		}
		c.exercise(ctx, learner, 6)

		// Leadership transfers asked of a learner: to itself (refused, typed),
		// and to each voter that does not lead.
		err := learner.node.TransferLeadership(ctx, learner.node.ID())
		if !errors.Is(err, confchange.ErrLearnerCannotLead) {
			t.Fatalf("learner: a transfer to itself: %v, want ErrLearnerCannotLead", err)
		}
		for range 2 {
			lead := c.leader(ctx)
			to := c.voterOtherThan(lead.node.ID())
			c.transfer(ctx, learner.node, to.node.ID())
		}
		// Its stream to the leader was never dropped as spoofed: writes
		// still flow through it.
		if _, err := learner.node.Propose(ctx, kv.Put("after", "transfers")); err != nil {
			t.Fatalf("learner: Propose after the transfers: %v", err)
		}
	})
}
