package raft

import (
	"slices"
	"sort"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// How a relaying leader sends a Ready's messages: the envelopes, one per
// relay, and the messages to relayed standbys it leaves out because others
// carry what they would.

// sendOut sends a Ready's network messages: directly, except the appends
// and heartbeats to relayed standbys, which go to their relay in one
// envelope per relay with the relay's own appends and heartbeats, each
// entry once.
func (n *Node) sendOut(out []*raftpb.Message) {
	l := &n.loop
	r := l.relay
	if l.role == RoleLearner && n.answers.route.Load() != nil {
		if out = n.answersThroughRelay(out); len(out) == 0 {
			return
		}
	}
	if r != nil && l.role == RoleLeader && !r.flushing {
		if out = n.dropRepeatedProbes(out); len(out) == 0 {
			return
		}
	}
	rt, ok := n.tr.(RelayTransport)
	if !ok || r == nil || len(r.via) == 0 || l.role != RoleLeader {
		n.tr.Send(out)
		return
	}
	bundles := r.bundles[:0]
	for _, m := range out {
		if via := r.via[m.GetTo()]; via != 0 && relayable(m) && !hasBundle(bundles, via) {
			k := r.load[via] + 1 // its standbys' messages and its own
			bundles = append(bundles, relayBundle{relay: via, env: &RelayEnvelope{
				Msgs: make([]*raftpb.Message, 0, k), Counts: make([]uint32, 0, k)}})
		}
	}
	if len(bundles) == 0 {
		r.bundles = bundles
		n.tr.Send(out)
		return
	}
	rest := r.rest[:0]
	r.replicatingRead = false // commitOnlyAppend reads it when first needed
	for _, m := range out {
		if relayable(m) {
			to := m.GetTo()
			via := r.via[to]
			if via != 0 && (n.redundantHeartbeat(m) || n.commitOnlyAppend(m)) {
				continue
			}
			if via != 0 && !r.flushing && len(m.Entries) > 0 && r.orphan[to] != 0 {
				r.held = append(r.held, m) // flushHeld, next tick
				continue
			}
			if via == 0 {
				via = to // a relay's own message rides with its standbys'
			}
			if i := bundleOf(bundles, via); i >= 0 && bundles[i].add(m) {
				if via != to {
					r.noteSent(m, l.ticks)
				}
				continue
			}
		}
		rest = append(rest, m)
	}
	if len(rest) > 0 {
		n.tr.Send(rest)
	}
	for i := range bundles {
		if len(bundles[i].env.Msgs) > 0 {
			rt.SendRelay(bundles[i].relay, bundles[i].env)
		}
		bundles[i] = relayBundle{}
	}
	clear(rest)
	r.rest, r.bundles = rest[:0], bundles[:0]
}

// noteSent records append or heartbeat m to a relayed standby, put in
// an envelope at tick (redundantHeartbeat, commitOnlyAppend).
func (r *relayState) noteSent(m *raftpb.Message, tick uint64) {
	mark := relayMark{index: m.GetCommit(), tick: tick}
	switch m.GetType() {
	case raftpb.MsgApp:
		if r.sentApp == nil {
			r.sentApp = make(map[uint64]relayMark)
		}
		r.sentApp[m.GetTo()] = mark
	case raftpb.MsgHeartbeat:
		if r.sentBeat == nil {
			r.sentBeat = make(map[uint64]relayMark)
		}
		r.sentBeat[m.GetTo()] = mark
	}
}

// idleBeatTicks is how often an idle relayed standby that holds the
// commit index is sent a heartbeat: a third of an election timeout (at
// least the heartbeat interval), so that its answers keep the leader's
// view of it — silent after an election timeout (relayTick's fallback,
// readiness, quiescence) — fresh with room to spare.
func (n *Node) idleBeatTicks() uint64 {
	return max(uint64(n.cfg.HeartbeatTicks), uint64(n.cfg.ElectionTicks)/3)
}

// redundantHeartbeat reports whether heartbeat m to a relayed standby may
// be left out:
//
//   - appends flow: the standby was sent an append within the heartbeat
//     interval. Its commit index rides on its next append (each carries the
//     commit index of its time), and its answers to them keep the leader's
//     view of it (Match, last contact) fresh. Once no append went within an
//     interval — the writes stopped, or raft paused the standby's appends
//     (inflights full: a heartbeat's answer is what frees them) — the
//     heartbeats go again, and the first one carries the commit index the
//     appends did not: the last write reaches a standby at most two
//     intervals after it committed;
//   - idle: no append within the interval, but the standby holds the
//     commit index (an append or heartbeat carried it), replicates, is
//     caught up (as of the last relayTick), and was sent a heartbeat or an
//     append within idleBeatTicks. Every idle tick cost the leader a
//     heartbeat header per relayed standby (16x the bytes of no standby
//     with 24), where a heartbeat every third of an election timeout tells
//     the standby nothing less.
//
// raft tolerates a lost heartbeat: a learner never campaigns, and its
// answer to a read round's heartbeat counts for no quorum (etcd raft's
// readOnly acks are counted over the voters). The quiesce marker is never
// left out.
func (n *Node) redundantHeartbeat(m *raftpb.Message) bool {
	l := &n.loop
	r := l.relay
	if m.GetType() != raftpb.MsgHeartbeat || quiesceKindOf(m.GetContext()) != 0 {
		return false
	}
	to := m.GetTo()
	app, sentApp := r.sentApp[to]
	if sentApp && l.ticks-app.tick <= uint64(n.cfg.HeartbeatTicks) {
		return true
	}
	beat, sentBeat := r.sentBeat[to]
	if !sentApp && !sentBeat {
		return false
	}
	held := max(app.index, beat.index)
	last := max(app.tick, beat.tick)
	p, ok := r.peers[to]
	caughtUp := ok && p.state == tracker.StateReplicate && p.match >= l.ms.lastIndex
	return caughtUp && held >= m.GetCommit() && l.ticks-last < n.idleBeatTicks()
}

// commitOnlyAppend reports whether append m to a relayed standby may be
// left out: it carries no entry, only a commit index, to a standby raft
// replicates to (StateReplicate: an empty append there is raft's commit
// bump after the commit index moved, or its check after a heartbeat's
// answer; a probe, which raft sends in StateProbe, always goes) that was
// sent an append within the heartbeat interval and did not forward a
// proposal or a read lately (relayNoteAsker). At a slow steady rate raft
// sends one such append per standby per commit, so a write cost the
// leader two headers per relayed standby — the append with its entry and
// this one — and the second grew with the standby count, not with the
// bytes written. The commit index reaches the standby anyway: on its next
// append (which carries the commit index of its time) or on its next
// heartbeat, which redundantHeartbeat does not leave out, since no append
// carried that commit index. Leaving a message out is safe in raft (a
// lost message); the standby applies a write at most a heartbeat interval
// later at a slow rate, and as before under load. Once no append went to
// the standby within an interval — idle, or an append lost — the empty
// append goes: after a heartbeat's answer it is how raft finds that the
// standby lacks the last entries (it rejects it, and raft resends). Which
// standbys raft replicates to is read from its progress once per sendOut,
// when first needed.
func (n *Node) commitOnlyAppend(m *raftpb.Message) bool {
	if m.GetType() != raftpb.MsgApp || len(m.Entries) > 0 {
		return false
	}
	r := n.loop.relay
	if _, asked := r.asked[m.GetTo()]; asked {
		return false
	}
	if sent, ok := r.sentApp[m.GetTo()]; !ok || n.loop.ticks-sent.tick > uint64(n.cfg.HeartbeatTicks) {
		return false
	}
	if !r.replicatingRead {
		r.replicatingRead = true
		r.replicating = r.replicating[:0]
		n.loop.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			if pr.IsLearner && pr.State == tracker.StateReplicate {
				r.replicating = append(r.replicating, id)
			}
		})
		slices.Sort(r.replicating)
	}
	_, ok := slices.BinarySearch(r.replicating, m.GetTo())
	return ok
}

// relayNoteAsker notes, on the leader, a standby that forwarded a proposal
// or a read (m, a peer message about to be stepped): until it is quiet for
// an election timeout it is sent the appends that carry only a commit
// index (commitOnlyAppend), so that its Propose, which returns once it
// applied the write, and its reads, which wait until it applied the read
// index, do not wait for a heartbeat. A relayed standby that only follows
// the log is not sent them.
func (n *Node) relayNoteAsker(m *raftpb.Message) {
	r := n.loop.relay
	if t := m.GetType(); r == nil || len(r.via) == 0 || (t != raftpb.MsgProp && t != raftpb.MsgReadIndex) {
		return
	}
	if _, relayed := r.via[m.GetFrom()]; !relayed {
		return
	}
	if r.asked == nil {
		r.asked = make(map[uint64]uint64)
	}
	r.asked[m.GetFrom()] = n.loop.ticks
}

// relayBundle is the envelope being built for one relay (a new one per
// Ready: the transport keeps it until it is written).
type relayBundle struct {
	relay uint64
	env   *RelayEnvelope
}

func hasBundle(bs []relayBundle, relay uint64) bool { return bundleOf(bs, relay) >= 0 }

func bundleOf(bs []relayBundle, relay uint64) int {
	for i := range bs {
		if bs[i].relay == relay {
			return i
		}
	}
	return -1
}

// add puts m in the envelope, its entries once, and m as their header
// (its Entries cleared), and reports whether it did: an append whose
// entries are not contiguous from its Index+1, or one of whose entries
// the envelope holds in another term (neither happens: raft builds a
// Ready's appends from one log), goes directly.
func (b *relayBundle) add(m *raftpb.Message) bool {
	ents := m.Entries
	e := b.env
	for j, ent := range ents {
		if ent.GetIndex() != m.GetIndex()+1+uint64(j) {
			return false
		}
		at, found := entryAt(e.Entries, ent.GetIndex())
		if found && e.Entries[at].GetTerm() != ent.GetTerm() {
			return false
		}
	}
	for _, ent := range ents {
		if k := len(e.Entries); k == 0 || e.Entries[k-1].GetIndex() < ent.GetIndex() {
			e.Entries = append(e.Entries, ent)
			continue
		}
		if at, found := entryAt(e.Entries, ent.GetIndex()); !found {
			e.Entries = slices.Insert(e.Entries, at, ent)
		}
	}
	// m itself becomes the header: raft does not look at a message of a
	// Ready again once handed over, and nothing else holds m.
	m.Entries = nil
	e.Msgs = append(e.Msgs, m)
	e.Counts = append(e.Counts, uint32(len(ents)))
	return true
}

// entryAt finds index in ents (sorted): its position, or where it goes.
func entryAt(ents []*raftpb.Entry, index uint64) (int, bool) {
	at := sort.Search(len(ents), func(i int) bool { return ents[i].GetIndex() >= index })
	return at, at < len(ents) && ents[at].GetIndex() == index
}
