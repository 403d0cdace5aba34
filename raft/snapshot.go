package raft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Local snapshots: when to take one (amortized against the log written
// since the last one, on demand with Node.Snapshot, or fresh because a new
// member needs one that lists it), and writing it beside the apply task.
//
// A snapshot is due once at least SnapshotCount entries were applied since
// the last one AND the bytes of those entries are at least the size of the
// last snapshot. With a small state that is every SnapshotCount entries, as
// etcd does; with a large one it is every "state's size" of writes, so that
// the work spent writing snapshots stays proportional to the bytes written
// (a fixed entry count would write a 100 MB state every second under load).
// The log kept meanwhile is at most about the state's size again, plus
// SnapshotCatchUpEntries after compaction.

// snapState is the apply task's snapshot bookkeeping.
type snapState struct {
	index    uint64 // index of the last snapshot taken (or being taken) or restored
	logBytes uint64 // bytes of entries applied since then
	lastSize atomic.Int64
	written  atomic.Uint64 // index of the last snapshot written or restored
	running  atomic.Bool   // a snapshot is being written (at most one at a time)

	// want is an index a snapshot must reach (set by the run loop): the
	// configuration raft has now added a member, and a member that joins
	// must get a snapshot whose configuration lists it.
	want atomic.Uint64

	mu      sync.Mutex
	waiters []chan snapResult // Node.Snapshot callers
	// failed is the backoff after failed snapshots, nil once one
	// succeeded (made with a failure: most nodes never have one).
	failed *snapBackoff
}

// snapBackoff is the delay after the last failed snapshot, and retryAt
// the time before which none is started unless a Node.Snapshot caller
// asks: a snapshot a joining member needs is retried until written, and a
// failing disk or state machine must not make that a loop of attempts (and
// of Error lines).
type snapBackoff struct {
	backoff time.Duration
	retryAt time.Time
}

type snapResult struct {
	index uint64
	err   error
}

// snapshotDue reports whether the node's own snapshot is due: SnapshotCount
// entries applied since the last one, whose bytes reach SnapshotLogRatio
// times its size (on the apply task, or the loop's worker while the apply
// task is idle).
func (n *Node) snapshotDue() bool {
	a := &n.apply
	s := &a.snap
	return a.applied >= s.index+n.cfg.SnapshotCount &&
		float64(s.logBytes) >= n.cfg.SnapshotLogRatio*float64(s.lastSize.Load())
}

func (s *snapState) restored(index uint64, size int64) {
	s.index = index
	s.written.Store(index)
	s.logBytes = 0
	s.lastSize.Store(size)
}

// snapshotFailed records a failed snapshot and returns the delay before the
// next one may start: half an election timeout, doubling up to 32 times
// that (as failed snapshot sends back off), reset by a success. The apply
// goroutine is woken once the delay has passed.
func (n *Node) snapshotFailed() time.Duration {
	s := &n.apply.snap
	base := n.electionTimeout() / 2
	s.mu.Lock()
	d := base
	if s.failed == nil {
		s.failed = new(snapBackoff)
	} else {
		d = min(2*s.failed.backoff, 32*base)
	}
	s.failed.backoff = d
	s.failed.retryAt = time.Now().Add(d)
	s.mu.Unlock()
	time.AfterFunc(d, n.wakeSnapshots)
	return d
}

// succeeded resets the backoff after a snapshot was written.
func (s *snapState) succeeded() {
	s.mu.Lock()
	s.failed = nil
	s.mu.Unlock()
}

// Snapshot takes a snapshot of the state machine now, at the applied index,
// writes it, compacts the log (keeping SnapshotCatchUpEntries), and returns
// its index. A snapshot already being written is finished first. It is what
// an operator calls before a backup or after a bulk load; the node takes
// snapshots on its own otherwise (see Config.SnapshotCount).
//
// Errors: ctx's error (the snapshot may still be written); an error
// wrapping the state machine's Snapshot error or the storage's (nothing
// was compacted: retry later, and look at the disk); an error when nothing
// was applied yet; ErrNotStarted; ErrStopped or the error that stopped
// the node.
func (n *Node) Snapshot(ctx context.Context) (uint64, error) {
	if err := n.usable(); err != nil {
		return 0, err
	}
	w := make(chan snapResult, 1)
	s := &n.apply.snap
	s.mu.Lock()
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	n.wakeSnapshots()
	select {
	case r := <-w:
		return r.index, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-n.stopc:
		return 0, n.stopErr()
	}
}

// wakeSnapshots makes the apply task look at the snapshot state even
// while no entries arrive.
func (n *Node) wakeSnapshots() {
	n.snapWake.Store(true)
	n.applyTask.Signal()
}

// needSnapshotAt asks for a snapshot at index or later (called on the loop).
func (n *Node) needSnapshotAt(index uint64) {
	s := &n.apply.snap
	for {
		cur := s.want.Load()
		if cur >= index || s.want.CompareAndSwap(cur, index) {
			break
		}
	}
	n.wakeSnapshots()
}

// maybeSnapshot starts a snapshot if one is due, wanted or asked for. The
// state machine captures its state here, on the apply task; writing it
// and compacting the log run on another goroutine while applying continues.
func (n *Node) maybeSnapshot() {
	a := &n.apply
	s := &a.snap
	if s.running.Load() {
		return
	}
	s.mu.Lock()
	asked := len(s.waiters) > 0
	backingOff := s.failed != nil && time.Now().Before(s.failed.retryAt)
	s.mu.Unlock()
	if backingOff && !asked {
		return // the last one failed: snapshotFailed wakes us when it is time
	}
	want := s.want.Load()
	if want > s.written.Load() && a.applied < want {
		// A member added at want needs a snapshot that lists it: one taken
		// now would be abandoned at once (errSnapshotSuperseded).
		return
	}
	due := n.snapshotDue()
	// A wanted snapshot is retried until one is written (a failed write
	// must not leave a joining member without one).
	wanted := want > s.written.Load() && a.applied >= want
	if !due && !wanted && !asked {
		return
	}
	if a.applied == 0 {
		n.resolveSnapshotWaiters(snapResult{err: errors.New("raft: nothing applied yet to snapshot")})
		return
	}
	snap, err := n.smSnapshot()
	if isPanic(err) {
		n.resolveSnapshotWaiters(snapResult{err: fmt.Errorf("raft: state machine snapshot: %w", err)})
		n.fail("state machine snapshot", err)
		return
	}
	if err != nil {
		d := n.snapshotFailed()
		n.log.Error("state machine snapshot failed", slog.Duration("retry_in", d), slog.Any("err", err))
		n.resolveSnapshotWaiters(snapResult{err: fmt.Errorf("raft: state machine snapshot: %w", err)})
		return
	}
	s.mu.Lock()
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()
	index := a.applied
	cs := proto.Clone(a.members.confState).(*raftpb.ConfState)
	h := &snapHeader{members: a.members.sorted(), removed: a.members.removedIDs(), dedup: a.dedup.ids(), clients: a.clients.ids(), sessions: a.sessions.appendTo(nil)}
	if cs := n.settings.Load(); cs != nil {
		h.settings = cs.Encode()
	}
	s.index = index
	s.logBytes = 0
	s.running.Store(true)
	n.hold()
	go func() {
		defer n.release()
		defer n.releaseSnap(snap)
		err := n.writeSnapshot(index, cs, h, snap)
		if errors.Is(err, errSnapshotSuperseded) {
			// The snapshot that replaces it answers these callers.
			s.mu.Lock()
			s.waiters = append(waiters, s.waiters...)
			s.mu.Unlock()
			waiters = nil
		}
		s.running.Store(false)
		for _, w := range waiters {
			w <- snapResult{index: index, err: err}
		}
		n.wakeSnapshots() // another may be wanted or asked for meanwhile
	}()
}

// errSnapshotSuperseded ends the writing of a snapshot that a member added
// meanwhile cannot use (its configuration predates the member): the fresh
// snapshot the member needs is taken at once instead of after it.
var errSnapshotSuperseded = errors.New("raft: snapshot superseded by one a new member needs")

func (n *Node) resolveSnapshotWaiters(r snapResult) {
	s := &n.apply.snap
	s.mu.Lock()
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()
	for _, w := range waiters {
		w <- r
	}
}

func (n *Node) writeSnapshot(index uint64, cs *raftpb.ConfState, h *snapHeader, s Snapshot) error {
	var size int64
	want := &n.apply.snap.want
	_, err := n.store.CreateSnapshot(index, cs, func(w io.Writer) error {
		cw := &countingWriter{w: w, superseded: func() bool { return want.Load() > index }}
		if err := h.writeTo(cw); err != nil {
			return err
		}
		err := writeSnap(s, cw)
		size = cw.n
		return err
	})
	if isPanic(err) {
		n.fail("state machine snapshot", err)
		return fmt.Errorf("raft: writing snapshot %d: %w", index, err)
	}
	if errors.Is(err, etcdraft.ErrSnapOutOfDate) {
		n.apply.snap.succeeded()
		return nil // a newer snapshot arrived from the leader meanwhile
	}
	if errors.Is(err, errSnapshotSuperseded) {
		n.log.Info("snapshot abandoned: a new member needs one that lists it", slog.Uint64("index", index))
		return err
	}
	if err != nil {
		// One attempt, and one line, per backoff step.
		d := n.snapshotFailed()
		n.log.Error("writing a snapshot failed", slog.Uint64("index", index), slog.Duration("retry_in", d), slog.Any("err", err))
		return fmt.Errorf("raft: writing snapshot %d: %w", index, err)
	}
	n.apply.snap.succeeded()
	n.apply.snap.lastSize.Store(size)
	n.apply.snap.written.Store(index)
	if index > n.cfg.SnapshotCatchUpEntries {
		compact := index - n.cfg.SnapshotCatchUpEntries
		if first, err := n.store.FirstIndex(); err == nil && compact >= first {
			if err := n.store.Compact(compact); err != nil && !errors.Is(err, etcdraft.ErrCompacted) {
				n.log.Error("compacting the log failed", slog.Uint64("index", compact), slog.Any("err", err))
			}
		}
	}
	n.events.emit(Event{Type: EventSnapshotCreated, Index: index})
	n.log.Info("snapshot written", slog.Uint64("index", index), slog.Int64("bytes", size))
	return nil
}

// countingWriter counts the bytes written through it, and fails once
// superseded reports true (a snapshot a new member cannot use is abandoned,
// see errSnapshotSuperseded).
type countingWriter struct {
	w          io.Writer
	n          int64
	superseded func() bool
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.superseded != nil && c.superseded() {
		return 0, errSnapshotSuperseded
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// snapshotToSend is raft's Storage.Snapshot on the leader's loop: raft asks
// for it only to send a snapshot to a member that is too far behind. A
// member that joined after the latest snapshot is not in its configuration
// and refuses it (etcd raft: "attempted to restore snapshot but it is not
// in the ConfState"), and the leader would send the same one again and
// again until a newer one exists — on an idle cluster, for ever. So when
// the latest snapshot predates the last conf change that added a member,
// raft is told to try again later (ErrSnapshotTemporarilyUnavailable, which
// it retries on the next heartbeat) and a fresh snapshot, at an applied
// index that includes that change, is taken at once — as etcd server sends
// a snapshot merged with the current configuration.
func (n *Node) snapshotToSend(snap *raftpb.Snapshot) (*raftpb.Snapshot, error) {
	added := n.loop.confAdded
	if snap.GetMetadata().GetIndex() >= added {
		return snap, nil
	}
	n.needSnapshotAt(added)
	return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
}

// reportSnapshot tells raft how sending a snapshot to member id ended. A
// failure is told only after a backoff (half an election timeout, doubling
// up to 32 times that, reset by a success): until then raft keeps the
// member in its snapshot state and sends nothing, so a member that cannot
// take a snapshot (unreachable, a full disk) does not make the leader
// stream it again and again.
func (n *Node) reportSnapshot(id uint64, status etcdraft.SnapshotStatus) {
	l := &n.loop
	if status == etcdraft.SnapshotFinish {
		delete(l.snapBackoff, id)
		l.rn.ReportSnapshot(id, status)
		return
	}
	base := n.electionTimeout() / 2
	d := l.snapBackoff[id]
	if d == 0 {
		d = base
	} else {
		d = min(2*d, 32*base)
	}
	if l.snapBackoff == nil {
		l.snapBackoff = make(map[uint64]time.Duration)
	}
	l.snapBackoff[id] = d
	n.log.Warn("sending a snapshot failed; raft retries after a backoff", slog.Uint64("peer", id), slog.Duration("backoff", d))
	time.AfterFunc(d, func() {
		n.post(func() { n.loop.rn.ReportSnapshot(id, etcdraft.SnapshotFailure) })
	})
}
