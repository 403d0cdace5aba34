package raft

import (
	"log/slog"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The run loop's view of the configuration and of this member's role:
// conf changes applied to raft, the soft state (leader, role) published
// to the node's readers.

// applyConfChange applies a committed configuration change to raft (on the
// loop, which owns the RawNode) and returns the new ConfState for the apply
// goroutine. An entry that does not decode is a fatal error: skipping it
// would diverge from the other members.
func (n *Node) applyConfChange(e *raftpb.Entry) *raftpb.ConfState {
	cc, err := decodeConfChange(e)
	if err != nil {
		panic(err)
	}
	before := n.loop.rn.Status().Config
	cs := n.loop.rn.ApplyConfChange(cc)
	n.loop.ms.raftConf = cs
	n.relayFollowConfig(cs)
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range ids {
			_, voter := before.Voters.IDs()[id]
			_, learner := before.Learners[id]
			if !voter && !learner {
				n.loop.confAdded = e.GetIndex()
			}
		}
	}
	var recs []Member
	if ctx, err := changeContext(cc); err == nil {
		recs = ctx.Members
	}
	n.followConfig(cs, recs)
	n.updateRole(cs)
	return cs
}

// followConfig brings the transport in line with the configuration raft
// has just taken (on the loop, before raft sends anything under it): the
// members a conf change adds become reachable — a snapshot to a new learner
// must not be dropped as addressed to an unknown peer — and every member's
// learner flag is set. The apply task still reconciles the peers with
// the applied member table (removals, address updates).
func (n *Node) followConfig(cs *raftpb.ConfState, recs []Member) {
	for _, m := range recs {
		if m.ID != n.cfg.ID && m.PeerAddr != "" {
			n.tr.AddPeer(m.ID, m.PeerAddr)
		}
	}
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetVotersOutgoing()} {
		for _, id := range ids {
			if id != n.cfg.ID {
				n.tr.SetLearner(id, false)
			}
		}
	}
	for _, id := range cs.GetLearners() {
		if id != n.cfg.ID {
			n.tr.SetLearner(id, true)
		}
	}
}

func (n *Node) updateSoftState(ss *etcdraft.SoftState) {
	l := &n.loop
	if ss.Lead != l.leader {
		l.leader = ss.Lead
		n.retryReads(true)
		n.events.emit(Event{Type: EventLeaderChanged, Leader: ss.Lead, Term: l.term})
		if ss.Lead != 0 {
			n.log.Info("leader changed", slog.Uint64("leader", ss.Lead), slog.Uint64("term", l.term))
		}
	}
	role := n.roleOf(ss.RaftState)
	if role == RoleLeader && l.role != RoleLeader {
		l.nowLeader = true
	}
	n.setRole(role)
	n.publishState()
}

func (n *Node) roleOf(st etcdraft.StateType) Role {
	switch st {
	case etcdraft.StateLeader:
		return RoleLeader
	case etcdraft.StateCandidate, etcdraft.StatePreCandidate:
		return RoleCandidate
	}
	if n.isLearner() {
		return RoleLearner
	}
	return RoleFollower
}

func (n *Node) isLearner() bool {
	cfg := n.loop.rn.Status().Config
	_, ok := cfg.Learners[n.cfg.ID]
	return ok
}

// updateRole recomputes the role after a configuration change (a follower
// promoted from learner keeps the same raft state but changes role).
func (n *Node) updateRole(cs *raftpb.ConfState) {
	if n.loop.role == RoleLeader || n.loop.role == RoleCandidate {
		return
	}
	role := RoleFollower
	for _, id := range cs.GetLearners() {
		if id == n.cfg.ID {
			role = RoleLearner
		}
	}
	n.setRole(role)
	n.publishState()
}

func (n *Node) setRole(r Role) {
	n.answersLearner.Store(r == RoleLearner)
	if r != n.loop.role {
		n.loop.role = r
		n.events.emit(Event{Type: EventRoleChanged, Role: r, Term: n.loop.term})
	}
}

func (n *Node) publishState() {
	l := &n.loop
	st := nodeState{leader: l.leader, term: l.term, role: l.role}
	if st != l.published {
		l.published = st
		n.sched.stateChanges.Add(1)
	}
	n.state.set(st)
}
