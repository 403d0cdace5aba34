package placement

import (
	"fmt"
	"testing"
)

// three builds n groups over hosts a, b and c (one voter on each, member
// IDs 10*g+1..3), led as lead says (lead[i] the leader's host of group i+1,
// "" none); dead hosts are not live.
func three(lead []string, dead ...string) []Group {
	var gs []Group
	for i, l := range lead {
		id := uint64(i + 1)
		g := Group{ID: id, Leader: l}
		for j, h := range []string{"a", "b", "c"} {
			live := true
			for _, d := range dead {
				live = live && h != d
			}
			g.Voters = append(g.Voters, Replica{Host: h, Member: 10*id + uint64(j) + 1, Live: live})
		}
		gs = append(gs, g)
	}
	return gs
}

// pin pins groups ids of gs.
func pin(gs []Group, ids ...uint64) []Group {
	for _, id := range ids {
		gs[id-1].Pinned = true
	}
	return gs
}

func repeat(n int, hosts ...string) []string {
	var out []string
	for i := range n {
		out = append(out, hosts[i%len(hosts)])
	}
	return out
}

// apply returns each host's leaders after the moves.
func apply(gs []Group, moves []Move) map[string]int {
	lead := map[uint64]string{}
	for _, g := range gs {
		lead[g.ID] = g.Leader
	}
	for _, m := range moves {
		lead[m.Group] = m.To.Host
	}
	counts := map[string]int{}
	for _, h := range lead {
		if h != "" {
			counts[h]++
		}
	}
	return counts
}

func TestLeaderMoves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		gs    []Group
		max   int
		moves int            // moves planned
		after map[string]int // leaders per host after them
	}{
		{"all on self: down to the share", "a", three(repeat(30, "a")), 100, 20, map[string]int{"a": 10, "b": 10, "c": 10}},
		{"bounded by max", "a", three(repeat(30, "a")), 4, 4, map[string]int{"a": 26, "b": 2, "c": 2}},
		{"self not over: nothing", "b", three(repeat(30, "a")), 100, 0, map[string]int{"a": 30}},
		{"spread evenly: nothing", "a", three(repeat(30, "a", "b", "c")), 100, 0, map[string]int{"a": 10, "b": 10, "c": 10}},
		{"share rounded up kept", "a", three(append(repeat(11, "a"), repeat(20, "b", "c")...)), 100, 0, map[string]int{"a": 11, "b": 10, "c": 10}},
		{"over by one, to the host under", "a", three(append(repeat(12, "a"), append(repeat(10, "b"), repeat(8, "c")...)...)), 100, 2, map[string]int{"a": 10, "b": 10, "c": 10}},
		{"a dead host pauses every move", "a", three(append(repeat(20, "a"), repeat(10, "c")...), "c"), 100, 0, map[string]int{"a": 20, "c": 10}},
		{"groups without a leader count for nobody", "a", three(append(repeat(6, "a"), repeat(24, "")...)), 100, 4, map[string]int{"a": 2, "b": 2, "c": 2}},
		{"max 0: nothing", "a", three(repeat(30, "a")), 0, 0, map[string]int{"a": 30}},
		{"pinned groups stay", "a", pin(three(repeat(30, "a")), 1, 2, 3), 100, 20, map[string]int{"a": 10, "b": 10, "c": 10}},
		{"all pinned: nothing", "a", pin(three(repeat(3, "a")), 1, 2, 3), 100, 0, map[string]int{"a": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moves := LeaderMoves(tc.self, tc.gs, tc.max)
			if len(moves) != tc.moves {
				t.Fatalf("%d moves %v; want %d", len(moves), moves, tc.moves)
			}
			seen := map[uint64]bool{}
			for _, m := range moves {
				g := tc.gs[m.Group-1]
				if g.Leader != tc.self || g.Pinned || m.To.Host == tc.self || !m.To.Live || seen[m.Group] {
					t.Fatalf("move %+v: want a group self leads, once, to a live voter elsewhere", m)
				}
				if m.To.Member != g.Voters[map[string]int{"a": 0, "b": 1, "c": 2}[m.To.Host]].Member {
					t.Fatalf("move %+v: member not the group's voter on that host", m)
				}
				seen[m.Group] = true
			}
			if got := apply(tc.gs, moves); fmt.Sprint(got) != fmt.Sprint(tc.after) {
				t.Fatalf("leaders after %v; want %v", got, tc.after)
			}
		})
	}
}

// TestLeaderMovesConverge: the hosts plan in turns, each on the view the
// previous moves left, from every group led by one host, with groups of
// unequal spans (some on two of four hosts, some on three): they end with
// no host over its share, and then plan nothing more.
func TestLeaderMovesConverge(t *testing.T) {
	hosts := []string{"a", "b", "c", "d"}
	var gs []Group
	for i := range 40 {
		id := uint64(i + 1)
		span := hosts[:3]
		if i%3 == 0 {
			span = []string{"a", hosts[1+i%3]}
		} else if i%3 == 1 {
			span = []string{"a", "c", "d"}
		}
		g := Group{ID: id, Leader: "a"}
		for j, h := range span {
			g.Voters = append(g.Voters, Replica{Host: h, Member: 10*id + uint64(j), Live: true})
		}
		gs = append(gs, g)
	}
	for round := range 50 {
		moved := 0
		for _, h := range hosts {
			for _, m := range LeaderMoves(h, gs, 3) {
				gs[m.Group-1].Leader = m.To.Host
				moved++
			}
		}
		if moved == 0 {
			for h, l := range Loads(gs) {
				if l.Over() {
					t.Fatalf("round %d: host %s over its share and nothing moves: %+v", round, h, l)
				}
			}
			return
		}
	}
	t.Fatalf("still moving after 50 rounds: %v", Loads(gs))
}

// Loads reads each group's live hosts without a slice of them: its
// allocations are the map's, whatever the number of groups (it allocated
// slices per group before: 859 allocations for 300 groups).
func TestLoadsAllocationsDoNotGrowWithGroups(t *testing.T) {
	groups := make([]Group, 300)
	for i := range groups {
		groups[i] = Group{ID: uint64(i + 1), Leader: []string{"a", "b", "c"}[i%3], Voters: []Replica{
			{Host: "a", Member: 1, Live: true}, {Host: "b", Member: 2, Live: true}, {Host: "c", Member: 3, Live: i%7 != 0},
		}}
	}
	if n := testing.AllocsPerRun(20, func() { Loads(groups) }); n > 4 {
		t.Fatalf("%.0f allocations per Loads of %d groups, want at most 4 (the map's)", n, len(groups))
	}
}
