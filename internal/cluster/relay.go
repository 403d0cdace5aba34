package cluster

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/raft/raftio"
)

// delivery is one item of an endpoint's queue: a raft message, or a relay
// envelope and the member that sent it. Both share one queue, so that a
// member's messages and envelopes to a peer arrive in the order sent.
type delivery struct {
	m    *raftpb.Message
	env  *raftio.RelayEnvelope
	from uint64
}

func (ep *endpoint) deliver(d delivery) {
	if d.env == nil {
		ep.handler.Process(d.m)
		return
	}
	if rh, ok := ep.handler.(raft.RelayHandler); ok {
		rh.ProcessRelay(d.from, d.env)
	}
}

// Traffic is what one member sent (or received) through the network:
// messages (a relay envelope counts as one), their encoded bytes (an
// envelope's: its entries once and its headers; a snapshot's data is not
// counted), the entries they carried (an envelope's once each), the
// envelopes among the messages, and the raft messages carried (a message
// is one, an envelope as many as it holds).
type Traffic struct {
	Messages, Bytes, Entries, Envelopes, Carried uint64
	// OwnEnveloped counts the messages of its own (From the member) it
	// sent in relay envelopes: a leader's to its relays, a standby's
	// answers through its relay; not what a relay hands on.
	OwnEnveloped uint64
}

// authored is one kind of raft message from its author to its addressee.
type authored struct {
	from, to uint64
	typ      raftpb.MessageType
}

// Authored returns how many messages of type typ member from built for
// member to and sent, directly or in a relay envelope of its own (a
// message a relay hands on is counted once, when its author sent it),
// since the network started or since ResetTraffic.
func (nw *Network) Authored(from, to uint64, typ raftpb.MessageType) uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.authored[authored{from, to, typ}]
}

// AuthoredBytes returns the encoded bytes of the messages Authored
// counts: a message sent directly in full, one in a relay envelope its
// header only (the envelope's entries are shared by its messages: they
// are in SentBy's Bytes, not here).
func (nw *Network) AuthoredBytes(from, to uint64, typ raftpb.MessageType) uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.authoredBytes[authored{from, to, typ}]
}

// Direct returns how many messages member from sent member to directly,
// not in a relay envelope, since the network started or since
// ResetTraffic.
func (nw *Network) Direct(from, to uint64) uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.direct[link{from, to}]
}

// ReceivedBy returns what the network delivered to member id since it
// started, or since ResetTraffic (a duplicate counts twice).
func (nw *Network) ReceivedBy(id uint64) Traffic {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if t := nw.recvBy[id]; t != nil {
		return *t
	}
	return Traffic{}
}

// SendRelay sends env to member to as member from would (SendRelay of
// its transport): for tests that play a relay sending what it should not.
func (nw *Network) SendRelay(from, to uint64, env *raftio.RelayEnvelope) {
	nw.sendRelay(from, to, env)
}

// SentBy returns what member id sent since the network started, or since
// ResetTraffic.
func (nw *Network) SentBy(id uint64) Traffic {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if t := nw.sentBy[id]; t != nil {
		return *t
	}
	return Traffic{}
}

// LinkTraffic returns what member from sent member to (messages and
// envelopes, as SentBy counts them) since the network started or since
// ResetTraffic: a test can break a member's traffic down by recipient.
func (nw *Network) LinkTraffic(from, to uint64) Traffic {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if t := nw.linkSent[link{from, to}]; t != nil {
		return *t
	}
	return Traffic{}
}

// ResetTraffic sets every member's Traffic, and the Authored, Direct and
// LinkTraffic counts, to zero.
func (nw *Network) ResetTraffic() {
	nw.mu.Lock()
	clear(nw.sentBy)
	clear(nw.recvBy)
	clear(nw.authored)
	clear(nw.authoredBytes)
	clear(nw.direct)
	clear(nw.linkSent)
	nw.mu.Unlock()
}

func (nw *Network) countLocked(from uint64, entries, bytes, carried int) {
	t := nw.sentBy[from]
	if t == nil {
		t = new(Traffic)
		nw.sentBy[from] = t
	}
	t.Messages++
	t.Bytes += uint64(bytes)
	t.Entries += uint64(entries)
	t.Carried += uint64(carried)
}

// countLinkLocked counts a message (or an envelope) from from to to.
func (nw *Network) countLinkLocked(from, to uint64, entries, bytes, carried int, envelope bool) {
	t := nw.linkSent[link{from, to}]
	if t == nil {
		t = new(Traffic)
		nw.linkSent[link{from, to}] = t
	}
	t.Messages++
	t.Bytes += uint64(bytes)
	t.Entries += uint64(entries)
	t.Carried += uint64(carried)
	if envelope {
		t.Envelopes++
	}
}

// countReceivedLocked counts copies of a message (or an envelope) to to.
func (nw *Network) countReceivedLocked(to uint64, copies, entries, bytes, carried int, envelope bool) {
	t := nw.recvBy[to]
	if t == nil {
		t = new(Traffic)
		nw.recvBy[to] = t
	}
	for range copies {
		t.Messages++
		t.Bytes += uint64(bytes)
		t.Entries += uint64(entries)
		t.Carried += uint64(carried)
		if envelope {
			t.Envelopes++
		}
	}
}

// envelopeSize is the encoded size of env: each entry once, each header,
// each count.
func envelopeSize(env *raftio.RelayEnvelope) int {
	n := 0
	for _, e := range env.Entries {
		n += proto.Size(e) + 2
	}
	for _, m := range env.Msgs {
		n += proto.Size(m) + 2
	}
	for _, c := range env.Counts {
		n += protowire.SizeVarint(uint64(c))
	}
	return n
}

func cloneEnvelope(env *raftio.RelayEnvelope) *raftio.RelayEnvelope {
	c := &raftio.RelayEnvelope{
		Entries: make([]*raftpb.Entry, len(env.Entries)),
		Msgs:    make([]*raftpb.Message, len(env.Msgs)),
		Counts:  append([]uint32(nil), env.Counts...),

		TakesAnswers: env.TakesAnswers,
	}
	for i, e := range env.Entries {
		c.Entries[i] = proto.Clone(e).(*raftpb.Entry)
	}
	for i, m := range env.Msgs {
		c.Msgs[i] = proto.Clone(m).(*raftpb.Message)
	}
	return c
}

// CarriesRelayedAnswers implements raft.AnswerRelayTransport: true unless
// the network was told otherwise (SetRelayedAnswers), as a host link of a
// previous release would.
func (ep *endpoint) CarriesRelayedAnswers(uint64) bool {
	return !ep.net.noAnswers.Load()
}

// SetRelayedAnswers sets whether the members' transports carry relayed
// standbys' answers (raft.AnswerRelayTransport; on by default): off, the
// relays tell their standbys to answer the leader directly, as relays
// whose links to the leader speak a previous protocol version do.
func (nw *Network) SetRelayedAnswers(on bool) { nw.noAnswers.Store(!on) }

// SendRelay implements raft.RelayTransport: env goes to member to under
// the network's faults, as a message would (a filter sees each message
// inside, reassembled, and drops the ones it refuses).
func (ep *endpoint) SendRelay(to uint64, env *raftio.RelayEnvelope) {
	ep.net.sendRelay(ep.id, to, env)
}

func (nw *Network) sendRelay(from, to uint64, env *raftio.RelayEnvelope) {
	nw.mu.Lock()
	if (nw.paused[from] || nw.paused[to]) && !nw.closed {
		nw.held = append(nw.held, heldMsg{from: from, to: to, env: cloneEnvelope(env)})
		nw.mu.Unlock()
		return
	}
	nw.stats.Sent++
	nw.stats.Envelopes++
	size := envelopeSize(env)
	nw.countLocked(from, len(env.Entries), size, len(env.Msgs))
	nw.countLinkLocked(from, to, len(env.Entries), size, len(env.Msgs), true)
	nw.sentBy[from].Envelopes++
	for _, h := range env.Msgs {
		if h.GetFrom() == from {
			nw.authored[authored{from, h.GetTo(), h.GetType()}]++
			nw.authoredBytes[authored{from, h.GetTo(), h.GetType()}] += uint64(proto.Size(h) + 2)
			nw.sentBy[from].OwnEnveloped++
		}
	}
	dst := nw.endpoints[to]
	p := max(nw.dropRate[link{from, to}], nw.dropRate[link{}])
	drop := nw.closed || dst == nil || nw.blocked[link{from, to}] || (p > 0 && nw.rng.Float64() < p)
	if !drop && nw.filter != nil {
		env = nw.filterEnvelopeLocked(from, env)
		drop = env == nil
	}
	copies := 1
	if !drop && nw.dupRate > 0 && nw.rng.Float64() < nw.dupRate {
		copies = 2
		nw.stats.Duplicated++
	}
	var delays [2]time.Duration
	if nw.delayMax > 0 {
		for i := range copies {
			delays[i] = time.Duration(nw.rng.Int63n(int64(nw.delayMax)))
		}
	}
	if !drop && dst.refuses(from) {
		drop = true
	}
	if drop {
		nw.stats.Dropped++
	} else {
		nw.stats.Delivered += uint64(copies)
		nw.countReceivedLocked(to, copies, len(env.Entries), size, len(env.Msgs), true)
	}
	nw.mu.Unlock()
	if drop {
		return
	}
	for i := range copies {
		d := delivery{env: cloneEnvelope(env), from: from}
		if delays[i] == 0 {
			dst.enqueue(d)
			continue
		}
		time.AfterFunc(delays[i], func() { dst.enqueue(d) })
	}
}

// filterEnvelopeLocked returns env without the messages the filter drops
// (nil if it drops them all).
func (nw *Network) filterEnvelopeLocked(from uint64, env *raftio.RelayEnvelope) *raftio.RelayEnvelope {
	var kept *raftio.RelayEnvelope
	for i := range env.Msgs {
		m, err := env.Message(i)
		if err != nil || nw.filter(from, m) {
			if kept == nil {
				kept = &raftio.RelayEnvelope{Entries: env.Entries, Msgs: env.Msgs[:i:i], Counts: env.Counts[:i:i], TakesAnswers: env.TakesAnswers}
			}
			continue
		}
		if kept != nil {
			kept.Msgs = append(kept.Msgs, env.Msgs[i])
			kept.Counts = append(kept.Counts, env.Counts[i])
		}
	}
	switch {
	case kept == nil:
		return env
	case len(kept.Msgs) == 0:
		return nil
	}
	return kept
}
