package raft

import (
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Messages of a leader's Ready that it does not send, because another
// message carries what they would: commit bumps and heartbeats while
// appends flow.
//
// Commit bumps. Each time a leader's commit index moves, etcd raft
// broadcasts a MsgApp to every follower (bcastAppend), with entries if it
// has any to send and else empty: an empty one to a follower that has
// acknowledged every entry only tells it the new commit index. It costs a
// round of its own — the follower's loop run, its answer (a MsgAppResp
// acknowledging nothing new, after an append with nothing to write) and
// the leader's loop run for that answer — and with a few writes per
// round it was more than one message a write (issue 37: 1.6 empty
// MsgApps and as many answers a write at 100 groups).
//
// The leader does not send it: the follower learns the commit index from
// the next MsgApp to it, which carries it (when writes go on: with the
// next round's entries), or from the next heartbeat, which carries
// min(match, commit) — the whole commit index here, the follower's match
// being the leader's last index — within the heartbeat interval. Raft
// counts it sent (Progress.SentCommit), which is what a lost message
// would look like. Only such a message is held back: to a follower
// replicating (tracker.StateReplicate, no snapshot pending) whose match is
// at the message's index (it has every entry), or that has appends in
// flight (its match is below the index: it is the follower that had not
// answered yet when the commit moved) and whose heartbeat answer the
// leader did not step within the last heartbeat interval. The empty
// MsgApp a heartbeat's answer prompts while the follower lags is how raft
// finds an append that was lost when no other comes: it goes. And a
// follower whose answers stop gets heartbeats again (below), so that path
// is never closed for long. Probes (tracker.StateProbe) go. Nothing is
// held back here to a relayed standby (relay_send.go decides for those,
// commitOnlyAppend), nor in a Ready that commits a conf change (a member
// that forwarded the change waits to apply it; changes are rare), nor to
// a member that forwarded a proposal the new commit index covers: a member answers its proposer once it applied the
// entry, so it must hear of the commit at once (the leader notes the
// forwarded MsgProp, and the last index of the Ready that appended it,
// until a MsgApp with that commit index went to the member).

// commitBump is the run loop's look-up of a follower's progress for
// isCommitBump, bound once (no closure a message).
type commitBump struct {
	to, index uint64
	// heartbeat: the leader stepped the follower's heartbeat answer
	// within the last heartbeat interval. confCommitted: the Ready being
	// handled commits a conf change.
	heartbeat, bump, confCommitted bool
	visit                          func(id uint64, typ etcdraft.ProgressType, pr tracker.Progress)
}

// isCommitBump reports whether m, a network message of a Ready of this
// leader, is a MsgApp that only carries the commit index to a follower
// that has every entry, or has appends in flight and did not answer a
// heartbeat lately (see above). It runs on the loop.
func (n *Node) isCommitBump(m *raftpb.Message) bool {
	l := &n.loop
	if m.GetType() != raftpb.MsgApp || len(m.Entries) > 0 || m.Snapshot != nil || l.role != RoleLeader ||
		l.relayVia(m.GetTo()) != 0 {
		return false
	}
	b := l.buffers()
	c := &b.bump
	if c.confCommitted {
		return false
	}
	if c.visit == nil {
		c.visit = func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			if id == c.to {
				c.bump = pr.State == tracker.StateReplicate && pr.PendingSnapshot == 0 &&
					(pr.Match >= c.index || !c.heartbeat)
			}
		}
	}
	c.to, c.index, c.bump = m.GetTo(), m.GetIndex(), false
	c.heartbeat = false
	for _, a := range b.appContacts {
		if a.id == c.to {
			if a.proposed != 0 && m.GetCommit() >= a.proposed {
				return false // its proposer waits (see above)
			}
			c.heartbeat = a.hasHeard && l.ticks-a.heard <= uint64(max(n.cfg.HeartbeatTicks, 1))
		}
	}
	l.rn.WithProgress(c.visit)
	return c.bump
}

// Heartbeats while appends flow. On every heartbeat tick etcd raft sends
// each follower a MsgHeartbeat, and the follower's answer prompts an empty
// MsgApp when the follower has not acknowledged every entry yet (as while
// appends flow: one is in flight), which it answers too: four messages and
// a loop run on each side per follower a tick, for nothing an append does
// not do already — a MsgApp resets the follower's election timer as a
// heartbeat does, and its answer makes the follower recently active for
// the leader's CheckQuorum. The leader does not send a heartbeat to a
// follower it sent a MsgApp to, and that acknowledged an append
// (MsgAppResp, not a rejection), within the last heartbeat interval
// (Config.HeartbeatTicks): the follower hears from it and it hears from
// the follower. A follower whose answers stop (appends lost on a
// congested link) gets its heartbeats again at the next tick, and so does
// every follower once the appends stop, which then learns the last commit
// index (a heartbeat carries it) within two heartbeat intervals.
// Heartbeats with a context (a read's round, a quiescence marker) always
// go, and none to a relayed standby is held back here (relay_send.go's
// redundantHeartbeat decides for those). A follower that relays is a
// follower like any other: its own commit bumps and heartbeats are held
// back as without standbys (before, a relaying leader sent them all, 2.1
// appends a write to each relay instead of 1).

// appContact is when the leader last sent a follower a MsgApp, last
// stepped its acknowledgement of one, and last stepped its answer to a
// heartbeat, in the loop's ticks. The loop's buffers hold one for each
// member it heard from or sent to while it led, until they are let go
// (quiescence, dropBuffers).
type appContact struct {
	id                          uint64
	sent, acked, heard          uint64 // loopState.ticks
	hasSent, hasAcked, hasHeard bool
	// proposing: the member forwarded a proposal that no Ready appended
	// yet; proposed: the last index of the Ready that appended it, until a
	// MsgApp with a commit index that covers it went to the member (0:
	// none).
	proposing bool
	proposed  uint64
}

// contact returns the follower's appContact, made if new.
func (b *loopBufs) contact(id uint64) *appContact {
	for i := range b.appContacts {
		if b.appContacts[i].id == id {
			return &b.appContacts[i]
		}
	}
	b.appContacts = append(b.appContacts, appContact{id: id})
	return &b.appContacts[len(b.appContacts)-1]
}

// noteAppSent records a MsgApp of a Ready this leader sends (handleReady).
func (n *Node) noteAppSent(m *raftpb.Message) {
	l := &n.loop
	if l.role != RoleLeader || m.GetType() != raftpb.MsgApp {
		return
	}
	c := l.buffers().contact(m.GetTo())
	c.sent, c.hasSent = l.ticks, true
	if c.proposed != 0 && m.GetCommit() >= c.proposed {
		c.proposed = 0 // it knows its proposal committed
	}
}

// noteProposed gives the members' forwarded proposals that this Ready
// appended (handleReady, after noteAppend) the Ready's last index.
func (n *Node) noteProposed() {
	l := &n.loop
	if l.bufs == nil {
		return
	}
	for i := range l.bufs.appContacts {
		if c := &l.bufs.appContacts[i]; c.proposing {
			c.proposing, c.proposed = false, max(c.proposed, l.ms.lastIndex)
		}
	}
}

// noteAppAcked records a follower's acknowledgement of an append, its
// answer to a heartbeat, or its forwarded proposal, stepped by this
// leader.
func (n *Node) noteAppAcked(m *raftpb.Message) {
	l := &n.loop
	if l.role != RoleLeader {
		return
	}
	switch t := m.GetType(); {
	case t == raftpb.MsgAppResp && !m.GetReject():
		c := l.buffers().contact(m.GetFrom())
		c.acked, c.hasAcked = l.ticks, true
	case t == raftpb.MsgHeartbeatResp:
		c := l.buffers().contact(m.GetFrom())
		c.heard, c.hasHeard = l.ticks, true
	case t == raftpb.MsgProp && m.GetFrom() != n.cfg.ID:
		l.buffers().contact(m.GetFrom()).proposing = true
	}
}

// isBusyHeartbeat reports whether m, a network message of a Ready of this
// leader, is a heartbeat without a context to a follower that appends
// reach and that answers them (see above).
func (n *Node) isBusyHeartbeat(m *raftpb.Message) bool {
	l := &n.loop
	if m.GetType() != raftpb.MsgHeartbeat || len(m.Context) > 0 || l.role != RoleLeader ||
		l.relayVia(m.GetTo()) != 0 || l.bufs == nil {
		return false
	}
	within := uint64(max(n.cfg.HeartbeatTicks, 1))
	for _, c := range l.bufs.appContacts {
		if c.id == m.GetTo() {
			return c.hasSent && c.hasAcked && l.ticks-c.sent <= within && l.ticks-c.acked <= within
		}
	}
	return false
}

// commitsConfChange reports whether rd hands a conf change to the apply
// task.
func commitsConfChange(rd etcdraft.Ready) bool {
	for _, m := range rd.Messages {
		if m.GetTo() != etcdraft.LocalApplyThread {
			continue
		}
		for _, e := range m.GetEntries() {
			if isConfChange(e) {
				return true
			}
		}
	}
	return false
}
