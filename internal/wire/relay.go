package wire

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// A TypeRelay frame (group in the header) carries a relay envelope
// (raftio.RelayEnvelope) on a host link: a leader's messages for the
// standbys a relay feeds, or one of them from the relay to its standby.
// Its payload is a raftpb.Message used as a container, never stepped:
//
//	from, to   the member that sends the envelope and the one it is for:
//	           the attachment it belongs to, as a TypeMessage's
//	entries    the envelope's entries, each index once, ascending
//	responses  the messages' headers (no entries of their own)
//	context    the messages' entry counts, one varint each
//	rejectHint flags: 1 — the relay takes its standby's answers
//	           (RelayEnvelope.TakesAnswers; ignored before AnswersVersion);
//	           2 — the headers are delta-coded (only since DeltaVersion)
//	type       absent: a container is never a raft message
//
// Delta-coded headers: each count in context is twice the entry count,
// plus 1 for a header written as a delta of the one before it, whose
// absent fields are that one's (a header cannot be a delta of none; a
// field set before and absent now is not expressible: such a header is
// written in full). A leader's appends to the standbys of one relay differ
// only in To, and their answers only in From: 3-5 bytes a standby instead
// of ~20. ParseRelay expands them; what it returns is a plain container.
//
// Since AnswersVersion the container also carries a relayed standby's
// answers (MsgAppResp, MsgHeartbeatResp headers, no entries): from the
// standby to its relay, and from the relay to the leader, gathered
// (RelayAnswers reports such a container).
//
// In memory, the transport queues the container like a message; a message
// without a type and with responses is a container (IsRelayCarrier), which
// raft never sends to a peer.

// RelayCarrier returns the container of env from member from to member
// to. It shares env's entries and headers.
func RelayCarrier(from, to uint64, env *raftio.RelayEnvelope) *raftpb.Message {
	var counts []byte
	for _, c := range env.Counts {
		counts = protowire.AppendVarint(counts, uint64(c))
	}
	m := &raftpb.Message{From: &from, To: &to, Entries: env.Entries, Responses: env.Msgs, Context: counts}
	if env.TakesAnswers {
		flags := relayTakesAnswers
		m.RejectHint = &flags
	}
	return m
}

// relayTakesAnswers is the container's flag for RelayEnvelope.TakesAnswers.
const relayTakesAnswers uint64 = 1

// IsAnswer reports whether m is an answer a relayed standby may send
// through its relay: a MsgAppResp or a MsgHeartbeatResp.
func IsAnswer(m *raftpb.Message) bool {
	t := m.GetType()
	return m.Type != nil && (t == raftpb.MsgAppResp || t == raftpb.MsgHeartbeatResp)
}

// RelayAnswers reports whether m is a relay container of answers only
// (IsAnswer), which only a connection of AnswersVersion carries.
func RelayAnswers(m *raftpb.Message) bool {
	if !IsRelayCarrier(m) || len(m.Entries) > 0 {
		return false
	}
	for _, h := range m.Responses {
		if !IsAnswer(h) {
			return false
		}
	}
	return true
}

// IsRelayCarrier reports whether m is a relay envelope's container.
func IsRelayCarrier(m *raftpb.Message) bool { return m.Type == nil && len(m.Responses) > 0 }

// relayDelta is the container's flag for delta-coded headers.
const relayDelta uint64 = 2

// AppendRelayFrame appends one TypeRelay frame carrying the container m,
// its headers delta-coded if delta (a connection of DeltaVersion).
func AppendRelayFrame(dst []byte, group uint64, m *raftpb.Message, delta bool) ([]byte, error) {
	dst, start := beginFrame(dst)
	var err error
	if delta {
		dst, err = appendDeltaContainer(dst, m)
	} else {
		dst, err = proto.MarshalOptions{}.MarshalAppend(dst, m)
	}
	if err != nil {
		return dst[:start], err
	}
	return sealFrame(dst, start, TypeRelay, group), nil
}

// ParseRelay decodes a TypeRelay payload into its container, checking it
// (and expanding delta-coded headers). The container's entries refer to p
// (UnmarshalContainer): p must not be reused while they live.
func ParseRelay(p []byte) (*raftpb.Message, error) { return parseRelay(p, UnmarshalContainer) }

// parseRelay is ParseRelay with the container decoded by unmarshal (the
// tests hold UnmarshalContainer to UnmarshalProto through it).
func parseRelay(p []byte, unmarshal func([]byte) (*raftpb.Message, error)) (*raftpb.Message, error) {
	m, err := unmarshal(p)
	if err != nil {
		return nil, err
	}
	if m.GetRejectHint()&relayDelta != 0 {
		if err := expandDeltas(m); err != nil {
			return nil, err
		}
	}
	if _, err := RelayEnvelopeOf(m); err != nil {
		return nil, err
	}
	return m, nil
}

// RelayEnvelopeOf returns the envelope a container carries (sharing its
// entries and headers). Errors match ErrMalformed: a typed message, no
// headers, counts that do not match the headers, entries out of order, a
// header with a body of its own.
func RelayEnvelopeOf(m *raftpb.Message) (*raftio.RelayEnvelope, error) {
	if m.Type != nil || len(m.Responses) == 0 || m.Snapshot != nil {
		return nil, fmt.Errorf("%w: not a relay container", ErrMalformed)
	}
	env := &raftio.RelayEnvelope{Entries: m.Entries, Msgs: m.Responses, Counts: make([]uint32, 0, len(m.Responses)),
		TakesAnswers: m.GetRejectHint()&relayTakesAnswers != 0}
	for b := m.Context; len(b) > 0; {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 || v > 1<<31 {
			return nil, fmt.Errorf("%w: relay entry counts", ErrMalformed)
		}
		env.Counts = append(env.Counts, uint32(v))
		b = b[n:]
	}
	if len(env.Counts) != len(env.Msgs) {
		return nil, fmt.Errorf("%w: %d relay entry counts for %d messages", ErrMalformed, len(env.Counts), len(env.Msgs))
	}
	for i, e := range env.Entries {
		if i > 0 && e.GetIndex() <= env.Entries[i-1].GetIndex() {
			return nil, fmt.Errorf("%w: relay entries out of order", ErrMalformed)
		}
	}
	for _, h := range env.Msgs {
		if h == nil || len(h.Entries) > 0 || h.Snapshot != nil || len(h.Responses) > 0 {
			return nil, fmt.Errorf("%w: a relayed header with a body", ErrMalformed)
		}
	}
	return env, nil
}
