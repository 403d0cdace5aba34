package raft

import (
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// A leadership transfer's MsgTimeoutNow tells the transferee to campaign
// at once. etcd raft refuses to campaign while committed conf changes are
// not applied (hasUnappliedConfChanges), and drops the message: the
// transfer then fails, after an election timeout, although the transferee
// had every entry (the leader checked its match). That happens when the
// conf change was committed but not yet applied here — its entries just
// written, or being applied — which a follower that learns the commit
// index with the leader's next message (redundant.go) meets more often.
//
// The loop holds such a message (a follower's, that did not campaign on
// it, with committed entries not applied) and steps it again once raft's
// applied index reached its commit index, in the same term and within an
// election timeout (the leader abandons the transfer after one); the
// apply answers that move raft's applied index run the loop.

// heldTimeoutNow is the MsgTimeoutNow the loop holds, and the tick count
// when it took it.
type heldTimeoutNow struct {
	m    *raftpb.Message
	tick uint64
}

// holdTimeoutNow, after stepping m, holds it if it is a MsgTimeoutNow on
// which this member did not campaign while committed entries are not
// applied (see above).
func (n *Node) holdTimeoutNow(m *raftpb.Message) {
	l := &n.loop
	if m.GetType() != raftpb.MsgTimeoutNow {
		return
	}
	st := l.rn.BasicStatus()
	if st.RaftState != etcdraft.StateFollower || st.Applied >= st.GetCommit() || st.GetTerm() != m.GetTerm() {
		return
	}
	l.buffers().timeoutNow = heldTimeoutNow{m: m, tick: l.ticks}
}

// retryTimeoutNow steps the held MsgTimeoutNow again once raft applied
// what it committed, or drops it when the term moved on, this member is
// no longer a follower, or an election timeout passed.
func (n *Node) retryTimeoutNow() {
	l := &n.loop
	if l.bufs == nil || l.bufs.timeoutNow.m == nil {
		return
	}
	h := &l.bufs.timeoutNow
	st := l.rn.BasicStatus()
	switch {
	case st.RaftState != etcdraft.StateFollower || st.GetTerm() != h.m.GetTerm() ||
		l.ticks-h.tick > uint64(n.cfg.ElectionTicks):
		*h = heldTimeoutNow{}
	case st.Applied >= st.GetCommit():
		m := h.m
		*h = heldTimeoutNow{}
		n.stepPeer(m, l.lastContact.get(m.GetFrom()))
	}
}
