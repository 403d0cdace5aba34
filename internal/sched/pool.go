// Package sched runs many small state machines (a host's raft groups) on a
// fixed number of goroutines.
//
// A Task is a unit of work that is run again whenever it is signaled: a
// group's raft loop, its log appends, its apply queue. A Pool runs tasks on
// at most Workers goroutines, one goroutine at a time per task (so a task's
// state needs no lock), in the order they were signaled. A task signaled
// while it runs is run once more after it returns; signals while it waits
// merge into one run. This is the scheduler of CockroachDB's raft
// processing and of TiKV's batch system, reduced to what understudy needs.
package sched

import (
	"sync"
	"sync/atomic"
)

// Task states.
const (
	idle    int32 = iota // not queued, not running
	queued               // in its pool's run queue
	running              // a worker runs it
	again                // a worker runs it, and it was signaled meanwhile
)

// Task is a function that a Pool runs when signaled. The zero value is not
// usable: make one with NewTask.
type Task struct {
	pool  *Pool
	run   func()
	state atomic.Int32
}

// NewTask returns a task of p that runs run.
func (p *Pool) NewTask(run func()) *Task { return &Task{pool: p, run: run} }

// Signal asks for the task to run. It never blocks: the task is queued
// unless it already is, and a task running now runs once more when it
// returns. Signal is safe from any goroutine, the task's own included.
func (t *Task) Signal() {
	for {
		switch s := t.state.Load(); s {
		case idle:
			if t.state.CompareAndSwap(idle, queued) {
				t.pool.push(t)
				return
			}
		case running:
			if t.state.CompareAndSwap(running, again) {
				return
			}
		default: // queued, or already marked to run again
			return
		}
	}
}

// RunHere runs f in place of the task's function, on the calling
// goroutine, if the task is idle (neither queued nor running), and reports
// whether it did. It takes the task's turn: no worker runs the task while
// f runs, and a Signal meanwhile queues the task once f returns, as for a
// run on a worker. A caller that has work for the task and gets false
// signals it instead (its Signal then merges into the queued or running
// turn). It saves the hand-off to another goroutine when the caller's
// goroutine is free to do the work now.
func (t *Task) RunHere(f func()) bool {
	if !t.state.CompareAndSwap(idle, running) {
		return false
	}
	p := t.pool
	p.inline.Add(1)
	f()
	if !t.state.CompareAndSwap(running, idle) {
		t.state.Store(queued)
		p.push(t)
	}
	return true
}

// Pool runs tasks on at most Workers goroutines, started when work needs
// them and kept until Close.
type Pool struct {
	max int

	mu      sync.Mutex
	cond    sync.Cond
	queue   []*Task // a ring: head at start, n long
	start   int
	n       int
	workers int // started
	waiting int // workers waiting for work
	closed  bool
	wg      sync.WaitGroup

	runs, inline atomic.Uint64
}

// NewPool returns a pool of at most workers goroutines (at least 1).
func NewPool(workers int) *Pool {
	p := &Pool{max: max(workers, 1), queue: make([]*Task, 16)}
	p.cond.L = &p.mu
	return p
}

// Workers returns the pool's bound on goroutines.
func (p *Pool) Workers() int { return p.max }

// Started returns how many worker goroutines are running.
func (p *Pool) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.workers
}

// Runs returns how many task runs the pool's workers have made: each was
// a hand-off to a worker (RunHere's are not counted).
func (p *Pool) Runs() uint64 { return p.runs.Load() }

// InlineRuns returns how many turns of the pool's tasks RunHere ran on
// its caller's goroutine.
func (p *Pool) InlineRuns() uint64 { return p.inline.Load() }

func (p *Pool) push(t *Task) {
	p.mu.Lock()
	if p.n == len(p.queue) {
		q := make([]*Task, 2*len(p.queue))
		for i := 0; i < p.n; i++ {
			q[i] = p.queue[(p.start+i)%len(p.queue)]
		}
		p.queue, p.start = q, 0
	}
	p.queue[(p.start+p.n)%len(p.queue)] = t
	p.n++
	switch {
	case p.waiting > 0:
		p.cond.Signal()
	case p.workers < p.max && !p.closed:
		p.workers++
		p.wg.Add(1)
		go p.work()
	}
	p.mu.Unlock()
}

// pop waits for a task; it returns nil once the pool is closed and empty.
func (p *Pool) pop() *Task {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == 0 {
		if p.closed {
			return nil
		}
		p.waiting++
		p.cond.Wait()
		p.waiting--
	}
	t := p.queue[p.start]
	p.queue[p.start] = nil
	p.start = (p.start + 1) % len(p.queue)
	p.n--
	return t
}

func (p *Pool) work() {
	defer p.wg.Done()
	for {
		t := p.pop()
		if t == nil {
			return
		}
		t.state.Store(running)
		p.runs.Add(1)
		t.run()
		if !t.state.CompareAndSwap(running, idle) {
			// Signaled while it ran: to the back of the queue, so that a
			// busy task does not starve the others.
			t.state.Store(queued)
			p.push(t)
		}
	}
}

// Close lets the workers exit once the queue is empty; tasks signaled
// after Close still run while a worker is left, but no worker is started
// after Close (a task signaled once every worker exited is never run: close
// a pool only once its tasks have no more work). It does not wait: Wait
// does.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Wait waits for the workers to exit after Close. It must not be called
// from a task.
func (p *Pool) Wait() { p.wg.Wait() }
