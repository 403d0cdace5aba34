package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/understudy-raft/understudy/confchange"
)

// Membership is the cluster's membership as the leader sees it.
type Membership struct {
	// Leader is the leader's ID.
	Leader uint64
	// Config is the applied configuration (joint while a multi-member
	// change is in progress).
	Config confchange.Config
	// Pending is true while a configuration change is proposed but not yet
	// applied on the leader.
	Pending bool
	// Index is the log index the membership is current at.
	Index uint64
	// LastIndex is the leader's last log index (lags are measured from it).
	LastIndex uint64
	// Members is every member of the configuration, by ID.
	Members []MemberStatus
	// Waiting says what the default policy waits for before it can act
	// (e.g. "target 5 voters, 3 now: waiting for 2 ready standbys to promote
	// at once (1 ready)"); "" when nothing, with automatic changes off, or
	// with a host's own policy.
	Waiting string `json:",omitempty"`
}

// Joint reports whether the configuration is joint.
func (m Membership) Joint() bool { return m.Config.Joint() }

// view rebuilds, as of now, the confchange.View the leader planned from
// when it answered m: what the policy needs to preview its next step
// outside the leader (CheckSettings). Readiness is carried by each member's
// stabilization time; removed IDs are not part of a Membership.
func (m Membership) view(now time.Time) confchange.View {
	v := confchange.View{
		Config: m.Config, Leader: m.Leader, LastIndex: m.LastIndex, Now: now, PendingChange: m.Pending,
		Members: map[uint64]confchange.Member{}, Progress: map[uint64]confchange.Progress{},
		ReadySince: map[uint64]time.Time{}, Removed: map[uint64]bool{},
	}
	for _, ms := range m.Members {
		v.Members[ms.ID] = ms.Member
		if ms.Progress != nil {
			v.Progress[ms.ID] = *ms.Progress
		}
		if c := ms.Readiness.Code; c == confchange.ReasonReady || c == confchange.ReasonStabilizing {
			v.ReadySince[ms.ID] = now.Add(-ms.Readiness.For)
		}
	}
	return v
}

// MemberStatus is one member's record, role and catch-up as the leader sees
// them.
type MemberStatus struct {
	Member
	// Role is the member's role in the incoming configuration.
	Role confchange.Role
	// Outgoing is true for a voter of the outgoing half of a joint
	// configuration.
	Outgoing bool
	// Progress is the leader's replication progress to the member; nil for
	// the leader itself.
	Progress *confchange.Progress
	// Lag is how many entries the member is behind the leader's last index.
	Lag uint64
	// Readiness says whether the member could be promoted now and, if not,
	// why (for voters it is the same measure).
	Readiness confchange.Reason
	// CatchUp is how the member is catching up (rate, estimate, snapshot in
	// flight); nil for the leader itself.
	CatchUp *CatchUp
	// Refused is why the member refuses the leader's connections, as its
	// handshake said (e.g. "cluster_mismatch": it was started for another
	// cluster; "unknown_sender": it does not know the leader yet), while
	// it cannot be reached; "" otherwise.
	Refused string `json:",omitempty"`
	// RelayedBy is the member that hands the leader's appends and
	// heartbeats on to this standby (Config.Relay; Status.Progress has
	// the same), 0 when the leader feeds it directly. It is the leader's
	// choice, so a follower's Membership (asked of the leader) has it too.
	RelayedBy uint64 `json:",omitempty"`
}

// Membership returns the membership as the leader sees it, with every
// member's catch-up and readiness. On a follower or learner it is asked of
// the leader over the member-to-member channel; while no leader is known (or
// the one known cannot be reached) it waits for one, within ctx.
//
// Errors: ctx's error (with ErrNoLeader attached when no leader is known,
// and the last attempt's failure); ErrStopped; ErrNotStarted.
func (n *Node) Membership(ctx context.Context) (Membership, error) {
	for {
		var (
			m   Membership
			err error
		)
		if derr := n.doQuiet(ctx, func() { m, err = n.membershipOnLoop() }); derr != nil {
			return Membership{}, derr // f may still run: m and err are not read
		}
		var nl errNotLeader
		if !errors.As(err, &nl) {
			return m, err
		}
		if nl.leader != 0 && nl.leader != n.cfg.ID {
			m, err = n.forwardMembership(ctx, nl.leader)
			if !errors.As(err, &nl) && !retryForward(err, true) {
				return m, err
			}
			// The member asked does not lead (any more) or cannot be
			// reached (the leader was removed or stopped): look again a
			// tick later, within ctx.
			if perr := n.pauseTick(ctx); perr != nil {
				return m, lastAttempt(perr, err)
			}
		}
		if err := n.waitLeaderChange(ctx, nl.leader); err != nil {
			return m, err
		}
	}
}

// membershipOnLoop builds the Membership on the leader's loop.
func (n *Node) membershipOnLoop() (Membership, error) {
	l := &n.loop
	if l.role != RoleLeader {
		return Membership{}, errNotLeader{leader: l.leader}
	}
	v := n.view()
	t := n.members.Load()
	m := Membership{
		Leader:    n.cfg.ID,
		Config:    v.Config,
		Pending:   v.PendingChange,
		Index:     t.index,
		LastIndex: v.LastIndex,
	}
	for _, id := range v.Config.IDs() { // sorted
		rec, ok := v.Members[id]
		if !ok {
			rec = Member{ID: id}
		}
		ms := MemberStatus{
			Member:    rec,
			Role:      v.Config.Role(id),
			Outgoing:  slices.Contains(v.Config.VotersOutgoing, id),
			Readiness: confchange.Readiness(v, n.membershipSettings(), id),
			RelayedBy: n.relayedBy(id),
		}
		if pr, ok := v.Progress[id]; ok {
			ms.Progress = &pr
			ms.Lag = pr.Lag(v.LastIndex)
			cu := n.catchUp(id, ms.Lag, n.loop.catchUp[id])
			ms.CatchUp = &cu
			if r, ok := n.tr.(interface{ Refusal(uint64) string }); ok && !pr.RecentActive {
				ms.Refused = r.Refusal(id)
			}
		}
		m.Members = append(m.Members, ms)
	}
	if !n.ownPolicy && n.autoPromote() && n.settings.Load() != nil {
		v.ReadySince = n.loop.ms.readySince()
		m.Waiting = confchange.DefaultPolicy{Settings: n.membershipSettings()}.Waiting(v)
	}
	return m, nil
}

// ChangeMembership checks req against the membership rules (confchange)
// on the leader, proposes the planned conf change — through a joint
// configuration when more than one voter changes — and waits until it is
// applied on this member (a joint change: until the joint configuration is
// left). It works on any member: followers and learners forward the request
// to the leader. req.ChangeID is set by the leader.
//
// Errors: every refusal of the rules as a *confchange.Refusal (or
// confchange.Refusals), before anything is proposed (errors.Is with
// confchange.ErrLearnerNotReady, ErrQuorumAtRisk, …; ErrChangeInProgress
// only once another change in flight was not applied within an election
// timeout: the call waits that long for it; ErrPolicyWouldUndo for a
// promotion or demotion that the policy, acting on its own, would reverse
// at its next step — confchange.PolicyWouldUndo asks the policy in use,
// the default one or the host's own; with automatic changes off nothing is
// asked and manual changes stick); ErrChangeDropped when
// raft did not take the change (nothing changed); ErrLeaderChanged when the
// leader changed before the change was applied (the outcome is unknown: read
// Membership) — but not once the leader that answers applied the entry
// entering a joint configuration: the outcome is then settled, whoever
// leaves it (the next leader does), so a leader change does not end the
// wait, and the call answers nil once the joint configuration is left.
// That is how a Replace or Swap of the leader itself is answered: the
// leader hands leadership to an incoming voter rather than leave the joint
// configuration itself. ErrTimeout (no outcome within RequestTimeout;
// likewise unknown); ctx.Err() — joined with ErrNotProposed when
// the request never reached raft (safe to retry); ErrStopped. While no leader
// is known, or the known one cannot be reached (it stopped, or removed
// itself), the call waits for the next one within ctx.
func (n *Node) ChangeMembership(ctx context.Context, req confchange.Request) (ChangeResult, error) {
	return n.change(ctx, req, false)
}

// CheckMembership is ChangeMembership's dry run: it checks and plans req on
// the leader and returns every refusal, proposing nothing.
//
// Errors: confchange.Refusals with every reason req would be refused (each
// matches its sentinel with errors.Is; ChangeResult.Description still holds
// the plan when one could be made); and, like Membership, ctx's error
// (joined with ErrNoLeader while no leader is known) and ErrStopped.
func (n *Node) CheckMembership(ctx context.Context, req confchange.Request) (ChangeResult, error) {
	return n.change(ctx, req, true)
}

func (n *Node) change(ctx context.Context, req confchange.Request, dryRun bool) (ChangeResult, error) {
	if req.Op == confchange.OpTransferLeader && !dryRun {
		if len(req.IDs) != 1 {
			return ChangeResult{}, &confchange.Refusal{Err: confchange.ErrInvalidRequest, Detail: "transfer-leader takes one ID"}
		}
		return ChangeResult{}, n.TransferLeadership(ctx, req.IDs[0])
	}
	if err := n.checkIncarnation(req, n.cfg.ID); err != nil {
		return ChangeResult{}, err
	}
	var leaderless time.Time // since when no leader is known
	for {
		res, err := n.changeLocally(ctx, req, dryRun)
		var nl errNotLeader
		if !errors.As(err, &nl) {
			return res, err
		}
		if nl.leader == 0 {
			if leaderless.IsZero() {
				leaderless = time.Now()
			} else if time.Since(leaderless) >= 2*n.electionTimeout() {
				// No leader has reached this member for two election
				// timeouts: perhaps none can — it moved, and the cluster
				// still dials the address it had; the update it asks for is
				// what fixes that. Ask the leader through the members it
				// knows, whose answers name their leader.
				if res, err, ok := n.changeThroughPeers(ctx, req, dryRun); ok {
					if err != nil || dryRun {
						return res, err
					}
					return res, n.waitChangeApplied(ctx, res.Index)
				}
				leaderless = time.Now()
			}
		} else {
			leaderless = time.Time{}
		}
		if nl.leader != 0 && nl.leader != n.cfg.ID {
			res, err = n.forwardChange(ctx, nl.leader, req, dryRun)
			if !errors.As(err, &nl) && !retryForward(err, dryRun) {
				if err != nil || dryRun {
					return res, err
				}
				// Answer once the change is applied here too, so that this
				// member's Membership and Status already show it.
				return res, n.waitChangeApplied(ctx, res.Index)
			}
			// The member asked does not lead (any more), names this member
			// as the leader, or could not be reached with the request (the
			// leader was removed or stopped): ask again who leads, a tick
			// later, within ctx.
			if perr := n.pauseTick(ctx); perr != nil {
				return res, lastAttempt(perr, err)
			}
		}
		// No leader known, or this member is taking over: wait for the
		// leadership state to move, as Propose does.
		if werr := n.waitLeaderChange(ctx, nl.leader); werr != nil {
			return res, werr
		}
	}
}

// checkIncarnation refuses an update that records an incarnation unless
// it is member from's publication of its own: from is the member asking
// (this one, or the one that forwarded the request) and, when it is this
// member, the incarnation must be this replica's. Any other would make the
// cluster refuse that member's real replica as wiped, for good (the
// incarnation, once recorded, never changes). Adds carry none
// (confchange refuses them).
func (n *Node) checkIncarnation(req confchange.Request, from uint64) error {
	m := req.Member
	if req.Op != confchange.OpUpdate || m.Incarnation == 0 {
		return nil
	}
	if m.ID == from && (from != n.cfg.ID || m.Incarnation == n.Incarnation()) {
		return nil
	}
	return &confchange.Refusal{Err: confchange.ErrInvalidMember, ID: m.ID,
		Detail: fmt.Sprintf("member %d: an incarnation (%x) is published only by the member itself, of its own data; leave Incarnation 0 (the recorded one is kept)", m.ID, m.Incarnation)}
}

// changeThroughPeers sends req to the leader through each member this one
// knows in turn, until one reaches it (ok), for a member that no leader
// reaches. A member that cannot be reached, or knows no leader either, is
// skipped; a change is sent on only when the previous attempt never left
// this member, so it is never applied twice.
func (n *Node) changeThroughPeers(ctx context.Context, req confchange.Request, dryRun bool) (res ChangeResult, err error, ok bool) {
	t := n.members.Load()
	for _, m := range t.sorted() {
		if m.ID == n.cfg.ID || !confchange.ConfigFromConfState(t.confState).Contains(m.ID) {
			continue
		}
		res, err = n.forwardChange(ctx, m.ID, req, dryRun)
		var nl errNotLeader
		switch {
		case errors.As(err, &nl):
			continue // it knows no leader either
		case err != nil && retryForward(err, dryRun):
			continue // never reached it
		case ctx.Err() != nil:
			return res, err, true
		}
		n.log.Info("asked the leader through another member: no leader reaches this one",
			slog.Uint64("through", m.ID), slog.String("request", req.String()))
		return res, err, true
	}
	return ChangeResult{}, nil, false
}

// lastAttempt is the error of a call whose context ended while it retried:
// the context's error, with what the last attempt met.
func lastAttempt(ctxErr, last error) error {
	var nl errNotLeader
	if last == nil || errors.As(last, &nl) {
		return ctxErr
	}
	return fmt.Errorf("%w (last attempt: %v)", ctxErr, last)
}

// pauseTick waits one tick, within ctx.
func (n *Node) pauseTick(ctx context.Context) error {
	t := time.NewTimer(n.cfg.TickInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return n.ctxErr(ctx)
	case <-n.stopc:
		return n.stopErr()
	}
}

// waitLeaderChange waits, within ctx, until a leader is known and the
// leadership state differs from "led by was" — or a tick passed (the
// answer that named was may have been stale).
func (n *Node) waitLeaderChange(ctx context.Context, was uint64) error {
	wctx, cancel := context.WithTimeout(ctx, n.cfg.TickInterval)
	defer cancel()
	err := waitFor(n, wctx, n.state, func(s nodeState) bool {
		return s.leader != 0 && (s.leader != was || s.role == RoleLeader)
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrStopped) {
		return nil // a tick passed: look again
	}
	return err
}

// waitChangeApplied waits until this member has applied the change a
// leader answered with index: up to index and, when index is where a joint
// configuration was entered (the answer of a member the change removed,
// which never learns the leave's index), until it is left.
func (n *Node) waitChangeApplied(ctx context.Context, index uint64) error {
	return waitFor(n, ctx, n.applied, func(i uint64) bool {
		if i < index {
			return false
		}
		t := n.members.Load()
		return t == nil || t.index != index || len(t.confState.GetVotersOutgoing()) == 0
	})
}

// waitApplied waits until this member has applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	return waitFor(n, ctx, n.applied, func(i uint64) bool { return i >= index })
}

// AddLearner adds m as a learner: it never changes the quorum, so a wrong
// address or a member that never starts is undone by removing it. The new
// member then starts with empty storage and no InitialMembers (it joins).
//
// Errors: a *confchange.Refusal before anything is proposed —
// ErrMemberExists (the ID is in use or was removed: pick a new one),
// ErrInvalidMember (a bad record), ErrTooManyLearners (remove or promote
// one first), ErrChangeInProgress (retry once it is applied) — and the
// errors of ChangeMembership (ErrLeaderChanged, ErrTimeout: read Membership
// to learn the outcome; ErrChangeDropped: retry; ctx's error; ErrStopped).
func (n *Node) AddLearner(ctx context.Context, m Member) error {
	_, err := n.ChangeMembership(ctx, confchange.AddLearner(m))
	return err
}

// AddVoter adds m directly as a voter: an explicit opt-in, refused unless
// the cluster keeps an active majority while counting m as down.
//
// Errors: as AddLearner, and ErrQuorumAtRisk when the new configuration
// would lack an active majority (add it as a learner instead).
func (n *Node) AddVoter(ctx context.Context, m Member) error {
	_, err := n.ChangeMembership(ctx, confchange.AddVoter(m))
	return err
}

// Promote makes learners voters once they are ready (caught up and stable);
// several at once go through a joint configuration.
//
// Errors: ErrLearnerNotReady with the reason (lag, no contact, not stable
// yet: wait, or watch Membership); ErrTooManyVoters (over 9);
// ErrMemberReadOnly; ErrUnknownMember; ErrQuorumAtRisk; ErrChangeInProgress;
// confchange.ErrPolicyWouldUndo while the policy acts on its own and its
// next step would demote a voter again (the promotion takes the voters past
// the target: raise the target instead, or turn automatic changes off);
// and the errors of ChangeMembership.
func (n *Node) Promote(ctx context.Context, ids ...uint64) error {
	_, err := n.ChangeMembership(ctx, confchange.Promote(ids...))
	return err
}

// Demote makes voters learners (several at once through a joint
// configuration).
//
// Errors: ErrQuorumAtRisk when the remaining voters would lack an active
// majority; ErrUnknownMember; ErrChangeInProgress;
// confchange.ErrPolicyWouldUndo while the policy acts on its own and its
// next step would promote a learner again (below the target with a ready
// learner: lower the target instead, or turn automatic changes off); and
// the errors of ChangeMembership.
func (n *Node) Demote(ctx context.Context, ids ...uint64) error {
	_, err := n.ChangeMembership(ctx, confchange.Demote(ids...))
	return err
}

// RemoveMember removes member id, voter or learner. Its ID is never reused.
// A leader may remove itself: it applies its removal and stops (ErrRemoved),
// and a call made through another member waits for the next leader.
//
// Errors: ErrQuorumAtRisk when the remaining voters would lack an active
// majority; ErrUnknownMember; ErrChangeInProgress; and the errors of
// ChangeMembership.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	_, err := n.ChangeMembership(ctx, confchange.Remove(id))
	return err
}

// UpdateMember replaces the record (peer address, metadata, read-only flag)
// of member m.ID. Every member's transport follows the new address once it
// applies it. Clearing ReadOnly is how a read-only learner becomes
// promotable; a voter cannot be made read-only (demote it first).
//
// m.Incarnation is left 0 (the recorded one is kept): a member publishes
// its own incarnation itself once it runs, and an update that records
// one for any other member, or another one than this replica's, is
// refused (ErrInvalidMember).
//
// Errors: ErrUnknownMember; ErrInvalidMember; ErrMemberReadOnly (m is a
// voter and ReadOnly is set); ErrChangeInProgress; and the errors of
// ChangeMembership.
func (n *Node) UpdateMember(ctx context.Context, m Member) error {
	_, err := n.ChangeMembership(ctx, confchange.UpdateMember(m))
	return err
}
