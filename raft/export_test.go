package raft

import "io"

// ErrSnapshotSuperseded is errSnapshotSuperseded, for the external tests.
var ErrSnapshotSuperseded = errSnapshotSuperseded

// SnapshotSessions returns the client sessions in a snapshot's data (read
// from r), in their canonical encoding: two members hold the same sessions
// if and only if the bytes are equal.
func SnapshotSessions(r io.Reader) ([]byte, error) {
	h, err := readSnapHeader(r)
	if err != nil {
		return nil, err
	}
	return h.sessions, nil
}

// Ticks returns how many raft ticks the node's loop ran.
func Ticks(n *Node) uint64 { return n.ticked.Load() }

// SchedStats returns the stats of the node's scheduler.
func SchedStats(n *Node) SchedulerStats { return n.sched.Stats() }

// VoterOrder is voterOrder: the order in which members campaign first
// (a new cluster's first election, a dead leader's replacement).
func VoterOrder(clusterID uint64, ids []uint64) []uint64 { return voterOrder(clusterID, ids) }
