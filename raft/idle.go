package raft

// What an idle node holds: a host runs many groups, most of them idle, so
// a quiesced node lets go of what only a busy one needs (see "Memory of an
// idle group" in docs/architecture.md). Everything here runs on the run
// loop.

// cacheDropper is a Storage that can let go of its in-memory caches
// (storage.Store.DropCaches): a quiesced node asks it to.
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

// dropIdle lets a quiesced node's loop state and storage caches go, once
// per quiet spell: the maps made for work that is over, and the storage's
// copy of the log's tail (read back from the database when the group
// wakes and needs it).
func (n *Node) dropIdle() {
	l := &n.loop
	if l.droppedFor.Equal(l.q.since) {
		return
	}
	l.droppedFor = l.q.since
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
	if d, ok := n.store.(cacheDropper); ok {
		d.DropCaches()
	}
}
