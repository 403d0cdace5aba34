package raft

import (
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// AnswerRelayTransport is a RelayTransport that may carry relayed
// standbys' answers (MsgAppResp, MsgHeartbeatResp) in envelopes: a
// standby fed through a relay answers through it, and the relay hands the
// answers of its standbys on to the leader gathered, so that the leader
// reads a frame per relay rather than one per standby. A relay tells its
// standbys to do so (RelayEnvelope.TakesAnswers) only while
// CarriesRelayedAnswers(leader) holds. transport.Transport and the
// in-process test network implement it.
type AnswerRelayTransport interface {
	RelayTransport
	// CarriesRelayedAnswers reports whether an envelope of answers for
	// member to would reach it now (on host links: the link to its host
	// speaks the protocol version that carries them).
	CarriesRelayedAnswers(to uint64) bool
}

// relayAnswers is a node's side of the answers that travel through
// relays.
type relayAnswers struct {
	// route is, on a standby, where its answers to the leader go: through
	// the relay its latest leader message came through, if that relay
	// said it takes them; nil: directly.
	route atomic.Pointer[answerRoute]
	// box is the rest, made with the first answer this member hands on
	// as a relay or steps as a leader (most members of a host's many
	// groups never do: the Node stays in its size class).
	box atomic.Pointer[answerBox]
}

// answerBox is a relay's and a leader's side of the answers that travel
// through relays, and a relay's count of the messages it handed on.
type answerBox struct {
	// handedOn counts the standbys' answers this member handed on as a
	// relay; stepped and dropped the relayed answers this member stepped
	// as leader, and those it dropped (not from the relay of their
	// standby at the time).
	handedOn, stepped, dropped atomic.Uint64
	// relayedOn counts the leader's messages this member handed on to
	// standbys as a relay.
	relayedOn atomic.Uint64

	// mu guards outbox, the standbys' answers this member (a relay)
	// received and has not handed on yet, and flushing: a flush of it is
	// queued on the loop.
	mu       sync.Mutex
	outbox   []*raftpb.Message
	flushing bool
	flush    func() // flushAnswers, bound once
	// timer queues the flush relayAnswerWindow after the first answer of
	// an empty outbox (made with the first; Reset after).
	timer *time.Timer
}

// relayAnswerWindow is how long a relay gathers its standbys' answers
// before it hands them on: each standby answers each batch its transport
// gathered (LearnerBatchDelay, 10 ms by default) at its own moment, so a
// flush per answer cost the leader a frame per standby per batch; gathered
// for a few milliseconds, a relay's dozen standbys cost it about one. A
// learner's answer counts for no quorum: the delay slows no commit and no
// read, only the leader's view of the standby (its Match, its last
// contact), by at most this much.
const relayAnswerWindow = 5 * time.Millisecond

// answerBox returns the box, made if there is none yet.
func (a *relayAnswers) answerBox() *answerBox {
	if b := a.box.Load(); b != nil {
		return b
	}
	a.box.CompareAndSwap(nil, new(answerBox))
	return a.box.Load()
}

// counts returns the handed-on, stepped and dropped answers and the
// messages relayed on (Status).
func (a *relayAnswers) counts() (handedOn, stepped, dropped, relayedOn uint64) {
	if b := a.box.Load(); b != nil {
		return b.handedOn.Load(), b.stepped.Load(), b.dropped.Load(), b.relayedOn.Load()
	}
	return 0, 0, 0, 0
}

// answerEnvelope is a standby's envelope of answers with room for one (a
// standby usually sends one at a time): one allocation.
type answerEnvelope struct {
	RelayEnvelope
	one [1]*raftpb.Message
}

// zeros are the entry counts of envelopes of answers (shared: an
// envelope is only read).
var zeros [64]uint32

// zeroCounts returns n zero counts, shared when n is small.
func zeroCounts(n int) []uint32 {
	if n <= len(zeros) {
		return zeros[:n:n]
	}
	return make([]uint32, n)
}

// maxAnswerOutbox bounds the answers a relay holds for its flush (beyond,
// they are dropped: raft tolerates a lost answer).
const maxAnswerOutbox = 4096

// answerRoute: a standby's answers to leader go through relay.
type answerRoute struct{ relay, leader uint64 }

// isAnswer reports whether m is an answer a standby may send through its
// relay: MsgAppResp and MsgHeartbeatResp only (never a proposal, a read,
// a vote).
func isAnswer(m *raftpb.Message) bool {
	t := m.GetType()
	return m.Type != nil && (t == raftpb.MsgAppResp || t == raftpb.MsgHeartbeatResp)
}

// isAnswerCarrier reports whether m is the loop's carrier of answers that
// came through a relay (ProcessRelay): no type, the relay as From, the
// answers as Responses.
func isAnswerCarrier(m *raftpb.Message) bool { return m.Type == nil && len(m.Responses) > 0 }

// noteLeaderMessage records how a leader message to this member came: from
// the leader itself (relay 0, or relay == leader), or through relay,
// which takes this member's answers or not.
func (n *Node) noteLeaderMessage(relay, leader uint64, takes bool) {
	a := &n.answers
	cur := a.route.Load()
	if relay == 0 || relay == leader || !takes {
		if cur != nil {
			a.route.Store(nil)
		}
		return
	}
	if cur == nil || cur.relay != relay || cur.leader != leader {
		a.route.Store(&answerRoute{relay: relay, leader: leader})
	}
}

// noteDirect is noteLeaderMessage for messages that came directly: a
// leader's append or heartbeat among them sends this member's answers
// directly again.
func (n *Node) noteDirect(ms []*raftpb.Message) {
	if n.answers.route.Load() == nil {
		return
	}
	for _, m := range ms {
		if relayable(m) {
			n.answers.route.Store(nil)
			return
		}
	}
}

// answersThroughRelay (a learner's sendOut, and the append task's
// acknowledgements) takes out of out the answers to the leader whose
// latest message came through a relay that takes them, and sends them to
// that relay in one envelope; it returns the rest, which go directly. A
// member that is not a learner (promoted, as its loop applied it)
// answers directly.
func (n *Node) answersThroughRelay(out []*raftpb.Message) []*raftpb.Message {
	route := n.answers.route.Load()
	if route == nil || !n.answersLearner.Load() {
		return out
	}
	rt, ok := n.tr.(RelayTransport)
	if !ok {
		return out
	}
	var env *answerEnvelope
	rest := out[:0]
	for _, m := range out {
		if isAnswer(m) && m.GetTo() == route.leader && m.GetFrom() == n.cfg.ID {
			if env == nil {
				env = new(answerEnvelope)
				env.Msgs = env.one[:0]
			}
			env.Msgs = append(env.Msgs, m)
			continue
		}
		rest = append(rest, m)
	}
	clear(out[len(rest):])
	if env != nil {
		env.Counts = zeroCounts(len(env.Msgs))
		rt.SendRelay(route.relay, &env.RelayEnvelope)
	}
	return rest
}

// carriesAnswers reports whether this member, as a relay, takes its
// standbys' answers to leader's messages: its transport carries them to
// leader.
func (n *Node) carriesAnswers(leader uint64) bool {
	if !n.cfg.RelayAnswers {
		return false
	}
	art, ok := n.tr.(AnswerRelayTransport)
	return ok && art.CarriesRelayedAnswers(leader)
}

// handOnAnswers queues standbys' answers (each sent to this member, its
// relay, by the standby itself) for the members they are for: a flush on
// the loop (a quiet call: it wakes nothing) hands on all that came
// meanwhile, in one envelope per leader — the answers of a relay's dozen
// standbys to one append reach the leader together.
func (n *Node) handOnAnswers(answers []*raftpb.Message) {
	if !n.running.Load() || n.stopped() {
		return
	}
	a := n.answers.answerBox()
	a.mu.Lock()
	room := maxAnswerOutbox - len(a.outbox)
	answers = answers[:min(len(answers), max(room, 0))]
	a.outbox = append(a.outbox, answers...)
	flush := !a.flushing && len(a.outbox) > 0
	a.flushing = a.flushing || flush
	if flush && a.flush == nil {
		a.flush = n.flushAnswers
	}
	if flush {
		if a.timer == nil {
			a.timer = time.AfterFunc(relayAnswerWindow, func() { n.postQuiet(a.flush) })
		} else {
			a.timer.Reset(relayAnswerWindow)
		}
	}
	a.mu.Unlock()
}

// flushAnswers hands on the answers queued by handOnAnswers.
func (n *Node) flushAnswers() {
	a := n.answers.answerBox()
	a.mu.Lock()
	answers := a.outbox
	a.outbox, a.flushing = nil, false
	a.mu.Unlock()
	rt, ok := n.tr.(RelayTransport)
	if !ok || n.stopped() {
		return
	}
	for len(answers) > 0 {
		// Usually one leader: the answers are the envelope's as they are.
		to, k := answers[0].GetTo(), 0
		for _, m := range answers {
			if m.GetTo() == to {
				k++
			}
		}
		msgs, rest := answers, []*raftpb.Message(nil)
		if k < len(answers) {
			msgs = make([]*raftpb.Message, 0, k)
			for _, m := range answers {
				if m.GetTo() == to {
					msgs = append(msgs, m)
				} else {
					rest = append(rest, m)
				}
			}
		}
		n.answers.answerBox().handedOn.Add(uint64(len(msgs)))
		rt.SendRelay(to, &RelayEnvelope{Msgs: msgs, Counts: zeroCounts(len(msgs))})
		answers = rest
	}
}

// stepRelayedAnswers steps the answers relay c.From handed on (on the
// loop): each only if this member leads and, now, relays that standby
// through that relay — a relay never speaks for a member it does not
// relay, and never for a voter (relayFollowConfig). The others are
// dropped and counted. It reports whether all were quiet (stepPeer).
func (n *Node) stepRelayedAnswers(c *raftpb.Message, now time.Time) (quiet bool) {
	l := &n.loop
	r := l.relay // nil: this member relays no standby through anyone
	relay := c.GetFrom()
	quiet = true
	for _, m := range c.Responses {
		s := m.GetFrom()
		if !isAnswer(m) || m.GetTo() != n.cfg.ID || l.role != RoleLeader || r == nil || r.term != l.term || relay == 0 || r.via[s] != relay {
			n.answers.answerBox().dropped.Add(1)
			continue
		}
		n.answers.answerBox().stepped.Add(1)
		if !n.stepPeer(m, now) {
			quiet = false
		}
	}
	return quiet
}

// relayFollowConfig (on the leader's loop, as raft takes a configuration)
// feeds directly, at once, every relayed standby the configuration makes
// no learner (promoted, or removed): from then on its answers are stepped
// only when they come from it directly. A promoted standby's own loop
// answers directly once it applies the same change; what it sent through
// its relay meanwhile is dropped here, which raft tolerates.
func (n *Node) relayFollowConfig(cs *raftpb.ConfState) {
	r := n.loop.relay
	if r == nil || len(r.via) == 0 {
		return
	}
	learners := cs.GetLearners()
	var out []uint64
	for s := range r.via {
		learner := false
		for _, id := range learners {
			if id == s {
				learner = true
				break
			}
		}
		if !learner {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return
	}
	st := n.loop.rn.Status()
	last := n.loop.ms.lastIndex
	for _, s := range out {
		pr, ok := st.Progress[s]
		n.unrelay(s, ok && pr.State == tracker.StateReplicate && pr.Match < last)
	}
}
