package raft

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
)

// leaderBook is the membership bookkeeping of a leader: what it tracks of
// each member (readiness, first seen) and the reused parts of its views.
// becameLeader makes it afresh for each term; a member that does not lead
// lets it go when quiesced (dropIdle), so that the idle followers of a
// host's many groups do not hold a leader's maps. Owned by the run loop.
type leaderBook struct {
	// leaderSince is when this member became leader.
	leaderSince time.Time
	// readySince is the policy's memory (confchange.UpdateReadySince).
	readySince map[uint64]time.Time
	// firstSeen is when this leader first tracked each member: a member
	// added while it leads is not "unheard of" for longer than it exists.
	firstSeen map[uint64]time.Time
	// inherited: members recorded ready before this term, and when this
	// member learned it (see readiness.go); recorded: the readiness last
	// recorded per member; recordedAt: the tick before which a member's
	// readiness is not recorded again.
	inherited  map[uint64]time.Time
	recorded   map[uint64]bool
	recordedAt map[uint64]uint64
	// waiting is what the default policy last said it waits for.
	waiting string
	// bookMembers and bookSettings are the member table and the settings
	// of the last bookkeeping pass: a change of either runs the next.
	bookMembers  *memberTable
	bookSettings *confchange.ClusterSettings
	// viewProgress and viewConfig (built from viewConfigOf) are reused by
	// view while the default policy reads them.
	viewProgress map[uint64]confchange.Progress
	viewConfig   *confchange.Config
	viewConfigOf *raftpb.ConfState
	// viewMembers and viewRemoved are the records and the removed IDs of
	// viewMembersOf as maps (what a view takes), shared by every view of
	// that table as the table's own maps were: never modified.
	viewMembers   map[uint64]Member
	viewRemoved   map[uint64]bool
	viewMembersOf *memberTable
	// lastBookkeeping is the tick of the last membershipTick.
	lastBookkeeping uint64
}

// leaderBook returns the leader's bookkeeping, made if the node has none
// (only a leader's paths call it: a follower reads book, nil or not).
func (ms *membershipLoop) leaderBook() *leaderBook {
	if ms.book == nil {
		ms.book = new(leaderBook)
	}
	return ms.book
}

// readySince returns the leader's readiness memory (nil without a book).
func (ms *membershipLoop) readySince() map[uint64]time.Time {
	if ms.book == nil {
		return nil
	}
	return ms.book.readySince
}
