package raft

import (
	"runtime"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/sched"
)

// Scheduler runs the nodes of a host on a fixed number of goroutines,
// whatever the number of nodes (a host runs one node per raft group):
//
//   - Workers goroutines step the run loops. A node's loop is a task run
//     by one worker at a time (one goroutine still owns each RawNode),
//     woken by its inbox (proposals, reads, peer messages, the append and
//     apply responses), its tick, or its own unfinished work; handling a
//     Ready never blocks a worker: it hands the appends and the committed
//     entries to the two pools below.
//   - IOWorkers goroutines persist the nodes' appends (a node's appends in
//     order, one worker at a time): a worker waits in the storage's
//     commit, where the appends of up to IOWorkers nodes share one commit
//     (the storage engine's group commit).
//   - ApplyWorkers goroutines apply committed entries to the state
//     machines (a node's in order, one worker at a time), take the
//     snapshots' state and restore received ones: a slow state machine
//     holds up one worker, not the loops.
//   - One goroutine per distinct Config.TickInterval ticks every node.
//
// Goroutines are started when work needs them, up to the bounds. A node
// uses Config.Scheduler when set (a host shares one among its groups); a
// node without one gets its own with one goroutine of each kind, closed
// when the node stops.
type Scheduler struct {
	loops, appends, applies *sched.Pool
	clock                   *sched.Clock
	closeOnce               sync.Once
}

// SchedulerConfig bounds a Scheduler's goroutines. Zero fields take the
// defaults.
type SchedulerConfig struct {
	// Workers step the run loops. Default runtime.GOMAXPROCS(0).
	Workers int
	// IOWorkers persist appends. Default 32.
	IOWorkers int
	// ApplyWorkers apply committed entries. Default 16.
	ApplyWorkers int
}

// NewScheduler returns a scheduler with cfg's bounds; its goroutines start
// with the first node's work. Close it after every node using it stopped.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.IOWorkers <= 0 {
		cfg.IOWorkers = 32
	}
	if cfg.ApplyWorkers <= 0 {
		cfg.ApplyWorkers = 16
	}
	return &Scheduler{
		loops:   sched.NewPool(cfg.Workers),
		appends: sched.NewPool(cfg.IOWorkers),
		applies: sched.NewPool(cfg.ApplyWorkers),
		clock:   sched.NewClock(),
	}
}

// Close lets the scheduler's goroutines exit once the nodes using it have
// stopped (Node.Done), and waits for them. It is idempotent.
func (s *Scheduler) Close() {
	s.closeOnce.Do(s.close)
	s.loops.Wait()
	s.appends.Wait()
	s.applies.Wait()
	s.clock.Wait()
}

func (s *Scheduler) close() {
	s.loops.Close()
	s.appends.Close()
	s.applies.Close()
}

// SchedulerStats are a scheduler's goroutines and work.
type SchedulerStats struct {
	// Workers, IOWorkers and ApplyWorkers are the goroutines started (at
	// most the configured bounds).
	Workers, IOWorkers, ApplyWorkers int
	// LoopRuns, AppendRuns and ApplyRuns count the tasks run: a loop run
	// handles everything a node had queued when it started.
	LoopRuns, AppendRuns, ApplyRuns uint64
}

// Stats returns the scheduler's goroutines and work so far.
func (s *Scheduler) Stats() SchedulerStats {
	return SchedulerStats{
		Workers: s.loops.Started(), IOWorkers: s.appends.Started(), ApplyWorkers: s.applies.Started(),
		LoopRuns: s.loops.Runs(), AppendRuns: s.appends.Runs(), ApplyRuns: s.applies.Runs(),
	}
}

// queue is a FIFO that never blocks its producers; its size is bounded by
// the work raft has in flight (appends not yet persisted, committed entries
// not yet applied: both limited by raft's flow control).
type queue[T any] struct {
	mu    sync.Mutex
	items []T
}

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
}

// takeInto moves up to limit items (all for limit <= 0) into buf.
func (q *queue[T]) takeInto(buf []T, limit int) []T {
	q.mu.Lock()
	n := len(q.items)
	if limit > 0 && n > limit {
		n = limit
	}
	buf = append(buf, q.items[:n]...)
	rest := copy(q.items, q.items[n:])
	clear(q.items[rest:])
	q.items = q.items[:rest]
	if rest == 0 && cap(q.items) > 256 {
		q.items = nil // an idle node keeps no large buffer
	}
	q.mu.Unlock()
	return buf
}

func (q *queue[T]) pop() (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil
	}
	return v, true
}

func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// maxQueuedPeerMessages bounds the peer messages waiting for a node's loop:
// beyond it they are dropped (raft retransmits), so that a slow node never
// holds up a connection other groups share.
const maxQueuedPeerMessages = 4096

// inbox holds the peer messages received for the loop.
type inbox struct {
	mu      sync.Mutex
	msgs    []*raftpb.Message
	dropped uint64
}

// put queues ms, dropping beyond maxQueuedPeerMessages (never a snapshot:
// its file was received already). It reports whether anything was queued.
func (b *inbox) put(ms ...*raftpb.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	queued := false
	for _, m := range ms {
		if len(b.msgs) >= maxQueuedPeerMessages && m.GetType() != raftpb.MsgSnap {
			b.dropped++
			continue
		}
		b.msgs = append(b.msgs, m)
		queued = true
	}
	return queued
}

// take moves up to limit queued messages into buf.
func (b *inbox) take(buf []*raftpb.Message, limit int) []*raftpb.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.msgs), limit)
	buf = append(buf, b.msgs[:n]...)
	rest := copy(b.msgs, b.msgs[n:])
	clear(b.msgs[rest:])
	b.msgs = b.msgs[:rest]
	if rest == 0 && cap(b.msgs) > 512 {
		b.msgs = nil
	}
	return buf
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}
