package placement

import (
	"cmp"
	"math"
	"slices"
)

// Replica is one voter of a group, on a host: Host is the host's key (the
// address the group records for its replicas there), Member the voter's
// member ID, Live whether the host is live as the planning host sees it
// (the planning host itself always is).
type Replica struct {
	Host   string
	Member uint64
	Live   bool
}

// Group is one group the planning host runs, as it sees it: its leader's
// host ("" while no leader is known) and the group's voters that can
// lead (the leader's included). A pinned group counts in the loads but is
// not moved (a move of it was refused a moment ago).
type Group struct {
	ID     uint64
	Leader string
	Voters []Replica
	Pinned bool
}

// Move hands group Group's leadership to voter To.
type Move struct {
	Group uint64
	To    Replica
}

// Load is a host's leaders and its share of them in a view: Share sums,
// over the groups with a leader on a live host that have a voter on this
// host, 1 / the number of live hosts holding a voter of the group — what
// it would lead if every group's leadership were spread evenly over the
// live hosts it may lead on.
type Load struct {
	Leaders int
	Share   float64
}

// Loads returns each host's leaders and share over groups (see Load). A
// group without a known leader, or led from a host not live, counts for
// nobody: it is electing. The hosts are those holding a live voter of a
// counted group.
func Loads(groups []Group) map[string]Load {
	loads := map[string]Load{}
	for _, g := range groups {
		// g's distinct live hosts, counted without a slice of them (a
		// host plans over all its groups, 10,000 of them each round).
		hosts, leaderLive := 0, false
		for i, r := range g.Voters {
			if firstLive(g.Voters, i) {
				hosts++
				leaderLive = leaderLive || r.Host == g.Leader
			}
		}
		if g.Leader == "" || !leaderLive {
			continue
		}
		for i, r := range g.Voters {
			if firstLive(g.Voters, i) {
				l := loads[r.Host]
				l.Share += 1 / float64(hosts)
				loads[r.Host] = l
			}
		}
		l := loads[g.Leader]
		l.Leaders++
		loads[g.Leader] = l
	}
	return loads
}

// firstLive reports whether rs[i] is live and the first live replica of
// its host in rs.
func firstLive(rs []Replica, i int) bool {
	if !rs[i].Live {
		return false
	}
	for _, r := range rs[:i] {
		if r.Live && r.Host == rs[i].Host {
			return false
		}
	}
	return true
}

// eps absorbs the rounding of shares summed from fractions.
const eps = 1e-9

// Over reports whether l leads more than its share rounded up: the host
// gives leadership away only then, so that a spread within one of the
// share is left alone (no moves back and forth).
func (l Load) Over() bool { return float64(l.Leaders) > math.Ceil(l.Share-eps) }

// Under reports whether l leads fewer than its share: a host may take a
// leadership only then, so that one it takes never makes it Over.
func (l Load) Under() bool { return float64(l.Leaders) < l.Share-eps }

// LeaderMoves plans, for host self, at most max moves of the groups it
// leads to voters on live hosts that lead fewer than their share (Under),
// while self leads more than its share rounded up (Over): each move to the
// host furthest under its share among the group's voters (ties to the
// lower host key), the groups taken in ID order. Only self's leadership
// moves: each host plans for the groups it leads, so that hosts planning
// at once never move the same group, and none takes a leadership that
// would put it over its share. A target's caught-up state is not known
// here: the host checks it as it carries a move out.
//
// While any voter of any group is on a host that is not live, it plans
// nothing (HostDown): the dead host's groups elected leaders elsewhere,
// and moves would wake quiesced groups the dead host does not touch — a
// dead host must wake only what must elect — to be undone when it
// returns.
func LeaderMoves(self string, groups []Group, max int) []Move {
	loads := Loads(groups)
	if max <= 0 || !loads[self].Over() || HostDown(groups) {
		return nil
	}
	mine := slices.Clone(groups)
	slices.SortFunc(mine, func(a, b Group) int { return cmp.Compare(a.ID, b.ID) })
	var moves []Move
	for _, g := range mine {
		if len(moves) == max || !loads[self].Over() {
			break
		}
		if g.Leader != self || g.Pinned {
			continue
		}
		var best Replica
		var bestBy float64
		for _, r := range g.Voters {
			l := loads[r.Host]
			if r.Host == self || !r.Live || !l.Under() {
				continue
			}
			by := float64(l.Leaders) - l.Share // how far under: most negative first
			if best.Host == "" || by < bestBy-eps || (math.Abs(by-bestBy) <= eps && r.Host < best.Host) {
				best, bestBy = r, by
			}
		}
		if best.Host == "" {
			continue
		}
		moves = append(moves, Move{Group: g.ID, To: best})
		s, t := loads[self], loads[best.Host]
		s.Leaders--
		t.Leaders++
		loads[self], loads[best.Host] = s, t
	}
	return moves
}

// HostDown reports whether a voter of some group is on a host that is not
// live.
func HostDown(groups []Group) bool {
	for _, g := range groups {
		for _, r := range g.Voters {
			if !r.Live {
				return true
			}
		}
	}
	return false
}
