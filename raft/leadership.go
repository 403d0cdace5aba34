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
// waits until to leads, within ctx. It works on any member: a follower or
// learner forwards the request to the leader over the member-to-member
// channel (Transport.Call), as membership calls are, and waits until it
// sees to lead. Only a voter of the incoming configuration can lead
// (confchange.Config.CanLead, checked by the leader): a learner, or a voter
// that a joint configuration is turning into a learner or removing, is
// ErrLearnerCannotLead; an ID outside the configuration is
// ErrUnknownMember. A transfer to the member that leads already returns at
// once. While no leader is known (or the known one cannot be reached) the
// call waits for one, within ctx. Raft abandons a transfer that does not
// complete within an election timeout: the call then returns ErrTimeout.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	for {
		var err error
		if derr := n.do(ctx, func() { err = n.transferOnLeader(to) }); derr != nil {
			return derr // f may still run: err is not read
		}
		var nl errNotLeader
		if !errors.As(err, &nl) {
			if err != nil {
				return err
			}
			break
		}
		if nl.leader != 0 && nl.leader != n.cfg.ID {
			// Raft's own way — stepping MsgTransferLeader on a follower —
			// forwards a message whose sender is the transferee, which the
			// leader's transport refuses as spoofed (and drops this
			// member's stream): the leader is asked over the request
			// channel instead.
			err = n.forwardTransfer(ctx, nl.leader, to)
			if err == nil {
				break
			}
			if !errors.As(err, &nl) && !retryForward(err, true) {
				return err
			}
			// The member asked does not lead (any more) or could not be
			// reached: ask again who leads, a tick later, within ctx.
			if perr := n.pauseTick(ctx); perr != nil {
				return lastAttempt(perr, err)
			}
		}
		if werr := n.waitLeaderChange(ctx, nl.leader); werr != nil {
			return werr
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*n.electionTimeout())
	defer cancel()
	err := waitFor(n, wctx, n.state, func(s nodeState) bool { return s.leader == to })
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: leadership did not move to member %d within two election timeouts", ErrTimeout, to)
	}
	return err
}

// transferOnLeader, on the leader's loop, checks that member to can lead
// and starts the transfer to it (raft ignores a transfer to itself, and
// one to the member a transfer is already under way to). Elsewhere it is
// errNotLeader: the caller forwards.
func (n *Node) transferOnLeader(to uint64) error {
	if n.loop.role != RoleLeader {
		return errNotLeader{leader: n.loop.leader}
	}
	cfg := confchange.ConfigFromTracker(n.loop.rn.Status().Config)
	if err := cfg.CanLead(to); err != nil {
		return err
	}
	if to != n.cfg.ID {
		n.log.Info("transferring leadership", slog.Uint64("to", to))
	}
	n.loop.rn.TransferLeader(to)
	return nil
}

// handOffLeadership, on a leader with other voters, transfers leadership to
// the most caught-up voter that can lead and answers now, and waits (within
// ctx) until it leads.
//
// "Answers now" is proven, not guessed from the last message heard: the
// leader sends every voter a heartbeat (a read round with no reads) and
// waits up to two heartbeat intervals for the answers; only a voter that
// answered after the stop began can take over. A member stopped a moment
// ago may still look recent (it answered the previous leader's hand-off a
// few milliseconds back): handed leadership, it would make this Stop wait
// for a transfer that cannot complete while proposals are refused.
func (n *Node) handOffLeadership(ctx context.Context) {
	began := time.Now()
	probing := false
	if derr := n.do(ctx, func() { probing = n.probeVoters() }); derr != nil || !probing {
		return
	}
	hb := time.Duration(n.cfg.HeartbeatTicks) * n.cfg.TickInterval
	deadline := time.NewTimer(max(2*hb, 20*time.Millisecond))
	defer deadline.Stop()
	poll := time.NewTicker(max(hb/20, time.Millisecond))
	defer poll.Stop()
	var target uint64
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return
		case <-n.stopc:
			return
		case <-deadline.C:
			done = true
		case <-poll.C:
		}
		final := done
		derr := n.do(ctx, func() {
			target, done = n.pickHandOffTarget(began, final)
		})
		if derr != nil {
			return // (after an early return the loop may still run f: target is not read)
		}
	}
	if target == 0 {
		return
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

// probeVoters, on a leader that has other voters and may answer reads,
// starts a read round with no reads: raft sends every voter a heartbeat at
// once, and each answer refreshes lastContact. It reports whether it did.
func (n *Node) probeVoters() bool {
	l := &n.loop
	if !n.leaderMayRead() || len(l.rn.Status().Config.Voters.IDs()) < 2 {
		return false
	}
	l.readSeq++
	l.addReadRound(&readRound{tick: l.ticks})
	l.rn.ReadIndex(n.readCtx(l.readSeq))
	return true
}

// pickHandOffTarget chooses, among the voters that can lead and answered
// since began, the most caught-up one (ties to the lowest ID), and starts
// the transfer to it. Until final it waits (done=false) while some voter
// that can lead has not answered yet; at final it picks among those that
// did. target is 0 when no member qualifies or this member no longer leads.
func (n *Node) pickHandOffTarget(began time.Time, final bool) (target uint64, done bool) {
	st := n.loop.rn.Status()
	if st.RaftState != etcdraft.StateLeader {
		return 0, true
	}
	cfg := confchange.ConfigFromTracker(st.Config)
	var best uint64
	waiting := false
	for _, id := range cfg.Voters {
		if id == n.cfg.ID || cfg.CanLead(id) != nil {
			continue
		}
		if n.loop.lastContact.get(id).Before(began) {
			waiting = true // not answered (yet): it cannot take over
			continue
		}
		pr, ok := st.Progress[id]
		if !ok || pr.State != tracker.StateReplicate || pr.Match == 0 {
			continue
		}
		if target == 0 || pr.Match > best || (pr.Match == best && id < target) {
			target, best = id, pr.Match
		}
	}
	if waiting && !final {
		return 0, false
	}
	if target != 0 {
		n.log.Info("stopping: handing leadership over", slog.Uint64("to", target), slog.Uint64("match", best))
		n.loop.rn.TransferLeader(target)
	}
	return target, true
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
			silent = !n.answersNow(target) && n.loop.lastContact.get(target).Before(began)
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
	heard := n.loop.lastContact.get(id)
	if heard.IsZero() || (n.loop.ms.book != nil && heard.Before(n.loop.ms.book.leaderSince)) {
		return false
	}
	window := max(3*time.Duration(n.cfg.HeartbeatTicks)*n.cfg.TickInterval, 50*time.Millisecond)
	return time.Since(heard) <= window
}
