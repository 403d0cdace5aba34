package transport

import (
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// RelayHandler is a Handler that takes relay envelopes (raft.Config.Relay):
// the raft node's PeerHandler implements it. from is the member that sent
// env — the attachment it came on, admitted as a message's is: a host
// speaks only for its own members — never a member the messages inside
// name. A transport whose Handler is no RelayHandler drops envelopes.
type RelayHandler interface {
	ProcessRelay(from uint64, env *raftio.RelayEnvelope)
}

// SendRelay queues env for member to, on the host link, in order with the
// member's messages (a TypeRelay frame: see internal/wire). Like Send, it
// never blocks: an envelope that does not fit in the peer's queue, or
// whose peer's link is down, is dropped and the member reported to
// Handler.ReportUnreachable. env is only read.
func (t *Transport) SendRelay(to uint64, env *raftio.RelayEnvelope) {
	p := t.peer(to)
	if p == nil || len(env.Msgs) == 0 {
		t.more().droppedUnknown.Add(1)
		return
	}
	p.enqueue(wire.RelayCarrier(t.cfg.ID, to, env))
}

// deliverRelayed is deliver for a pass that holds relay containers: the
// messages around each go as they would, each container to the
// RelayHandler as its envelope, in order.
func (t *Transport) deliverRelayed(msgs []*raftpb.Message) {
	start := 0
	for i, m := range msgs {
		if !wire.IsRelayCarrier(m) {
			continue
		}
		if start < i {
			t.deliver(msgs[start:i])
		}
		start = i + 1
		rh, ok := t.handler.(RelayHandler)
		env, err := wire.RelayEnvelopeOf(m)
		if !ok || err != nil {
			t.more().droppedRelay.Add(1)
			continue
		}
		t.hmu.RLock()
		if !t.hclosed {
			rh.ProcessRelay(m.GetFrom(), env)
		}
		t.hmu.RUnlock()
	}
	if start < len(msgs) {
		t.deliver(msgs[start:])
	}
}

// hasRelayCarrier reports whether msgs holds a relay container.
func hasRelayCarrier(msgs []*raftpb.Message) bool {
	for _, m := range msgs {
		if wire.IsRelayCarrier(m) {
			return true
		}
	}
	return false
}

// CarriesRelayedAnswers reports whether an envelope of relayed standbys'
// answers for member to would be written now: the link its messages take
// is up and speaks wire.AnswersVersion (a relay tells its standbys to
// answer through it only then: raft.AnswerRelayTransport).
func (t *Transport) CarriesRelayedAnswers(to uint64) bool {
	p := t.peer(to)
	if p == nil {
		return false
	}
	p.mu.Lock()
	f := p.flow
	p.mu.Unlock()
	if f == nil {
		return false
	}
	f.l.mu.Lock()
	c := f.l.conn
	f.l.mu.Unlock()
	return c != nil && c.reply.Version >= wire.AnswersVersion
}

// maxGatheredAnswers bounds the answers one gathered container holds.
const maxGatheredAnswers = 256

// gatherAnswers merges, in place, the containers of relayed answers in
// batch (one flow's: a relay's to the leader) into one, at the first's
// place, so that the leader reads one frame of them per write: an answer
// superseded by a later one of the same standby in the batch is left out
// (raftio.AnswerSuperseded).
func gatherAnswers(batch []*raftpb.Message) []*raftpb.Message {
	first, n := -1, 0
	for i, m := range batch {
		if wire.RelayAnswers(m) {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n < 2 {
		return batch
	}
	var answers []*raftpb.Message
	out := batch[:0]
	for i, m := range batch {
		if !wire.RelayAnswers(m) || len(answers)+len(m.Responses) > maxGatheredAnswers {
			out = append(out, m)
			continue
		}
		answers = append(answers, m.Responses...)
		if i == first {
			out = append(out, nil) // the gathered container's place
		}
	}
	clear(batch[len(out):])
	kept := answers[:0]
	for i, a := range answers {
		if !raftio.AnswerSuperseded(a, answers[i+1:]) {
			kept = append(kept, a)
		}
	}
	from, to := batch[first].GetFrom(), batch[first].GetTo()
	out[first] = wire.RelayCarrier(from, to, &raftio.RelayEnvelope{Msgs: kept, Counts: make([]uint32, len(kept))})
	return out
}
