package raft

import "go.etcd.io/raft/v3/raftpb"

// Quiet answers. The append and apply tasks tell the loop what they did
// through its mailbox (raft's MsgStorageAppendResp and
// MsgStorageApplyResp), and each used to signal a loop run for it. Two
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
//     snapshot written, the leader's own acknowledgement (which may
//     commit) — signals as before;
//   - an applied batch of entries without a conf change or a snapshot,
//     small enough, and with no other queued behind it, that raft's
//     bound on the bytes being applied (MaxCommittedSizePerReady) does
//     not hold back the next committed entries for its answer
//     (quietApplyAnswer). The proposers were answered by the apply task
//     already; what reads raft's applied index (a new leader's first
//     change, the leader's quiescence) runs on the loop after it stepped
//     its mailbox.
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
// raft's MsgStorageAppendResp of entries, while no caller waits for this
// member to apply something.
func (n *Node) quietAppendAnswers(batch []*raftpb.Message) bool {
	any := false
	for _, m := range batch {
		for _, r := range m.GetResponses() {
			if r.GetTo() != n.cfg.ID {
				continue
			}
			if r.GetType() != raftpb.MsgStorageAppendResp || r.Snapshot != nil {
				return false
			}
			any = true
		}
	}
	return any && !n.someoneWaits()
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
