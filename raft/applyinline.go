package raft

import "log/slog"

// Applies on the loop's worker (Config.InlineApply). At many groups a
// round carries a write or two per group, and handing each group's
// committed entries to an apply worker, then its answer back to the loop,
// costs two goroutine hand-offs for a few microseconds of Apply. So when
// the apply task is idle and what it has queued is small, the loop's
// worker takes the apply task's turn (sched.Task.RunHere: no apply worker
// runs it meanwhile, and a signal during it queues a worker run after it)
// and applies right after the Ready that committed the entries — after
// that Ready's messages left and its append was handed over — then steps
// the apply's answers itself. The entries are applied in order by one
// goroutine at a time as before; only which goroutine changes.

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
	l := &n.loop
	b := l.buffers()
	if len(b.answers) == 0 {
		return
	}
	// Answers of earlier turns (on an apply worker) first: raft hears of
	// the applied entries in order.
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
		b := n.loop.buffers()
		b.answers = append(b.answers, a.answers...)
		clear(a.answers)
		a.answers = a.answers[:0]
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
	due := a.applied >= s.index+n.cfg.SnapshotCount && s.logBytes >= uint64(s.lastSize.Load())
	want := s.want.Load()
	return due || (want > s.written.Load() && a.applied >= want)
}
