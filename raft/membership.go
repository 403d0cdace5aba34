package raft

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
)

// decodeConfChange decodes a committed configuration change entry.
func decodeConfChange(e *raftpb.Entry) (raftpb.ConfChangeI, error) {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, fmt.Errorf("%w: conf change at index %d: %v", ErrCorruptEntry, e.GetIndex(), err)
		}
		return cc, nil
	case raftpb.EntryConfChangeV2:
		cc := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, fmt.Errorf("%w: conf change at index %d: %v", ErrCorruptEntry, e.GetIndex(), err)
		}
		return cc, nil
	}
	return nil, fmt.Errorf("%w: entry %d is not a conf change", ErrCorruptEntry, e.GetIndex())
}

// isConfChange reports whether e is a configuration change entry.
func isConfChange(e *raftpb.Entry) bool {
	t := e.GetType()
	return t == raftpb.EntryConfChange || t == raftpb.EntryConfChangeV2
}

// changeContext decodes the confchange.Context of a conf change: the change
// ID and the member records it carries. Bootstrap entries (ConfChange V1,
// written by RawNode.Bootstrap) carry the same encoding.
func changeContext(cc raftpb.ConfChangeI) (confchange.Context, error) {
	var b []byte
	switch c := cc.(type) {
	case *raftpb.ConfChange:
		b = c.GetContext()
	case *raftpb.ConfChangeV2:
		b = c.GetContext()
	}
	return confchange.DecodeContext(b)
}

// memberTable is the membership as of the last applied entry: every
// member's record (from conf change contexts and snapshots) and the IDs
// removed from the cluster (never reused). The apply task builds a new
// table on every change and publishes it; a published table is never
// modified, so the run loop reads it without a lock.
//
// Records and removed IDs are sorted lists, binary searched: a group has
// a handful of members, and maps cost each of a host's many replicas about
// half a kilobyte. (A leader's views take maps: leaderBook.members.)
type memberTable struct {
	// index is the log index the table is current at.
	index     uint64
	confState *raftpb.ConfState
	records   []Member // by ID
	removed   []uint64 // sorted (nil: none)
	// jointChangeID is the change ID that entered the current joint
	// configuration (0 when not joint, or unknown after a snapshot).
	jointChangeID uint64
}

func newMemberTable() *memberTable {
	return &memberTable{confState: &raftpb.ConfState{}}
}

func (t *memberTable) find(id uint64) (int, bool) {
	return slices.BinarySearchFunc(t.records, id, func(m Member, id uint64) int { return cmp.Compare(m.ID, id) })
}

// record returns member id's record, if the table has one.
func (t *memberTable) record(id uint64) (Member, bool) {
	if i, ok := t.find(id); ok {
		return t.records[i], true
	}
	return Member{}, false
}

// put records m (replacing the record of its ID).
func (t *memberTable) put(m Member) {
	i, ok := t.find(m.ID)
	if ok {
		t.records[i] = m
		return
	}
	t.records = slices.Insert(t.records, i, m)
}

// forget deletes member id's record.
func (t *memberTable) forget(id uint64) {
	if i, ok := t.find(id); ok {
		t.records = slices.Delete(t.records, i, i+1)
	}
}

// isRemoved reports whether id was removed from the cluster.
func (t *memberTable) isRemoved(id uint64) bool {
	_, ok := slices.BinarySearch(t.removed, id)
	return ok
}

// markRemoved remembers id as removed.
func (t *memberTable) markRemoved(id uint64) {
	if i, ok := slices.BinarySearch(t.removed, id); !ok {
		t.removed = slices.Insert(t.removed, i, id)
	}
}

// recordMap returns the records as a map (what confchange.View takes).
func (t *memberTable) recordMap() map[uint64]Member {
	m := make(map[uint64]Member, len(t.records))
	for _, r := range t.records {
		m[r.ID] = r
	}
	return m
}

// removedMap returns the removed IDs as a set (nil: none).
func (t *memberTable) removedMap() map[uint64]bool {
	if len(t.removed) == 0 {
		return nil
	}
	m := make(map[uint64]bool, len(t.removed))
	for _, id := range t.removed {
		m[id] = true
	}
	return m
}

// clone returns a copy that can be changed.
func (t *memberTable) clone() *memberTable {
	return &memberTable{
		index:         t.index,
		confState:     t.confState,
		records:       slices.Clone(t.records),
		removed:       slices.Clone(t.removed),
		jointChangeID: t.jointChangeID,
	}
}

// apply records a conf change's member records and its new configuration,
// and returns the members it removed: they are forgotten and remembered as
// removed. (A record of an ID not yet in the configuration is kept: at
// bootstrap every initial member's record is known before its entry.)
//
// A member's incarnation, once recorded, stays: a record without one keeps
// it, and a record with another one keeps it too (the leader refuses such
// an update; this rule, applied alike by every member, holds even for one
// that slipped through). So a replica that lost its data can never make
// the cluster accept its new copy under the old ID.
func (t *memberTable) apply(index uint64, ctx confchange.Context, cs *raftpb.ConfState) (removed []uint64) {
	for _, m := range ctx.Members {
		if old, ok := t.record(m.ID); ok && old.Incarnation != 0 {
			m.Incarnation = old.Incarnation
		}
		t.put(m)
	}
	before := confchange.ConfigFromConfState(t.confState)
	after := confchange.ConfigFromConfState(cs)
	for _, id := range before.IDs() {
		if !after.Contains(id) {
			t.markRemoved(id)
			t.forget(id)
			removed = append(removed, id)
		}
	}
	t.confState = cs
	t.index = index
	t.jointChangeID = 0
	if after.Joint() {
		t.jointChangeID = ctx.ChangeID
	}
	return removed
}

// sorted returns the records in ID order.
func (t *memberTable) sorted() []Member {
	return slices.Clone(t.records)
}

// removedIDs returns the removed IDs in order.
func (t *memberTable) removedIDs() []uint64 { return slices.Clone(t.removed) }

// bootstrapContext is the context of a bootstrap conf change: member m's record.
func bootstrapContext(m Member) ([]byte, error) {
	return confchange.Context{Members: []Member{m}}.Encode()
}

// Member returns member id's record (peer address, metadata) as this member
// applied it, and whether the applied configuration lists id. It reads the
// local table: no round trip, possibly behind the leader's.
func (n *Node) Member(id uint64) (Member, bool) {
	t := n.members.Load()
	if t == nil || !confchange.ConfigFromConfState(t.confState).Contains(id) {
		return Member{}, false
	}
	m, ok := t.record(id)
	if !ok {
		m = Member{ID: id}
	}
	return m, true
}
