package raft

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	etcdraft "go.etcd.io/raft/v3"
)

// TransferLeadership asks the leader to hand leadership to member to and
// waits until to leads, within ctx. A learner cannot lead
// (ErrLearnerCannotLead); an ID outside the configuration is
// ErrUnknownMember.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	var err error
	if derr := n.do(ctx, func() {
		cfg := n.loop.rn.Status().Config
		if _, ok := cfg.Learners[to]; ok {
			err = fmt.Errorf("%w: member %d is a learner", ErrLearnerCannotLead, to)
			return
		}
		if _, ok := cfg.LearnersNext[to]; ok {
			err = fmt.Errorf("%w: member %d is becoming a learner", ErrLearnerCannotLead, to)
			return
		}
		if _, ok := cfg.Voters.IDs()[to]; !ok {
			err = fmt.Errorf("%w: %d", ErrUnknownMember, to)
			return
		}
		n.loop.rn.TransferLeader(to)
	}); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	return waitFor(n, ctx, n.state, func(s nodeState) bool { return s.leader == to })
}

// handOffLeadership, on a leader with other voters, transfers leadership to
// the most caught-up voter and waits (within ctx) until it leads.
func (n *Node) handOffLeadership(ctx context.Context) {
	var target uint64
	_ = n.do(ctx, func() {
		st := n.loop.rn.Status()
		if st.RaftState != etcdraft.StateLeader {
			return
		}
		var best uint64
		for id := range st.Config.Voters.IDs() {
			if id == n.cfg.ID {
				continue
			}
			pr, ok := st.Progress[id]
			if !ok || !n.recentlyActive(n.loop.lastContact[id], time.Now()) {
				continue // a member that cannot answer cannot take over
			}
			if target == 0 || pr.Match > best || (pr.Match == best && id < target) {
				target, best = id, pr.Match
			}
		}
		if target != 0 {
			n.log.Info("stopping: handing leadership over", slog.Uint64("to", target), slog.Uint64("match", best))
			n.loop.rn.TransferLeader(target)
		}
	})
	if target == 0 {
		return
	}
	// Raft abandons a transfer after an election timeout; so do we.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval)
	defer cancel()
	_ = n.state.wait(ctx, n.stopc, func(s nodeState) bool { return s.leader != n.cfg.ID })
}
