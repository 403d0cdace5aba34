package raft

import (
	"encoding/binary"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Linearizable reads on the run loop: queued reads share one ReadIndex round;
// a leader answers no round (its own, or one forwarded by another member)
// before an entry of its term is committed; read contexts carry this run's
// random ID so that an answer meant for an earlier run of this member is
// ignored. On the leader, the ReadIndex requests of other members (a
// follower's or a standby's round) are held and join the leader's next
// round — one such round in flight at a time — which answers each of them
// as raft would have (see "Reads from a fleet of standbys" in
// docs/architecture.md): raft sends every member a heartbeat for each
// request it steps, so dozens of standbys reading at once would cost the
// leader a broadcast each.

// maxPendingReads bounds the reads the run loop holds while they wait for a
// leader or a read index; beyond it ReadBarrier waits within its context.
const maxPendingReads = 4096

// maxHeldReadIndex bounds the ReadIndex requests of other members a new
// leader holds (they retry after an election timeout if dropped).
const maxHeldReadIndex = 4096

// readCtxSize is the size of a ReadIndex request context: the run ID, then
// the round number, both big endian.
const readCtxSize = 16

// readRound is one ReadIndex request shared by many reads: this member's
// (reqs) and, on the leader, other members' ReadIndex requests (peers),
// taken in term.
type readRound struct {
	reqs  []*readRequest
	peers []*raftpb.Message
	tick  uint64
	term  uint64
}

// queueRead queues r for the next round unless its caller gave up.
func (n *Node) queueRead(r *readRequest) {
	if !r.canceled.Load() {
		n.loop.readQueue = append(n.loop.readQueue, r)
	}
}

// flushReads starts one ReadIndex round for the queued reads, once a leader
// is known and (on the leader) it may answer reads. The leader's round also
// takes the ReadIndex requests of other members it holds, unless a round
// with such requests is still unanswered: the requests that arrive
// meanwhile wait for it and share the next, so that members' reads cost
// the leader at most one heartbeat to each member per round trip, however
// many members read. Its own reads keep a round per pass.
func (n *Node) flushReads() {
	l := &n.loop
	mayRead := l.leader == n.cfg.ID && n.leaderMayRead()
	_, inFlight := l.readRounds[l.peerRound]
	peers := mayRead && len(l.heldReadIndex) > 0 && !inFlight
	own := len(l.readQueue) > 0 && l.leader != 0 && (l.leader != n.cfg.ID || mayRead)
	if !peers && !own {
		return
	}
	round := &readRound{tick: l.ticks, term: l.term}
	if own {
		round.reqs, l.readQueue = l.readQueue, nil
	}
	if peers {
		round.peers, l.heldReadIndex = l.heldReadIndex, nil
	}
	l.readSeq++
	if peers {
		l.peerRound = l.readSeq
	}
	l.addReadRound(round)
	l.rn.ReadIndex(n.readCtx(l.readSeq))
}

// leaderMayRead reports whether this member leads and has committed an
// entry of its term. Raft checks that itself before it answers a ReadIndex —
// except on a single voter, which it answers with its commit index at once;
// after a restart that index may trail writes already acknowledged (a
// commit-only hard state is not written on its own), so the node holds
// reads until the commit index reaches the first entry of its term.
func (n *Node) leaderMayRead() bool {
	l := &n.loop
	if l.role != RoleLeader || l.ms.termStart == 0 {
		return false
	}
	st := l.rn.BasicStatus()
	return st.RaftState == etcdraft.StateLeader && st.GetCommit() >= l.ms.termStart
}

// holdReadIndex reports whether m, a ReadIndex request from another member,
// is held (it is then kept) instead of stepped: on the leader every such
// request waits for the next round (flushReads: one round for all those
// held, and for those a new leader holds until it may answer reads).
func (n *Node) holdReadIndex(m *raftpb.Message) bool {
	l := &n.loop
	if m.GetType() != raftpb.MsgReadIndex || l.rn.BasicStatus().RaftState != etcdraft.StateLeader {
		return false // raft forwards it to the leader, or drops it
	}
	if len(l.heldReadIndex) >= maxHeldReadIndex {
		return true // dropped: the member retries after an election timeout
	}
	l.heldReadIndex = append(l.heldReadIndex, m)
	return true
}

// retryReads requeues read rounds that got no answer within an election
// timeout (raft drops a ReadIndex silently when the leader is unknown or the
// message is lost), or all of them (all=true, after a leader change). Reads
// are idempotent: retrying them is always safe.
func (n *Node) retryReads(all bool) {
	l := &n.loop
	if all {
		l.heldReadIndex = nil // their senders retry with the new leader
	}
	for id, round := range l.readRounds {
		if !all && l.ticks-round.tick <= uint64(n.cfg.ElectionTicks) {
			continue
		}
		delete(l.readRounds, id)
		for _, r := range round.reqs {
			n.queueRead(r)
		}
		if !all && round.term == l.term {
			for _, m := range round.peers { // into the next round
				if len(l.heldReadIndex) < maxHeldReadIndex {
					l.heldReadIndex = append(l.heldReadIndex, m)
				}
			}
		}
	}
}

// dropAbandonedReads forgets the queued reads whose callers gave up.
func (n *Node) dropAbandonedReads() {
	l := &n.loop
	l.readQueue = slices.DeleteFunc(l.readQueue, func(r *readRequest) bool { return r.canceled.Load() })
}

func (n *Node) answerReads(states []etcdraft.ReadState) {
	l := &n.loop
	for _, rs := range states {
		id, ok := n.parseReadCtx(rs.RequestCtx)
		if !ok {
			continue
		}
		round, ok := l.readRounds[id]
		if !ok {
			continue // a round already answered or retried
		}
		delete(l.readRounds, id)
		for _, r := range round.reqs {
			r.done <- readResult{index: rs.Index}
		}
		if len(round.peers) > 0 {
			n.answerPeerReads(round, rs.Index)
			if len(l.heldReadIndex) > 0 {
				n.loopTask.Signal() // the requests held meanwhile: the next round
			}
		}
	}
}

// answerPeerReads answers the other members' ReadIndex requests of a
// confirmed round with what raft sends for one it confirmed: a
// MsgReadIndexResp of this leader's term, with the read index and the
// request's entries (its context).
func (n *Node) answerPeerReads(round *readRound, index uint64) {
	from, term := n.cfg.ID, round.term
	resps := make([]*raftpb.Message, len(round.peers))
	for i, m := range round.peers {
		resps[i] = &raftpb.Message{Type: raftpb.MsgReadIndexResp.Enum(), From: &from, To: m.From, Term: &term, Index: &index, Entries: m.GetEntries()}
	}
	n.sendOut(resps)
}

// readCtx is the context of read round seq of this run.
func (n *Node) readCtx(seq uint64) []byte {
	b := make([]byte, 0, readCtxSize)
	b = binary.BigEndian.AppendUint64(b, n.runID)
	return binary.BigEndian.AppendUint64(b, seq)
}

// parseReadCtx returns the round of a read context of this run; ok is false
// for any other context (another run of this member, or garbage).
func (n *Node) parseReadCtx(b []byte) (seq uint64, ok bool) {
	if len(b) != readCtxSize || binary.BigEndian.Uint64(b) != n.runID {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[8:]), true
}
