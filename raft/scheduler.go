package raft

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/understudy-raft/understudy/internal/sched"
	"github.com/understudy-raft/understudy/internal/shared"
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
//     order, one write at a time). On an AsyncStorage (storage.Store) a
//     worker queues the write for the storage's next commit and moves on;
//     the commit completes it (the node's responses are queued and its
//     task signaled from the goroutine that made the commit), so workers
//     wait only to make a commit themselves. On another Storage a worker
//     waits in Save, and the appends of up to IOWorkers nodes share one
//     commit.
//   - ApplyWorkers goroutines apply committed entries to the state
//     machines (a node's in order, one worker at a time), take the
//     snapshots' state and restore received ones: a slow state machine
//     holds up one worker, not the loops. (With Config.InlineApply a
//     loop worker applies a node's small batches itself when its apply
//     task is idle.)
//   - One goroutine per distinct Config.TickInterval ticks every node.
//
// Goroutines are started when work needs them, up to the bounds. A node
// uses Config.Scheduler when set (a host shares one among its groups); a
// node without one gets its own with one goroutine of each kind, closed
// when the node stops. The nodes of a scheduler configured alike share
// one copy of their Config's settings (a host's thousands of replicas keep
// one, not one each).
//
// Closing a scheduler refuses the nodes that start after (Node.Start
// returns ErrStopped) and waits for those that run to be done (Node.Done)
// before its goroutines exit: a node started on it always has its tasks
// run, so that it can stop.
type Scheduler struct {
	loops, appends, applies *sched.Pool
	clock                   *sched.Clock
	closeOnce               sync.Once
	// wakes throttles the wake-ups a host's liveness causes (quiesce.go).
	wakes *sched.Throttle
	// quiesced counts the nodes quiesced; woken counts wake-ups by cause.
	quiesced atomic.Int64
	woken    [numWakeCauses]atomic.Uint64
	// stateChanges counts the leader, term or role changes its nodes
	// published (StateChanges).
	stateChanges atomic.Uint64
	// configs are the Configs its nodes share (nodeConfig): a host's
	// groups are configured alike.
	configs shared.Set[Config]

	mu      sync.Mutex
	closing bool
	nodes   int           // nodes started on it and not done
	idle    chan struct{} // closed once closing and no node is left
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
	// MaxWakesPerSec bounds the quiesced groups a host's liveness change
	// wakes per second (a dead host's groups elect new leaders at this
	// rate; a blip does not wake thousands at once). Default 2,000.
	MaxWakesPerSec int
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
	if cfg.MaxWakesPerSec <= 0 {
		cfg.MaxWakesPerSec = 2000
	}
	return &Scheduler{
		loops:   sched.NewPool(cfg.Workers),
		appends: sched.NewPool(cfg.IOWorkers),
		applies: sched.NewPool(cfg.ApplyWorkers),
		clock:   sched.NewClock(),
		wakes:   sched.NewThrottle(float64(cfg.MaxWakesPerSec), min(256, cfg.MaxWakesPerSec)),
		idle:    make(chan struct{}),
	}
}

// Validate reports negative bounds (zero takes the default).
//
// Errors: ErrInvalidConfig naming each negative field.
func (c SchedulerConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"Workers", c.Workers}, {"IOWorkers", c.IOWorkers}, {"ApplyWorkers", c.ApplyWorkers}, {"MaxWakesPerSec", c.MaxWakesPerSec}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%w: Scheduler.%s (%d) must not be negative (0: the default)", ErrInvalidConfig, f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// enter counts a node starting on the scheduler; false once it is closing.
func (s *Scheduler) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.nodes++
	return true
}

// leave ends the count of a node that entered: it is done.
func (s *Scheduler) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes--
	if s.nodes == 0 && s.closing {
		close(s.idle)
	}
}

// Close refuses new nodes, waits for every node using the scheduler to be
// done (Node.Done: stop them first), then lets the scheduler's goroutines
// exit and waits for them. It is idempotent.
func (s *Scheduler) Close() { _ = s.CloseContext(context.Background()) }

// CloseContext is Close, its wait for the nodes not done yet bounded by
// ctx: when ctx ends first (a node's state machine does not return), it
// returns an error matching ErrStopTimeout and the goroutines exit in the
// background once those nodes are done. The workers themselves exit at
// once when no node is left.
func (s *Scheduler) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		if s.nodes == 0 {
			close(s.idle)
		}
	}
	left := s.nodes
	s.mu.Unlock()
	select {
	case <-s.idle:
	default:
		select {
		case <-s.idle:
		case <-ctx.Done():
			go s.finish()
			return fmt.Errorf("%w: %d node(s) of the scheduler still running: %w", ErrStopTimeout, left, ctx.Err())
		}
	}
	s.finish()
	return nil
}

// finish lets the goroutines exit once no node is left, and waits for them.
func (s *Scheduler) finish() {
	<-s.idle
	s.closeOnce.Do(s.close)
	s.loops.Wait()
	s.appends.Wait()
	s.applies.Wait()
	s.clock.Wait()
	s.wakes.Wait()
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
	// LoopRuns, AppendRuns and ApplyRuns count the tasks run by the pools'
	// workers (each a hand-off to another goroutine): a loop run handles
	// everything a node had queued when it started.
	LoopRuns, AppendRuns, ApplyRuns uint64
	// AppendInline and ApplyInline count the append and apply tasks'
	// turns taken by a loop worker instead (an append with nothing to
	// write; Config.InlineApply), not in AppendRuns and ApplyRuns.
	AppendInline, ApplyInline uint64
	// Quiesced is the number of its nodes quiesced now (Config.Quiesce).
	Quiesced int
	// Wakes counts the quiesced nodes woken, by cause: "proposal", "read",
	// "call" (a membership call, a transfer, a stop), "message" (a peer
	// message), "refused" (a follower refused to quiesce), "nudge" (a
	// follower woken by another cause asked its leader to wake),
	// "leaderDead" (a follower's leader's host died), "hostDown" (a
	// leader's member's host died), "leaderGone" (a follower's leader's
	// group stopped on a live host), "policy" (the membership policy's
	// next decision about a member left lagging on a host not live is
	// due), "hostUp" (such a member's host turned live again). Status
	// counts one node's.
	Wakes map[string]uint64
	// WakesQueued are the wake-ups a host's liveness caused that wait for
	// MaxWakesPerSec; WakesDeferred counts those that waited, WakesSkipped
	// those dropped when their turn came because the node was awake
	// already (they take nothing of the rate).
	WakesQueued   int
	WakesDeferred uint64
	WakesSkipped  uint64
}

// Stats returns the scheduler's goroutines and work so far.
func (s *Scheduler) Stats() SchedulerStats {
	return SchedulerStats{
		Workers: s.loops.Started(), IOWorkers: s.appends.Started(), ApplyWorkers: s.applies.Started(),
		LoopRuns: s.loops.Runs(), AppendRuns: s.appends.Runs(), ApplyRuns: s.applies.Runs(),
		AppendInline: s.appends.InlineRuns(), ApplyInline: s.applies.InlineRuns(),
		Quiesced: int(s.quiesced.Load()), Wakes: s.wakeCounts(),
		WakesQueued: s.wakes.Queued(), WakesDeferred: s.wakes.Deferred(), WakesSkipped: s.wakes.Skipped(),
	}
}

// StateChanges counts the changes of leader, term or role that the nodes
// on the scheduler published (Node.Leader, Term, IsLeader): a host reads it
// to tell whether any of its groups' leadership moved without looking at
// each of them (its leader balancing, while nothing changes).
func (s *Scheduler) StateChanges() uint64 { return s.stateChanges.Load() }
