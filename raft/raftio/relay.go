package raftio

import (
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/raft/v3/raftpb"
)

// RelayEnvelope carries raft messages a leader built through a relay
// member to the standbys it feeds (raft.Config.Relay), and from the relay
// to each standby. It holds each entry once, however many of its messages
// carry it: message i is Msgs[i] (its header: type, to, from, term, log
// term, index, commit, context) with the Counts[i] entries of indexes
// Msgs[i].Index+1 … Msgs[i].Index+Counts[i], taken from Entries.
//
// The messages are the leader's own, byte for byte once reassembled
// (Message): a relay hands them on, it never builds one.
//
// The same envelope, without entries, carries a relayed standby's answers
// (MsgAppResp, MsgHeartbeatResp) to its relay, and the answers a relay
// gathered to the leader (TakesAnswers): each is the standby's own.
type RelayEnvelope struct {
	// Entries are the entries the messages carry, each index once, sorted
	// by index.
	Entries []*raftpb.Entry
	// Msgs are the messages' headers: their Entries are empty.
	Msgs []*raftpb.Message
	// Counts are how many entries each message carries (len(Msgs)).
	Counts []uint32
	// TakesAnswers, in an envelope a relay hands on to a standby, says
	// that the relay takes the standby's answers to these messages and
	// hands them on to their sender: its own link to the sender's host
	// carries them (wire.AnswersVersion).
	TakesAnswers bool
}

// ErrBadRelayEnvelope is matched by the error of reassembling a message
// of a malformed envelope (a count without its entries, a header with
// entries of its own, Counts and Msgs of different lengths).
var ErrBadRelayEnvelope = errors.New("raftio: malformed relay envelope")

// Message reassembles message i: a new header (sharing the envelope's
// field values, which must not be modified) with its entries, which are
// the envelope's (shared, not copied).
func (e *RelayEnvelope) Message(i int) (*raftpb.Message, error) {
	if len(e.Counts) != len(e.Msgs) || i < 0 || i >= len(e.Msgs) {
		return nil, fmt.Errorf("%w: message %d of %d (%d counts)", ErrBadRelayEnvelope, i, len(e.Msgs), len(e.Counts))
	}
	h := e.Msgs[i]
	if h == nil || len(h.Entries) > 0 || h.Snapshot != nil || len(h.Responses) > 0 {
		return nil, fmt.Errorf("%w: message %d has a body of its own", ErrBadRelayEnvelope, i)
	}
	m := &raftpb.Message{
		Type: h.Type, To: h.To, From: h.From, Term: h.Term, LogTerm: h.LogTerm,
		Index: h.Index, Commit: h.Commit, Vote: h.Vote, Reject: h.Reject,
		RejectHint: h.RejectHint, Context: h.Context,
	}
	n := int(e.Counts[i])
	if n == 0 {
		return m, nil
	}
	first := h.GetIndex() + 1
	if first+uint64(n) < first {
		return nil, fmt.Errorf("%w: message %d: index overflow", ErrBadRelayEnvelope, i)
	}
	at := sort.Search(len(e.Entries), func(j int) bool { return e.Entries[j].GetIndex() >= first })
	if at+n > len(e.Entries) {
		return nil, fmt.Errorf("%w: message %d: entries %d-%d missing", ErrBadRelayEnvelope, i, first, first+uint64(n)-1)
	}
	ents := e.Entries[at : at+n : at+n]
	for j, ent := range ents {
		if ent.GetIndex() != first+uint64(j) {
			return nil, fmt.Errorf("%w: message %d: entry %d missing", ErrBadRelayEnvelope, i, first+uint64(j))
		}
	}
	m.Entries = ents
	return m, nil
}

// AnswerSuperseded reports whether answer a says nothing that one of later
// (answers sent after it) does not: an acceptance of an append up to an
// index that a later acceptance from the same member to the same member in
// the same term reaches (a leader takes the highest: its progress and its
// in-flight window move to it at once), or a plain heartbeat answer (no
// context: no read round's, no quiesce's) followed by another answer of the
// same kind between the same members in that term. A rejection, and an
// answer with a context, is never superseded.
func AnswerSuperseded(a *raftpb.Message, later []*raftpb.Message) bool {
	t := a.GetType()
	if a.GetReject() || (t != raftpb.MsgAppResp && t != raftpb.MsgHeartbeatResp) ||
		(t == raftpb.MsgHeartbeatResp && len(a.GetContext()) > 0) {
		return false
	}
	for _, b := range later {
		if b.GetType() != t || b.GetReject() || b.GetFrom() != a.GetFrom() || b.GetTo() != a.GetTo() || b.GetTerm() != a.GetTerm() {
			continue
		}
		if t == raftpb.MsgHeartbeatResp || b.GetIndex() >= a.GetIndex() {
			return true
		}
	}
	return false
}
