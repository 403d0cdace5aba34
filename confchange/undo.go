package confchange

import (
	"slices"
	"strconv"
)

// PolicyWouldUndo answers, for a manual promotion or demotion r, "would the
// policy's next step undo it?": it asks p what it would do next in the view
// as it will be once r is applied (the configuration changed, no change
// pending, every member's progress and readiness as now), and returns an
// ErrPolicyWouldUndo refusal when that step moves the voter count back — a
// demotion after a promotion, a promotion after a demotion. With the
// default policy that is
//
//   - a promotion that makes the voters exceed the target (TargetVoters):
//     the policy demotes the surplus at once;
//   - a promotion to an even count below the target with no other standby
//     in contact: the policy restores an odd count by demoting one;
//   - a demotion below the target while a ready learner exists — the
//     demoted voter itself is one, when it is caught up: the policy
//     promotes it (or another standby) again.
//
// A promotion up to the target, a demotion above it or one that leaves no
// ready learner are not undone, so they pass. A host's own policy is asked
// the same question (a policy that panics counts as doing nothing). The
// caller asks only while the policy acts on its own (the default policy
// owns the voter count then; with automatic changes off, manual changes
// stick). It returns nil for every other op, for a joint or invalid
// configuration, and for IDs not in the role r needs (Check refuses those).
// Pure: v is not changed.
func PolicyWouldUndo(p Policy, v View, r Request) *Refusal {
	if p == nil || (r.Op != OpPromote && r.Op != OpDemote) || len(r.IDs) == 0 {
		return nil
	}
	before := v.Config.Normalize()
	if before.Joint() || before.validate() != nil {
		return nil
	}
	ids := dedup(r.IDs)
	after := Config{Voters: slices.Clone(before.Voters), Learners: slices.Clone(before.Learners)}
	for _, id := range ids {
		from, to := &after.Learners, &after.Voters
		if r.Op == OpDemote {
			from, to = &after.Voters, &after.Learners
		}
		i := slices.Index(*from, id)
		if i < 0 || (r.Op == OpDemote && id == v.Leader) {
			return nil
		}
		*from = slices.Delete(*from, i, i+1)
		*to = append(*to, id)
	}
	w := v
	w.Config = after.Normalize()
	w.PendingChange = false
	next, ok := askNext(p, w)
	if !ok {
		return nil
	}
	d := voterDelta(w.Config, next)
	if (r.Op == OpPromote && d >= 0) || (r.Op == OpDemote && d <= 0) {
		return nil
	}
	return &Refusal{Err: ErrPolicyWouldUndo, ID: ids[0], Detail: undoDetail(p, r, before, w.Config, next)}
}

// askNext asks p for its next step; a panic is no step.
func askNext(p Policy, v View) (r Request, ok bool) {
	defer func() {
		if recover() != nil {
			r, ok = Request{}, false
		}
	}()
	return p.Next(v)
}

// voterDelta is how many voters r adds to cfg (negative: removes).
func voterDelta(cfg Config, r Request) int {
	d := 0
	switch r.Op {
	case OpPromote:
		for _, id := range dedup(r.IDs) {
			if slices.Contains(cfg.Learners, id) {
				d++
			}
		}
	case OpDemote:
		for _, id := range dedup(r.IDs) {
			if slices.Contains(cfg.Voters, id) {
				d--
			}
		}
	case OpRemove:
		if len(r.IDs) == 1 && slices.Contains(cfg.Voters, r.IDs[0]) {
			d--
		}
	case OpAddVoter:
		d++
	}
	return d
}

// undoDetail says what the policy would do and what to change instead.
func undoDetail(p Policy, r Request, before, after Config, next Request) string {
	detail := r.Op.String() + " " + idsString(dedup(r.IDs)) + " (voters " + strconv.Itoa(len(before.Voters)) + " → " +
		strconv.Itoa(len(after.Voters)) + "), then the policy: " + next.String()
	dp, ok := p.(DefaultPolicy)
	if !ok {
		return detail + "; change what the policy aims for, or turn auto-promote off to change voters by hand"
	}
	target := dp.Settings.WithDefaults().TargetVoters
	detail += "; it keeps " + plural(target, "voter") + " (target-voters) while auto-promote is on"
	n := len(after.Voters)
	switch {
	case r.Op == OpPromote && n > target:
		if t := n + 1 - n%2; t <= MaxVoters { // the odd count that seats them
			return detail + ": raise target-voters to " + strconv.Itoa(t) +
				" (the policy then promotes ready standbys itself), or turn auto-promote off to promote by hand"
		}
	case r.Op == OpDemote && n < target:
		if t := n - 1 + n%2; t >= 1 {
			return detail + ": lower target-voters to " + strconv.Itoa(t) +
				" (the policy then demotes the least healthy voters itself), or turn auto-promote off to demote by hand"
		}
	}
	return detail + ": turn auto-promote off to change voters by hand"
}
