package raft

import (
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3/quorum"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/sched"
)

// A quiesced leader's lagging members: those on a host not live when it
// quiesced. They get no quiesce message (nothing reaches them); the
// leader sleeps until the policy's next decision about them
// (confchange.Deadliner, a timer) or until one's host turns live again
// (hostBack), whichever comes first. See "Quiescence" in
// docs/architecture.md.

// wakeKey is what the scheduler's throttle deduplicates a wake under: one
// per node, cause and member, so that a queued wake never hides another.
type wakeKey struct {
	n      *Node
	cause  wakeCause
	member uint64
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// laggingDeadline returns when the leader should wake for the policy's
// next decision with the lagging members silent and nothing else changing
// — two election timeouts before the policy would act (the zero time:
// never) — and
// whether the group may quiesce with them: the policy must be a
// confchange.Deadliner (the default is), and its next decision not due
// within a tick. A member left lagging is read as its group will read it
// while quiesced and after a wake: heard when its host last was, if later
// than the group (hostHeard), so a silent voter's failover is due
// FailoverAfter after its host's death, as in an awake group. A policy
// that does not act on its own (ManualMembership, AutoPromote off) has no
// deadline.
func (n *Node) laggingDeadline(lagging []uint64, now time.Time) (at time.Time, ok bool) {
	if !n.autoPromote() {
		return time.Time{}, true
	}
	d, ok := n.policy().(confchange.Deadliner)
	if !ok {
		return time.Time{}, false // a host's policy without deadlines: stay awake
	}
	lt, ok := n.tr.(LivenessTransport)
	if !ok {
		return time.Time{}, false
	}
	v := n.view()
	v.ReadySince = n.loop.ms.readySince()
	for _, id := range lagging {
		pr, ok := v.Progress[id]
		if !ok {
			continue
		}
		if at, _ := lt.HostContact(id); at.After(pr.LastContact) {
			pr.LastContact, pr.ViaHost = at, true
		}
		if pr.RecentActive = n.recentlyActive(pr.LastContact, v.Now); pr.RecentActive {
			return time.Time{}, false // not silent yet: its activity will change
		}
		v.Progress[id] = pr
	}
	defer func() {
		if r := recover(); r != nil {
			n.log.Error("membership policy's NextDecision panicked; the group stays awake", slog.Any("panic", r))
			at, ok = time.Time{}, false
		}
	}()
	at = d.NextDecision(v)
	if !at.IsZero() {
		// Awake two election timeouts before the decision: a member whose
		// host reads as dead while its group's traffic still flows (host
		// liveness and group traffic disagree) answers the group before
		// the policy reads it as silent.
		at = at.Add(-2 * n.electionTimeout())
	}
	if !at.IsZero() && at.Sub(now) <= n.cfg.TickInterval {
		return time.Time{}, false // due now: stay awake for it
	}
	return at, true
}

// policyHasDeadlines reports whether the policy says when it acts next (a
// confchange.Deadliner, as the default is) or does not act on its own:
// what a leader needs to sleep with members lagging.
func (n *Node) policyHasDeadlines() bool {
	if !n.autoPromote() {
		return true
	}
	_, ok := n.policy().(confchange.Deadliner)
	return ok
}

// quietLag is what a quiesced leader keeps of the members it left
// lagging: made when it leaves any or arms the policy's timer, let go on
// its wake (endLagging).
type quietLag struct {
	lagging []uint64
	// deadline is the policy's next decision's timer (nil: none);
	// deadlineGen tells a stale one's firing, deadlineAt when it fires.
	deadline    *time.Timer
	deadlineGen uint64
	deadlineAt  time.Time
}

// laggingIDs returns the members a quiesced leader left lagging.
func (q *quiesceState) laggingIDs() []uint64 {
	if q.lag == nil {
		return nil
	}
	return q.lag.lagging
}

// quiesceLagging records the members a leader that just quiesced left
// lagging, publishes them for HostLiveness, and arms the policy's timer:
// at deadline, a wake (cause policy) through the scheduler's throttle.
func (n *Node) quiesceLagging(lagging []uint64, deadline time.Time) {
	q := &n.loop.q
	if q.lag == nil {
		if len(lagging) == 0 && deadline.IsZero() {
			return
		}
		q.lag = new(quietLag)
	}
	g := q.lag
	g.lagging = lagging
	if len(lagging) > 0 {
		n.quietLagging.Store(&lagging)
	}
	if deadline.IsZero() {
		return
	}
	g.deadlineGen++
	gen := g.deadlineGen
	g.deadlineAt = deadline
	g.deadline = time.AfterFunc(time.Until(deadline), func() {
		n.sched.wakes.PushLane(wakeKey{n, wakePolicy, 0}, sched.LaneLater, n.awake, func() { n.postQuiet(func() { n.policyDue(g, gen) }) })
	})
	n.log.Debug("quiesced with lagging members", slog.Any("lagging", lagging), slog.Time("policy", deadline))
}

// recheckHosts runs once a leader reads as quiesced: a host that turned
// live or not live since maybeQuiesce looked was reported while the node
// did not read as quiesced (HostLiveness did nothing), so it is acted on
// now, as HostLiveness would have.
func (n *Node) recheckHosts(lt LivenessTransport) {
	q := &n.loop.q
	for _, id := range q.laggingIDs() {
		if _, live := lt.HostContact(id); live {
			n.quiesceHostLiveness(id, true)
		}
	}
	for _, id := range q.set {
		if _, live := lt.HostContact(id); !live {
			n.quiesceHostLiveness(id, false)
		}
	}
}

// endLagging stops the policy's timer and forgets the lagging members
// (on a wake, and when the loop exits quiesced).
func (n *Node) endLagging() {
	q := &n.loop.q
	if q.lag != nil && q.lag.deadline != nil {
		q.lag.deadline.Stop()
	}
	q.lag = nil
	n.quietLagging.Store(nil)
}

// policyDue runs on the loop when the policy's timer armed as gen of g fired:
// the leader, still quiesced under that timer, wakes so that the policy
// acts on its next tick.
//
// The timer may also be lagInPlace's look again, once a member whose host
// died reads as silent: the policy is then asked as maybeQuiesce asks it,
// and the leader stays quiesced with its next decision's timer armed if
// that decision is not due yet.
func (n *Node) policyDue(g *quietLag, gen uint64) {
	q := &n.loop.q
	if !q.on || q.lag != g || g.deadline == nil || g.deadlineGen != gen {
		return
	}
	g.deadline = nil
	if at, ok := n.laggingDeadline(g.lagging, time.Now()); ok {
		n.quiesceLagging(g.lagging, at)
		return
	}
	n.wake(wakePolicy, 0)
}

// lagInPlace runs on the loop of a quiesced leader told that member's
// host died, member being one it told to quiesce: it moves member to the
// lagging members, as if the group had quiesced with its host dead, and
// arms the policy's timer — so that the group stays quiesced (a dead
// host's thousands of groups led elsewhere do not wake; only those it led
// must). While member still reads as recently active (its host answered
// less than an election timeout ago: it was just declared dead) the timer
// looks again once it reads as silent (policyDue). It reports false, and
// changes nothing, when the leader must wake instead: without member, the
// caught-up live voters and the leader would be no quorum (awake,
// CheckQuorum acts), or the policy's next decision is not known or due
// within a tick.
func (n *Node) lagInPlace(member uint64) bool {
	l := &n.loop
	q := &l.q
	lt, ok := n.tr.(LivenessTransport)
	if !ok || !n.policyHasDeadlines() {
		return false
	}
	set := slices.DeleteFunc(slices.Clone(q.set), func(id uint64) bool { return id == member })
	votes := map[uint64]bool{n.cfg.ID: true}
	for _, id := range set {
		votes[id] = true
	}
	cfg := l.rn.Status().Config
	if len(cfg.Voters[1]) > 0 || cfg.Voters[0].VoteResult(votes) != quorum.VoteWon {
		return false
	}
	lagging := append(slices.Clone(q.laggingIDs()), member)
	slices.Sort(lagging)
	now := time.Now()
	at, _ := lt.HostContact(member)
	var due time.Time
	if heard := later(l.lastContact.get(member), at); n.recentlyActive(heard, now) {
		due = heard.Add(n.electionTimeout() + n.cfg.TickInterval)
		if g := q.lag; g != nil && g.deadline != nil && g.deadlineAt.Before(due) {
			due = g.deadlineAt // another lagging member's decision comes first
		}
	} else if due, ok = n.laggingDeadline(lagging, now); !ok {
		return false
	}
	n.endLagging()
	q.set = set
	n.quiesceLagging(lagging, due)
	n.log.Debug("a member's host died: left lagging, quiesced still", slog.Uint64("member", member))
	return true
}

// hostBack runs on the loop for a quiesced leader told that member's host
// turned live: if it left that member lagging and the host is still live,
// it wakes so that it catches the member up (cause hostUp).
func (n *Node) hostBack(member uint64) {
	l := &n.loop
	if !l.q.on || l.role != RoleLeader || !slices.Contains(l.q.laggingIDs(), member) {
		return
	}
	if lt, ok := n.tr.(LivenessTransport); !ok {
		return
	} else if _, live := lt.HostContact(member); !live {
		return
	}
	n.wake(wakeHostUp, 0)
}

// postQuiet queues f to run on the loop as a quiet act: unlike post, it
// does not wake a quiesced node by itself (f decides).
func (n *Node) postQuiet(f func()) {
	if n.life.Load() != lifeStarted || n.stopped() {
		return
	}
	n.quietActs.push(f)
	n.loopTask.Signal()
}
