package raft

import "go.etcd.io/raft/v3/raftpb"

// Quiet answers. The append and apply tasks tell the loop what they did
// through its mailbox (raft's MsgStorageAppendResp and
// MsgStorageApplyResp), and each used to signal a loop run for it. Two of
// those answers give the loop nothing to do at once, and most of those
// runs were runs without a Ready (issue 37: at 100 groups about 1.8 of
// 5.6 loop runs a write, the largest kind of run):
//
//   - a follower's append answered to itself only (MsgStorageAppendResp:
//     the entries are on disk; its acknowledgement went to the leader
//     straight from the append task). Raft applies an entry only once it
//     is on disk and committed, and the follower learns the commit index
//     from the leader's next message, which runs the loop. A batch whose
//     answers to this member include anything else — the leader's own
//     acknowledgement (MsgAppResp to itself, which may commit), a vote,
//     a snapshot written — signals as before;
//   - an applied batch of entries without a conf change or a snapshot,
//     small enough (inlineApplyEntries, inlineApplyBytes) that raft's
//     bound on the bytes being applied (MaxCommittedSizePerReady) does
//     not hold back the next committed entries for its answer. The
//     proposers were answered by the apply task already; what reads
//     raft's applied index (a new leader's first change, the leader's
//     quiescence) runs on the loop after it stepped its mailbox.
//
// They are queued without a signal: the loop's next run steps them, after
// the peer messages it takes and before the proposals, reads and calls,
// and a node that is not quiesced runs at least once a tick. A quiesced node is signaled as before (and quiesce signals a loop
// run if its mailbox holds something).

// answerQuietly queues the answers msgs of the append or apply task for
// the loop's next run without signaling it (see above).
func (n *Node) answerQuietly(msgs ...*raftpb.Message) {
	n.local.putQuiet(msgs...)
	if n.quiesced.Load() || n.stopped() {
		n.loopTask.Signal()
	}
}

// quietAppendAnswers reports whether the answers to this member of a
// persisted batch are only raft's MsgStorageAppendResp of entries (see
// above).
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
	return any
}

// quietApplyAnswer reports whether the answer of the applied task t may
// wait for the loop's next run (see above).
func quietApplyAnswer(t applyTask) bool {
	if t.snap != nil || len(t.confStates) > 0 {
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
	return size <= inlineApplyBytes
}
