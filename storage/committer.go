package storage

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The committer: every write of every group (a Save's puts and deletes,
// Compact's bounds, a snapshot's record, the identity, the tombstone, a new
// group's buckets) is a closure doing bbolt work only, validated and encoded
// beforehand by its Store. The Store queues it and waits; one goroutine runs
// all the closures queued while the previous commit ran in one bbolt
// transaction, commits it once and answers them all. Natural batching: no
// timer, a lone write is committed at once, and under load a commit carries
// whatever arrived during the one before.
//
// A group has at most one write queued at a time (its writers hold its wmu
// while they wait), so a commit carries one write per group it touches.

// commitReq is one write: fn runs in the shared transaction.
type commitReq struct {
	group uint64
	save  bool
	fn    func(*bolt.Tx) error
}

// commitBatch is the writes one transaction carries. err, dur and writeTime
// are set before done is closed.
type commitBatch struct {
	reqs      []commitReq
	done      chan struct{}
	err       error
	dur       time.Duration // the whole transaction, fsyncs included
	writeTime time.Duration // bbolt's write and sync time; 0 with NoSync
}

type committer struct {
	mu      sync.Mutex
	pending *commitBatch // the writes queued for the next commit
	stopped bool
	wake    chan struct{} // capacity 1: a batch is pending
	stop    chan struct{}
	exited  chan struct{}
}

func (e *Engine) startCommitter() {
	e.c.wake = make(chan struct{}, 1)
	e.c.stop = make(chan struct{})
	e.c.exited = make(chan struct{})
	go e.runCommitter()
}

// stopCommitter stops the committer; a write queued after that (there is
// none once every group is closed) fails with ErrClosed.
func (e *Engine) stopCommitter() {
	e.c.mu.Lock()
	e.c.stopped = true
	e.c.mu.Unlock()
	close(e.c.stop)
	<-e.c.exited
	e.c.mu.Lock()
	b := e.c.pending
	e.c.pending = nil
	e.c.mu.Unlock()
	if b != nil {
		b.err = ErrClosed
		close(b.done)
	}
}

// commit queues fn, a write of group, for the next commit and waits for it.
// It returns the batch's error (the same for every write of the batch) and
// the commit's durations.
func (e *Engine) commit(group uint64, save bool, fn func(*bolt.Tx) error) (dur, writeTime time.Duration, err error) {
	e.c.mu.Lock()
	if e.c.stopped {
		e.c.mu.Unlock()
		return 0, 0, ErrClosed
	}
	b := e.c.pending
	if b == nil {
		b = &commitBatch{done: make(chan struct{})}
		e.c.pending = b
		select {
		case e.c.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	b.reqs = append(b.reqs, commitReq{group: group, save: save, fn: fn})
	e.c.mu.Unlock()
	<-b.done
	return b.dur, b.writeTime, b.err
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

func (e *Engine) runCommitter() {
	defer close(e.c.exited)
	for {
		select {
		case <-e.c.wake:
		case <-e.c.stop:
			return
		}
		e.c.mu.Lock()
		b := e.c.pending
		e.c.pending = nil
		e.c.mu.Unlock()
		if b == nil {
			continue
		}
		e.commitBatch(b)
		close(b.done)
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
	var tx *bolt.Tx
	err := e.update(func(t *bolt.Tx) error {
		tx = t
		for _, r := range b.reqs {
			if err := r.fn(t); err != nil {
				if len(b.reqs) == 1 {
					return err
				}
				return fmt.Errorf("the write of group %d in a commit of %d: %w", r.group, len(b.reqs), err)
			}
		}
		return nil
	})
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
	e.m.saves.Add(uint64(saves))
	e.m.commitDur.observe(b.dur)
	if !e.opts.NoSync {
		// bbolt's write time of the commit: its pages written and
		// fdatasynced, then its meta page written and fdatasynced.
		st := tx.Stats()
		b.writeTime = st.GetWriteTime()
		e.m.syncDur.observe(b.writeTime)
	}
	for {
		m := e.m.maxWrites.Load()
		if uint64(len(b.reqs)) <= m || e.m.maxWrites.CompareAndSwap(m, uint64(len(b.reqs))) {
			break
		}
	}
}
