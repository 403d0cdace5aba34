package raft

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
)

// dedupWindowSize is how many recently applied request IDs every member
// remembers: the proposers' own IDs (a proposal duplicated on the way), and
// the client request IDs of older versions' entries (entryClientCommand).
// It must be the same on every member (it decides which duplicates are
// skipped), so it is a constant, not a setting. Client retries are matched
// by their session instead (sessions.go), which no count of other commands
// pushes out.
const dedupWindowSize = 8192

// applyTask is one unit of work for the apply task: committed entries
// (msg, a MsgStorageApply, with the ConfState after each of its conf changes
// as computed by the loop), or a snapshot to restore the state machine from.
type applyTask struct {
	msg        *raftpb.Message
	confStates []*raftpb.ConfState
	snap       *raftpb.Snapshot
	files      *snapFiles // snap's data, opened when it was saved
}

// snapFiles are two readers of a snapshot's data, opened as soon as the
// snapshot is saved: the storage may prune the file (two newer snapshots
// arrived) before the apply task restores from it, and an open file
// outlives its removal.
type snapFiles struct {
	verify, restore io.ReadCloser
	size            int64
}

// openSnapFiles opens snap's data twice (to verify it whole, then to restore).
func (n *Node) openSnapFiles(snap *raftpb.Snapshot) (*snapFiles, error) {
	index := snap.GetMetadata().GetIndex()
	v, _, err := n.store.OpenSnapshot(snap)
	if err != nil {
		return nil, fmt.Errorf("opening snapshot %d: %w", index, err)
	}
	r, size, err := n.store.OpenSnapshot(snap)
	if err != nil {
		_ = v.Close()
		return nil, fmt.Errorf("opening snapshot %d: %w", index, err)
	}
	return &snapFiles{verify: v, restore: r, size: size}, nil
}

func (f *snapFiles) close() {
	_ = f.verify.Close()
	_ = f.restore.Close()
}

// applyState is owned by the apply task (and by Start, before it runs).
type applyState struct {
	applied uint64
	members *memberTable
	dedup   *dedupWindow
	clients *dedupWindow // client request IDs of older versions' entries (entryClientCommand; nil: none yet)
	// sessions are the client sessions (ProposeWithID).
	sessions sessionTable
	snap     snapState
	// onLoop: this turn runs on the loop's worker (onloop.go), which
	// steps the answers (left in its buffers) itself after it.
	onLoop bool
	// bufs are the reused buffers of a batch (nil: none yet, or let go
	// while quiesced: applyIdle).
	bufs *applyBufs
}

// applyBufs are the apply task's reused buffers: the commands of a batch,
// their request IDs and results, and pend the session commands among
// them, whose results their sessions keep.
type applyBufs struct {
	pend    []pendingResult
	cmds    []Command
	ids     []requestID
	results []Result
}

// clientWindow returns the window of older versions' client request IDs,
// made with the first: only a log written by an older version has them.
func (a *applyState) clientWindow() *dedupWindow {
	if a.clients == nil {
		a.clients = newDedupWindow(dedupWindowSize)
	}
	return a.clients
}

// applyBuffers returns the apply task's buffers, made if it has none.
func (n *Node) applyBuffers() *applyBufs {
	a := &n.apply
	if a.bufs == nil {
		a.bufs = new(applyBufs)
		n.applyBufsHeld.Store(true)
	}
	return a.bufs
}

func (a *applyState) init(n *Node) {
	a.dedup = newDedupWindow(dedupWindowSize)
	n.setMembers(newMemberTable())
}

// setMembers installs t as the applied membership and publishes it.
func (n *Node) setMembers(t *memberTable) {
	n.apply.members = t
	n.members.Store(t)
}

// applyBatch bounds the tasks one run of the apply task takes, so that a
// busy group does not hold an apply worker from the others for long.
const applyBatch = 8

// runApply is the apply task: it applies committed entries and restores
// received snapshots in order, and takes snapshots when due.
func (n *Node) runApply() {
	if !n.running.Load() {
		return
	}
	n.applyMu.Lock()
	if !n.applyExited {
		if n.stopped() {
			n.exitApply()
		} else {
			n.applyOnce()
			n.applyIdle()
		}
	}
	n.applyMu.Unlock()
	if n.applyExitAsked.Load() {
		// The append task exited while this ran: it left the exit to it.
		n.exitApplyIdle()
	}
}

// exitApply ends the apply task of a stopped node, once the append task
// has exited (it may queue a restore until then, and signals this task
// when it exits). The caller holds applyMu.
func (n *Node) exitApply() {
	if !n.appendDone.Load() {
		return
	}
	n.closeQueuedSnapshots()
	n.applyExited = true
	n.release()
}

// exitApplyIdle ends the apply task of a stopped node, from the append
// task's exit, unless the apply task runs now: the apply workers may all
// be held by other nodes' state machines that do not return, and a node
// must be able to stop without one. A running apply task does it once it
// returns: applyExitAsked is set before the lock is tried, and the apply
// task looks at it after it unlocks.
func (n *Node) exitApplyIdle() {
	n.applyExitAsked.Store(true)
	if !n.applyMu.TryLock() {
		return // held: by the apply task, which calls this again after
	}
	defer n.applyMu.Unlock()
	if !n.applyExited {
		n.exitApply()
	}
}

func (n *Node) applyOnce() {
	defer func() {
		if r := recover(); r != nil {
			n.fail("applying committed entries", panicError(r))
		}
	}()
	for i := 0; i < applyBatch && !n.stopped(); i++ {
		t, ok := n.applies.pop()
		if !ok {
			break
		}
		var err error
		if t.snap != nil {
			err = n.restoreSnapshot(t.snap, t.files)
		} else {
			err = n.applyEntries(t)
		}
		if err != nil {
			n.fail("applying committed entries", err)
			return
		}
	}
	if n.snapWake.Swap(false) && !n.stopped() {
		n.maybeSnapshot()
	}
	if n.applies.len() > 0 {
		n.applyTask.Signal()
	}
}

// applyEntries applies one batch of committed entries, resolves the waiting
// proposers, and tells raft (through the mailbox) that they are applied.
func (n *Node) applyEntries(t applyTask) error {
	a := &n.apply
	ents := t.msg.GetEntries()
	ci := 0
	for _, e := range ents {
		idx := e.GetIndex()
		isConf := isConfChange(e)
		if idx <= a.applied {
			if isConf {
				ci++
			}
			continue
		}
		if isConf {
			if err := n.flushCommands(); err != nil {
				return err
			}
			if ci >= len(t.confStates) {
				return fmt.Errorf("%w: conf change at %d without a conf state", ErrCorruptEntry, idx)
			}
			if err := n.applyMembership(e, t.confStates[ci]); err != nil {
				return err
			}
			ci++
			continue
		}
		data := e.GetData()
		if len(data) == 0 {
			continue // a new leader's empty entry
		}
		if data[0] == entryReadiness {
			if err := n.applyReadiness(idx, data); err != nil {
				return err
			}
			continue
		}
		if data[0] == entrySettings || data[0] == entrySettingsSeed {
			if err := n.applySettings(idx, data); err != nil {
				return err
			}
			continue
		}
		if data[0] == entryRegisterClient {
			if err := n.applyRegister(idx, data); err != nil {
				return err
			}
			continue
		}
		id, rid, cmd, err := decodeCommand(data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", idx, err)
		}
		if !a.dedup.add(id) {
			continue // a duplicate of a command applied recently
		}
		if rid.Client != 0 && data[0] == entrySessionCommand {
			answered, err := n.sessionCommand(idx, id, rid)
			if err != nil {
				return err
			}
			if answered {
				continue // a retry, or a request its session cannot tell about: not applied
			}
		} else if rid.Client != 0 && !a.clientWindow().add(requestID{proposer: rid.Client, seq: rid.Seq}) {
			// An older version's retry of a client request applied before:
			// not applied again.
			if err := n.answerNow(idx, id, Result{Err: ErrDuplicateRequest}); err != nil {
				return err
			}
			continue
		}
		b := n.applyBuffers()
		b.cmds = append(b.cmds, Command{Index: idx, Data: cmd})
		b.ids = append(b.ids, id)
	}
	if err := n.flushCommands(); err != nil {
		return err
	}
	if len(ents) > 0 {
		if last := ents[len(ents)-1].GetIndex(); last > a.applied {
			a.applied = last
		}
	}
	for _, e := range ents {
		a.snap.logBytes += uint64(len(e.GetData()))
	}
	advanceTo(n.applied, a.applied)
	if a.onLoop {
		// The loop steps the answers after this turn, and a snapshot is
		// left to the apply workers.
		b := n.loop.buffers() // on the loop's goroutine
		b.answers = append(b.answers, t.msg.GetResponses()...)
		if n.snapshotMayBeDue() {
			n.wakeSnapshots()
		}
		return nil
	}
	if n.quietApplyAnswer(t) {
		n.answerQuietly(t.msg.GetResponses()...)
	} else {
		n.local.put(t.msg.GetResponses()...)
	}
	n.maybeSnapshot()
	return nil
}

// applySettings applies a settings entry: the commands before it first,
// then the new cluster settings (an entry that does not decode is skipped,
// deterministically, and its proposer told why).
func (n *Node) applySettings(idx uint64, data []byte) error {
	a := &n.apply
	if err := n.flushCommands(); err != nil {
		return err
	}
	id, cs, err := decodeSettings(data)
	if !a.dedup.add(id) {
		return nil
	}
	if err == nil && data[0] == entrySettingsSeed && n.settings.Load() != nil {
		// A seed that lost the race with an update: the update stands.
		a.applied = idx
		return nil
	}
	if err == nil {
		n.settings.Store(&cs)
		n.log.Info("cluster settings changed", slog.Uint64("index", idx), slog.String("settings", cs.String()))
		n.events.emit(Event{Type: EventSettingsChanged, Index: idx})
	} else {
		n.log.Warn("ignoring a settings entry that does not decode", slog.Uint64("index", idx), slog.Any("err", err))
	}
	a.applied = idx
	n.answerApplied(idx, id, Result{Err: err})
	return nil
}

// answerApplied answers this member's proposer of the entry at idx (id, any
// member's), once the applied index covers idx: a caller that reads
// AppliedIndex after its call returned sees its own entry. Everything up to
// idx is applied when it is called (entries are taken in order, and the
// commands before idx were flushed).
func (n *Node) answerApplied(idx uint64, id requestID, r Result) {
	advanceTo(n.applied, idx)
	if id.proposer == n.cfg.ID {
		n.waiters.resolve(id.seq, r)
	}
}

// flushCommands hands the collected commands to the state machine as one
// batch and resolves this member's waiting proposers.
func (n *Node) flushCommands() (err error) {
	a := &n.apply
	b := a.bufs
	if b == nil || len(b.cmds) == 0 {
		return nil
	}
	if cap(b.results) < len(b.cmds) {
		b.results = make([]Result, len(b.cmds))
	}
	results := b.results[:len(b.cmds)]
	clear(results)
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("state machine panicked applying entries %d-%d: %v",
					b.cmds[0].Index, b.cmds[len(b.cmds)-1].Index, r)
			}
		}()
		n.sm.Apply(b.cmds, results)
	}()
	if err != nil {
		return err
	}
	b.keepResults(results)
	last := b.cmds[len(b.cmds)-1].Index
	// Everything up to last is applied (entries are taken in order; a
	// conf change flushes the commands before it): say so before the
	// proposers are answered, so that one that reads AppliedIndex after
	// its Propose returned sees its own write.
	advanceTo(n.applied, last)
	for i, id := range b.ids {
		if id.proposer == n.cfg.ID {
			n.waiters.resolve(id.seq, results[i])
		}
	}
	clear(b.cmds)
	b.cmds = b.cmds[:0]
	b.ids = b.ids[:0]
	clear(results)
	a.applied = last
	return nil
}

// applyMembership records the member records a conf change carries and its
// configuration, brings the transport's peers in line, and resolves the
// change's waiter once the change is complete (a joint change when it is
// left).
func (n *Node) applyMembership(e *raftpb.Entry, cs *raftpb.ConfState) error {
	a := &n.apply
	cc, err := decodeConfChange(e)
	if err != nil {
		return err
	}
	ctx, err := changeContext(cc)
	if err != nil {
		// The context is replicated data: every member sees the same bytes
		// and ignores them the same way, so this cannot diverge.
		n.log.Warn("ignoring the member records of a conf change", slog.Uint64("index", e.GetIndex()), slog.Any("err", err))
	}
	t := a.members.clone()
	wasJoint := t.jointChangeID
	removed := t.apply(e.GetIndex(), ctx, cs)
	n.setMembers(t)
	a.applied = e.GetIndex()
	n.syncPeers(removed)
	joint := len(cs.GetVotersOutgoing()) > 0
	n.log.Info("membership changed", slog.Uint64("index", e.GetIndex()),
		slog.String("config", confchange.ConfigFromConfState(cs).String()))
	// Everything up to the change is applied: say so before its caller
	// hears of it, so that a change it makes next is not refused as
	// "in progress" (the leader compares its gate with the applied index).
	advanceTo(n.applied, e.GetIndex())
	switch {
	case joint && ctx.ChangeID != 0:
		// Entered: the change completes whoever leads (changeWaiter.entered).
		n.changes.enter(ctx.ChangeID, e.GetIndex())
	case !joint:
		if ctx.ChangeID != 0 {
			n.changes.resolve(ctx.ChangeID, changeResult{index: e.GetIndex()})
		}
		// A leave carries the entering change's ID when its leader knew it;
		// one that did not (it learned the joint configuration from a
		// snapshot) leaves it all the same.
		if wasJoint != 0 && wasJoint != ctx.ChangeID {
			n.changes.resolve(wasJoint, changeResult{index: e.GetIndex()})
		}
	}
	n.events.emit(Event{Type: EventMembershipChanged, Index: e.GetIndex()})
	if slices.Contains(removed, n.cfg.ID) {
		n.removed(fmt.Sprintf("applied its removal at index %d", e.GetIndex()), e.GetIndex())
	}
	n.checkOwnIncarnation(e.GetIndex())
	return nil
}

// checkOwnIncarnation stops the node (ErrReplicaWiped) when the applied
// member table records another incarnation for this member than the one
// its storage holds: it caught up on a log that another copy of its data
// wrote to (its own data was lost), and must not vote.
func (n *Node) checkOwnIncarnation(index uint64) {
	own := n.inc.Load()
	r, _ := n.apply.members.record(n.cfg.ID)
	rec := r.Incarnation
	if own != 0 && rec != 0 && own != rec {
		n.wiped(fmt.Sprintf("applied, at index %d, its record with incarnation %x; its data is incarnation %x", index, rec, own))
	}
}

// setPeerIncarnation tells a transport that checks incarnations member
// id's recorded one.
func (n *Node) setPeerIncarnation(id, inc uint64) {
	if s, ok := n.tr.(interface{ SetPeerIncarnation(id, inc uint64) }); ok && inc != 0 {
		s.SetPeerIncarnation(id, inc)
	}
}

// syncPeers forgets the removed members in the transport and adds (or
// updates) every other member with a record.
func (n *Node) syncPeers(removed []uint64) {
	for _, id := range removed {
		if id != n.cfg.ID {
			n.tr.RemovePeer(id)
		}
	}
	for _, m := range n.apply.members.records {
		if id := m.ID; id != n.cfg.ID {
			n.tr.AddPeer(id, m.PeerAddr)
			n.setPeerIncarnation(id, m.Incarnation)
		}
	}
	// Learner flags after AddPeer (a member known only from a snapshot is
	// added just above).
	for _, id := range n.apply.members.confState.GetLearners() {
		if id != n.cfg.ID {
			n.tr.SetLearner(id, true)
		}
	}
}

// closeQueuedSnapshots closes the files of snapshots queued for a restore
// that will not happen (the node stops). It runs once the append task has
// exited: that task persists what the loop handed over after the stop, and
// may queue a restore until it exits.
func (n *Node) closeQueuedSnapshots() {
	for {
		t, ok := n.applies.pop()
		if !ok {
			return
		}
		if t.files != nil {
			t.files.close()
		}
	}
}

// restoreSnapshot replaces the state machine, the member table, the dedup
// windows and the client sessions with the snapshot's, read from files (opened here if nil). The
// snapshot's data is verified whole (the storage checks its checksum)
// before the state machine sees any of it.
func (n *Node) restoreSnapshot(snap *raftpb.Snapshot, files *snapFiles) error {
	a := &n.apply
	index := snap.GetMetadata().GetIndex()
	if files == nil {
		var err error
		if files, err = n.openSnapFiles(snap); err != nil {
			return err
		}
	}
	defer files.close()
	if _, err := io.Copy(io.Discard, files.verify); err != nil {
		return fmt.Errorf("verifying snapshot %d: %w", index, err)
	}
	rc, size := files.restore, files.size
	var err error
	h := &snapHeader{}
	var r io.Reader = rc
	if size > 0 {
		br := bufio.NewReaderSize(rc, 64<<10)
		if h, err = readSnapHeader(br); err != nil {
			return fmt.Errorf("snapshot %d: %w", index, err)
		}
		r = br
	}
	if err := n.smRestore(r); err != nil {
		return fmt.Errorf("restoring the state machine from snapshot %d: %w", index, err)
	}
	t := newMemberTable()
	for _, m := range h.members {
		t.put(m)
	}
	for _, id := range h.removed {
		t.markRemoved(id)
	}
	t.confState = proto.Clone(snap.GetMetadata().GetConfState()).(*raftpb.ConfState)
	t.index = index
	var removed []uint64
	if old := a.members; old != nil {
		for _, m := range old.records {
			if id := m.ID; t.isRemoved(id) {
				removed = append(removed, id)
			}
		}
	}
	n.setMembers(t)
	a.dedup.reset(h.dedup)
	if len(h.clients) > 0 {
		a.clientWindow().reset(h.clients)
	} else {
		a.clients = nil
	}
	a.sessions = sessionTable{}
	if h.table != nil {
		a.sessions = *h.table
	}
	// Readiness records are not in snapshots: the ones applied before may
	// have been undone by records the snapshot covers.
	n.ready.reset()
	n.settings.Store(nil)
	if len(h.settings) > 0 {
		cs, err := confchange.DecodeClusterSettings(h.settings) // checked when the header was read
		if err != nil {
			return fmt.Errorf("snapshot %d: %w: %w", index, ErrCorruptSnapshot, err)
		}
		n.settings.Store(&cs)
	}
	a.applied = index
	a.snap.restored(index, size)
	if n.applied != nil {
		advanceTo(n.applied, index)
	}
	n.syncPeers(removed)
	n.checkOwnIncarnation(index)
	n.events.emit(Event{Type: EventSnapshotRestored, Index: index})
	n.log.Info("restored the state machine from a snapshot", slog.Uint64("index", index), slog.Int64("bytes", size))
	return nil
}
