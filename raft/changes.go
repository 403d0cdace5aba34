package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/understudy-raft/understudy/confchange"
)

// This file is the leader's side of membership changes, on the run loop:
// the view the rules look at, proposing a planned change with its change ID
// and detecting that raft dropped it, leaving a joint configuration, and
// the automatic policy.

// membershipLoop is the run loop's membership state.
type membershipLoop struct {
	// lastIndex is the index of the last entry handed to the append task.
	lastIndex uint64
	// confGate: a conf change is pending until raft's applied index reaches
	// it (the index of the last conf change in the log, or the first entry
	// of this member's term as leader, as raft's pendingConfIndex).
	confGate uint64
	// checking is the change ID of a conf change just handed to raft, until
	// the append that carries it is seen (0: none).
	checking uint64
	// nextChangeID numbers this member's changes.
	nextChangeID uint64
	// termStart is the index of this leader's first entry.
	termStart uint64
	// seedRetry is the tick from which the leader may (again) propose the
	// seed cluster settings.
	seedRetry uint64
	// book is the leader's bookkeeping (nil: none yet, or let go while
	// quiesced as a follower; see leaderBook).
	book *leaderBook
	// raftConf is the configuration raft itself has taken, on the loop: a
	// committed conf change turns raft's configuration (joint, say) when
	// the loop hands the entry to the apply task, a moment before the
	// apply task records it in the member table; an installed snapshot,
	// when the loop hands it to the append task. Views check against it,
	// so that a check never passes on the configuration raft has just
	// left (a transfer to a voter the joint configuration is removing).
	// Nil until raft's configuration first changes on this loop: the
	// member table's, restored at Start, is raft's then.
	raftConf *raftpb.ConfState
}

// noteAppend tracks the entries of a MsgStorageAppend: the last index, the
// conf changes (the pending-change gate), and the change being checked.
func (n *Node) noteAppend(m *raftpb.Message) {
	ms := &n.loop.ms
	if md := m.GetSnapshot().GetMetadata(); md.GetIndex() > 0 {
		// An installed snapshot brings its configuration: this member's
		// role (a joiner learns here that it is a learner) and the
		// transport's learner flags follow it.
		ms.lastIndex = md.GetIndex()
		ms.raftConf = md.GetConfState()
		n.followConfig(md.GetConfState(), nil)
		n.updateRole(md.GetConfState())
	}
	for _, e := range m.GetEntries() {
		ms.lastIndex = e.GetIndex()
		if !isConfChange(e) {
			continue
		}
		ms.confGate = max(ms.confGate, e.GetIndex())
		if ms.checking == 0 {
			continue
		}
		if cc, err := decodeConfChange(e); err == nil {
			if ctx, err := changeContext(cc); err == nil && ctx.ChangeID == ms.checking {
				ms.checking = 0
			}
		}
	}
}

// becameLeader starts the leader's membership state: raft takes no conf
// change before it has applied every entry of its log up to its first own
// entry, and neither does the node.
func (n *Node) becameLeader() {
	ms := &n.loop.ms
	// A fresh book: no readiness or first sightings of an earlier term,
	// and the bookkeeping's first pass on the next tick.
	ms.book = &leaderBook{leaderSince: time.Now()}
	n.inheritReadiness()
	n.loop.catchUp = nil // rates measured in an earlier term are stale
	// Called after the Ready that made this member leader was dispatched:
	// lastIndex is the leader's first (empty) entry.
	// The gate is the leader's last index, as raft's own pendingConfIndex:
	// a conf change this member appended in an earlier term and that a
	// later leader overwrote must not hold changes back (its index may lie
	// beyond this log's end until new entries reach it).
	ms.termStart = ms.lastIndex
	ms.confGate = ms.lastIndex
}

// view builds the membership view the rules look at. Only on the leader.
// It reads raft's progress in place (no copy of its tracker).
func (n *Node) view() confchange.View { return n.buildView(false) }

// buildView is view; with reuse, the progress map and the configuration
// are the last reusing pass's (the configuration rebuilt only when the
// member table changed): for the bookkeeping's own passes with the default
// policy, which keeps nothing of a view. A view that leaves the loop (to a
// caller, or to a host's own policy) is built afresh.
func (n *Node) buildView(reuse bool) confchange.View {
	l := &n.loop
	ms := &l.ms
	b := ms.leaderBook()
	t := n.members.Load()
	// The configuration is raft's, which may be a moment ahead of the
	// member table (see raftConf); the records are the table's. A member
	// raft has added but the table not yet recorded appears without a
	// record only while PendingChange holds (the entry is not applied, and
	// confGate covers it), which refuses every change and every policy
	// decision until the table catches up.
	cs := ms.raftConf
	if cs == nil {
		cs = t.confState
	}
	var cfg confchange.Config
	var progress map[uint64]confchange.Progress
	if reuse {
		if b.viewConfigOf != cs {
			c := confchange.ConfigFromConfState(cs)
			b.viewConfig, b.viewConfigOf = &c, cs
		}
		if b.viewProgress == nil {
			b.viewProgress = make(map[uint64]confchange.Progress, len(t.records))
		}
		cfg, progress = *b.viewConfig, b.viewProgress
		clear(progress)
	} else {
		cfg, progress = confchange.ConfigFromConfState(cs), make(map[uint64]confchange.Progress, len(t.records))
	}
	if b.viewMembersOf != t {
		b.viewMembers, b.viewRemoved, b.viewMembersOf = t.recordMap(), t.removedMap(), t
	}
	v := confchange.View{
		Config:        cfg,
		Members:       b.viewMembers,
		Removed:       b.viewRemoved,
		Leader:        n.cfg.ID,
		LastIndex:     ms.lastIndex,
		Now:           time.Now(),
		Progress:      progress,
		ReadySince:    withInherited(b.readySince, b.inherited),
		PendingChange: l.rn.BasicStatus().Applied < ms.confGate || ms.checking != 0,
	}
	if b.firstSeen == nil {
		b.firstSeen = make(map[uint64]time.Time)
	}
	l.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
		if id == n.cfg.ID {
			return
		}
		// Before this member led, it heard only from the old leader: it
		// counts from when it took over, never from stale times.
		// A member added after that counts from when this leader first
		// tracked it, not from before it existed.
		// While quiesced, the group is silent: a member of the quiesce
		// set counts as heard when its host was.
		heard, viaHost := n.hostHeard(id, l.lastContact.get(id))
		lc := heard
		if lc.Before(b.leaderSince) {
			lc = b.leaderSince
		}
		first, ok := b.firstSeen[id]
		if !ok {
			first = v.Now
			b.firstSeen[id] = first
		}
		if lc.Before(first) {
			lc = first
		}
		p := confchange.ProgressFromTracker(pr, lc)
		p.ViaHost = viaHost
		// Raft's RecentActive is cleared for every member at each election
		// timeout (CheckQuorum) and set again by the next message, so it
		// flaps; readiness needs "heard from within an election timeout".
		p.RecentActive = n.recentlyActive(heard, v.Now)
		// What readiness says of a member out of contact: never heard
		// from, or never heard from because it refuses the leader's
		// connections, and why. Once heard from, the time without contact
		// is what is known (a refusal the transport remembers may predate
		// the last contact: a member that did not know the leader yet).
		p.Unheard = heard.IsZero()
		if !p.RecentActive && p.Unheard {
			if r, ok := n.tr.(interface{ Refusal(uint64) string }); ok {
				p.Refused = r.Refusal(id)
			}
		}
		progress[id] = p
	})
	return v
}

// recentlyActive reports whether a member last heard from at heard was heard
// from within the last election timeout.
func (n *Node) recentlyActive(heard, now time.Time) bool {
	return !heard.IsZero() && now.Sub(heard) <= n.electionTimeout()
}

func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

// maybeMembershipTick runs the leader's membership bookkeeping (catch-up
// tracking, readiness, the policy: membershipTick) on every tick while the
// membership is in motion — a joint configuration, a change pending, no
// settings yet, readiness inherited from the last term not yet credited —
// and on the first tick after the configuration or the settings changed.
// Otherwise, standbys or not, it runs every bookkeepingTicks: each pass
// looks at every member, and a leader with dozens of standbys (or a host
// with thousands of settled groups) must not pay that on every tick.
func (n *Node) maybeMembershipTick() {
	l := &n.loop
	if l.role != RoleLeader {
		return
	}
	b := l.ms.leaderBook()
	t, cs := n.members.Load(), n.settings.Load()
	if l.ticks-b.lastBookkeeping < n.bookkeepingTicks() && t == b.bookMembers && cs == b.bookSettings && n.membershipAtRest() {
		return
	}
	b.lastBookkeeping = l.ticks
	b.bookMembers, b.bookSettings = t, cs
	n.membershipTick()
}

// bookkeepingTicks is how often, in ticks, the leader's membership
// bookkeeping runs at rest: about once a second, and, with learners, at
// least four times per Stabilization and ten times per FailoverAfter (and
// RemoveDeadAfter), so that the delays the policy enforces stay accurate
// to a small fraction of themselves; at least every tick. (Voters alone
// have no standby to promote or fail over to.)
func (n *Node) bookkeepingTicks() uint64 {
	d := time.Second
	if t := n.members.Load(); t != nil && len(t.confState.GetLearners()) > 0 {
		s := n.membershipSettings().WithDefaults()
		d = min(d, s.Stabilization/4, s.FailoverAfter/10)
		if s.RemoveDeadAfter > 0 {
			d = min(d, s.RemoveDeadAfter/10)
		}
	}
	return max(uint64(d/n.cfg.TickInterval), 1)
}

// membershipAtRest reports whether no membership change is in motion: the
// settings replicated, no change in flight, not joint, and no readiness
// inherited from the last term waiting to be credited (it must be, within
// an election timeout of taking over). Learners may be there.
func (n *Node) membershipAtRest() bool {
	ms := &n.loop.ms
	if n.settings.Load() == nil || ms.checking != 0 || ms.confGate > n.applied.get() || (ms.book != nil && len(ms.book.inherited) > 0) {
		return false
	}
	t := n.members.Load()
	if t == nil || t.confState == nil {
		return false
	}
	cs := t.confState
	return len(cs.GetVotersOutgoing()) == 0 && len(cs.GetLearnersNext()) == 0
}

// membershipTick refreshes the readiness memory and the catch-up rates,
// leaves a joint configuration whose entering change is applied, and asks
// the policy for a change (on the leader; see maybeMembershipTick).
func (n *Node) membershipTick() {
	n.membershipDecide()
}

// membershipDecide is membershipTick: it reports whether the policy was
// asked and wanted no change (at rest), so that a leader quiesces only
// then: a group that quiesced with a decision left for later (a change
// pending when it looked, a promotion due) would never make it, since a
// quiesced leader runs no bookkeeping. at is the instant the policy judged
// (its view's Now): whoever goes on to judge readiness for the same
// decision must use it, not a later clock, or a learner whose
// stabilization ends in between reads as not yet stable to the policy and
// stable to the caller (maybeQuiesce then quiesced a group with a
// promotion due, for good).
func (n *Node) membershipDecide() (atRest bool, at time.Time) {
	l := &n.loop
	if l.role != RoleLeader {
		return false, time.Time{}
	}
	v := n.buildView(!n.ownPolicy)
	at = v.Now
	b := l.ms.book // made by buildView
	for id, p := range v.Progress {
		tr := n.trackCatchUp(id, p.Match, v.Now)
		n.emitCatchUp(id, n.catchUp(id, p.Lag(v.LastIndex), tr), tr, v.Now)
	}
	settings := n.membershipSettings()
	b.readySince = confchange.UpdateReadySince(v, settings)
	n.creditReadiness(v.Now)
	v.ReadySince = b.readySince
	if v.PendingChange {
		return false, at // so the applied member table is current
	}
	if v.Config.Joint() {
		if v.Config.CanLead(n.cfg.ID) != nil {
			n.handOffBeforeLeave()
			return false, at
		}
		n.leaveJoint(n.members.Load().jointChangeID)
		return false, at
	}
	if n.settings.Load() == nil {
		// The policy acts on replicated settings only: the same on every
		// member, whoever leads next.
		n.seedSettingsOnce(len(v.Config.Voters))
		return false, at
	}
	if !n.autoPromote() {
		return true, at
	}
	if !n.ownPolicy {
		if w := (confchange.DefaultPolicy{Settings: settings}).Waiting(v); w != b.waiting {
			b.waiting = w
			n.events.emit(Event{Type: EventPolicyWaiting, Term: l.term, Detail: w})
		}
	}
	req, ok := n.askPolicy(v)
	if !ok {
		return true, at
	}
	ms := &l.ms
	ms.nextChangeID++
	req.ChangeID = ms.nextChangeID
	plan, err := confchange.PlanChange(v, settings, req)
	if err != nil {
		n.log.Warn("membership policy asked for a change the rules refuse", slog.String("request", req.String()), slog.Any("err", err))
		return true, at // it would ask again, and be refused again
	}
	n.log.Info("membership policy: proposing a change", slog.String("plan", plan.Description))
	if err := n.proposeChange(plan.Change, req.ChangeID, nil); err != nil {
		n.log.Warn("membership policy: change not proposed", slog.String("plan", plan.Description), slog.Any("err", err))
	}
	return false, at
}

// askPolicy asks the host's policy for a change. A policy that panics is
// logged and ignored: the membership stays as it is.
func (n *Node) askPolicy(v confchange.View) (req confchange.Request, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			n.log.Error("membership policy panicked; no automatic change", slog.Any("panic", r))
			req, ok = confchange.Request{}, false
		}
	}()
	return n.policy().Next(v)
}

// handOffBeforeLeave hands leadership to a voter of the incoming
// configuration, instead of leaving the joint configuration, when leaving it
// would demote or remove this leader. A leader steps down the moment it
// applies such a leave (StepDownOnRemoval), maybe before any other voter
// learned that the leave committed; they still count the outgoing quorum,
// which then needs this member's vote, and it grants none to them while its
// log is the longest: with another outgoing voter down, nobody can be
// elected until that one returns (the robustness suite's membership walk
// found this: a swap whose new leader was the voter being demoted, its
// predecessor crashed). An incoming voter leads instead, and leaves the
// joint configuration itself. The most caught-up incoming voter that
// answers now is asked (raft catches it up first); a transfer under way is
// left alone, and raft abandons one that does not finish within an
// election timeout, so the next tick asks again. With no incoming voter
// answering, the leave could not commit anyway: nothing is done.
func (n *Node) handOffBeforeLeave() {
	st := n.loop.rn.Status()
	if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	cfg := confchange.ConfigFromTracker(st.Config)
	var target, best uint64
	for _, id := range cfg.Voters {
		if id == n.cfg.ID || cfg.CanLead(id) != nil || !n.answersNow(id) {
			continue
		}
		pr, ok := st.Progress[id]
		if !ok {
			continue
		}
		if target == 0 || pr.Match > best || (pr.Match == best && id < target) {
			target, best = id, pr.Match
		}
	}
	if target == 0 {
		return
	}
	n.log.Info("leaving the joint configuration would demote this leader: handing leadership to an incoming voter, which leaves it",
		slog.Uint64("to", target), slog.Uint64("match", best))
	n.loop.rn.TransferLeader(target)
}

// leaveJoint proposes leaving the joint configuration entered by change
// changeID (raft takes it only once the entering change is applied on the
// leader: the caller checks).
func (n *Node) leaveJoint(changeID uint64) {
	n.log.Info("leaving the joint configuration", slog.Uint64("change", changeID))
	if err := n.proposeChange(confchange.LeaveJointChange(changeID), changeID, nil); err != nil {
		n.log.Warn("leaving the joint configuration failed; retrying", slog.Any("err", err))
	}
}

// proposeChange hands a conf change to raft and checks, in the Ready that
// follows, that raft appended it: raft replaces a conf change it cannot take
// by an empty entry without an error, so a change whose ID is not in the
// next append was dropped (noteAppend also moves the pending-change gate to
// it). w, if set, is registered to wait for the change to be applied.
func (n *Node) proposeChange(cc *raftpb.ConfChangeV2, changeID uint64, w *changeWaiter) error {
	l := &n.loop
	ms := &l.ms
	if w != nil {
		w.term, w.tick = l.term, l.ticks
		n.changes.add(changeID, w)
	}
	if err := l.rn.ProposeConfChange(cc); err != nil {
		n.changes.remove(changeID)
		return fmt.Errorf("%w: %w", ErrChangeDropped, err)
	}
	ms.checking = changeID
	for l.rn.HasReady() {
		n.handleReady(l.rn.Ready())
	}
	if ms.checking != 0 {
		ms.checking = 0
		n.changes.remove(changeID)
		return fmt.Errorf("%w: raft did not append it (another change is pending)", ErrChangeDropped)
	}
	return nil
}

// changeOnLeader checks and plans req on the leader's loop and, unless
// dryRun, proposes it with w waiting for it.
func (n *Node) changeOnLeader(req confchange.Request, dryRun bool, w *changeWaiter) (confchange.Plan, error) {
	l := &n.loop
	if l.role != RoleLeader {
		return confchange.Plan{}, errNotLeader{leader: l.leader}
	}
	ms := &l.ms
	if applied := l.rn.BasicStatus().Applied; applied < ms.termStart {
		// A new leader takes no change before it applied its first entry:
		// that is not a change in progress, the caller waits for it.
		return confchange.Plan{}, errLeaderStarting{index: ms.termStart}
	}
	if applied := l.rn.BasicStatus().Applied; applied < ms.confGate && ms.checking == 0 && n.applied.get() >= ms.confGate {
		// The last change is applied (its caller may already have its
		// answer and be asking for the next one) but raft hears of it on
		// the loop's next turn: not a change in progress, the caller waits.
		return confchange.Plan{}, errLeaderStarting{index: ms.confGate}
	}
	ms.nextChangeID++
	req.ChangeID = ms.nextChangeID
	v := n.view()
	plan, err := confchange.PlanChange(v, n.membershipSettings(), req)
	if n.autoPromote() {
		// While the policy acts on its own it owns the voter count: a
		// promotion or demotion that its next step would reverse is
		// refused, with what to change instead (the target, or
		// auto-promote). A host's own policy is asked the same question.
		if undo := confchange.PolicyWouldUndo(n.policy(), v, req); undo != nil {
			err = withRefusal(err, undo)
		}
	}
	if err != nil || dryRun {
		return plan, err
	}
	if plan.Change == nil { // OpTransferLeader: checked, no conf change
		return plan, nil
	}
	n.log.Info("proposing a membership change", slog.String("plan", plan.Description))
	return plan, n.proposeChange(plan.Change, req.ChangeID, w)
}

// withRefusal adds r to the refusals err holds (nil, a *Refusal or
// Refusals), after them.
func withRefusal(err error, r *confchange.Refusal) error {
	var rs confchange.Refusals
	var one *confchange.Refusal
	switch {
	case err == nil:
		return r
	case errors.As(err, &rs):
		return append(slices.Clone(rs), r)
	case errors.As(err, &one):
		return confchange.Refusals{one, r}
	}
	return err
}

// errNotLeader says that the loop is not the leader (the caller forwards).
type errNotLeader struct{ leader uint64 }

func (e errNotLeader) Error() string {
	if e.leader == 0 {
		return ErrNoLeader.Error()
	}
	return fmt.Sprintf("raft: not the leader (member %d leads)", e.leader)
}

func (e errNotLeader) Unwrap() error {
	if e.leader == 0 {
		return ErrNoLeader
	}
	return nil
}

// errLeaderStarting says that the leader has not applied its first entry.
type errLeaderStarting struct{ index uint64 }

func (e errLeaderStarting) Error() string {
	return fmt.Sprintf("raft: the leader has not applied its first entry (%d) yet", e.index)
}

// changeLocally runs a membership request on this member, which must lead,
// and waits until the change is applied here.
func (n *Node) changeLocally(ctx context.Context, req confchange.Request, dryRun bool) (ChangeResult, error) {
	var (
		plan confchange.Plan
		err  error
		w    *changeWaiter
	)
	if !dryRun {
		w = &changeWaiter{done: make(chan changeResult, 1)}
	}
	// Another change in flight (the policy's, another caller's) is usually
	// applied within a few round trips: the request — and its dry run, which
	// answers what the request would meet — waits for it, up to an election
	// timeout, before it is refused as in progress.
	patience := time.Now().Add(n.electionTimeout())
	for {
		if derr := n.do(ctx, func() { plan, err = n.changeOnLeader(req, dryRun, w) }); derr != nil {
			return ChangeResult{}, notProposed(derr)
		}
		var starting errLeaderStarting
		if errors.As(err, &starting) {
			if werr := n.waitApplied(ctx, starting.index); werr != nil {
				return ChangeResult{}, notProposed(werr)
			}
			continue
		}
		if errors.Is(err, confchange.ErrChangeInProgress) && time.Now().Before(patience) {
			if perr := n.pauseTick(ctx); perr != nil {
				return ChangeResult{}, notProposed(lastAttempt(perr, err))
			}
			continue
		}
		break
	}
	res := ChangeResult{Description: plan.Description}
	if err != nil || dryRun || plan.Change == nil {
		return res, err
	}
	select {
	case r := <-w.done:
		if r.err != nil {
			return res, r.err
		}
		res.Index = r.index
		return res, nil
	case <-ctx.Done():
		return res, n.ctxErr(ctx)
	case <-n.stopc:
		select {
		case r := <-w.done: // applied just before the node stopped (e.g. removed itself)
			if r.err == nil {
				res.Index = r.index
				return res, nil
			}
		default:
		}
		return res, n.stopErr()
	}
}
