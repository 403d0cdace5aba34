package raft

import (
	"log/slog"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// maxAppendBatch bounds how many MsgStorageAppend messages one Save merges.
const maxAppendBatch = 256

// runAppend is the append task: it persists MsgStorageAppend messages in
// order and then delivers their responses (to the loop, or to peers: a
// follower's ack leaves only after its fsync). The messages queued since
// the previous run are merged into one Save (up to maxAppendBatch; a
// snapshot is saved on its own, after what came before) — one storage
// commit for many Readys, which is where group commit comes from. It runs
// on the scheduler's I/O workers: a Save waits for the storage's commit.
func (n *Node) runAppend() {
	if !n.running.Load() || n.appendExited {
		return
	}
	s := &n.saved
	if !s.init {
		s.init = true
		if hs, _, err := n.store.InitialState(); err == nil {
			s.term, s.vote = hs.GetTerm(), hs.GetVote()
		}
	}
	if n.stopped() {
		// The loop may still hand over appends until it exits (it signals
		// this task when it does): persist everything it handed over.
		select {
		case <-n.loopDone:
		default:
			return
		}
		n.drainAppends()
		n.flushCommit()
		n.appendExited = true
		close(n.appendDone)
		n.applyTask.Signal()
		n.release()
		return
	}
	s.queued = n.appends.takeInto(s.queued[:0], maxAppendBatch)
	if !n.saveSplit(s.queued) {
		return
	}
	clear(s.queued)
	if n.appends.len() > 0 {
		n.appendTask.Signal()
	}
}

// saveSplit saves msgs in order, each snapshot on its own. It reports false
// if the node must stop.
func (n *Node) saveSplit(msgs []*raftpb.Message) bool {
	s := &n.saved
	start := 0
	for i, m := range msgs {
		if m.GetSnapshot() != nil {
			if !n.saveBatch(msgs[start:i], &s.ents, &s.out) || !n.saveBatch(msgs[i:i+1], &s.ents, &s.out) {
				return false
			}
			start = i + 1
		}
	}
	return n.saveBatch(msgs[start:], &s.ents, &s.out)
}

// saveBatch persists the merged batch with one Save and delivers the
// responses. It returns false if the node must stop.
func (n *Node) saveBatch(batch []*raftpb.Message, entsBuf *[]*raftpb.Entry, out *[]*raftpb.Message) bool {
	if len(batch) == 0 {
		return true
	}
	var (
		hs   *raftpb.HardState
		snap *raftpb.Snapshot
		ents = (*entsBuf)[:0]
	)
	for _, m := range batch {
		if m.Term != nil { // Term, Vote and Commit are set together or not at all
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
		if s := m.GetSnapshot(); !etcdraft.IsEmptySnap(s) {
			snap = s
		}
		ents = mergeEntries(ents, m.GetEntries())
	}
	commitOnly := hs != nil && len(ents) == 0 && snap == nil &&
		hs.GetTerm() == n.saved.term && hs.GetVote() == n.saved.vote
	switch {
	case commitOnly:
		// Only the commit index moved. Raft does not need it durable (a
		// restarted member learns it again; etcd raft's MustSync says the
		// same), so it rides along with the next write instead of costing
		// a commit of its own.
		n.saved.pending = hs
	case hs != nil || len(ents) > 0 || snap != nil:
		if hs == nil {
			hs = n.saved.pending
		}
		if err := n.store.Save(hs, ents, snap); err != nil {
			n.fail("persisting the log", err)
			return false
		}
		n.saved.pending = nil
		if hs != nil {
			n.saved.term, n.saved.vote = hs.GetTerm(), hs.GetVote()
		}
	}
	clear(ents)
	*entsBuf = ents[:0]
	if snap != nil {
		// The state machine must be restored from the snapshot before any
		// later entry is applied; raft emits those only after it steps the
		// response below, so queueing the restore first keeps the order.
		files, err := n.openSnapFiles(snap)
		if err != nil {
			n.fail("opening a received snapshot", err)
			return false
		}
		if !n.queueRestore(applyTask{snap: snap, files: files}) {
			// The node stops: the snapshot is saved, and the next start
			// restores from it. Persisting goes on — the appends the loop
			// handed over are drained and the held-back commit index
			// written (drainAppends, flushCommit) — so this is no failure.
			files.close()
		}
	}
	o := (*out)[:0]
	for _, m := range batch {
		for _, r := range m.GetResponses() {
			if r.GetTo() == n.cfg.ID {
				n.local.put(r)
			} else {
				o = append(o, r)
			}
		}
	}
	if len(o) > 0 {
		n.tr.Send(o)
	}
	clear(o)
	*out = o[:0]
	return true
}

// queueRestore hands a received snapshot's restore to the apply task,
// unless the node stops (it reports false then; the caller closes the
// files). A restore queued as the node stops is not lost either: the apply
// task closes the files of queued restores once this task has exited
// (closeQueuedSnapshots runs after appendDone).
func (n *Node) queueRestore(t applyTask) bool {
	if n.stopped() {
		return false
	}
	n.applies.push(t)
	n.applyTask.Signal()
	return true
}

// drainAppends, as the node stops, persists the appends the run loop handed
// over and this task had not taken yet (it runs once the loop has exited,
// so none come later). The loop hands over an append before the entries it
// commits are applied, so once this returns every applied entry's commit
// index is on disk or held for flushCommit: a restart replays the log up to
// it before Start returns (TestHostRestartServesReplayedState).
func (n *Node) drainAppends() {
	s := &n.saved
	for {
		s.queued = n.appends.takeInto(s.queued[:0], maxAppendBatch)
		if len(s.queued) == 0 {
			return
		}
		ok := n.saveSplit(s.queued)
		clear(s.queued)
		if !ok {
			return
		}
	}
}

// flushCommit writes a commit-only hard state still held back, as the node
// stops: a restarted member then starts from every commit it knew of.
// (Reads do not depend on it — a leader answers none before it commits an
// entry of its own term — but a restart applies what was committed at once.)
func (n *Node) flushCommit() {
	if hs := n.saved.pending; hs != nil {
		n.saved.pending = nil
		if err := n.store.Save(hs, nil, nil); err != nil {
			n.log.Warn("persisting the commit index on stop", slog.Any("err", err))
		}
	}
}

// appendState is the append task's: what it knows about the persisted hard
// state, and its reused buffers.
type appendState struct {
	init       bool // term and vote were read from the storage
	term, vote uint64
	pending    *raftpb.HardState // a commit-only update not written yet
	queued     []*raftpb.Message
	ents       []*raftpb.Entry
	out        []*raftpb.Message
}

// mergeEntries appends next to acc, truncating the entries of acc that next
// overwrites (a later append may replace a conflicting tail).
func mergeEntries(acc, next []*raftpb.Entry) []*raftpb.Entry {
	if len(next) == 0 {
		return acc
	}
	if len(acc) > 0 {
		first := next[0].GetIndex()
		base := acc[0].GetIndex()
		switch {
		case first <= base:
			clear(acc)
			acc = acc[:0]
		case first <= acc[len(acc)-1].GetIndex():
			cut := int(first - base)
			clear(acc[cut:])
			acc = acc[:cut]
		}
	}
	return append(acc, next...)
}
