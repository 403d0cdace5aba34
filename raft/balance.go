package raft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3/tracker"

	"github.com/understudy-raft/understudy/confchange"
)

// What a host's leader balancing reads of a group and asks of it (see
// "Leaders spread over hosts" in docs/architecture.md): the applied voters,
// read without the loop, and a transfer started only when it can complete
// at once.

// ErrTransferNotNow is TryTransferLeadership's refusal: this member does
// not lead, the target is not caught up or not heard from, a membership
// change is in motion, or a transfer is under way. The text says which.
// Nothing was started; the caller may try again later.
var ErrTransferNotNow = errors.New("raft: leadership cannot move now")

// AppliedVoters returns the voters of the configuration this member
// applied (the incoming ones while it is joint), with their records, in ID
// order, and whether the configuration is joint. It reads the local table:
// no round trip, and a quiesced group stays quiesced.
func (n *Node) AppliedVoters() (voters []Member, joint bool) {
	return n.AppendAppliedVoters(nil)
}

// AppendAppliedVoters is AppliedVoters appending the voters to dst: a
// caller reading many groups' voters (a host's leader balancing) reuses
// one buffer.
func (n *Node) AppendAppliedVoters(dst []Member) (_ []Member, joint bool) {
	t := n.members.Load()
	if t == nil {
		return dst, false
	}
	start := len(dst)
	for _, id := range t.confState.GetVoters() {
		if slices.ContainsFunc(dst[start:], func(m Member) bool { return m.ID == id }) {
			continue
		}
		m, ok := t.record(id)
		if !ok {
			m = Member{ID: id}
		}
		dst = append(dst, m)
	}
	slices.SortFunc(dst[start:], func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return dst, len(t.confState.GetVotersOutgoing()) > 0
}

// TryTransferLeadership starts handing leadership to member to, and does
// not wait for it, if it can complete at once: this member leads, to is a
// voter that can lead (confchange.Config.CanLead), to has every entry of
// the leader's log and is replicating, to was heard from within an
// election timeout (in a quiesced group, through its host) and its host is
// not known dead, no
// membership change is in motion (a joint configuration, a change proposed
// or not yet applied) and no transfer is under way. Raft then has to
// send to one message (MsgTimeoutNow) and to wins its election at once.
// It wakes a quiesced group. Use TransferLeadership to wait for the
// outcome.
//
// Errors: ErrTransferNotNow (nothing started); ErrLearnerCannotLead;
// ErrUnknownMember; ctx's error; ErrNotStarted; ErrStopped.
func (n *Node) TryTransferLeadership(ctx context.Context, to uint64) error {
	var err error
	if derr := n.do(ctx, func() { err = n.tryTransferOnLoop(to) }); derr != nil {
		return derr // f may still run: err is not read
	}
	return err
}

func (n *Node) tryTransferOnLoop(to uint64) error {
	l := &n.loop
	if l.role != RoleLeader {
		return fmt.Errorf("%w: member %d does not lead", ErrTransferNotNow, n.cfg.ID)
	}
	if to == n.cfg.ID {
		return nil
	}
	st := l.rn.Status()
	cfg := confchange.ConfigFromTracker(st.Config)
	if err := cfg.CanLead(to); err != nil {
		return err
	}
	ms := &l.ms
	switch {
	case cfg.Joint() || len(cfg.LearnersNext) > 0 || ms.checking != 0 || ms.confGate > n.applied.get() || st.Applied < ms.confGate:
		return fmt.Errorf("%w: a membership change is in motion", ErrTransferNotNow)
	case st.LeadTransferee != 0:
		return fmt.Errorf("%w: a transfer to member %d is under way", ErrTransferNotNow, st.LeadTransferee)
	}
	pr, ok := st.Progress[to]
	if !ok || pr.State != tracker.StateReplicate || pr.Match < ms.lastIndex {
		return fmt.Errorf("%w: member %d is not caught up", ErrTransferNotNow, to)
	}
	// A quiesced group (woken by this call only at the end of the loop's
	// intake) reads its members' contact through their hosts.
	if heard, _ := n.hostHeard(to, l.lastContact.get(to)); !n.recentlyActive(heard, time.Now()) {
		return fmt.Errorf("%w: member %d was not heard from within an election timeout", ErrTransferNotNow, to)
	}
	if n.hostKnownDead(to) {
		return fmt.Errorf("%w: member %d is on a host not live", ErrTransferNotNow, to)
	}
	n.log.Info("moving leadership", slog.Uint64("to", to), slog.Uint64("match", pr.Match))
	l.rn.TransferLeader(to)
	return nil
}
