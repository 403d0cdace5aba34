package confchange

import (
	"maps"
	"slices"
	"time"
)

// This file is a deliberately naive second implementation of the rules:
// plain sets, brute force where possible, written from the package
// documentation rather than from check.go. quick_test.go compares the two.

type set map[uint64]bool

func setOf(ids ...[]uint64) set {
	s := set{}
	for _, l := range ids {
		for _, id := range l {
			s[id] = true
		}
	}
	return s
}

func (s set) sorted() []uint64 {
	if len(s) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(s))
}

func (s set) clone() set { return maps.Clone(s) }

// naiveMajority: is there a subset of voters, larger than half, whose
// members are all active? Brute force over every subset.
func naiveMajority(voters []uint64, active func(uint64) bool) bool {
	n := len(voters)
	if n == 0 {
		return false
	}
	for mask := 0; mask < 1<<n; mask++ {
		size, allActive := 0, true
		for i := range n {
			if mask&(1<<i) != 0 {
				size++
				allActive = allActive && active(voters[i])
			}
		}
		if allActive && 2*size > n {
			return true
		}
	}
	return false
}

func naiveActive(v View, id uint64) bool {
	if id != 0 && id == v.Leader {
		return true
	}
	pr, ok := v.Progress[id]
	return ok && pr.RecentActive
}

func naiveReady(v View, s Settings, id uint64) bool {
	if id != 0 && id == v.Leader {
		return true
	}
	c := v.Config
	if id == 0 || !setOf(c.Voters, c.VotersOutgoing, c.Learners, c.LearnersNext)[id] {
		return false
	}
	pr, ok := v.Progress[id]
	if !ok || !pr.RecentActive || pr.State != StateReplicate || pr.PendingSnapshot != 0 {
		return false
	}
	lag := uint64(0)
	if v.LastIndex > pr.Match {
		lag = v.LastIndex - pr.Match
	}
	if lag > s.MaxLag {
		return false
	}
	since, ok := v.ReadySince[id]
	if !ok || since.After(v.Now) {
		since = v.Now
	}
	return v.Now.Sub(since) >= s.Stabilization
}

// naiveValid: etcd's configuration invariants, restated.
func naiveValid(c Config) bool {
	voters, out, learners, next := setOf(c.Voters), setOf(c.VotersOutgoing), setOf(c.Learners), setOf(c.LearnersNext)
	if len(voters) == 0 {
		return false
	}
	for id := range learners {
		if voters[id] || out[id] || next[id] {
			return false
		}
	}
	for id := range next {
		if !out[id] || voters[id] {
			return false
		}
	}
	if len(out) == 0 && (len(next) > 0 || c.AutoLeave) {
		return false
	}
	return true
}

// naiveOutcome is what the twin decides: the set of refusal codes, and for an
// accepted conf change the joint (if any) and final configurations.
type naiveOutcome struct {
	codes        set2
	joint, after Config
}

type set2 map[string]bool

func naive(v View, s Settings, r Request) naiveOutcome {
	s = s.WithDefaults()
	o := naiveOutcome{codes: set2{}}
	refuse := func(code string) { o.codes[code] = true }
	c := v.Config.Normalize()
	if !naiveValid(c) {
		refuse("invalid_request")
		return o
	}
	voters, out := setOf(c.Voters), setOf(c.VotersOutgoing)
	learners, next := setOf(c.Learners), setOf(c.LearnersNext)
	all := setOf(c.Voters, c.VotersOutgoing, c.Learners, c.LearnersNext)
	joint := len(out) > 0

	nIDs := map[Op][2]int{OpAddLearner: {0, 0}, OpAddVoter: {0, 0}, OpUpdate: {0, 0}, OpLeaveJoint: {0, 0},
		OpPromote: {1, 9}, OpDemote: {1, 9}, OpRemove: {1, 1}, OpTransferLeader: {1, 1}, OpReplace: {2, 2}, OpSwap: {2, 2}}
	want, ok := nIDs[r.Op]
	if !ok || len(r.IDs) < want[0] || len(r.IDs) > want[1] {
		refuse("invalid_request")
		return o
	}
	if len(setOf(r.IDs)) != len(r.IDs) {
		refuse("invalid_request")
		if r.Op == OpReplace || r.Op == OpSwap {
			return o
		}
	}
	exists := func(id uint64) bool {
		switch {
		case id == 0:
			refuse("invalid_member")
		case !all[id]:
			refuse("unknown_member")
		default:
			return true
		}
		return false
	}
	record := func(m Member) {
		if m.ID == 0 || checkPeerAddr(m.PeerAddr) != "" {
			refuse("invalid_member")
		}
		for k := range m.Metadata {
			if k == "" {
				refuse("invalid_member")
			}
		}
		for id := range all {
			if o, ok := v.Members[id]; ok && id != m.ID && m.PeerAddr != "" && o.PeerAddr == m.PeerAddr {
				refuse("member_exists")
			}
		}
	}
	// mayVote refuses a learner that may not become a voter; it reports
	// whether id is a learner at all.
	mayVote := func(id uint64) bool {
		if !exists(id) {
			return false
		}
		if !learners[id] && !next[id] {
			refuse("invalid_member")
			return false
		}
		if v.Members[id].ReadOnly {
			refuse("member_read_only")
		}
		if !naiveReady(v, s, id) {
			refuse("learner_not_ready")
		}
		return true
	}
	isVoter := func(id uint64) bool {
		if !exists(id) {
			return false
		}
		if !voters[id] {
			refuse("invalid_member")
			return false
		}
		return true
	}

	newVoters, newLearners := voters.clone(), learners.clone()
	for id := range next {
		newLearners[id] = true
	}
	var down uint64
	changes := 0
	switch r.Op {
	case OpAddLearner, OpAddVoter:
		m := r.Member
		record(m)
		if m.ID != 0 && (all[m.ID] || v.Removed[m.ID]) {
			refuse("member_exists")
		}
		if r.Op == OpAddLearner {
			if len(learners)+len(next) >= s.MaxLearners {
				refuse("too_many_learners")
			}
			newLearners[m.ID] = true
		} else {
			if m.ReadOnly {
				refuse("member_read_only")
			}
			newVoters[m.ID], down = true, m.ID
		}
		changes = 1
	case OpUpdate:
		if exists(r.Member.ID) {
			record(r.Member)
			if id := r.Member.ID; r.Member.ReadOnly && !v.Members[id].ReadOnly && (voters[id] || out[id]) {
				refuse("member_read_only")
			}
		}
		changes = 1
	case OpPromote:
		for _, id := range slices.Compact(slices.Clone(r.IDs)) {
			if mayVote(id) {
				newVoters[id] = true
				delete(newLearners, id)
				changes++
			}
		}
	case OpDemote:
		for _, id := range r.IDs {
			if isVoter(id) && !newLearners[id] {
				delete(newVoters, id)
				newLearners[id] = true
				changes++
			}
		}
	case OpRemove:
		if exists(r.IDs[0]) {
			delete(newVoters, r.IDs[0])
			delete(newLearners, r.IDs[0])
		}
		changes = 1
	case OpReplace, OpSwap:
		old, nw := r.IDs[0], r.IDs[1]
		if isVoter(old) {
			delete(newVoters, old)
			if r.Op == OpSwap {
				newLearners[old] = true
			}
		}
		if mayVote(nw) {
			newVoters[nw] = true
			delete(newLearners, nw)
		}
		changes = 2
	case OpLeaveJoint:
		if !joint {
			refuse("invalid_request")
		}
	case OpTransferLeader:
		if exists(r.IDs[0]) && !voters[r.IDs[0]] {
			refuse("learner_cannot_lead")
		}
		o.after = c
		return o
	}
	if len(newVoters) > MaxVoters && len(newVoters) > len(voters) {
		refuse("too_many_voters")
	}
	if v.PendingChange || (joint && r.Op != OpLeaveJoint) {
		refuse("change_in_progress")
	}
	now := func(id uint64) bool { return naiveActive(v, id) }
	if !naiveMajority(c.Voters, now) || (joint && !naiveMajority(c.VotersOutgoing, now)) {
		refuse("quorum_at_risk")
	}
	active := func(id uint64) bool { return id != down && naiveActive(v, id) }
	if r.Op != OpLeaveJoint && !maps.Equal(newVoters, voters) && !naiveMajority(newVoters.sorted(), active) {
		refuse("quorum_at_risk")
	}

	o.after = Config{Voters: newVoters.sorted(), Learners: newLearners.sorted()}
	if r.Op == OpLeaveJoint {
		o.after.Voters = c.Voters
	} else if changes > 1 {
		// Entering joint: the outgoing half is the current voters; a
		// demoted voter waits in learners_next.
		jl, jn := set{}, set{}
		for id := range newLearners {
			if voters[id] {
				jn[id] = true
			} else {
				jl[id] = true
			}
		}
		o.joint = Config{Voters: newVoters.sorted(), VotersOutgoing: c.Voters, Learners: jl.sorted(), LearnersNext: jn.sorted()}
	}
	return o
}

// naivePolicyVoters is how many voters the policy may leave: it never goes
// from an odd count to an even one, and from an even count below the target
// it goes to an odd one whenever a promotable learner is ready.
func naivePolicyWantsOdd(v View, s Settings) bool {
	s = s.WithDefaults()
	n := len(v.Config.Voters)
	if n%2 == 1 {
		return true
	}
	if n >= s.TargetVoters {
		return false
	}
	for _, id := range v.Config.Learners {
		if !v.Members[id].ReadOnly && naiveReady(v, s, id) {
			return true
		}
	}
	return false
}

var _ = time.Second
