package raft

import (
	"log/slog"
	"slices"
	"sort"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// RelayEnvelope is raftio.RelayEnvelope: a leader's raft messages on
// their way through a relay, each entry once.
type RelayEnvelope = raftio.RelayEnvelope

// RelayTransport is a Transport that carries relay envelopes
// (Config.Relay): the leader sends one to each relay, the relay one to
// each standby it feeds. transport.Transport and the in-process test
// network implement it. The node looks for it, as for the Transport's
// other optional methods; without it, Config.Relay changes nothing.
type RelayTransport interface {
	Transport
	// SendRelay queues env for member to without waiting. The sender is
	// this member, whatever the messages inside say: the receiving
	// transport hands it to its node's RelayHandler with this member's ID.
	// A failure is reported as Send's are (PeerHandler.ReportUnreachable
	// of to). env is shared: the transport must not modify it.
	SendRelay(to uint64, env *RelayEnvelope)
}

// RelayHandler is the side of a PeerHandler that takes relay envelopes:
// the PeerHandler a Node returns implements it. from is the member that
// sent env, as the transport authenticated it.
type RelayHandler interface {
	ProcessRelay(from uint64, env *RelayEnvelope)
}

// relayState is the leader's choice of relays (owned by the run loop).
type relayState struct {
	term uint64
	// via is the relay of each relayed standby; load counts them by relay.
	via  map[uint64]uint64
	load map[uint64]int
	// direct holds a standby that fell back to direct sends until the tick
	// given; down a relay not chosen until the tick given.
	direct map[uint64]uint64
	down   map[uint64]uint64
	// mark tracks each relayed standby's progress: its Match must reach
	// index (the commit index at tick) within twice the fallback delay.
	mark map[uint64]relayMark
	// keep tracks each standby's keeping up, for relaying: its Match must
	// reach index (the commit index at tick) within relayKeepUpTicks.
	keep map[uint64]relayMark
	// avoid is the relay a standby fell back from while that relay was
	// fit (a fault between them): it is given another if one has room.
	avoid map[uint64]uint64
	// orphan holds a standby whose relay failed (down, unfit, or silent
	// with most of its standbys) and the tick it did: it is given another
	// relay at once, whatever its own state, and its silence is not held
	// against it (nor its new relay) until fallbackTicks after that.
	orphan map[uint64]uint64
	// held are the appends with entries to orphans that sendOut held back
	// until the next relayTick (flushHeld): raft resends to each orphan
	// from its Match as its answers come, one by one, each in a Ready of
	// its own; sent together, they share their entries in one envelope.
	held []*raftpb.Message
	// flushing: sendOut is sending held, which it must not hold again.
	flushing bool
	// probed is, per standby, the index of the latest append with entries
	// the leader sent it and the tick it did (dropRepeatedProbes).
	probed map[uint64]relayMark
	// peers is this tick's view of the members (reused).
	peers map[uint64]relayPeer
	// sentApp is, per relayed standby, the tick of the latest append put
	// in an envelope for it and the commit index it carried
	// (redundantHeartbeat).
	sentApp map[uint64]relayMark
	// sentBeat is, per relayed standby, the tick of the latest heartbeat
	// put in an envelope for it and the commit index it carried
	// (redundantHeartbeat).
	sentBeat map[uint64]relayMark
	// Reused buffers of sendOut.
	bundles []relayBundle
	rest    []*raftpb.Message
	// asked holds, per standby that forwarded a proposal or a read to the
	// leader, the tick it last did: it is sent its commit-only appends
	// (commitOnlyAppend), its Propose and reads waiting for that commit
	// index. Let go with the rest (reset; a quiesced node drops it).
	asked map[uint64]uint64
	// replicating: the learners raft replicates to (sorted), read by
	// commitOnlyAppend once per sendOut (replicatingRead).
	replicating     []uint64
	replicatingRead bool
}

type relayMark struct{ index, tick uint64 }

// relayPeer is one member as relayTick sees it.
type relayPeer struct {
	learner bool
	// heard: it answered within the fallback delay; healthy: and it is
	// replicating (not probed, not sent a snapshot).
	heard, healthy bool
	match          uint64
	state          tracker.StateType
}

// relayable reports whether m may travel through a relay: appends and
// heartbeats only (snapshots, votes and the rest go directly).
func relayable(m *raftpb.Message) bool {
	t := m.GetType()
	return t == raftpb.MsgApp || t == raftpb.MsgHeartbeat
}

func (r *relayState) reset() {
	clear(r.keep)
	clear(r.sentApp)
	clear(r.sentBeat)
	clear(r.asked)
	if len(r.via) == 0 && len(r.down) == 0 && len(r.direct) == 0 && len(r.orphan) == 0 && len(r.held) == 0 {
		return
	}
	clear(r.via)
	clear(r.load)
	clear(r.direct)
	clear(r.down)
	clear(r.mark)
	clear(r.avoid)
	clear(r.orphan)
	clear(r.held)
	r.held = r.held[:0]
	clear(r.probed)
}

// fallbackTicks is how long a relayed standby may go without answering
// before it is fed directly again, and a relay without answering before
// it is not chosen: an election timeout (a loaded standby may miss a few
// heartbeats; raft's own retransmissions cover lost appends). One without
// progress past the commit index falls back after twice as long.
func (n *Node) fallbackTicks() uint64 { return uint64(max(2, n.cfg.ElectionTicks)) }

// relayTick (on the leader, each tick) checks the relayed standbys — one
// silent for fallbackTicks, or without progress for twice as long, is fed
// directly again; those of a relay no longer fit, or most of whose
// standbys failed at once, are given another relay (orphaned) — and
// assigns the standbys fed directly that answer, and the orphans, to
// relays: follower voters first, then caught-up standbys, at most
// Config.RelayFanout each.
func (n *Node) relayTick() {
	l := &n.loop
	r := l.relay
	_, ok := n.tr.(RelayTransport)
	if !ok || !n.cfg.Relay || l.role != RoleLeader || r == nil || r.term != l.term {
		if r == nil {
			if !ok || !n.cfg.Relay || l.role != RoleLeader {
				return // nothing to reset: none made, or let go while quiesced
			}
			r = new(relayState)
			l.relay = r
		}
		r.reset()
		r.term = l.term
		return
	}
	if r.via == nil {
		r.via, r.load = make(map[uint64]uint64), make(map[uint64]int)
		r.direct, r.down = make(map[uint64]uint64), make(map[uint64]uint64)
		r.mark, r.peers = make(map[uint64]relayMark), make(map[uint64]relayPeer)
		r.avoid, r.keep = make(map[uint64]uint64), make(map[uint64]relayMark)
		r.orphan = make(map[uint64]uint64)
	}
	fb := n.fallbackTicks()
	fresh := time.Duration(fb) * n.cfg.TickInterval
	last := l.ms.lastIndex
	commit := l.rn.BasicStatus().GetCommit()
	clear(r.peers)
	// Silence is measured against the latest answer of any member, not
	// the clock: a leader whose own loop was held up (a busy host) has not
	// stepped what waits for it, and must not blame every standby at once.
	var newest time.Time
	l.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, _ tracker.Progress) {
		if at := l.lastContact.get(id); id != n.cfg.ID && at.After(newest) {
			newest = at
		}
	})
	l.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
		if id == n.cfg.ID {
			return
		}
		heard := !l.lastContact.get(id).IsZero() && newest.Sub(l.lastContact.get(id)) <= fresh
		r.peers[id] = relayPeer{learner: pr.IsLearner, heard: heard, healthy: heard && pr.State == tracker.StateReplicate, match: pr.Match, state: pr.State}
	})
	n.flushHeld()
	ticks := l.ticks
	for id, at := range r.asked {
		if ticks-at > fb {
			delete(r.asked, id)
		}
	}
	for id, until := range r.down {
		if until <= ticks {
			delete(r.down, id)
		}
	}
	for id, until := range r.direct {
		if until <= ticks {
			delete(r.direct, id)
		}
	}
	// Check the relayed standbys.
	var failed map[uint64][]uint64
	var unfit []uint64
	for s := range r.avoid {
		if _, ok := r.peers[s]; !ok {
			delete(r.avoid, s)
		}
	}
	for s := range r.orphan {
		// An orphan is one until it answers (through its new relay).
		if p, ok := r.peers[s]; !ok || !p.learner || p.heard {
			delete(r.orphan, s)
		}
	}
	for s := range r.keep {
		if p, ok := r.peers[s]; !ok || !p.learner {
			delete(r.keep, s)
		}
	}
	for s, via := range r.via {
		p, ok := r.peers[s]
		switch {
		case !ok || !p.learner: // removed or promoted: a voter is fed directly
			n.unrelay(s, ok && p.state == tracker.StateReplicate && p.match < last)
		case !n.relayFit(via, commit):
			// The relay is at fault, not the standby: another relay.
			n.orphaned(s, p, last)
			if !slices.Contains(unfit, via) {
				unfit = append(unfit, via)
			}
		case r.orphan[s] != 0 && ticks-r.orphan[s] <= fb:
			// Given this relay after its last one failed, and silent
			// since: it has an election timeout to answer through it.
		case !p.heard || n.relayStalled(s, p.match, commit, 2*fb):
			// A standby probed for a moment (a lost append, rejected) is
			// not at fault: raft resends through the relay; one that
			// stays stuck is caught by its progress. An orphan still
			// silent is fed directly; its new relay is not blamed.
			if r.orphan[s] != 0 {
				n.fallBack(s, p, last, "silent since its relay failed")
				continue
			}
			if failed == nil {
				failed = make(map[uint64][]uint64)
			}
			failed[via] = append(failed[via], s)
		}
	}
	// A relay most of whose standbys failed at once is the one at fault:
	// not chosen for an election timeout, its standbys given other relays
	// at once. Otherwise each failed standby is fed directly for a while.
	for _, via := range unfit {
		n.reclaim(via)
	}
	for via, ss := range failed {
		// Those that fell back from it a moment ago count: a dead relay's
		// standbys seldom all go silent at the same tick.
		k := len(ss) + n.fellBackFrom(via)
		if 2*k >= r.load[via]+k-len(ss) {
			n.relayDown(via, "most of its standbys fell silent")
			continue
		}
		for _, s := range ss {
			p := r.peers[s]
			why := "no progress"
			if !p.heard {
				why = "silent"
			}
			r.avoid[s] = via
			n.fallBack(s, p, last, why)
		}
	}
	n.assignRelays(commit)
}

// relayStalled reports whether relayed standby s made no progress within
// fb ticks: its Match did not reach the commit index of fb ticks ago.
func (n *Node) relayStalled(s, match, commit, fb uint64) bool {
	r := n.loop.relay
	mk, ok := r.mark[s]
	if !ok || match >= mk.index {
		r.mark[s] = relayMark{index: commit, tick: n.loop.ticks}
		return false
	}
	return n.loop.ticks-mk.tick > fb
}

// relayFit reports whether member id may relay: a follower voter that
// answered within the fallback delay and is not marked down, or a standby
// fed directly that answered, keeps up with the commit index and
// replicates (or relays already).
func (n *Node) relayFit(id, commit uint64) bool {
	r := n.loop.relay
	p, ok := r.peers[id]
	if !ok || !p.heard || r.down[id] != 0 {
		return false
	}
	if !p.learner {
		// A voter that answers relays, whatever its own log's state: what
		// it hands on does not come from its log, and a moment in probe (an
		// append lost or rejected) is no reason to move a dozen standbys.
		return true
	}
	// A standby starts relaying when it replicates; it goes on while it
	// keeps up (a moment in probe does not move its standbys).
	_, relayed := r.via[id]
	return !relayed && (p.healthy || r.load[id] > 0) && n.keepsUp(id, p.match, commit)
}

// relayKeepUpTicks is how recent a commit index a standby relay's Match
// must have reached. Under steady writes a standby's Match is rarely the
// commit index at the very tick the leader looks — the appends to it take
// a moment (the transport gathers a learner's messages for up to
// LearnerBatchDelay, and it syncs them) — so requiring Match == commit
// dropped standby relays, and probed their standbys, tick after tick.
const relayKeepUpTicks = 3

// keepsUp reports whether standby id's Match reached the commit index of
// at most relayKeepUpTicks ago (the first time it is asked, whether it is
// at the commit index now).
func (n *Node) keepsUp(id, match, commit uint64) bool {
	r := n.loop.relay
	ticks := n.loop.ticks
	mk, ok := r.keep[id]
	if match >= commit {
		r.keep[id] = relayMark{index: commit, tick: ticks}
		return true
	}
	if !ok {
		return false
	}
	if match >= mk.index {
		// It reached the commit index it was measured against: measure
		// against the one of now, from now.
		r.keep[id] = relayMark{index: commit, tick: ticks}
		return true
	}
	return ticks-mk.tick <= relayKeepUpTicks
}

// assignRelays gives each standby fed directly that may be relayed, and
// each orphan, a relay with room: the least loaded fit follower voter,
// else the least loaded standby relay; when none has room, the standby
// becomes a relay itself (if caught up, and not an orphan), else a
// caught-up standby a voter relays is made one (borrowRelay), else it
// stays direct. Before that, a standby relay whose standbys the voter
// relays have room for gives them up (rebalance): a voter relay costs the
// leader no copy of the entries beyond the one it sends that voter, a
// standby relay one more.
func (n *Node) assignRelays(commit uint64) {
	r := n.loop.relay
	k := n.cfg.RelayFanout
	var relays, pending []uint64
	for id, p := range r.peers {
		switch {
		case !p.learner || r.load[id] > 0:
			if n.relayFit(id, commit) {
				relays = append(relays, id)
			}
		case r.via[id] == 0 && (r.orphan[id] != 0 || (p.healthy && r.direct[id] == 0)):
			pending = append(pending, id)
		}
	}
	// Voters first, then by ID: a stable choice.
	sort.Slice(relays, func(i, j int) bool {
		vi, vj := !r.peers[relays[i]].learner, !r.peers[relays[j]].learner
		if vi != vj {
			return vi
		}
		return relays[i] < relays[j]
	})
	relays = n.rebalance(relays, commit)
	if len(pending) == 0 {
		return
	}
	slices.Sort(pending)
	for _, s := range pending {
		best := n.relayWithRoom(s, relays, k)
		if best == 0 && r.orphan[s] != 0 {
			if best = n.borrowRelay(commit); best != 0 {
				relays = append(relays, best)
			} else {
				best = n.overflowRelay(relays, k)
			}
		}
		if best == 0 {
			if n.relayFit(s, commit) {
				relays = append(relays, s) // it relays for the next ones
			}
			continue
		}
		r.via[s] = best
		r.load[best]++
		if r.avoid[s] != best {
			delete(r.avoid, s)
		}
		r.mark[s] = relayMark{index: commit, tick: n.loop.ticks}
	}
}

// unrelay feeds standby s directly from now on. probe: what was in flight
// through its relay may be lost, so raft resends from its Match.
func (n *Node) unrelay(s uint64, probe bool) {
	r := n.loop.relay
	via, ok := r.via[s]
	if !ok {
		return
	}
	delete(r.via, s)
	delete(r.mark, s)
	delete(r.sentApp, s)
	delete(r.sentBeat, s)
	if r.load[via]--; r.load[via] <= 0 {
		delete(r.load, via)
	}
	if probe {
		n.loop.rn.ReportUnreachable(s)
	}
}

// fallBack feeds relayed standby s directly for an election timeout.
func (n *Node) fallBack(s uint64, p relayPeer, last uint64, why string) {
	r := n.loop.relay
	n.log.Debug("standby fed directly again", slog.Uint64("standby", s), slog.Uint64("relay", r.via[s]), slog.String("why", why))
	n.unrelay(s, p.state == tracker.StateReplicate && p.match < last)
	r.direct[s] = n.loop.ticks + uint64(n.cfg.ElectionTicks)
	delete(r.orphan, s)
}

// relayDown stops using relay id for an election timeout: its standbys
// are given other relays (orphaned).
func (n *Node) relayDown(id uint64, why string) {
	r := n.loop.relay
	if r == nil || r.via == nil {
		return
	}
	r.down[id] = n.loop.ticks + uint64(n.cfg.ElectionTicks)
	if r.load[id] == 0 {
		return
	}
	n.log.Debug("relay not used", slog.Uint64("relay", id), slog.String("why", why))
	last := n.loop.ms.lastIndex
	for s, via := range r.via {
		if via == id {
			n.orphaned(s, r.peers[s], last)
		}
	}
	n.reclaim(id)
}

// relayUnreachable is the transport's report that a message to id could
// not be sent (on the loop): a relay it concerns is not used for a while,
// and its standbys are given other relays before raft's resends to them
// leave.
func (n *Node) relayUnreachable(id uint64) {
	if r := n.loop.relay; r != nil && r.load[id] > 0 {
		n.relayDown(id, "unreachable")
		n.assignRelays(n.loop.rn.BasicStatus().GetCommit())
	}
}

// relayedBy returns the relay feeding standby id, 0 if none (Status).
func (n *Node) relayedBy(id uint64) uint64 { return n.loop.relayVia(id) }

// relayVia returns the relay feeding standby id, 0 if none.
func (l *loopState) relayVia(id uint64) uint64 {
	if l.relay == nil {
		return 0
	}
	return l.relay.via[id]
}

// idle reports whether the relay state holds nothing but reused buffers:
// no standby relayed, none fed directly or avoided for a while, no relay
// down, no progress tracked. A quiesced node lets such a state go.
func (r *relayState) idle() bool {
	return len(r.via) == 0 && len(r.load) == 0 && len(r.direct) == 0 && len(r.down) == 0 &&
		len(r.mark) == 0 && len(r.keep) == 0 && len(r.avoid) == 0 && len(r.orphan) == 0
}
