package raft

// What an idle node holds: a host runs many groups, most of them idle, so
// a quiesced node lets go of what only a busy one needs (see "Memory of an
// idle group" in docs/architecture.md). Everything here runs on the run
// loop.

// cacheDropper is a Storage or a Transport that can let go of its
// in-memory caches (storage.Store.DropCaches, transport.Transport.DropCaches):
// a quiesced node asks it to.
type cacheDropper interface {
	DropCaches()
}

// addReadRound starts read round l.readSeq; the map is made with the
// first round, and a quiesced node lets it go (dropIdle).
func (l *loopState) addReadRound(r *readRound) {
	if l.readRounds == nil {
		l.readRounds = make(map[uint64]*readRound)
	}
	l.readRounds[l.readSeq] = r
}

// dropIdle lets a quiesced node's idle memory go, at the end of each of its
// runs (rare: a read-only call or a quiet message; the first is the run
// that quiesced): the maps made and the queue buffers grown for work that
// is over, the storage's copy of the log's tail (read back from the
// database when the group wakes and needs it) and the transport's queue
// buffers.
func (n *Node) dropIdle() {
	l := &n.loop
	if len(l.readRounds) == 0 {
		l.readRounds = nil
	}
	if len(l.snapBackoff) == 0 {
		l.snapBackoff = nil
	}
	if len(l.heldReadIndex) == 0 {
		l.heldReadIndex = nil
	}
	if len(l.readQueue) == 0 {
		l.readQueue = nil
	}
	if len(l.pending) == 0 {
		l.pending = nil
	}
	l.catchUp = nil // the wake drops it too: rates over a quiet spell mean nothing
	if l.role != RoleLeader {
		// A leader's bookkeeping: becameLeader makes it afresh.
		l.ms.book = nil
	} else if b := l.ms.book; b != nil {
		// The reused parts of its views, made again by the next.
		b.viewProgress, b.viewConfig, b.viewConfigOf = nil, nil, nil
		b.viewMembers, b.viewRemoved, b.viewMembersOf = nil, nil, nil
	}
	if l.relay != nil && (l.role != RoleLeader || l.relay.idle()) {
		// Nothing relayed: the next relayTick of a leader makes it again.
		l.relay = nil
	}
	if n.applyBufsHeld.Load() {
		n.applyTask.Signal() // it lets its buffers go (applyIdle)
	}
	n.changes.release()
	n.waiters.release()
	n.recv.release()
	n.local.release()
	n.acts.release()
	n.quietActs.release()
	n.props.release()
	n.reads.release()
	n.appends.release()
	n.applies.release()
	if d, ok := n.store.(cacheDropper); ok {
		d.DropCaches()
	}
	if d, ok := n.tr.(cacheDropper); ok {
		d.DropCaches()
	}
}

// applyIdle, at the end of each run of the apply task, lets the task's
// batch buffers go if the group is quiesced and no batch is in progress:
// the next batch makes them again. On the apply task.
func (n *Node) applyIdle() {
	a := &n.apply
	if a.bufs == nil || !n.quiesced.Load() || n.applies.len() > 0 ||
		len(a.bufs.cmds) > 0 || len(a.bufs.pend) > 0 {
		return
	}
	a.bufs = nil
	n.applyBufsHeld.Store(false)
}

// release lets the set's map go when no proposal is waited for.
func (w *waiterSet) release() {
	w.mu.Lock()
	if len(w.m) == 0 {
		w.m = nil
	}
	w.mu.Unlock()
}

// release lets the set's map go when no change is waited for.
func (s *changeSet) release() {
	s.mu.Lock()
	if len(s.m) == 0 {
		s.m = nil
	}
	s.mu.Unlock()
}

// release lets an empty queue's buffer go.
func (q *queue[T]) release() {
	q.mu.Lock()
	if len(q.items) == 0 {
		q.items = nil
	}
	q.mu.Unlock()
}

// release lets an empty queue's buffer go.
func (q *boundedQueue[T]) release() {
	q.mu.Lock()
	if len(q.items) == 0 {
		q.items = nil
	}
	q.mu.Unlock()
}

// release lets an empty inbox's buffer go.
func (b *inbox) release() {
	b.mu.Lock()
	if len(b.msgs) == 0 {
		b.msgs = nil
	}
	b.mu.Unlock()
}

// release lets an empty mailbox's buffer go.
func (mb *mailbox) release() {
	mb.mu.Lock()
	if len(mb.msgs) == 0 {
		mb.msgs = nil
	}
	mb.mu.Unlock()
}
