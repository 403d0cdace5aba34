package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/understudy-raft/understudy/confchange"
)

// TransferLeadership asks the leader to hand leadership to member to and
// waits until to leads, within ctx. Only a voter of the incoming
// configuration can lead (confchange.Config.CanLead): a learner, or a voter
// that a joint configuration is turning into a learner or removing, is
// ErrLearnerCannotLead; an ID outside the configuration is
// ErrUnknownMember. Raft abandons a transfer that does not complete within
// an election timeout: the call then returns ErrTimeout.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	var err error
	if derr := n.do(ctx, func() {
		cfg := confchange.ConfigFromTracker(n.loop.rn.Status().Config)
		if err = cfg.CanLead(to); err != nil {
			return
		}
		n.loop.rn.TransferLeader(to)
	}); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*n.electionTimeout())
	defer cancel()
	err = waitFor(n, wctx, n.state, func(s nodeState) bool { return s.leader == to })
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: leadership did not move to member %d within two election timeouts", ErrTimeout, to)
	}
	return err
}

// handOffLeadership, on a leader with other voters, transfers leadership to
// the most caught-up voter that can lead and answers, and waits (within ctx)
// until it leads.
func (n *Node) handOffLeadership(ctx context.Context) {
	var target uint64
	derr := n.do(ctx, func() {
		st := n.loop.rn.Status()
		if st.RaftState != etcdraft.StateLeader {
			return
		}
		cfg := confchange.ConfigFromTracker(st.Config)
		var best uint64
		for _, id := range cfg.Voters {
			if id == n.cfg.ID || cfg.CanLead(id) != nil {
				continue
			}
			pr, ok := st.Progress[id]
			if !ok || !n.answersNow(id) || pr.State != tracker.StateReplicate || pr.Match == 0 {
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
	if derr != nil || target == 0 {
		return // (after an early return the loop may still run f: target is not read)
	}
	// Raft abandons a transfer after an election timeout; so do we — and
	// sooner if the target falls silent (it stopped too, a moment ago: a
	// live member answers every heartbeat), so that members stopped one
	// after the other do not each wait for a hand-off that cannot complete.
	ctx, cancel := context.WithTimeout(ctx, 2*n.electionTimeout())
	defer cancel()
	go n.abandonSilentTransfer(ctx, cancel, target, time.Now())
	_ = n.state.wait(ctx, n.stopc, func(s nodeState) bool { return s.leader != n.cfg.ID })
}

// abandonSilentTransfer calls cancel once the leader has not heard from
// target for the answersNow window since the transfer began.
func (n *Node) abandonSilentTransfer(ctx context.Context, cancel context.CancelFunc, target uint64, began time.Time) {
	step := time.Duration(n.cfg.HeartbeatTicks) * n.cfg.TickInterval
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var silent bool
		if err := n.do(ctx, func() {
			silent = !n.answersNow(target) && n.loop.lastContact[target].Before(began)
		}); err != nil {
			return
		}
		if silent {
			n.log.Info("stopping: the hand-off target is silent; not waiting for it", slog.Uint64("to", target))
			cancel()
			return
		}
	}
}

// answersNow reports whether this leader heard from member id since it took
// over and within the last three heartbeats: a live member answers every
// heartbeat, and one that stopped a moment ago (its last message is older)
// must not be handed leadership, or the stop waits for a transfer that
// cannot complete while proposals are refused.
func (n *Node) answersNow(id uint64) bool {
	heard := n.loop.lastContact[id]
	if heard.IsZero() || heard.Before(n.loop.ms.leaderSince) {
		return false
	}
	window := max(3*time.Duration(n.cfg.HeartbeatTicks)*n.cfg.TickInterval, 50*time.Millisecond)
	return time.Since(heard) <= window
}
