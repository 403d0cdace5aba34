package raft

import (
	"context"
	"io"
)

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

// StopClock stops the node's tick clock (on its loop): it ticks only
// when LeaderTicks says so.
func StopClock(ctx context.Context, n *Node) error {
	return n.do(ctx, func() {
		n.cancelTick()
		n.cancelTick = func() {}
	})
}

// LeaderTicks runs, on the node's loop, k ticks of the node's own
// bookkeeping (tickWork) without raft's (no heartbeats): what a tick costs
// the node beyond raft.
func LeaderTicks(ctx context.Context, n *Node, k int) error {
	return n.do(ctx, func() {
		for range k {
			n.loop.ticks++
			n.tickWork()
		}
	})
}

// ReadPasses returns how many of the node's loop passes took at least one
// ReadIndex request of another member.
func ReadPasses(ctx context.Context, n *Node) (passes uint64, err error) {
	err = n.do(ctx, func() { passes = n.loop.readPasses })
	return passes, err
}

// LeaderStateHeld reports what of a leader's state the node's loop holds:
// its membership bookkeeping (book), the reused parts of its views
// (views), its relay state (relay). Asked without waking a quiesced node.
func LeaderStateHeld(ctx context.Context, n *Node) (book, views, relay bool, err error) {
	err = n.doQuiet(ctx, func() {
		b := n.loop.ms.book
		book = b != nil
		views = b != nil && (b.viewProgress != nil || b.viewConfigOf != nil)
		relay = n.loop.relay != nil
	})
	return book, views, relay, err
}

// ApplyBuffersHeld reports whether the node's apply task holds its batch
// buffers.
func ApplyBuffersHeld(n *Node) bool { return n.applyBufsHeld.Load() }

// QuietHeir reports whether the quiesced follower n ranks first among its
// group's voters but the leader: its wake goes first when the leader's
// host dies.
func QuietHeir(n *Node) bool { return n.quietHeir.Load() }
