package raft

import (
	"maps"
	"slices"
	"testing"

	"github.com/understudy-raft/understudy/confchange"
	"go.etcd.io/raft/v3/raftpb"
)

// TestMemberTableLists: the member table's records and removed IDs, kept
// as sorted lists, answer as the maps they replaced did: records put in
// any order are found by ID and listed in order, a record put again
// replaces the old one, a removal forgets the record and remembers the
// ID, a clone is changed apart from its original, and the maps a view
// takes hold the same.
func TestMemberTableLists(t *testing.T) {
	tb := newMemberTable()
	for _, id := range []uint64{7, 3, 9, 1} {
		tb.put(Member{ID: id, PeerAddr: "a"})
	}
	tb.put(Member{ID: 3, PeerAddr: "b"})
	if m, ok := tb.record(3); !ok || m.PeerAddr != "b" {
		t.Fatalf("record 3 = %+v, %t; want the one put last", m, ok)
	}
	if _, ok := tb.record(4); ok {
		t.Fatal("record 4 found, never put")
	}
	ids := func(ms []Member) []uint64 {
		var out []uint64
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids(tb.sorted()); !slices.Equal(got, []uint64{1, 3, 7, 9}) {
		t.Fatalf("sorted = %v", got)
	}
	if tb.removedMap() != nil || len(tb.removedIDs()) != 0 {
		t.Fatal("a new table lists removed members")
	}
	c := tb.clone()
	cs := &raftpb.ConfState{Voters: []uint64{1, 3, 7, 9}}
	c.apply(1, confchange.Context{}, cs)
	removed := c.apply(2, confchange.Context{Members: []Member{{ID: 5, PeerAddr: "c"}}}, &raftpb.ConfState{Voters: []uint64{1, 5, 9}})
	if !slices.Equal(removed, []uint64{3, 7}) && !slices.Equal(removed, []uint64{7, 3}) {
		t.Fatalf("apply removed %v; want 3 and 7", removed)
	}
	if got := ids(c.sorted()); !slices.Equal(got, []uint64{1, 5, 9}) {
		t.Fatalf("after the removal: records %v", got)
	}
	if got := c.removedIDs(); !slices.Equal(got, []uint64{3, 7}) || !c.isRemoved(7) || c.isRemoved(5) {
		t.Fatalf("removed %v", got)
	}
	if got := ids(tb.sorted()); !slices.Equal(got, []uint64{1, 3, 7, 9}) || tb.isRemoved(3) {
		t.Fatalf("the original changed with its clone: %v", got)
	}
	if m := c.recordMap(); !slices.Equal(slices.Sorted(maps.Keys(m)), []uint64{1, 5, 9}) || m[5].PeerAddr != "c" {
		t.Fatalf("recordMap = %v", m)
	}
	if m := c.removedMap(); len(m) != 2 || !m[3] || !m[7] {
		t.Fatalf("removedMap = %v", m)
	}
}
