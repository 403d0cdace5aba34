package raft

import "go.etcd.io/raft/v3/raftpb"

// Quiet answers. The append and apply tasks tell the loop what they did
// through its mailbox (raft's MsgStorageAppendResp and
// MsgStorageApplyResp), and each used to signal a loop run for it. Three
// kinds of answers give the loop nothing to do at once, and most of those
// runs were runs without a Ready (issue 37: at 100 groups about 1.8 of
// 5.6 loop runs a write, the largest kind of run):
//
//   - a follower's append answered to itself only (MsgStorageAppendResp:
//     the entries are on disk; its acknowledgement went to the leader
//     straight from the append task). Raft applies an entry only once it
//     is on disk and committed, and the follower learns the commit index
//     from the leader's next message, which runs the loop. Not while a
//     caller waits for this member to apply something (someoneWaits:
//     the leader's message may have come before the entries were on
//     disk, and the entries are then applied on this answer). A batch
//     whose answers to this member include anything else — a vote, a
//     snapshot written, the leader's own acknowledgement but as below —
//     signals as before;
//   - an applied batch of entries without a conf change or a snapshot,
//     small enough, and with no other queued behind it, that raft's
//     bound on the bytes being applied (MaxCommittedSizePerReady) does
//     not hold back the next committed entries for its answer
//     (quietApplyAnswer). The proposers were answered by the apply task
//     already; what reads
//     raft's applied index (a new leader's first change, the leader's
//     quiescence) runs on the loop after it stepped its mailbox;
//   - the leader's own acknowledgement of an append (its MsgAppResp to
//     itself, with the MsgStorageAppendResp) while no follower voter has
//     acknowledged an index of that append or beyond: it cannot commit
//     anything alone then (a commit needs another voter's acknowledgement
//     of the entry too), and the follower's acknowledgement, when it
//     comes, runs the loop, which steps both. The loop publishes the
//     highest index a follower acknowledged (followerAcked: a learner's
//     too, which only signals more) before it takes its mailbox; the append task queues the answer, then reads
//     it and signals if a follower is there already: one of the two sees
//     the other. With a single voter, a joint configuration, or when it
//     does not lead, the gate is closed (ackGateClosed: always signal).
//
// They are queued without a signal: the loop's next run steps them, after
// the peer messages it takes and before the proposals, reads and calls,
// and a node that is not quiesced runs at least once a tick. A quiesced
// node is signaled as before (and quiesce signals a loop run if its
// mailbox holds something).

// answerQuietly queues the answers msgs of the append or apply task for
// the loop's next run without signaling it (see above).
func (n *Node) answerQuietly(msgs ...*raftpb.Message) {
	n.local.putQuiet(msgs...)
	if n.quiesced.Load() || n.stopped() {
		n.loopTask.Signal()
	}
}

// quietAppendAnswers reports whether the answers to this member of a
// persisted batch may wait for the loop's next run (see above): only
// raft's MsgStorageAppendResp of entries, or with them the leader's own
// acknowledgement of the batch's entries (then first, the index of the
// batch's first entry, is not 0: the caller signals if a follower voter
// acknowledged an index from there, after queuing the answers).
func (n *Node) quietAppendAnswers(batch []*raftpb.Message) (quiet bool, first uint64) {
	own := false
	for _, m := range batch {
		if ents := m.GetEntries(); first == 0 && len(ents) > 0 {
			first = ents[0].GetIndex()
		}
		for _, r := range m.GetResponses() {
			if r.GetTo() != n.cfg.ID {
				continue
			}
			switch {
			case r.GetType() == raftpb.MsgStorageAppendResp && r.Snapshot == nil:
				quiet = true
			case r.GetType() == raftpb.MsgAppResp && !r.GetReject() && r.GetFrom() == n.cfg.ID:
				own = true
			default:
				return false, 0
			}
		}
	}
	if !own {
		return quiet && !n.someoneWaits(), 0
	}
	if first == 0 || n.followerAcked.Load() == ackGateClosed {
		return false, 0
	}
	return true, first
}

// someoneWaits reports whether a caller waits for this member to apply
// something: a proposal or change it made (forwarded to the leader), a
// read or a forwarded call waiting for the applied index. Its append's
// answer then runs the loop, which may apply at once what the leader
// already said is committed (its message came before the entries were on
// disk).
func (n *Node) someoneWaits() bool {
	n.applied.mu.Lock()
	w := n.applied.ch != nil
	n.applied.mu.Unlock()
	if w {
		return true
	}
	n.waiters.mu.Lock()
	w = len(n.waiters.m) > 0
	n.waiters.mu.Unlock()
	if w {
		return true
	}
	n.changes.mu.Lock()
	w = len(n.changes.m) > 0
	n.changes.mu.Unlock()
	return w
}

// ackGateClosed in followerAcked: the leader's own acknowledgement always
// signals the loop.
const ackGateClosed = ^uint64(0)

// noteFollowerAcked raises followerAcked to index, a follower's
// acknowledgement this leader's loop steps, unless the gate is closed.
func (n *Node) noteFollowerAcked(index uint64) {
	for {
		cur := n.followerAcked.Load()
		if cur == ackGateClosed || cur >= index || n.followerAcked.CompareAndSwap(cur, index) {
			return
		}
	}
}

// publishAckGate sets followerAcked when the role or the configuration
// changes, on the loop: the highest match of a follower voter while this
// member leads a configuration of two voters or more, not joint, and
// ackGateClosed otherwise.
func (n *Node) publishAckGate() {
	l := &n.loop
	if l.role != RoleLeader || l.rn == nil {
		n.followerAcked.Store(ackGateClosed)
		return
	}
	st := l.rn.Status()
	voters := st.Config.Voters
	if len(voters[1]) > 0 || len(voters[0]) < 2 {
		n.followerAcked.Store(ackGateClosed)
		return
	}
	var acked uint64
	for id, pr := range st.Progress {
		if _, voter := voters[0][id]; voter && id != n.cfg.ID {
			acked = max(acked, pr.Match)
		}
	}
	n.followerAcked.Store(acked)
}

// quietApplyAnswer reports whether the answer of the applied task t may
// wait for the loop's next run (see above): raft stops handing out
// committed entries while the bytes it handed to the apply task and has
// not heard back of reach 4 × MaxSizePerMsg (MaxCommittedSizePerReady),
// and a committed entry it holds back for an answer that waits would wait
// for the next tick. So only a small batch (at most half of MaxSizePerMsg,
// and the inline bounds) with nothing queued behind it: the answers that
// wait are then of the batches the loop handed out since it last took its
// mailbox, a few, far from that bound. (Raft's count of the leader's
// uncommitted bytes, MaxUncommittedEntriesSize, also drops only with the
// answer: what waits is far below it, and the loop steps its mailbox
// before its own proposals.)
func (n *Node) quietApplyAnswer(t applyTask) bool {
	if t.snap != nil || len(t.confStates) > 0 || n.applies.len() > 0 {
		return false
	}
	ents := t.msg.GetEntries()
	if len(ents) > inlineApplyEntries {
		return false
	}
	size := 0
	for _, e := range ents {
		size += len(e.GetData())
	}
	return size <= inlineApplyBytes && uint64(size) <= n.cfg.MaxSizePerMsg/2
}
