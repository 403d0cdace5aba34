package raft

import "log/slog"

// Work of the append and apply tasks done on the loop's worker, where it
// saves a goroutine hand-off each way (and the loop's next run for the
// task's answer) without holding the loop for long: the task's turn is
// taken on the loop's goroutine (sched.Task.RunHere: no worker runs the
// task meanwhile, and a signal during it queues a worker run after it), so
// each task's work is still done in order by one goroutine at a time;
// only which goroutine changes. It runs right after the Ready that made
// the work, once that Ready's messages left and its other work was handed
// over, and the loop steps the task's answers itself.
//
//   - An append with nothing to write — only the commit index moved, which
//     rides with the next write (mergeBatch), and the answers it carries —
//     when no write of the node is in flight or queued: its answers
//     (a follower's ack of an empty append, the leader's own) may leave
//     now, every write before them being durable. Always.
//   - Small batches of committed entries when the apply task is idle
//     (Config.InlineApply: the state machine's Apply must be quick).
const (
	// inlineApplyEntries and inlineApplyBytes bound what one turn on the
	// loop applies: larger batches (one busy group's) go to the apply
	// workers, where applying overlaps the loop's next round.
	inlineApplyEntries = 32
	inlineApplyBytes   = 32 << 10
)

// applyOnLoop applies on the loop's worker the committed entries handed
// to the apply task, if it is idle and they are small enough, and steps
// the apply's answers; otherwise it signals the apply task, as handleReady
// does without InlineApply. It runs on the loop.
func (n *Node) applyOnLoop() {
	if n.stopped() || !n.applyTask.RunHere(n.applyTurnOnLoop) {
		n.applyTask.Signal()
		return
	}
	n.stepAnswers()
}

// appendOnLoop delivers, on the loop's worker, the answers of an append
// that has nothing to write, when the append task is idle and no write
// of the node is in flight or queued before it; otherwise it signals the
// append task. It runs on the loop.
func (n *Node) appendOnLoop() {
	if n.stopped() || n.saving.Load() || !n.appendTask.RunHere(n.appendTurnOnLoop) {
		n.appendTask.Signal()
		return
	}
	n.stepAnswers()
}

// appendTurnOnLoop is the append task's turn taken by the loop's worker:
// it handles the one append queued if it writes nothing (mergeBatch keeps
// a commit-only hard state for the next write), and else leaves it to an
// I/O worker.
func (n *Node) appendTurnOnLoop() {
	s := &n.saved
	if !n.running.Load() || n.appendExited || n.saving.Load() || n.stopped() || !s.init {
		n.appendTask.Signal() // runAppend knows what to do
		return
	}
	m, ok := n.appends.peek()
	if !ok {
		return
	}
	if n.appends.len() != 1 || len(m.GetEntries()) > 0 || m.GetSnapshot() != nil ||
		(m.Term != nil && (m.GetTerm() != s.term || m.GetVote() != s.vote)) {
		n.appendTask.Signal()
		return
	}
	// runAppend's work for this append, which writes nothing: mergeBatch
	// keeps its hard state, if any, for the next write, and its answers
	// are delivered at once.
	s.onLoop = true
	s.queued = n.appends.takeInto(s.queued[:0], 1)
	if as, ok := n.store.(AsyncStorage); ok {
		n.saveAsync(as, s.queued)
	} else if n.saveSplit(s.queued) {
		n.batchDone()
	}
	s.onLoop = false
}

// stepAnswers steps the answers the append and apply tasks' turns on the
// loop's worker left, after those the tasks' runs on workers queued
// before: raft hears of persisted and applied entries in order.
func (n *Node) stepAnswers() {
	l := &n.loop
	b := l.buffers()
	if len(b.answers) == 0 {
		return
	}
	b.localBuf = n.local.take(b.localBuf[:0])
	b.localBuf = append(b.localBuf, b.answers...)
	clear(b.answers)
	b.answers = b.answers[:0]
	for i, m := range b.localBuf {
		if err := l.rn.Step(m); err != nil {
			n.log.Debug("stepping a local message", slog.Any("err", err))
		}
		b.localBuf[i] = nil
	}
}

// applyTurnOnLoop is the apply task's turn taken by the loop's worker: it
// applies the queued tasks that fit the bounds, in order, and leaves the
// rest (a conf change, a snapshot to restore, a large batch, a snapshot to
// take) to an apply worker.
func (n *Node) applyTurnOnLoop() {
	n.applyMu.Lock()
	switch {
	case n.applyExited:
	case n.stopped():
		n.applyTask.Signal() // a worker ends the task (runApply)
	default:
		n.applyOnLoopOnce()
	}
	n.applyMu.Unlock()
	if n.applyExitAsked.Load() {
		n.exitApplyIdle()
	}
}

func (n *Node) applyOnLoopOnce() {
	a := &n.apply
	a.onLoop = true
	defer func() {
		a.onLoop = false
		if r := recover(); r != nil {
			n.fail("applying committed entries", panicError(r))
		}
	}()
	entries, bytes := 0, 0
	for !n.stopped() {
		t, ok := n.applies.peek()
		if !ok || t.snap != nil || len(t.confStates) > 0 {
			break
		}
		ents := t.msg.GetEntries()
		size := 0
		for _, e := range ents {
			size += len(e.GetData())
		}
		if entries+len(ents) > inlineApplyEntries || bytes+size > inlineApplyBytes {
			break
		}
		entries, bytes = entries+len(ents), bytes+size
		n.applies.pop() // the one peeked: only the apply task's turn takes
		if err := n.applyEntries(t); err != nil {
			n.fail("applying committed entries", err)
			return
		}
	}
	if n.applies.len() > 0 {
		n.applyTask.Signal() // after this turn, on an apply worker
	}
}

// snapshotMayBeDue reports whether maybeSnapshot may start a snapshot now
// (due by count, or wanted for a joining member); the apply task looks
// when woken (wakeSnapshots). A Node.Snapshot caller wakes it itself.
func (n *Node) snapshotMayBeDue() bool {
	a := &n.apply
	s := &a.snap
	if s.running.Load() {
		return false
	}
	want := s.want.Load()
	return n.snapshotDue() || (want > s.written.Load() && a.applied >= want)
}
