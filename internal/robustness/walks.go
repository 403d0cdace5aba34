package robustness

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// membershipWalk is the scripted membership scenario, with the policy off
// (explicit requests only) and the clients running throughout. In order,
// each asserted to take effect: two learners are added, one at a time,
// each catching up by snapshot (the log is compacted first); both are
// promoted in one joint change (three voters to five: a fourth voter alone
// would be even), the leader crashed inside it; two voters are demoted in
// one joint change (five to three); a voter is swapped for a learner in one
// joint change, the leader crashed inside it; a voter is replaced by a
// learner (the voter removed) in one joint change; a learner is removed.
// Outside joint configurations the voter count stays odd. The walk ends
// as it started, with three voters and no learner: it runs rounds times.
func membershipWalk(rounds int) func(*script) {
	return func(s *script) {
		for range rounds {
			membershipRound(s)
		}
	}
}

func membershipRound(s *script) {
	for range 2 {
		s.between()
		s.addLearner(s.nm.nextID)
		s.nm.nextID++
	}

	s.between()
	st := s.status()
	ls := st.Learners
	if len(ls) != 2 {
		s.fail("want two learners to promote, the leader has %s", configOf(st))
	}
	what := fmt.Sprintf("promote %d %d", ls[0], ls[1])
	jc := s.crashInJoint(what, func(ctx context.Context, l *cluster.Member) (bool, error) {
		_, err := l.Node.ChangeMembership(ctx, confchange.Promote(ls...))
		return err == nil, err
	})
	if !slices.Equal(jc.Joint.Voters, sortedUnion(st.Voters, ls)) || !slices.Equal(jc.Joint.VotersOutgoing, st.Voters) {
		s.fail("%s: the joint configuration was %s, from %s", what, configOf(jc.Joint), configOf(st))
	}

	s.between()
	st = s.status()
	vs := s.pick(others(st.Voters, st.ID), 2)
	s.until(Demote, fmt.Sprintf("demote %d %d", vs[0], vs[1]),
		func(ctx context.Context, l *cluster.Member) error {
			_, err := l.Node.ChangeMembership(ctx, confchange.Demote(vs...))
			return err
		},
		func(st raft.Status) bool {
			return !st.Joint() && len(st.Voters) == 3 && containsAll(st.Learners, vs...)
		})

	s.between()
	st = s.status()
	old, stand := s.pick(others(st.Voters, st.ID), 1)[0], s.pick(st.Learners, 1)[0]
	what = fmt.Sprintf("swap voter %d for learner %d", old, stand)
	jc = s.crashInJoint(what, func(ctx context.Context, l *cluster.Member) (bool, error) {
		_, err := l.Node.ChangeMembership(ctx, confchange.Swap(old, stand))
		return err == nil, err
	})
	if !slices.Contains(jc.Joint.Voters, stand) || slices.Contains(jc.Joint.Voters, old) || !slices.Contains(jc.Joint.LearnersNext, old) {
		s.fail("%s: the joint configuration was %s", what, configOf(jc.Joint))
	}
	if st := s.status(); !slices.Contains(st.Learners, old) {
		s.fail("%s: voter %d is not a learner after the change: %s", what, old, configOf(st))
	}

	s.between()
	st = s.status()
	old, stand = s.pick(others(st.Voters, st.ID), 1)[0], s.pick(st.Learners, 1)[0]
	s.until(Replace, fmt.Sprintf("replace voter %d by learner %d (%d removed)", old, stand, old),
		func(ctx context.Context, l *cluster.Member) error {
			_, err := l.Node.ChangeMembership(ctx, confchange.Replace(old, stand))
			return err
		},
		func(st raft.Status) bool {
			return !st.Joint() && slices.Contains(st.Voters, stand) && !inConfig(st, old)
		})
	s.removed(old)

	s.between()
	st = s.status()
	gone := s.pick(st.Learners, 1)[0]
	s.until(RemoveLearner, fmt.Sprintf("remove learner %d", gone),
		func(ctx context.Context, l *cluster.Member) error { return l.Node.RemoveMember(ctx, gone) },
		func(st raft.Status) bool { return !inConfig(st, gone) })
	s.removed(gone)
	if st := s.waitVoters(3); len(st.Learners) > 0 {
		s.fail("the round ends with learners %v", st.Learners)
	}
}

// addLearner adds member id as a learner and waits until it has caught up,
// checking that it did so by snapshot: first every running member's log is
// compacted (a snapshot now, with at least minSnapshotIndex entries applied),
// so the new member's start is no longer in any log.
func (s *script) addLearner(id uint64) {
	const minSnapshotIndex = 150 // three times the cluster's SnapshotCatchUpEntries: compaction cuts the log's start off
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	for _, m := range s.c.Running() {
		for m.Node.AppliedIndex() < minSnapshotIndex {
			if ctx.Err() != nil {
				s.fail("member %d applied %d entries, want %d before compacting", m.ID, m.Node.AppliedIndex(), minSnapshotIndex)
			}
			time.Sleep(retryPause)
		}
		idx, err := m.Node.Snapshot(ctx)
		if err != nil {
			s.fail("snapshot on member %d: %v", m.ID, err)
		}
		s.record(SnapshotNow, fmt.Sprintf("snapshot on %d at %d, its log compacted", m.ID, idx))
	}
	st := s.until(AddLearner, fmt.Sprintf("add learner %d", id),
		func(ctx context.Context, l *cluster.Member) error { return l.Node.AddLearner(ctx, s.c.Record(id)) },
		func(st raft.Status) bool { return slices.Contains(st.Learners, id) })
	m := s.c.Join(id)
	for m.Node.AppliedIndex() < st.Commit {
		if ctx.Err() != nil {
			s.fail("learner %d applied %d, did not catch up to %d within %s", id, m.Node.AppliedIndex(), st.Commit, stepBound)
		}
		time.Sleep(retryPause)
	}
	if n := s.c.Net.SnapshotsTo(id); n == 0 {
		s.fail("learner %d caught up to %d without a snapshot: the compacted log should have required one", id, st.Commit)
	}
	s.record(AddLearner, fmt.Sprintf("learner %d caught up by snapshot (applied %d)", id, m.Node.AppliedIndex()))
}

// removed records that member id was removed: it stops itself once it
// applies its removal; the harness crashes it to be sure.
func (s *script) removed(id uint64) {
	s.nm.removed[id] = true
	s.c.Crash(id)
}

// scaleWalk is the scripted scale walk: the policy on, the clients running,
// the replicated target voter count set to each of targets in turn. Every
// step is one joint change (the policy promotes or demotes two at once); the
// leader is crashed inside each, the next leader must complete it, and the
// step ends only once the leader reports exactly that many voters outside a
// joint configuration. Before a scale-down, leadership moves to the
// highest-ID voter — the policy's first choice among healthy voters of equal
// lag — and the step checks that the policy did not demote the leader.
func scaleWalk(targets ...int) func(*script) {
	return func(s *script) {
		var reached []int
		downs, attributed := 0, 0 // scale-downs; those made by the highest-ID voter as leader
		for _, n := range targets {
			s.between()
			st := s.status()
			from := len(st.Voters)
			if from == n {
				s.fail("target %d: the cluster has %d voters already: not a step", n, from)
			}
			var top, term uint64
			if n < from {
				top = slices.Max(st.Voters)
				s.transferTo(top)
				st = s.status()
				term = st.Term
			}
			what := fmt.Sprintf("target voters %d → %d", from, n)
			jc := s.crashInJoint(what, func(ctx context.Context, l *cluster.Member) (bool, error) {
				cs := l.Node.Settings()
				cs.TargetVoters = n
				return false, l.Node.UpdateSettings(ctx, cs)
			})
			if len(jc.Joint.Voters) != n || !slices.Equal(jc.Joint.VotersOutgoing, st.Voters) {
				s.fail("%s: the policy's joint configuration %s does not take %v to %d voters", what, configOf(jc.Joint), st.Voters, n)
			}
			if n < from {
				downs++
				switch {
				case jc.Leader != top || jc.Term != term:
					s.record(Target, fmt.Sprintf("%s: leadership moved (leader %d term %d, not %d term %d) before the policy demoted: not the highest-ID-leader case",
						what, jc.Leader, jc.Term, top, term))
				case slices.Contains(jc.Joint.LearnersNext, top) || !slices.Contains(jc.Joint.Voters, top):
					s.fail("%s: the policy demoted the leader %d (the highest ID) while other voters could go: %s", what, top, configOf(jc.Joint))
				default:
					attributed++
				}
			}
			st = s.waitVoters(n)
			reached = append(reached, n)
			s.record(Target, fmt.Sprintf("%s: reached, leader %d has %s", what, st.ID, configOf(st)))
		}
		if !slices.Equal(reached, targets) {
			s.fail("targets reached %v, want %v", reached, targets)
		}
		if downs > 0 && attributed == 0 {
			s.fail("no scale-down was made with the highest-ID voter leading (leadership moved each time): the leader-kept check never ran")
		}
	}
}

// status is the leader's status, failing the run after stepBound.
func (s *script) status() raft.Status {
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	for {
		_, st, err := s.leaderStatus(ctx)
		if err == nil {
			return st
		}
		if ctx.Err() != nil {
			s.fail("no leader within %s: %v", stepBound, err)
		}
		time.Sleep(retryPause)
	}
}

// pick draws k of ids (fewer fails the run), in the seed's order.
func (s *script) pick(ids []uint64, k int) []uint64 {
	if len(ids) < k {
		s.fail("want %d members to choose from, have %v", k, ids)
	}
	ids = slices.Clone(ids)
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:k]
}

func others(ids []uint64, self uint64) []uint64 {
	return slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool { return id == self })
}

func sortedUnion(a, b []uint64) []uint64 {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func containsAll(ids []uint64, want ...uint64) bool {
	for _, id := range want {
		if !slices.Contains(ids, id) {
			return false
		}
	}
	return true
}

// inConfig reports whether id is in st's configuration, in any role.
func inConfig(st raft.Status, id uint64) bool {
	return slices.Contains(st.Voters, id) || slices.Contains(st.VotersOutgoing, id) ||
		slices.Contains(st.Learners, id) || slices.Contains(st.LearnersNext, id)
}
