package raft

import (
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Commit bumps. Each time a leader's commit index moves, etcd raft
// broadcasts a MsgApp to every follower (bcastAppend), with entries if it
// has any to send and else empty: an empty one to a follower that has
// acknowledged every entry only tells it the new commit index. It costs a
// round of its own — the follower's loop run, its answer (a MsgAppResp
// acknowledging nothing new, after an append with nothing to write) and
// the leader's loop run for that answer — and with a few writes per
// round it was more than one message a write (issue 37: 1.6 empty
// MsgApps and as many answers a write at 100 groups).
//
// The leader does not send it: the follower learns the commit index from
// the next MsgApp to it, which carries it (when writes go on: with the
// next round's entries), or from the next heartbeat, which carries
// min(match, commit) — the whole commit index here, the follower's match
// being the leader's last index — within the heartbeat interval. Raft
// counts it sent (Progress.SentCommit), which is what a lost message
// would look like. Only such a message is held back: to a follower
// replicating (tracker.StateReplicate) whose match is at the message's
// index (nothing sent to it unacknowledged, so the message probes
// nothing and frees no inflight slot: those go, as the probes and the
// empty appends a heartbeat's answer prompts while the follower lags),
// and not to a relayed standby (its relay's own traffic is left as it
// is, nor to any member while the leader relays: relay.go).

// commitBump is the run loop's look-up of a follower's progress for
// isCommitBump, bound once (no closure a message).
type commitBump struct {
	to, index uint64
	bump      bool
	visit     func(id uint64, typ etcdraft.ProgressType, pr tracker.Progress)
}

// isCommitBump reports whether m, a network message of a Ready of this
// leader, is a MsgApp that only carries the commit index to a follower
// that has every entry (see above). It runs on the loop.
func (n *Node) isCommitBump(m *raftpb.Message) bool {
	l := &n.loop
	if m.GetType() != raftpb.MsgApp || len(m.Entries) > 0 || m.Snapshot != nil || l.role != RoleLeader ||
		(l.relay != nil && len(l.relay.via) > 0) {
		return false
	}
	c := &l.buffers().bump
	if c.visit == nil {
		c.visit = func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
			if id == c.to {
				c.bump = pr.State == tracker.StateReplicate && pr.Match >= c.index && pr.PendingSnapshot == 0
			}
		}
	}
	c.to, c.index, c.bump = m.GetTo(), m.GetIndex(), false
	l.rn.WithProgress(c.visit)
	return c.bump
}
