package raft

import (
	"log/slog"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// maxAppendBatch bounds how many MsgStorageAppend messages one Save merges.
const maxAppendBatch = 256

// runAppend is the append task: it persists MsgStorageAppend messages in
// order and then delivers their responses (to the loop, or to peers: a
// follower's ack leaves only after its fsync). The messages queued since
// the previous run are merged into one Save (up to maxAppendBatch; a
// snapshot is saved on its own, after what came before) — one storage
// commit for many Readys, which is where group commit comes from. It runs
// on the scheduler's I/O workers. On an AsyncStorage the write is queued
// for the storage's next commit, and the task's next run waits for its
// completion (saveAsync); otherwise the worker waits in Save.
func (n *Node) runAppend() {
	if !n.running.Load() || n.appendExited || n.saving.Load() {
		return // (a SaveAsync in flight signals the task when it is done)
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
		if !n.loopDone.Load() {
			return
		}
		n.drainAppends()
		n.flushCommit()
		n.appendExited = true
		n.appendDone.Store(true)
		n.applyTask.Signal()
		n.exitApplyIdle()
		n.release()
		return
	}
	s.queued = n.appends.takeInto(s.queued[:0], maxAppendBatch)
	if as, ok := n.store.(AsyncStorage); ok && !hasSnapshot(s.queued) {
		n.saveAsync(as, s.queued)
		return
	}
	if !n.saveSplit(s.queued) {
		return
	}
	clear(s.queued)
	if n.appends.len() > 0 {
		n.appendTask.Signal()
	}
}

// AsyncStorage is a Storage whose Save can complete without its caller
// waiting (storage.Store implements it). The node's append task then does
// not hold an I/O worker while its write waits for the storage's commit:
// done runs when the write is durable, on the goroutine that made the
// commit, and must not block (the node's only queues the responses and
// signals its tasks).
type AsyncStorage interface {
	// SaveAsync is Save, reporting its error to done instead of returning
	// it. The node calls it with at most one write in flight.
	SaveAsync(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot, done func(error))
}

func hasSnapshot(msgs []*raftpb.Message) bool {
	for _, m := range msgs {
		if m.GetSnapshot() != nil {
			return true
		}
	}
	return false
}

// saveAsync is saveBatch for a batch without a snapshot on an AsyncStorage
// (batch is saved.queued, which the completion delivers and clears):
// the responses are delivered, and the task signaled for its next batch,
// when the write is durable.
func (n *Node) saveAsync(as AsyncStorage, batch []*raftpb.Message) {
	s := &n.saved
	hs, ents, _, write := n.mergeBatch(batch, s.ents[:0])
	s.ents = ents
	if !write {
		n.deliver(batch)
		n.batchDone()
		return
	}
	n.saving.Store(true)
	// While the write is in flight nothing else reads pending (the task's
	// runs and turns return at once while saving): it holds the hard state
	// written, for the completion.
	s.pending = hs
	if s.savedFn == nil {
		s.savedFn = n.asyncSaved // bound once: not a closure per write
	}
	as.SaveAsync(hs, ents, nil, s.savedFn)
}

// asyncSaved completes saveAsync's write of the batch saved.queued (and
// the hard state saved.pending) when the storage reports it durable or
// failed: on the goroutine that made the storage commit.
func (n *Node) asyncSaved(err error) {
	s := &n.saved
	if err != nil {
		s.failed = true // (read by the task's next run, after saving)
		n.fail("persisting the log", err)
	} else {
		if hs := s.pending; hs != nil {
			s.term, s.vote = hs.GetTerm(), hs.GetVote()
		}
		s.pending = nil
		n.deliver(s.queued)
	}
	n.clearBatch()
	n.saving.Store(false)
	// The task's next run only if it has work: appends queued meanwhile
	// (a run that found this write in flight returned at once: saving
	// is cleared before the queue is looked at, so one of the two sees
	// the other), or the node's stop. Not a run per commit per group.
	if n.appends.len() > 0 || n.stopped() {
		n.appendTask.Signal()
	}
}

// batchDone clears the append task's buffers after a batch and signals the
// task if more is queued.
func (n *Node) batchDone() {
	n.clearBatch()
	if n.appends.len() > 0 {
		n.appendTask.Signal()
	}
}

// clearBatch clears the append task's buffers after a batch.
func (n *Node) clearBatch() {
	s := &n.saved
	clear(s.ents)
	s.ents = s.ents[:0]
	clear(s.queued)
	s.queued = s.queued[:0]
}

// mergeBatch merges a batch's writes into one: the last hard state, the
// last snapshot, the entries (a later append replacing a conflicting tail).
// write is false when nothing is to be written now: a commit-only hard
// state is kept (saved.pending) for the next write instead.
func (n *Node) mergeBatch(batch []*raftpb.Message, ents []*raftpb.Entry) (hs *raftpb.HardState, _ []*raftpb.Entry, snap *raftpb.Snapshot, write bool) {
	for _, m := range batch {
		if m.Term != nil { // Term, Vote and Commit are set together or not at all
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
		if s := m.GetSnapshot(); !etcdraft.IsEmptySnap(s) {
			snap = s
		}
		ents = mergeEntries(ents, m.GetEntries())
		n.learnIncarnations(m.GetEntries())
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
		return nil, ents, nil, false
	case hs != nil || len(ents) > 0 || snap != nil:
		if hs == nil {
			hs = n.saved.pending
		}
		return hs, ents, snap, true
	}
	return nil, ents, nil, false
}

// deliver sends the responses of a persisted batch: to the loop, or to
// peers (a follower's ack leaves only after its fsync).
func (n *Node) deliver(batch []*raftpb.Message) {
	s := &n.saved
	o := s.out[:0]
	quiet := !s.onLoop && n.quietAppendAnswers(batch) // (quietanswers.go)
	for _, m := range batch {
		for _, r := range m.GetResponses() {
			if r.GetTo() == n.cfg.ID {
				switch {
				case s.onLoop:
					b := n.loop.buffers() // the loop steps it after this turn (onloop.go)
					b.answers = append(b.answers, r)
				case quiet:
					n.answerQuietly(r)
				default:
					n.local.put(r)
				}
			} else {
				o = append(o, r)
			}
		}
	}
	if len(o) > 1 {
		o = dropSupersededAnswers(o)
	}
	if len(o) > 0 && n.answers.route.Load() != nil {
		o = n.answersThroughRelay(o) // a relayed standby's acks (relay_answers.go)
	}
	if len(o) > 0 {
		n.tr.Send(o)
	}
	clear(o)
	s.out = o[:0]
}

// dropSupersededAnswers leaves out, in place, each acknowledgement that a
// later one in out covers (raftio.AnswerSuperseded): a member that appended
// several appends in one write — a standby handed a relay's gathered
// appends, a follower behind a burst — acknowledges once, with the highest
// index, which frees the leader's in-flight slots of all of them. The
// leader reads, steps and (for a standby fed directly) pays a frame for
// one answer instead of one per append.
func dropSupersededAnswers(out []*raftpb.Message) []*raftpb.Message {
	kept := out[:0]
	for i, m := range out {
		if !raftio.AnswerSuperseded(m, out[i+1:]) {
			kept = append(kept, m)
		}
	}
	clear(out[len(kept):])
	return kept
}

// saveSplit saves msgs in order, each snapshot on its own. It reports false
// if the node must stop.
func (n *Node) saveSplit(msgs []*raftpb.Message) bool {
	s := &n.saved
	start := 0
	for i, m := range msgs {
		if m.GetSnapshot() != nil {
			if !n.saveBatch(msgs[start:i], &s.ents) || !n.saveBatch(msgs[i:i+1], &s.ents) {
				return false
			}
			start = i + 1
		}
	}
	return n.saveBatch(msgs[start:], &s.ents)
}

// saveBatch persists the merged batch with one Save and delivers the
// responses. It returns false if the node must stop.
func (n *Node) saveBatch(batch []*raftpb.Message, entsBuf *[]*raftpb.Entry) bool {
	if len(batch) == 0 {
		return true
	}
	hs, ents, snap, write := n.mergeBatch(batch, (*entsBuf)[:0])
	if write {
		if err := n.store.Save(hs, ents, snap); err != nil {
			n.saved.failed = true
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
		files, err := n.openSnapFiles(snap)
		if err != nil {
			n.saved.failed = true
			n.fail("opening a received snapshot", err)
			return false
		}
		if !n.queueRestore(applyTask{snap: snap, files: files}) {
			files.close()
		}
	}
	n.deliver(batch)
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
//
// Not after a batch failed (saved.failed: the node stops on that failure):
// the later appends build on what it did not write. One may carry no
// entries and only the acknowledgement of an append the failed write held
// (a follower's answer to an empty MsgApp, or to a resent one): delivering
// it told the leader that this member holds entries it never wrote, and the
// leader counted them towards a commit, then sent the restarted member a
// commit index past its log ("tocommit(N) is out of range"). So they are
// dropped, unwritten and unacknowledged, as a crash at the failed write
// would have dropped them.
func (n *Node) drainAppends() {
	s := &n.saved
	for !s.failed {
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
//
// Not after a batch failed: the commit index held back may be past the
// entries that batch did not write (a stored commit index past the log
// fails the next start).
func (n *Node) flushCommit() {
	if hs := n.saved.pending; hs != nil && !n.saved.failed {
		n.saved.pending = nil
		if err := n.store.Save(hs, nil, nil); err != nil {
			n.log.Warn("persisting the commit index on stop", slog.Any("err", err))
		}
	}
}

// appendState is the append task's: what it knows about the persisted hard
// state, and its reused buffers.
type appendState struct {
	init bool // term and vote were read from the storage
	// onLoop: this turn runs on the loop's worker (onloop.go), which steps
	// the answers to this member itself after it.
	onLoop bool
	// failed: a batch could not be persisted (or its snapshot opened) and
	// the node stops on it; nothing later is written or acknowledged.
	failed     bool
	term, vote uint64
	// pending is a commit-only update not written yet; while a SaveAsync
	// is in flight, the hard state it writes.
	pending *raftpb.HardState
	queued  []*raftpb.Message
	ents    []*raftpb.Entry
	out     []*raftpb.Message
	savedFn func(error) // asyncSaved, bound with the first SaveAsync
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
