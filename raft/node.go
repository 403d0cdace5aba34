package raft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/sched"
)

// Node is one member of a replicated state machine. Three tasks, each run
// by one goroutine at a time of the node's Scheduler, do its work: the run
// loop owns etcd's RawNode, the append task persists the log and the apply
// task applies committed commands to the StateMachine, so that applying
// never blocks persisting and the leader replicates before its own fsync
// finishes.
//
// Create it with NewNode, then Start it with a Transport. Every method is
// safe for concurrent use.
type Node struct {
	cfg   nodeConfig
	log   *slog.Logger
	sm    StateMachine
	store Storage
	tr    Transport

	// The node runs as three tasks of its Scheduler: the run loop (owns
	// the RawNode), the append task (persists the log) and the apply task
	// (applies committed entries). Each is run by one goroutine at a time.
	sched    *Scheduler
	ownSched bool // sched is the node's own: closed when it stops
	// ownPolicy: the host gave Config.Policy (else the default policy runs
	// with the replicated settings).
	ownPolicy bool
	// Owned by their tasks: each has exited.
	loopExited, appendExited, applyExited bool
	loopTask, appendTask, applyTask       *sched.Task
	// running is set once Start has restored the node: the tasks do nothing
	// before.
	running atomic.Bool
	// tick is set by the scheduler's clock and taken by the loop.
	tick       atomic.Bool
	cancelTick func()

	// Inputs of the run loop; every producer signals loopTask.
	props boundedQueue[*proposal]    // Propose (waits when full: back-pressure)
	reads boundedQueue[*readRequest] // ReadBarrier (likewise)
	recv  inbox                      // peer messages (never waits: drops beyond a bound)
	acts  queue[func()]              // calls to run on the loop (post, do)
	local *mailbox                   // responses from the append and apply tasks
	// appends are the MsgStorageAppend messages for the append task.
	appends queue[*raftpb.Message]
	// loopDone is set when the run loop has exited: nothing is queued on
	// appends after it. appendDone is set when the append task has
	// exited: no snapshot restore is queued on applies after it. (Flags,
	// not channels: nothing waits on them, and a host's many nodes would
	// each hold two channels for nothing.)
	loopDone, appendDone atomic.Bool
	applies              queue[applyTask]
	// snapWake makes the apply task look at the snapshot state.
	snapWake atomic.Bool
	// applyBufsHeld: the apply task holds its buffers (apply.bufs); a
	// quiesced loop signals it to let them go (applyIdle).
	applyBufsHeld atomic.Bool
	// applyMu is held by the apply task while it runs (it guards the
	// apply state and applyExited): a stopping node whose apply task
	// waits for a worker ends it from the append task (exitApplyIdle).
	applyMu sync.Mutex
	// applyExitAsked: the append task exited (see exitApplyIdle).
	applyExitAsked atomic.Bool

	life atomic.Int32 // lifeNew, lifeStarted or lifeStoppedUnstarted
	// stopClosed: stopc was closed (closeStopc); doneClosed: the node was
	// done (closeDone). Flags rather than sync.Once: closing a channel
	// does not wait, and a flag takes 4 bytes of each of a host's nodes.
	stopClosed atomic.Bool
	doneClosed atomic.Bool
	stopc      chan struct{} // closed when the node stops (Stop or a fatal error)
	// live counts the node's tasks not exited and its snapshot writers:
	// the node is done when it drops to zero.
	live atomic.Int32
	// donec is closed once every task and goroutine has exited: made by
	// the first Done caller (nil: none asked yet), or closedChan when the
	// node was done first (a host's idle replicas hold no channel).
	donec atomic.Pointer[chan struct{}]
	// err is the fatal error the node stopped with, if any: set once
	// (setErr), the first wins.
	err atomic.Pointer[error]

	// runID is random per Start: it makes read contexts unique across runs
	// of this member, and seeds the proposal sequence numbers.
	runID   uint64
	seq     atomic.Uint64 // last proposal sequence number
	waiters waiterSet
	changes changeSet
	members atomic.Pointer[memberTable] // the applied membership
	// clusterID is the cluster's ID as configured or recorded (0: unknown).
	clusterID atomic.Uint64
	// inc is this replica's incarnation, as recorded (Incarnation).
	inc atomic.Uint64
	// settings are the replicated cluster settings as applied (nil: none
	// replicated yet; the Config seeds them).
	settings atomic.Pointer[confchange.ClusterSettings]
	// ready are the readiness records applied (readiness.go).
	ready   readyRecords
	applied *watched[uint64]
	state   *watched[nodeState]
	events  eventHub
	// hostReports counts PeerHandler.HostLiveness calls.
	hostReports atomic.Uint64
	// quiesced is the loop's quiescence, published for the handlers;
	// quietLeader is the leader of the quiesced group (this member's ID
	// when it leads it). quietActs are calls that do not wake it (Status,
	// Membership). ticked counts raft ticks.
	quiesced atomic.Bool
	// saving: a SaveAsync is in flight: the append task waits for its
	// completion.
	saving      atomic.Bool
	quietLeader atomic.Uint64
	// quietHeir: this quiesced follower ranks first among the voters but
	// its leader (campaignRank with every host live), so that, its
	// leader's host dead, its wake goes first (sched.LaneUrgent).
	quietHeir atomic.Bool
	// answersLearner is whether this member is a learner (its role, as
	// the loop set it) for its answers through relays: the append task
	// sends answers too (relay_answers.go).
	answersLearner atomic.Bool
	quietActs      queue[func()]
	ticked         atomic.Uint64
	// quietLagging are the members a quiesced leader left lagging (on a
	// host not live; nil when none), published for HostLiveness.
	quietLagging atomic.Pointer[[]uint64]
	// answers is the state of the answers that travel through relays
	// (relay_answers.go).
	answers relayAnswers

	loop  loopState   // owned by the run loop
	apply applyState  // owned by the apply task
	saved appendState // owned by the append task (and by a SaveAsync completion while saving)
}

// NewNode validates cfg and returns a node that is not started yet. store
// must be open; the node reads and writes it from Start until Stop returns.
// The caller keeps ownership of store (it closes it after Stop).
//
// Errors: ErrInvalidConfig, joined for every problem of cfg at once (fix
// the configuration; nothing was started or written).
func NewNode(cfg Config, sm StateMachine, store Storage) (*Node, error) {
	ownPolicy := cfg.Policy != nil
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sm == nil {
		return nil, fmt.Errorf("%w: nil StateMachine", ErrInvalidConfig)
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil Storage", ErrInvalidConfig)
	}
	n := &Node{
		cfg:   nodeConfig{ID: cfg.ID, OnStopped: cfg.OnStopped},
		log:   cfg.Logger.With(slog.Uint64("member", cfg.ID)),
		sm:    sm,
		store: store,
		stopc: make(chan struct{}),
		state: newWatched(nodeState{}),
		sched: cfg.Scheduler,
	}
	if cfg.ClusterID != 0 || len(cfg.InitialMembers) > 0 {
		n.cfg.boot = &bootConfig{clusterID: cfg.ClusterID, initialMembers: cfg.InitialMembers}
	}
	if n.sched == nil {
		// Its goroutines start only with the node's work.
		n.sched = NewScheduler(SchedulerConfig{Workers: 1, IOWorkers: 1, ApplyWorkers: 1})
		n.ownSched = true
	}
	// The queues into the loop are small and allocated with their first
	// item: the loop drains each in batches and keeps its own bounded
	// backlog (MaxPendingProposals, maxPendingReads); a full queue only
	// makes the sender wait. An idle replica of a host's many groups holds
	// no buffer.
	n.props.max = min(cfg.MaxPendingProposals, 512)
	n.reads.max = 256
	n.loopTask = n.sched.loops.NewTask(n.runLoop)
	n.appendTask = n.sched.appends.NewTask(n.runAppend)
	n.applyTask = n.sched.applies.NewTask(n.runApply)
	n.local = newMailbox(n.loopTask.Signal)
	n.cancelTick = func() {}
	n.ownPolicy = ownPolicy
	if !ownPolicy {
		// The default policy runs with the settings in force (policy): the
		// one WithDefaults boxed is not kept for each of a host's replicas.
		cfg.Policy = nil
	}
	// What is the member's own is in n.cfg; the rest is shared by the
	// nodes of a scheduler configured alike (a host's groups).
	cfg.ID, cfg.ClusterID, cfg.InitialMembers, cfg.OnStopped, cfg.Logger = 0, 0, nil, nil, nil
	n.cfg.Config = &cfg
	if !n.ownSched {
		n.cfg.Config = n.sched.configs.Share(n.cfg.Config)
	}
	return n, nil
}

// nodeConfig is a node's Config. Its settings, the same for a host's
// many groups, are one Config its Scheduler's nodes configured alike share
// (only read); what is the member's own is apart: its ID and OnStopped,
// and, until Start, its configured cluster ID and initial members (the
// shared Config holds none of these, nor the Logger: n.log is made from
// it). n.cfg.X reads the member's own field where there is one.
type nodeConfig struct {
	*Config
	ID        uint64
	OnStopped func(error)
	boot      *bootConfig // nil when neither is set, and after Start
}

// bootConfig is what Start reads of a Config and the node keeps no longer.
type bootConfig struct {
	clusterID      uint64
	initialMembers []confchange.Member
}

// bootConfig returns the configured cluster ID and initial members; none
// after Start.
func (c *nodeConfig) bootConfig() (clusterID uint64, initial []confchange.Member) {
	if c.boot == nil {
		return 0, nil
	}
	return c.boot.clusterID, c.boot.initialMembers
}

// Start restores the state machine from the latest snapshot, bootstraps a new
// cluster if the storage is empty and Config.InitialMembers is set, and
// starts the node's goroutines. tr must deliver received messages to
// n.PeerHandler(). Start returns an error (and starts nothing) if the
// storage cannot be read or the snapshot cannot be restored.
//
// Errors: ErrInvalidConfig (nil tr); ErrIdentityMismatch, a
// *IdentityError naming the stored and the requested identity (the
// storage belongs to another member or cluster: use the right data dir,
// never force it); the storage's errors (storage.ErrCorrupt: restore the
// member from a backup or add it again as a new one); the state machine's
// Restore error; ErrStopped when the node was already stopped. A node
// whose Start failed cannot be started again: make a new one.
func (n *Node) Start(tr Transport) error {
	if tr == nil {
		return fmt.Errorf("%w: nil Transport", ErrInvalidConfig)
	}
	if !n.life.CompareAndSwap(lifeNew, lifeStarted) {
		if n.life.Load() == lifeStarted {
			return errors.New("raft: node already started")
		}
		return ErrStopped
	}
	if !n.sched.enter() {
		n.closeStopc()
		n.events.closeAll()
		n.closeDone()
		return fmt.Errorf("%w: its scheduler is closed", ErrStopped)
	}
	n.tr = tr
	// Request IDs must not repeat across restarts (the dedup window, restored
	// from the snapshot and the log, would skip a reused one as a duplicate),
	// and read contexts must not either (an answer meant for an earlier run
	// would answer a read of this one). Each run takes a random 64-bit run ID
	// and numbers its proposals from another random point: no clock is
	// trusted, and two runs collide with probability about 2^-50.
	n.runID = randomUint64()
	n.seq.Store(randomUint64() >> 1)
	err := n.checkIdentity()
	if err == nil {
		err = n.restore()
	}
	if err != nil {
		n.closeStopc()
		n.events.closeAll()
		n.sched.leave()
		n.closeOwnScheduler()
		n.closeDone()
		return err
	}
	// The initial members served the bootstrap only (their records are in
	// the member table now): a host's many replicas need not keep them.
	n.cfg.boot = nil
	n.live.Store(3)
	n.cancelTick = n.sched.clock.Every(n.cfg.TickInterval, n.onTick)
	n.running.Store(true)
	n.wakeAll() // what arrived during the restore, or a stop
	return nil
}

// onTick is the scheduler clock's tick of this node.
func (n *Node) onTick() {
	n.tick.Store(true)
	n.loopTask.Signal()
}

// wakeAll signals the node's three tasks.
func (n *Node) wakeAll() {
	n.loopTask.Signal()
	n.appendTask.Signal()
	n.applyTask.Signal()
}

// closeStopc closes stopc, once.
func (n *Node) closeStopc() {
	if n.stopClosed.CompareAndSwap(false, true) {
		close(n.stopc)
	}
}

// closeStop closes stopc (once) and wakes the tasks to exit.
func (n *Node) closeStop() {
	n.closeStopc()
	n.wakeAll()
}

// stopped reports whether stopc is closed.
func (n *Node) stopped() bool {
	select {
	case <-n.stopc:
		return true
	default:
		return false
	}
}

// hold counts a goroutine of the node's (a snapshot writer) that Done
// waits for; release ends it, and the node's last release finishes it.
func (n *Node) hold() { n.live.Add(1) }

func (n *Node) release() {
	if n.live.Add(-1) == 0 {
		n.waiters.failAll(n.stopErr())
		n.changes.failAll(n.stopErr())
		n.events.closeAll()
		n.sched.leave()
		if n.ownSched {
			n.sched.close() // its goroutines exit: Stop waits for them
		}
		n.closeDone()
		if f := n.cfg.OnStopped; f != nil {
			go f(n.Err())
		}
	}
}

// closeOwnScheduler lets the node's own scheduler's goroutines exit and
// waits for them (not from one of them).
func (n *Node) closeOwnScheduler() {
	if n.ownSched {
		n.sched.Close()
	}
}

// PeerHandler returns what the Transport must deliver received messages to.
func (n *Node) PeerHandler() PeerHandler { return peerHandler{n} }

// ID returns this member's ID.
func (n *Node) ID() uint64 { return n.cfg.ID }

// AppliedIndex returns the index of the last entry applied to the state
// machine. Once Propose returned, it covers the proposal's entry.
func (n *Node) AppliedIndex() uint64 { return n.applied.get() }

// Err returns the fatal error the node stopped with, or nil.
func (n *Node) Err() error {
	if p := n.err.Load(); p != nil {
		return *p
	}
	return nil
}

// setErr records err as the error the node stopped with, unless one was:
// it reports whether err is the first.
func (n *Node) setErr(err error) bool {
	return n.err.CompareAndSwap(nil, &err)
}

// Done is closed once the node has stopped and all its tasks and goroutines have
// exited, whether by Stop or by a fatal error (see Err).
func (n *Node) Done() <-chan struct{} {
	if p := n.donec.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if n.donec.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *n.donec.Load()
}

// closedChan is the channel Done returns once a node is done before
// anyone asked.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// closeDone closes the Done channel (once), or marks the node done if
// nobody asked for it yet.
func (n *Node) closeDone() {
	if !n.doneClosed.CompareAndSwap(false, true) {
		return
	}
	if !n.donec.CompareAndSwap(nil, &closedChan) {
		close(*n.donec.Load())
	}
}

// Stop shuts the node down. A leader first hands leadership to the most
// caught-up voter, bounded by ctx (a ctx that is already done skips the
// hand-off, like a crash that lost nothing acknowledged). Stop then waits,
// within ctx, for every goroutine to exit, and fails pending calls with
// ErrStopped; it persists the latest commit index on the way out.
//
// Stop returns the node's fatal error, if it had one. If ctx ends before the
// goroutines exited (a host's Apply or snapshot writer that does not
// return), Stop returns an error matching ErrStopTimeout and the node
// finishes stopping in the background: Done is closed once it has, and the
// storage must stay open until then. Stop is idempotent and safe to call
// concurrently with Start, or on a node never started.
func (n *Node) Stop(ctx context.Context) error {
	if n.life.CompareAndSwap(lifeNew, lifeStoppedUnstarted) || n.life.Load() == lifeStoppedUnstarted {
		n.events.closeAll()
		n.closeStopc()
		n.closeOwnScheduler()
		n.closeDone()
		return nil
	}
	if ctx.Err() == nil {
		n.handOffLeadership(ctx)
	}
	n.closeStop()
	select {
	case <-n.Done():
		n.closeOwnScheduler()
		return n.Err()
	default:
	}
	select {
	case <-n.Done():
		n.closeOwnScheduler()
		return n.Err()
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrStopTimeout, ctx.Err())
	}
}

// Node lifecycle states (Node.life).
const (
	lifeNew int32 = iota
	lifeStarted
	lifeStoppedUnstarted // Stop was called before Start
)

func (n *Node) usable() error {
	switch n.life.Load() {
	case lifeNew:
		return ErrNotStarted
	case lifeStoppedUnstarted:
		return ErrStopped
	}
	select {
	case <-n.stopc:
		return n.stopErr()
	default:
		return nil
	}
}

// stopErr is ErrStopped, joined with the fatal error if there is one.
func (n *Node) stopErr() error {
	if err := n.Err(); err != nil {
		return errors.Join(ErrStopped, err)
	}
	return ErrStopped
}

// ctxErr is ctx's error, with ErrNoLeader attached when no leader is known.
func (n *Node) ctxErr(ctx context.Context) error {
	if n.state.get().leader == 0 {
		return fmt.Errorf("%w (%w)", ctx.Err(), ErrNoLeader)
	}
	return ctx.Err()
}

// expireWaiters fails the proposals and membership changes handed to raft
// that had no outcome within RequestTimeout (checked once per election
// timeout, on the loop).
func (n *Node) expireWaiters() {
	l := &n.loop
	if l.ticks%uint64(n.cfg.ElectionTicks) != 0 {
		return
	}
	bound := uint64(n.cfg.RequestTimeout / n.cfg.TickInterval)
	if l.ticks <= bound {
		return
	}
	n.waiters.failExpired(l.ticks-bound, ErrTimeout)
	n.changes.failExpired(l.ticks-bound, ErrTimeout)
}

// fail stops the node with a fatal error.
func (n *Node) fail(op string, err error) {
	fe := &FatalError{Op: op, Err: err}
	if n.setErr(fe) {
		n.log.Error("node stopping on fatal error", slog.String("op", op), slog.Any("err", err))
	}
	n.closeStop()
}

// removed stops the node because it was removed from the cluster, after
// recording it in the storage (why says how it learned it).
func (n *Node) removed(why string, index uint64) {
	if !n.setErr(ErrRemoved) {
		return
	}
	n.log.Warn("this member was removed from the cluster; stopping", slog.String("how", why))
	if err := n.store.MarkRemoved(); err != nil {
		n.log.Error("recording the removal in the storage failed", slog.Any("err", err))
	}
	n.events.emit(Event{Type: EventRemoved, Index: index})
	n.closeStop()
}

// wiped stops the node because its data is not the copy the cluster knows
// (ErrReplicaWiped). Nothing is recorded: the member was not removed, and
// the data dir is the operator's to delete.
func (n *Node) wiped(why string) {
	if !n.setErr(ErrReplicaWiped) {
		return
	}
	n.log.Error("this replica's data was wiped: the cluster knows another copy of this member; stopping. Remove the member and add it again under a new ID",
		slog.String("how", why), slog.String("incarnation", fmt.Sprintf("%x", n.inc.Load())))
	n.closeStop()
}

// do runs f on the run loop and waits for it. When do returns an error
// (ctx ended, the node stopped) f may still run later on the loop: a caller
// must not read or write anything f touches after an error — read f's
// results only when do returned nil.
func (n *Node) do(ctx context.Context, f func()) error { return n.runOnLoop(ctx, &n.acts, f) }

// doQuiet is do for a call that only reads (Status, Membership): it does
// not wake a quiesced node, so that metrics scrapes keep idle groups idle.
func (n *Node) doQuiet(ctx context.Context, f func()) error {
	return n.runOnLoop(ctx, &n.quietActs, f)
}

// runOnLoop queues f on q for the run loop and waits for it (do, doQuiet).
func (n *Node) runOnLoop(ctx context.Context, q *queue[func()], f func()) error {
	if err := n.usable(); err != nil {
		return err
	}
	done := make(chan struct{})
	q.push(func() { f(); close(done) })
	n.loopTask.Signal()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return n.stopErr()
	}
}

// post queues f for the run loop without waiting for it; it is dropped if
// the node stopped.
func (n *Node) post(f func()) {
	if n.life.Load() != lifeStarted || n.stopped() {
		return
	}
	n.acts.push(f)
	n.loopTask.Signal()
}

// randomUint64 returns 64 random bits from the operating system's source.
func randomUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (crypto/rand)
	return binary.BigEndian.Uint64(b[:])
}
