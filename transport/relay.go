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
