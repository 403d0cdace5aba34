package storage

import (
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"time"

	"github.com/understudy-raft/understudy/internal/diskfault"
)

// The committer: every write of every group (a Save's puts and deletes,
// Compact's bounds, a snapshot's record, the identity, the tombstone, a new
// group's buckets) is a closure doing bbolt work only, validated and encoded
// beforehand by its Store. The Store queues it and waits; one commit runs at
// a time, carrying every write queued while the previous one ran, in one
// bbolt transaction, and answers them all. Natural batching: no timer, a
// lone write is committed at once, and under load a commit carries whatever
// arrived during the one before.
//
// The committer is mostly a role, as in RocksDB's write groups: a writer
// that finds no commit running commits its write itself; one that finds a
// commit running queues its write for the next commit, and the first
// synchronous writer of that next batch commits it when the running commit
// hands over. A lone writer so pays no goroutine hand-off (two wake-ups,
// about 10 µs per Save with NoSync on this 2-core machine). Asynchronous
// writes (Store.SaveAsync, the append tasks' path) do not wait: a batch of
// only those is handed to the engine's one commit goroutine, which commits
// batches until none is queued or a synchronous writer takes the next one.
// Whoever makes a commit calls the done callbacks of its asynchronous
// writes after it, instead of waking one goroutine per group.
//
// A group has at most one write queued at a time (its writers hold its wmu
// while they wait), so a commit carries one write per group it touches.
//
// Between commits, the committer yields its processor when more than one
// group writes, before it takes the next batch (once, then again while that
// pays off: yieldForBatch). Completing a commit readies every group it
// carried (their append tasks, then their loops, which make their next
// appends); Go runs a goroutine readied by another ahead of everything
// queued, so without the yield the commit goroutine, readied by the
// backend's sync, took the next batch while those groups' next writes were
// still on their way: with 100 groups on a 2-core host each commit carried
// 1.5 groups, and the fsyncs, not the groups' work, set the pace. After the
// yield, what was runnable has run and queued its writes (see
// docs/architecture.md "A commit waits for what is runnable").
// "More than one group writes" is: the commit carried more than one write,
// or its write is another group's than the commit before it. Yielding only
// after commits of several writes was not enough: batches of one then
// stayed batches of one. A lone group (one write queued at a time) never
// yields: it has nothing to wait for. Nor does a commit of synchronous
// writes only (it readied no group's append task: a writer waiting in Save
// goes on by itself, and a host closing its groups one after the other
// took 3 s instead of 0.6 with a yield behind each), nor a committer whose
// next batch already holds as many writes as the commit just made (and at
// least yieldBelow): it has no reason to wait, and when thousands of
// groups write at once (elections after a host's loss) a yield behind all
// of them only delays their votes' fsyncs.

// parkAbove and parkBelow bound the average groups a commit carries while
// SyncWaitAuto parks the Pebble backend's fsyncs: from parkAbove on, until
// below parkBelow (noteGroups).
const (
	parkAbove = 8
	parkBelow = 5
)

// yieldBelow is the smallest next batch that spares the committer's yield.
const yieldBelow = 4

// maxYields bounds the committer's yields between two commits, and
// yieldGrowth the next batch it yields for: at most that many times the
// writes of the commit just made (see yieldForBatch).
const (
	maxYields   = 8
	yieldGrowth = 4
	yieldFor    = 4 // times the duration of the commit just made
)

// commitReq is one write: fn runs in the shared transaction. done, for a
// write queued with commitAsync, is called by the commit's leader after the
// commit, with the batch's durations and error.
type commitReq struct {
	group uint64
	save  bool
	fn    func(kvTx) error
	done  func(dur, writeTime time.Duration, err error)
}

// commitBatch is the writes one transaction carries. err, dur and writeTime
// are set before done is closed.
type commitBatch struct {
	reqs []commitReq   // in few[:] until it outgrows it
	lead chan struct{} // non-nil when a synchronous writer waits to commit it; closed when it is to
	// done is closed when the batch's commit ended. Made (under the
	// committer's mu, while the batch is pending) only for a synchronous
	// writer that joins the batch and waits: the batch's leader and its
	// asynchronous writers do not need it.
	done      chan struct{}
	err       error
	dur       time.Duration // the whole transaction, fsyncs included
	writeTime time.Duration // the backend's write and sync time; 0 with NoSync
	few       [4]commitReq
}

// newBatch returns a batch of the one write req.
func newBatch(req commitReq) *commitBatch {
	b := &commitBatch{}
	b.few[0] = req
	b.reqs = b.few[:1]
	return b
}

// add queues req in pending batch b, making b if nil.
func addToBatch(b *commitBatch, req commitReq) *commitBatch {
	if b == nil {
		return newBatch(req)
	}
	b.reqs = append(b.reqs, req)
	return b
}

type committer struct {
	mu      sync.Mutex
	busy    bool         // a commit is running (or handed over to the pending batch)
	pending *commitBatch // the writes queued for the next commit; only while busy
	stopped bool

	// yield lets every runnable goroutine run before the next commit is
	// taken (runtime.Gosched; tests replace it).
	yield func()
	// runnable reports whether goroutines wait for a processor
	// (runnableGoroutines; tests replace it).
	runnable  func() bool
	lastGroup uint64 // the group of the last write of the last commit

	// kick hands a pending batch of asynchronous writes only to the
	// engine's commit goroutine (startCommitter): a writer that queued its
	// write with commitAsync does not wait, so none of them can lead it.
	kick chan *commitBatch
	wg   sync.WaitGroup

	// Owned by the batch's leader while it commits (one at a time): the
	// batch, runBatch bound once for the backend's update, and the
	// runtime/metrics sample runnableGoroutines reads.
	running   *commitBatch
	runFn     func(kvTx) error
	sample    [1]rtmetrics.Sample
	groupsAvg int64 // groups a commit carried, x16, averaged (commitBatch)
}

// startCommitter starts the commit goroutine, which commits the batches
// of asynchronous writes that no synchronous writer leads.
func (e *Engine) startCommitter() {
	e.c.yield = runtime.Gosched
	if e.opts.commitYield != nil {
		e.c.yield = e.opts.commitYield
	}
	e.c.sample[0].Name = "/sched/goroutines/runnable:goroutines"
	e.c.runnable = e.c.runnableGoroutines
	if e.opts.commitRunnable != nil {
		e.c.runnable = e.opts.commitRunnable
	}
	e.c.kick = make(chan *commitBatch, 1)
	e.c.wg.Add(1)
	go func() {
		defer e.c.wg.Done()
		for b := range e.c.kick {
			e.lead(b, true)
		}
	}()
}

// stopCommitter refuses every later write with ErrClosed and stops the
// commit goroutine. The engine calls it once its groups are closed, so no
// write is running or queued.
func (e *Engine) stopCommitter() {
	e.c.mu.Lock()
	stopped := e.c.stopped
	e.c.stopped = true
	e.c.mu.Unlock()
	if !stopped && e.c.kick != nil {
		close(e.c.kick)
		e.c.wg.Wait()
	}
}

// commit queues fn, a write of group, for the next commit and waits for it.
// It returns the batch's error (the same for every write of the batch) and
// the commit's durations.
func (e *Engine) commit(group uint64, save bool, fn func(kvTx) error) (dur, writeTime time.Duration, err error) {
	req := commitReq{group: group, save: save, fn: fn}
	e.c.mu.Lock()
	if e.c.stopped {
		e.c.mu.Unlock()
		return 0, 0, ErrClosed
	}
	if !e.c.busy { // no commit running (nothing is pending then): commit now
		e.c.busy = true
		e.c.mu.Unlock()
		b := newBatch(req)
		e.lead(b, false)
		return b.dur, b.writeTime, b.err
	}
	b := addToBatch(e.c.pending, req)
	e.c.pending = b
	if b.done == nil {
		b.done = make(chan struct{})
	}
	leader := b.lead == nil
	if leader {
		b.lead = make(chan struct{})
	}
	e.c.mu.Unlock()
	if leader {
		<-b.lead // the running commit is done: take the batch and commit it
		e.c.mu.Lock()
		e.c.pending = nil
		e.c.mu.Unlock()
		e.lead(b, false)
	}
	<-b.done
	return b.dur, b.writeTime, b.err
}

// commitAsync queues fn, a Save of group, for the next commit and returns
// without waiting, unless no commit is running: then it commits it at once
// (with whatever else queues meanwhile handed to the commit goroutine). done
// is called once the write's commit ended, on the goroutine that made it;
// it must not block, nor queue another write and wait for it.
func (e *Engine) commitAsync(group uint64, fn func(kvTx) error, done func(dur, writeTime time.Duration, err error)) {
	req := commitReq{group: group, save: true, fn: fn, done: done}
	e.c.mu.Lock()
	if e.c.stopped {
		e.c.mu.Unlock()
		done(0, 0, ErrClosed)
		return
	}
	if !e.c.busy {
		e.c.busy = true
		e.c.mu.Unlock()
		e.lead(newBatch(req), false)
		return
	}
	e.c.pending = addToBatch(e.c.pending, req)
	e.c.mu.Unlock()
}

// lead commits b and completes its writes, then hands over the next batch:
// to the synchronous writer waiting to lead it, or else to the commit
// goroutine, or leaves the committer idle if none is queued. The commit
// goroutine (dedicated) leads the batches that follow itself.
func (e *Engine) lead(b *commitBatch, dedicated bool) {
	for {
		e.commitBatch(b)
		readied := false
		for _, r := range b.reqs {
			if r.done != nil {
				r.done(b.dur, b.writeTime, b.err)
				readied = true
			}
		}
		e.c.mu.Lock() // (b.done was made under it, if at all)
		if b.done != nil {
			close(b.done)
		}
		last, queued := b.reqs[len(b.reqs)-1].group, 0
		if e.c.pending != nil {
			queued = len(e.c.pending.reqs)
		}
		yield := readied && (len(b.reqs) > 1 || last != e.c.lastGroup) && queued < max(len(b.reqs), yieldBelow)
		e.c.lastGroup = last
		if yield {
			e.yieldForBatch(b, queued)
		}
		next := e.c.pending
		switch {
		case next == nil:
			e.c.busy = false
			e.c.mu.Unlock()
			return
		case next.lead != nil:
			close(next.lead) // busy stays set: the next commit is next's
			e.c.mu.Unlock()
			return
		case !dedicated:
			e.c.pending = nil
			e.c.kick <- next // never blocks: one batch is handed over at a time
			e.c.mu.Unlock()
			return
		}
		e.c.pending = nil
		e.c.mu.Unlock()
		b = next
	}
}

// yieldForBatch lets what the commit just made readied run and queue its
// writes before the next commit is taken (called with e.c.mu held, which it
// releases while it yields and holds again when it returns; busy stays
// set). It yields once, then again while that paid off — the next batch
// grew — or goroutines are still runnable (the groups the commit readied
// wait for a processor: the fsync of this or another engine holds one), at
// most maxYields times, for at most yieldFor times as long as the commit
// just made took, and only while the next batch holds fewer than
// yieldGrowth times the writes b carried (and yieldBelow). queued is how
// many writes the next batch held before the first yield.
func (e *Engine) yieldForBatch(b *commitBatch, queued int) {
	limit := yieldGrowth * max(len(b.reqs), yieldBelow)
	bound := yieldFor * b.dur
	if e.opts.commitYieldFor > 0 {
		bound = e.opts.commitYieldFor
	}
	deadline := time.Now().Add(bound)
	e.c.mu.Unlock()
	defer e.c.mu.Lock()
	for i := 1; ; i++ {
		e.c.yield() // what the yield runs queues its writes
		n := e.pendingWrites()
		grew := n > queued
		queued = n
		if i >= maxYields || n >= limit || !(grew || e.c.runnable()) || time.Now().After(deadline) {
			return
		}
	}
}

// runnableGoroutines reports whether the Go scheduler has goroutines
// waiting for a processor (runtime/metrics; false where the runtime does
// not report it). Only the goroutine leading a commit calls it, one at a
// time, so its sample needs no lock.
func (c *committer) runnableGoroutines() bool {
	rtmetrics.Read(c.sample[:])
	v := c.sample[0].Value
	return v.Kind() == rtmetrics.KindUint64 && v.Uint64() > 0
}

// pendingWrites returns how many writes are queued for the next commit.
func (e *Engine) pendingWrites() int {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	if e.c.pending == nil {
		return 0
	}
	return len(e.c.pending.reqs)
}

// runBatch runs the writes of the batch being committed in t.
func (e *Engine) runBatch(t kvTx) error {
	b := e.c.running
	for _, r := range b.reqs {
		if err := r.fn(t); err != nil {
			if len(b.reqs) == 1 {
				return err
			}
			return fmt.Errorf("the write of group %d in a commit of %d: %w", r.group, len(b.reqs), err)
		}
	}
	return nil
}

// noteGroups averages the groups a commit carried (x16, over about the last
// 8 commits) and tells the Pebble backend whether to park its fsyncs under
// SyncWaitAuto: while the average is at least parkAbove, until it falls
// below parkBelow. Those are hosts of many busy groups, where what the
// fsync holds — its goroutine's processor — is what the groups wait for
// (docs/architecture.md, "Parked fsyncs"). Called by the commit's leader.
func (e *Engine) noteGroups(n int) {
	if e.pdb == nil {
		return
	}
	// An eighth of the way to n each commit, at least one step of 1/16:
	// truncation alone would leave the average short of a steady n.
	d := int64(n)*16 - e.c.groupsAvg
	step := d / 8
	if step == 0 {
		step = max(-1, min(1, d))
	}
	e.c.groupsAvg += step
	switch {
	case e.c.groupsAvg >= parkAbove*16:
		e.pdb.park.Store(true)
	case e.c.groupsAvg < parkBelow*16:
		e.pdb.park.Store(false)
	}
}

// commitBatch runs b's writes in one transaction. Any error — a write's own,
// bbolt's commit, an fsync — rolls the whole transaction back (or leaves its
// outcome on disk unknown, for an fsync error) and fails every write of b and
// the engine: nothing of b is published, and no later write is attempted.
func (e *Engine) commitBatch(b *commitBatch) {
	if err := e.failure(); err != nil {
		b.err = err
		return
	}
	start := time.Now()
	var writeTime time.Duration
	err := diskfault.BeforeCommit(e.dir)
	if err == nil {
		if e.c.runFn == nil {
			e.c.runFn = e.runBatch // bound once: not a closure per commit
		}
		e.c.running = b
		writeTime, err = e.update(e.c.runFn)
		e.c.running = nil
	}
	if err != nil {
		e.fail(err)
		b.err = err
		return
	}
	b.dur = time.Since(start)
	saves := 0
	for _, r := range b.reqs {
		if r.save {
			saves++
		}
	}
	e.m.commits.Add(1)
	e.m.writes.Add(uint64(len(b.reqs)))
	e.noteGroups(len(b.reqs))
	e.m.saves.Add(uint64(saves))
	e.m.commitDur.observe(b.dur)
	if !e.opts.NoSync {
		// The backend's write time of the commit: bbolt's pages written
		// and fdatasynced, then its meta page written and fdatasynced;
		// Pebble's batch committed to its WAL and synced.
		b.writeTime = writeTime
		e.m.syncDur.observe(b.writeTime)
	}
	for {
		m := e.m.maxWrites.Load()
		if uint64(len(b.reqs)) <= m || e.m.maxWrites.CompareAndSwap(m, uint64(len(b.reqs))) {
			break
		}
	}
}
