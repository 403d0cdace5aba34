package confchange

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Policy decides the next membership change on its own. The node asks it on
// the leader after each refresh of the view and plans (PlanChange) what it
// returns; a host may replace it. It must be deterministic and must not keep
// or change the view.
type Policy interface {
	// Next returns the change to make now, if any: at most one request.
	Next(v View) (Request, bool)
}

// DefaultPolicy is the built-in policy. In order, it:
//
//  1. does nothing while a change is pending or without an active majority
//     in the current configuration (both halves when joint);
//  2. completes a joint configuration (OpLeaveJoint), e.g. one a crashed
//     leader entered;
//  3. fills voter seats up to TargetVoters with ready learners, one when the
//     voter count is even and two at once when it is odd, so the count stays
//     odd; learners beyond the target stay standbys;
//  4. demotes the voters beyond TargetVoters (after the target was
//     lowered) in one change: the least healthy first — out of contact,
//     then most behind — then the highest ID, never the leader; they stay
//     as standbys;
//  5. swaps a voter it has not heard from for FailoverAfter for a ready
//     standby in one joint change (standby → voter, lost voter → learner),
//     keeping the voter count;
//  6. restores an odd voter count (a voter was removed and no learner in
//     contact can take its seat) by demoting one more voter, the least
//     healthy, never the leader;
//  7. removes a learner it has not heard from for RemoveDeadAfter, when set,
//     as long as the members left can still fill TargetVoters seats.
//
// Candidates are taken least lag first, then lowest ID; lost voters longest
// silent first, then lowest ID. It returns only requests Check accepts.
type DefaultPolicy struct {
	Settings Settings
}

// Next implements Policy.
func (p DefaultPolicy) Next(v View) (Request, bool) {
	s := p.Settings.WithDefaults()
	v.Config = v.Config.Normalize()
	cfg := v.Config
	if v.PendingChange || cfg.validate() != nil {
		return Request{}, false
	}
	for _, half := range [][]uint64{cfg.Voters, cfg.VotersOutgoing} {
		if _, ok := v.majority(half, 0); len(half) > 0 && !ok {
			return Request{}, false
		}
	}
	ok := func(r Request) bool { return len(Check(v, s, r)) == 0 }
	if cfg.Joint() {
		if r := LeaveJoint(); ok(r) {
			return r, true
		}
		return Request{}, false
	}

	standbys := p.standbys(v, s)
	if n := len(cfg.Voters); n < s.TargetVoters {
		k := 1 + n%2 // an odd count gets two at once, an even one one
		if len(standbys) >= k && n+k <= s.TargetVoters {
			if r := Promote(standbys[:k]...); ok(r) {
				return r, true
			}
		}
	}

	// Scale down: demote the voters beyond the target, at once (one joint
	// change when more than one), least healthy first, never the leader.
	if n := len(cfg.Voters); n > s.TargetVoters {
		if victims := p.surplus(v, n-s.TargetVoters); victims != nil {
			if r := Demote(victims...); ok(r) {
				return r, true
			}
		}
	}

	for _, lost := range silent(v, cfg.Voters, s.FailoverAfter) {
		for _, sb := range standbys {
			if r := Swap(lost, sb); ok(r) {
				return r, true
			}
		}
	}

	// An even voter count (a voter was removed) with no learner in contact
	// that could take the seat (a ready one is promoted above; one catching
	// up is waited for): demote one more, so that the count is odd again —
	// two voters need both for a quorum, one needs only itself.
	if n := len(cfg.Voters); n%2 == 0 && n > 0 && !p.candidateInContact(v) {
		if victims := p.surplus(v, 1); victims != nil {
			if r := Demote(victims...); ok(r) {
				return r, true
			}
		}
	}

	if s.RemoveDeadAfter > 0 {
		// Never below what the target needs: the voters and the learners
		// that could take a seat (not read-only ones) must be able to fill
		// TargetVoters seats once the dead member is gone.
		seats := len(cfg.Voters)
		for _, id := range cfg.Learners {
			if !v.Members[id].ReadOnly {
				seats++
			}
		}
		for _, dead := range silent(v, cfg.Learners, s.RemoveDeadAfter) {
			if !v.Members[dead].ReadOnly && seats-1 < s.TargetVoters {
				continue // a read-only one may still go
			}
			if r := Remove(dead); ok(r) {
				return r, true
			}
		}
	}
	return Request{}, false
}

// standbys returns the ready, promotable learners, least lag then lowest ID.
func (p DefaultPolicy) standbys(v View, s Settings) []uint64 {
	var out []uint64
	for _, id := range v.Config.Learners {
		if !v.Members[id].ReadOnly && Readiness(v, s, id).Ready() {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(v.Progress[a].Lag(v.LastIndex), v.Progress[b].Lag(v.LastIndex)), cmp.Compare(a, b))
	})
	return out
}

// silent returns the members of ids, other than the leader, that are
// inactive and were last heard from at least d ago, longest silent first,
// then lowest ID. A member with no known last contact is never silent.
func silent(v View, ids []uint64, d time.Duration) []uint64 {
	var out []uint64
	for _, id := range ids {
		pr, ok := v.Progress[id]
		if ok && !v.active(id) && !pr.LastContact.IsZero() && v.Now.Sub(pr.LastContact) >= d {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b uint64) int {
		return cmp.Or(v.Progress[a].LastContact.Compare(v.Progress[b].LastContact), cmp.Compare(a, b))
	})
	return out
}

// surplus picks k voters to demote, the least healthy first (not recently
// active, then most lag), then the highest ID; never the leader. It returns
// nil when fewer than k voters other than the leader exist.
func (p DefaultPolicy) surplus(v View, k int) []uint64 {
	var cands []uint64
	for _, id := range v.Config.Voters {
		if id != v.Leader {
			cands = append(cands, id)
		}
	}
	if len(cands) < k {
		return nil
	}
	slices.SortFunc(cands, func(a, b uint64) int {
		aa, ba := v.active(a), v.active(b)
		if aa != ba {
			if !aa {
				return -1 // the inactive one first
			}
			return 1
		}
		return cmp.Or(cmp.Compare(v.Progress[b].Lag(v.LastIndex), v.Progress[a].Lag(v.LastIndex)), cmp.Compare(b, a))
	})
	return cands[:k]
}

// Waiting says in words what the policy waits for before it can act on
// its own, "" when nothing: seats to fill with fewer ready standbys than it
// needs (it never makes the voter count even), or a lost voter with no
// ready standby to take its seat.
func (p DefaultPolicy) Waiting(v View) string {
	s := p.Settings.WithDefaults()
	v.Config = v.Config.Normalize()
	cfg := v.Config
	if cfg.Joint() || cfg.validate() != nil {
		return ""
	}
	standbys := p.standbys(v, s)
	if n := len(cfg.Voters); n < s.TargetVoters {
		k := 1 + n%2
		if len(standbys) < k || n+k > s.TargetVoters {
			if k == 1 {
				return fmt.Sprintf("target %d voters, %d now: waiting for a ready standby to promote (none ready)", s.TargetVoters, n)
			}
			return fmt.Sprintf("target %d voters, %d now: waiting for 2 ready standbys to promote at once (%d ready)",
				s.TargetVoters, n, len(standbys))
		}
	}
	if lost := silent(v, cfg.Voters, s.FailoverAfter); len(lost) > 0 && len(standbys) == 0 {
		return fmt.Sprintf("voter %d lost for %s or more: waiting for a ready standby to take its seat", lost[0], s.FailoverAfter)
	}
	return ""
}

// candidateInContact reports whether a promotable learner is in contact
// with the leader (ready, or on its way).
func (p DefaultPolicy) candidateInContact(v View) bool {
	for _, id := range v.Config.Learners {
		if !v.Members[id].ReadOnly && v.active(id) {
			return true
		}
	}
	return false
}

// Deadliner is a Policy that can say when it will next act on its own with
// nothing else changing. A node whose group is quiesced (raft.Config.Quiesce)
// while a member's host is down sleeps until then instead of asking the
// policy at every tick; a Policy that is no Deadliner keeps such a group
// awake. NextDecision must be pure, like Next.
type Deadliner interface {
	// NextDecision returns the earliest time, not before v.Now, at which
	// Next would return a change if nothing in v changed but Now (no
	// message heard, no member's activity changed), or the zero time when
	// no such time exists. It returns v.Now when Next returns a change now.
	NextDecision(v View) time.Time
}

// NextDecision implements Deadliner. With nothing but time passing, the
// default policy's decision changes only when a voter it has not heard
// from turns silent for FailoverAfter (a failover, if a ready standby can
// take its seat), a learner turns silent for RemoveDeadAfter (a removal,
// when set), or a learner ends its stabilization (a promotion): it asks
// Next at each of these times, earliest first, and returns the first at
// which Next acts.
func (p DefaultPolicy) NextDecision(v View) time.Time {
	if _, ok := p.Next(v); ok {
		return v.Now
	}
	s := p.Settings.WithDefaults()
	cfg := v.Config.Normalize()
	var at []time.Time
	add := func(t time.Time) {
		if t.After(v.Now) {
			at = append(at, t)
		}
	}
	silentAt := func(ids []uint64, d time.Duration) {
		for _, id := range ids {
			if pr, ok := v.Progress[id]; ok && !v.active(id) && !pr.LastContact.IsZero() {
				add(pr.LastContact.Add(d))
			}
		}
	}
	silentAt(cfg.Voters, s.FailoverAfter)
	silentAt(cfg.VotersOutgoing, s.FailoverAfter)
	if s.RemoveDeadAfter > 0 {
		silentAt(cfg.Learners, s.RemoveDeadAfter)
	}
	for _, id := range cfg.IDs() {
		since, ok := v.ReadySince[id]
		if ok && instantReadiness(v, s, id).Code == ReasonReady {
			add(since.Add(s.Stabilization))
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	for i, t := range at {
		if i > 0 && t.Equal(at[i-1]) {
			continue
		}
		w := v
		w.Now = t
		if _, ok := p.Next(w); ok {
			return t
		}
	}
	return time.Time{}
}
