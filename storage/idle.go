package storage

import "go.etcd.io/raft/v3/raftpb"

// emptySnapshot is a new group's latest snapshot (none), shared by every
// Store: a Store replaces its snapshot and never modifies it, and hands
// out copies (Snapshot).
var emptySnapshot = raftpb.EnsureSnapshot(nil)

// DropCaches lets go of what the store holds in memory only to be fast
// while its group is busy: the tail of recent entries (Entries and Term read
// them from the database afterwards, and Save starts a new tail) but for the
// last entry's term (an election asks for it on every member: no database
// read for it) and, unless
// a write is in progress, the write state and buffers Save reuses. A node calls it when its
// group quiesces, so that an idle replica of a host's many groups holds no
// copy of its log; the next Save or read brings what it needs back. Like
// Entries, it waits for a write that removes entries (never one that only
// appends) to commit. Safe for concurrent use.
func (s *Store) DropCaches() {
	s.mu.Lock()
	s.tail.dropIdle()
	s.mu.Unlock()
	if s.wmu.TryLock() {
		s.ws = nil
		s.wmu.Unlock()
	}
}
