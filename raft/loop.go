package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// loopState is owned by the run loop.
type loopState struct {
	rn     *etcdraft.RawNode
	leader uint64
	term   uint64
	role   Role
	// published is the state last published (publishState).
	published  nodeState
	ticks      uint64
	pending    []*proposal // waiting to be handed to raft (no leader yet)
	readQueue  []*readRequest
	readSeq    uint64
	readRounds map[uint64]*readRound // made with the first (addReadRound)
	// heldReadIndex are ReadIndex requests from other members that this
	// leader holds for its next read round (reads.go), and, as a new
	// leader, until it may answer them (see leaderMayRead).
	heldReadIndex []*raftpb.Message
	// peerRound is the last read round that took held requests: while it
	// is in readRounds, the requests held wait for its answer.
	peerRound   uint64
	lastContact contacts
	// bootCampaign: this node bootstrapped a new cluster and has not yet
	// decided whether to campaign at once (bootcampaign.go). nowLeader:
	// it became leader in the Ready being handled.
	bootCampaign, nowLeader bool
	// applyHere: the Ready being handled queued committed entries for the
	// apply task, to be applied on the loop's worker (Config.InlineApply).
	// appendHere: it queued an append with no entries for the append task,
	// which may have nothing to write (onloop.go).
	applyHere, appendHere bool
	// bufs are the reused buffers (nil: none yet, or let go while
	// quiesced); buffers makes them.
	bufs      *loopBufs
	lastBatch int // proposals in the last flush
	ms        membershipLoop
	// confAdded is the index of the last conf change raft took that added
	// a member (in any role): a snapshot sent to a member must be at least
	// that recent to list it (see snapshotToSend).
	confAdded uint64
	// snapBackoff is the current backoff of failed snapshot sends, by member.
	snapBackoff map[uint64]time.Duration
	// catchUp measures each member's catch-up rate (on the leader).
	catchUp map[uint64]*catchUpTrack
	// q is the quiescence state (quiesce.go).
	q quiesceState
	// relay is the leader's choice of relays for its standbys (relay.go;
	// nil: none made, or let go while quiesced).
	relay *relayState
	// readPasses counts the loop's passes that took at least one ReadIndex
	// request of another member (the coalescing's bound, reads.go).
	readPasses uint64
}

// loopBufs are the run loop's reused buffers, apart from the Node: a
// quiesced node lets them go (dropBuffers) and its Node is the smaller.
type loopBufs struct {
	out      []*raftpb.Message // network messages
	localBuf []*raftpb.Message // mailbox messages
	recvBuf  []*raftpb.Message // peer messages
	acts     []func()          // calls run on the loop
	readsBuf []*readRequest    // reads taken
	live     []uint64          // the sequence numbers of a batch being proposed
	answers  []*raftpb.Message // of applies on the loop's worker (applyinline.go)
	bump     commitBump        // a follower's progress looked up (redundant.go)
	// appContacts are the leader's appends to and from each follower (redundant.go).
	appContacts []appContact
	timeoutNow  heldTimeoutNow // (timeoutnow.go)
}

// buffers returns the loop's reused buffers, made if the node has none.
func (l *loopState) buffers() *loopBufs {
	if l.bufs == nil {
		l.bufs = new(loopBufs)
	}
	return l.bufs
}

// restore prepares the RawNode at Start: restores the state machine from the
// latest snapshot and bootstraps a new cluster on empty storage.
func (n *Node) restore() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &FatalError{Op: "start", Err: panicError(r)}
		}
	}()
	hs, _, err := n.store.InitialState()
	if err != nil {
		return fmt.Errorf("raft: reading initial state: %w", err)
	}
	snap, err := n.store.Snapshot()
	if err != nil {
		return fmt.Errorf("raft: reading snapshot: %w", err)
	}
	n.apply.init(n)
	applied := snap.GetMetadata().GetIndex()
	if !etcdraft.IsEmptySnap(snap) {
		if err := n.restoreSnapshot(snap, nil); err != nil {
			return err
		}
	}
	n.applied = newWatched(applied)
	c := n.cfg
	rn, err := etcdraft.NewRawNode(&etcdraft.Config{
		ID:                        c.ID,
		ElectionTick:              c.ElectionTicks,
		HeartbeatTick:             c.HeartbeatTicks,
		Storage:                   raftStorage{Storage: n.store, n: n},
		Applied:                   applied,
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             c.MaxSizePerMsg,
		MaxCommittedSizePerReady:  c.MaxSizePerMsg * 4,
		MaxUncommittedEntriesSize: c.MaxUncommittedEntriesSize,
		MaxInflightMsgs:           c.MaxInflightMsgs,
		MaxInflightBytes:          c.MaxInflightBytes,
		CheckQuorum:               !c.DisableCheckQuorum,
		PreVote:                   !c.DisablePreVote,
		ReadOnlyOption:            etcdraft.ReadOnlySafe,
		Logger:                    raftLogger{n.log},
		StepDownOnRemoval:         true,
	})
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	last, err := n.store.LastIndex()
	if err != nil {
		return fmt.Errorf("raft: reading last index: %w", err)
	}
	bootstrapped := false
	if _, initial := c.bootConfig(); last == 0 && etcdraft.IsEmptyHardState(hs) && len(initial) > 0 {
		peers := make([]etcdraft.Peer, len(initial))
		t := n.apply.members.clone()
		for i, m := range initial {
			ctx, err := bootstrapContext(m)
			if err != nil {
				return fmt.Errorf("%w: InitialMembers: %w", ErrInvalidConfig, err)
			}
			peers[i] = etcdraft.Peer{ID: m.ID, Context: ctx}
			t.put(m)
		}
		n.setMembers(t)
		if err := rn.Bootstrap(peers); err != nil {
			return fmt.Errorf("raft: bootstrapping: %w", err)
		}
		n.log.Info("bootstrapping a new cluster", slog.Int("members", len(peers)))
		bootstrapped = true
	}
	// The transport refuses removed members (and tells them so).
	n.syncPeers(n.apply.members.removedIDs())
	// Members added after the snapshot are known from the log only once it
	// is replayed: tell the transport now, so that it accepts them from the
	// first moment (a restarted member would refuse its peers as unknown).
	// Only the committed part: the tail may never commit.
	if err := n.preloadPeers(applied+1, min(hs.GetCommit(), last)); err != nil {
		return err
	}
	n.loop = loopState{rn: rn}
	n.loop.term = hs.GetTerm()
	n.loop.bootCampaign = bootstrapped
	n.loop.ms.lastIndex = last
	// The role as of the stored configuration: raft reports no soft state
	// change at start, so a restarted learner would read as a follower.
	if n.isLearner() {
		n.loop.role = RoleLearner
	}
	n.publishState()
	n.loop.ms.nextChangeID = randomUint64() >> 1 // unique across runs, like request IDs
	return nil
}

// runLoop is the run loop's task: one run handles what the node had queued
// when it started — a tick, peer messages, proposals, reads, the append and
// apply responses, calls — then every Ready raft has. It never blocks: the
// appends and the committed entries go to their own tasks' queues, and a
// run that leaves work queued (a bounded batch of each input per run, so
// that one busy node does not starve the others on its worker) signals
// itself to run again.
func (n *Node) runLoop() {
	if !n.running.Load() || n.loopExited {
		return
	}
	if !n.stopped() {
		n.loopOnce()
	}
	if n.stopped() {
		n.loopExited = true
		n.cancelTick()
		n.endQuiesce()
		n.loopDone.Store(true)
		n.appendTask.Signal()
		n.release()
	}
}

// loopInputBatch bounds how many of each input one run of the loop takes.
const loopInputBatch = 256

func (n *Node) loopOnce() {
	defer func() {
		if r := recover(); r != nil {
			n.fail("raft loop", panicError(r))
		}
	}()
	l := &n.loop
	b := l.buffers()
	// A tick that was due when the node quiesced is dropped.
	tick := n.tick.Swap(false) && !l.q.on
	if tick {
		l.rn.Tick()
		n.ticked.Add(1)
		l.ticks++
		n.tickWork()
	}
	if n.recv.len() > 0 {
		now := time.Now()
		b.recvBuf = n.recv.take(b.recvBuf[:0], loopInputBatch)
		for _, m := range b.recvBuf {
			if m.GetType() == raftpb.MsgReadIndex {
				l.readPasses++ // passes that took a member's ReadIndex request
				break
			}
		}
		for i, m := range b.recvBuf {
			if !n.stepPeer(m, now) {
				n.stir(wakeMessage, m.GetFrom())
			}
			b.recvBuf[i] = nil
			if n.stopped() { // a message told it its data was lost: write nothing more
				clear(b.recvBuf)
				return
			}
		}
	}
	taken := len(l.pending)
	if room := n.cfg.MaxPendingProposals - len(l.pending); room > 0 {
		// Proposers woken together by one applied batch arrive a few
		// microseconds apart: when the last batch had company, yielding
		// once lets them queue up, so that they share one raft message,
		// one Ready and one storage write. A lone proposer does not wait.
		if queued := n.props.len(); queued > 1 || (queued > 0 && l.lastBatch > 1) {
			runtime.Gosched()
		}
		l.pending = n.props.takeInto(l.pending, room)
	}
	if len(l.pending) > taken {
		n.stir(wakeProposal, 0)
	}
	if room := maxPendingReads - len(l.readQueue); room > 0 {
		b.readsBuf = n.reads.takeInto(b.readsBuf[:0], room)
		if len(b.readsBuf) > 0 {
			n.stir(wakeRead, 0)
		}
		for i, r := range b.readsBuf {
			n.queueRead(r)
			b.readsBuf[i] = nil
		}
	}
	b.localBuf = n.local.take(b.localBuf[:0])
	for i, m := range b.localBuf {
		if err := l.rn.Step(m); err != nil {
			n.log.Debug("stepping a local message", slog.Any("err", err))
		}
		b.localBuf[i] = nil
	}
	n.retryTimeoutNow()
	b.acts = n.acts.takeInto(b.acts[:0], loopInputBatch)
	if len(b.acts) > 0 {
		n.stir(wakeCall, 0)
	}
	// Wake before the calls run: a call's caller, once answered, finds
	// the node awake and its wake counted.
	if q := &l.q; q.on && q.stirred {
		n.wake(q.cause, q.from)
	}
	for i, f := range b.acts {
		f()
		b.acts[i] = nil
	}
	if q := &l.q; q.on && q.stirred {
		n.wake(q.cause, q.from)
	}
	// Calls that only read run as they are: they do not wake the node.
	if n.quietActs.len() > 0 {
		for _, f := range n.quietActs.takeInto(nil, loopInputBatch) {
			f()
		}
	}
	n.flushProposals()
	n.flushReads()
	for l.rn.HasReady() {
		n.handleReady(l.rn.Ready())
		if l.appendHere {
			l.appendHere = false
			n.appendOnLoop() // (its answers make the next Ready)
		}
		if l.applyHere {
			l.applyHere = false
			n.applyOnLoop()
		}
	}
	if tick && n.cfg.Quiesce {
		n.noteIdle()
		n.maybeQuiesce()
	}
	if l.q.on {
		n.dropBuffers()
	}
	if n.recv.len() > 0 || n.acts.len() > 0 || n.quietActs.len() > 0 ||
		(n.props.len() > 0 && len(l.pending) < n.cfg.MaxPendingProposals) ||
		(n.reads.len() > 0 && len(l.readQueue) < maxPendingReads) {
		n.loopTask.Signal()
	}
}

// tickWork is the node's own work on each tick, after raft's: read
// retries, expiries, the leader's membership bookkeeping and relays, the
// first campaign.
func (n *Node) tickWork() {
	n.retryReads(false)
	n.dropAbandonedReads()
	n.expireWaiters()
	n.maybeMembershipTick()
	n.relayTick()
	n.bootCampaign()
}

// stepPeer steps a peer message and reports whether it was quiet: one
// that does not wake a quiesced node (quietStep).
func (n *Node) stepPeer(m *raftpb.Message, now time.Time) (quiet bool) {
	l := &n.loop
	if isAnswerCarrier(m) {
		return n.stepRelayedAnswers(m, now)
	}
	if from := m.GetFrom(); from != 0 {
		l.lastContact.set(from, now)
	}
	n.relayNoteAsker(m)
	n.noteAppAcked(m)
	quiet, consumed := n.quietStep(m)
	if consumed || n.holdReadIndex(m) {
		return quiet
	}
	if m.GetType() == raftpb.MessageType_MsgHeartbeat && m.GetCommit() > l.ms.lastIndex && n.stepLostLog(m) {
		return
	}
	if err := l.rn.Step(m); err != nil && !errors.Is(err, etcdraft.ErrStepPeerNotFound) {
		n.log.Debug("stepping a peer message", slog.Uint64("from", m.GetFrom()), slog.Any("err", err))
	}
	n.holdTimeoutNow(m)
	return quiet
}

// stepLostLog steps a leader's heartbeat whose commit index is past the
// last index this member wrote. The leader sends a member at most what
// that member acknowledged (its match), so if raft's log — which may hold
// entries not yet written — ends before it too, this member lost entries
// it acknowledged: its data is not the copy the cluster knew (a replaced
// disk, a data dir restored from an old copy). raft panics on it ("tocommit
// out of range"); the node stops with ErrReplicaWiped instead, saying so.
// It reports whether it stopped the node.
func (n *Node) stepLostLog(m *raftpb.Message) (lost bool) {
	defer func() {
		if r := recover(); r != nil {
			if !strings.Contains(fmt.Sprint(r), "out of range") {
				panic(r)
			}
			lost = true
			n.wiped(fmt.Sprintf("leader %d holds this member's log acknowledged up to index %d, but it ends at %d: it lost what it acknowledged", m.GetFrom(), m.GetCommit(), n.loop.ms.lastIndex))
		}
	}()
	if err := n.loop.rn.Step(m); err != nil && !errors.Is(err, etcdraft.ErrStepPeerNotFound) {
		n.log.Debug("stepping a peer message", slog.Uint64("from", m.GetFrom()), slog.Any("err", err))
	}
	return false
}

// flushProposals hands the pending proposals to raft, in MsgProp messages of
// at most MaxSizePerMsg bytes each, once a leader is known.
func (n *Node) flushProposals() {
	l := &n.loop
	if len(l.pending) == 0 || l.leader == 0 {
		return
	}
	start := 0
	for start < len(l.pending) {
		var size uint64
		end := start
		for end < len(l.pending) && (end == start || size+uint64(payloadSize(l.pending[end].rid, l.pending[end].cmd)) <= n.cfg.MaxSizePerMsg) {
			size += uint64(payloadSize(l.pending[end].rid, l.pending[end].cmd))
			end++
		}
		n.proposeBatch(l.pending[start:end])
		start = end
	}
	l.lastBatch = len(l.pending)
	clear(l.pending)
	l.pending = l.pending[:0]
}

// proposeBatch hands one batch of proposals to raft as one MsgProp. The
// payloads are encoded into one buffer and the entries allocated as one
// slice per batch (a batch of one: the message, its entry and slice in one
// allocation, propOne): raft clones what it appends (and a follower
// forwards the message as it is), so nothing is reused and the cost per
// proposal shrinks with the batch.
func (n *Node) proposeBatch(batch []*proposal) {
	l := &n.loop
	size := 0
	for _, p := range batch {
		size += payloadSize(p.rid, p.cmd)
	}
	arena := make([]byte, 0, size)
	var (
		slab []raftpb.Entry
		ents []*raftpb.Entry
		m    *raftpb.Message
	)
	if len(batch) == 1 {
		// The usual batch when a group has a few writes per round: the
		// message, its type, entry and entries' slice in one allocation.
		one := new(propOne)
		one.typ = raftpb.MsgProp
		m, slab, ents = &one.m, one.e[:], one.ptr[:0]
		m.Type = &one.typ
	} else {
		m = &raftpb.Message{Type: raftpb.MsgProp.Enum()}
		slab = make([]raftpb.Entry, len(batch))
		ents = make([]*raftpb.Entry, 0, len(batch))
	}
	b := l.buffers()
	live := b.live[:0]
	n.waiters.mu.Lock()
	if n.waiters.m == nil {
		n.waiters.m = make(map[uint64]*proposal) // the first batch, or the first since quiesced
	}
	for _, p := range batch {
		if p.canceled.Load() {
			continue
		}
		p.term, p.tick = l.term, l.ticks
		n.waiters.m[p.seq] = p
		start := len(arena)
		if p.kind != 0 {
			arena = appendSettingsKind(arena, p.kind, requestID{proposer: n.cfg.ID, seq: p.seq}, p.cmd)
		} else {
			arena = appendCommand(arena, requestID{proposer: n.cfg.ID, seq: p.seq}, p.rid, p.cmd)
		}
		e := &slab[len(ents)]
		e.Data = arena[start:len(arena):len(arena)]
		ents = append(ents, e)
		live = append(live, p.seq)
	}
	n.waiters.mu.Unlock()
	if len(ents) > 0 {
		m.From, m.Entries = &n.cfg.ID, ents
		err := l.rn.Step(m)
		if err != nil {
			for _, seq := range live {
				n.waiters.resolve(seq, Result{Err: fmt.Errorf("%w: %w", ErrProposalDropped, err)})
			}
		}
	}
	b.live = live[:0]
}

// propOne is the MsgProp of a batch of one proposal, made at once.
type propOne struct {
	m   raftpb.Message
	typ raftpb.MessageType
	e   [1]raftpb.Entry
	ptr [1]*raftpb.Entry
}

// handleReady dispatches one Ready: network messages to the transport (the
// leader's appends go out before its own fsync: raft delays its own ack until
// the append task has persisted them), the MsgStorageAppend to the append
// task, the MsgStorageApply to the apply task. It never waits.
func (n *Node) handleReady(rd etcdraft.Ready) {
	l := &n.loop
	// The term first: a leader change and its new term can arrive in one
	// Ready, and the leader-changed event carries the new term.
	if hs := rd.HardState; hs != nil && hs.GetTerm() > l.term {
		l.term = hs.GetTerm()
		n.waiters.failOlder(l.term, ErrLeaderChanged)
		n.changes.failOlder(l.term, ErrLeaderChanged)
		n.publishState()
	}
	if ss := rd.SoftState; ss != nil {
		n.updateSoftState(ss)
	}
	if len(rd.ReadStates) > 0 {
		n.answerReads(rd.ReadStates)
	}
	b := l.buffers()
	out := b.out[:0]
	b.bump.confCommitted = l.role == RoleLeader && commitsConfChange(rd)
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case etcdraft.LocalAppendThread:
			n.noteAppend(m)
			if len(m.GetEntries()) == 0 && m.GetSnapshot() == nil && n.appends.len() == 0 {
				l.appendHere = true // perhaps nothing to write (appendOnLoop)
				n.appends.push(m)
			} else {
				n.appends.push(m)
				n.appendTask.Signal()
			}
		case etcdraft.LocalApplyThread:
			task := applyTask{msg: m}
			for _, e := range m.GetEntries() {
				if isConfChange(e) {
					task.confStates = append(task.confStates, n.applyConfChange(e))
				}
			}
			n.applies.push(task)
			if n.cfg.InlineApply && len(task.confStates) == 0 {
				l.applyHere = true // after this Ready's messages are out (applyOnLoop)
			} else {
				n.applyTask.Signal()
			}
		default:
			if n.isCommitBump(m) || n.isBusyHeartbeat(m) {
				continue // not sent (redundant.go)
			}
			n.noteAppSent(m)
			out = append(out, m)
		}
	}
	n.noteProposed()
	if len(out) > 0 {
		n.sendOut(out)
	}
	clear(out)
	b.out = out[:0]
	if l.nowLeader {
		l.nowLeader = false
		n.becameLeader()
	}
}

// raftStorage is the node's Storage as etcd raft reads it. The node writes a
// commit-only hard state lazily (see saveBatch), so the persisted commit
// index may trail the latest snapshot, whose entries were all committed:
// InitialState reports at least the snapshot's index, as raft requires
// Config.Applied <= commit.
type raftStorage struct {
	Storage
	n *Node
}

// Snapshot is the latest snapshot, unless a member joined after it: see
// Node.snapshotToSend. Raft calls it on the run loop.
func (s raftStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap, err := s.Storage.Snapshot()
	if err != nil || s.n == nil {
		return snap, err
	}
	return s.n.snapshotToSend(snap)
}

func (s raftStorage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs, cs, err := s.Storage.InitialState()
	if err != nil {
		return hs, cs, err
	}
	snap, err := s.Storage.Snapshot()
	if err != nil {
		return hs, cs, err
	}
	if idx := snap.GetMetadata().GetIndex(); hs != nil && hs.GetCommit() < idx {
		hs = &raftpb.HardState{Term: hs.Term, Vote: hs.Vote, Commit: &idx}
	}
	return hs, cs, nil
}

// panicError turns a recovered panic value into an error.
func panicError(r any) error {
	if err, ok := r.(error); ok {
		return err
	}
	return fmt.Errorf("panic: %v", r)
}
