package raft

import (
	"log/slog"

	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// What the leader does when a relay fails (docs/architecture.md, "When a
// relay dies"): the relay's standbys are orphans, given another relay at
// once (orphaned, reclaim); one is found with room (relayWithRoom), made
// of a caught-up standby (borrowRelay) or, last, beyond a voter relay's
// fanout (overflowRelay); standbys go back to voter relays once these have
// room (rebalance); raft's resends to orphans leave together (flushHeld),
// and a standby's repeated probe at most once per election timeout
// (dropRepeatedProbes).

// relayWithRoom returns the relay for standby s among relays (voters
// first): a voter with room if there is one, else a standby relay with
// room, the least loaded of its kind — the one s avoids only if it is the
// only one — or 0.
func (n *Node) relayWithRoom(s uint64, relays []uint64, k int) uint64 {
	r := n.loop.relay
	for _, voters := range []bool{true, false} {
		best := uint64(0)
		for _, id := range relays {
			if !r.peers[id].learner != voters || r.load[id] >= k {
				continue
			}
			if best == 0 || r.avoid[s] == best || (r.load[id] < r.load[best] && r.avoid[s] != id) {
				best = id
			}
		}
		if best != 0 {
			return best
		}
	}
	return 0
}

// overflowRelay returns the least loaded voter relay in relays that feeds
// fewer than twice k standbys, or 0: the last resort for an orphan when no
// relay has room and no standby can be made one (none keeps up: on a host
// whose standbys are starved). Fed directly instead, the orphan would cost
// the leader a full copy of every entry until a relay has room; through a
// voter relay beyond its fanout it costs the leader nothing, and that relay
// the copies for a moment: rebalance hands them over as soon as another
// voter relay has room.
func (n *Node) overflowRelay(relays []uint64, k int) uint64 {
	r := n.loop.relay
	best := uint64(0)
	for _, id := range relays {
		if !r.peers[id].learner && r.load[id] < 2*k && (best == 0 || r.load[id] < r.load[best]) {
			best = id
		}
	}
	return best
}

// rebalance hands the standbys of each standby relay in relays over to
// the voter relays in relays when these have room for all of them (after
// a voter relay came back: the standbys it lost went to standby relays),
// and returns relays without the standby relays left with none. Nothing
// was lost on the way (the old relay is fit): no resend is asked for.
func (n *Node) rebalance(relays []uint64, commit uint64) []uint64 {
	r := n.loop.relay
	k := n.cfg.RelayFanout
	room := 0
	for _, id := range relays {
		if !r.peers[id].learner {
			room += max(k-r.load[id], 0)
		}
	}
	if room == 0 {
		return relays
	}
	// A voter relay beyond its fanout (overflowRelay) first.
	for _, v := range relays {
		for extra := r.load[v] - k; extra > 0 && room > 0 && !r.peers[v].learner; extra-- {
			to := uint64(0)
			for _, id := range relays {
				if id != v && !r.peers[id].learner && r.load[id] < k && (to == 0 || r.load[id] < r.load[to]) {
					to = id
				}
			}
			s := uint64(0)
			for sb, via := range r.via {
				if via == v && (s == 0 || sb < s) {
					s = sb
				}
			}
			if to == 0 || s == 0 {
				break
			}
			n.unrelay(s, false)
			r.via[s] = to
			r.load[to]++
			r.mark[s] = relayMark{index: commit, tick: n.loop.ticks}
			room--
		}
	}
	out := relays[:0]
	for _, sr := range relays {
		load := r.load[sr]
		if !r.peers[sr].learner || load == 0 || load > room {
			out = append(out, sr)
			continue
		}
		n.log.Debug("standby relay's standbys handed to voter relays", slog.Uint64("relay", sr), slog.Int("standbys", load))
		for s, via := range r.via {
			if via != sr {
				continue
			}
			n.unrelay(s, false)
			best := n.relayWithRoom(s, relays, k)
			if best == 0 || r.peers[best].learner {
				continue // cannot happen: room was counted
			}
			r.via[s] = best
			r.load[best]++
			r.mark[s] = relayMark{index: commit, tick: n.loop.ticks}
		}
		room -= load
	}
	return out
}

// borrowRelay makes a caught-up standby that a voter relay feeds a relay
// (when no relay has room for an orphan: a voter relay failed and the
// other is full), and returns it, or 0 if there is none. It is taken off
// its voter relay without a resend: nothing was lost on the way.
func (n *Node) borrowRelay(commit uint64) uint64 {
	r := n.loop.relay
	best := uint64(0)
	for s, via := range r.via {
		p, vp := r.peers[s], r.peers[via]
		if vp.learner || !p.healthy || r.orphan[s] != 0 || (best != 0 && s > best) || !n.keepsUp(s, p.match, commit) {
			continue
		}
		best = s
	}
	if best != 0 {
		n.unrelay(best, false)
	}
	return best
}

// orphaned takes relayed standby s from its relay, which failed (down, or
// no longer fit): raft resends from its Match what was in flight
// (ReportUnreachable, as unrelay does), and s is given another relay by
// the next assignRelays whatever its own state — the resends and the next
// appends then leave in that relay's envelope, each entry once for all
// the standbys it takes, rather than one full copy per standby sent
// directly for an election timeout.
func (n *Node) orphaned(s uint64, p relayPeer, last uint64) {
	r := n.loop.relay
	n.unrelay(s, p.state != tracker.StateSnapshot && p.match < last)
	delete(r.direct, s)
	delete(r.avoid, s)
	if _, ok := r.orphan[s]; !ok && p.state != tracker.StateSnapshot {
		r.orphan[s] = n.loop.ticks
	}
}

// fellBackFrom counts the standbys fed directly for having fallen silent
// behind relay id (fallBack; not yet given another relay).
func (n *Node) fellBackFrom(id uint64) int {
	r := n.loop.relay
	k := 0
	for s, a := range r.avoid {
		if a == id && r.direct[s] != 0 && r.via[s] == 0 {
			k++
		}
	}
	return k
}

// reclaim makes orphans of the standbys fed directly for having fallen
// silent behind relay id, now found at fault (down, or no longer fit):
// they were not at fault, and are given another relay with its other
// standbys rather than fed directly for the rest of an election timeout.
func (n *Node) reclaim(id uint64) {
	r := n.loop.relay
	for s, a := range r.avoid {
		if a != id || r.direct[s] == 0 || r.via[s] != 0 {
			continue
		}
		delete(r.direct, s)
		delete(r.avoid, s)
		if _, ok := r.orphan[s]; !ok {
			r.orphan[s] = n.loop.ticks
		}
	}
}

// flushHeld sends the appends sendOut held back for orphans (on each
// relayTick, before the orphans are looked at): each through the standby's
// relay of now, in one envelope per relay, or directly.
func (n *Node) flushHeld() {
	r := n.loop.relay
	if len(r.held) == 0 {
		return
	}
	held := r.held
	r.held = nil
	if n.loop.role == RoleLeader {
		r.flushing = true
		n.sendOut(held)
		r.flushing = false
	}
	clear(held)
	r.held = held[:0]
}

// dropRepeatedProbes leaves out of out (in place) each append with entries
// to a standby that repeats the previous one — the same Index: raft sends
// it again from the same Next — within fallbackTicks of it. etcd raft
// resends a probe (StateProbe: everything from Next, up to MaxSizePerMsg)
// on every heartbeat answer until the standby acknowledges it; a standby
// slow to acknowledge (a starved process syncing a large append, or one
// whose acknowledgement went astray) was sent the same megabyte every
// heartbeat. Raft takes a left-out resend as a lost message: it tries
// again on a later heartbeat answer, which goes after fallbackTicks.
// Voters are not concerned.
func (n *Node) dropRepeatedProbes(out []*raftpb.Message) []*raftpb.Message {
	r := n.loop.relay
	ticks := n.loop.ticks
	kept := out[:0]
	for _, m := range out {
		if m.GetType() == raftpb.MsgApp && len(m.Entries) > 0 && r.peers[m.GetTo()].learner {
			to := m.GetTo()
			prev, ok := r.probed[to]
			if ok && prev.index == m.GetIndex() && ticks-prev.tick < n.fallbackTicks() {
				continue
			}
			if r.probed == nil {
				r.probed = make(map[uint64]relayMark)
			}
			r.probed[to] = relayMark{index: m.GetIndex(), tick: ticks}
		}
		kept = append(kept, m)
	}
	clear(out[len(kept):])
	return kept
}
