package robustness

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// A scripted scenario (Scenario.Script) makes its changes in a fixed order
// while the clients run, instead of drawing them at random, and asserts that
// each took effect: a step that never does within stepBound fails the run
// with the fault timeline. The bounds are failure bounds only: nothing
// asserts how fast a step goes.
const (
	stepBound    = 20 * time.Second // one step, retries included
	attemptBound = 3 * time.Second  // one call of a step
	retryPause   = 20 * time.Millisecond
)

// script is what a Scenario.Script drives: the cluster, the history (its
// steps go on the fault timeline), the seed's random source and the
// run's failure function.
type script struct {
	c    *cluster.Cluster
	h    *History
	rng  *rand.Rand
	nm   *nemesis // the faults drawn between steps; the counters
	fail func(format string, args ...any)
}

// record puts a step on the fault timeline and counts it.
// members describes every member for a failure: its role, term, leader,
// indexes and configuration, or why it does not answer.
func (s *script) members() string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, m := range s.c.Running() {
		st, err := m.Node.Status(ctx)
		if err != nil {
			fmt.Fprintf(&b, "  %d: %v (node error: %v)\n", m.ID, err, m.Node.Err())
			continue
		}
		fmt.Fprintf(&b, "  %d: %s term %d leader %d commit %d applied %d last %d, %s, dropped %d\n",
			m.ID, st.Role, st.Term, st.Leader, st.Commit, st.Applied, st.LastIndex, configOf(st), st.PeerMessagesDropped)
	}
	return b.String()
}

func (s *script) record(kind, what string) {
	s.nm.kinds[kind]++
	s.h.Fault(kind, what)
}

// changed records a membership change that took effect.
func (s *script) changed(kind, what string) {
	s.nm.changes++
	s.record(kind, what)
}

// between runs between two steps: the clients run for a while in the
// configuration just reached (the scenario's Every, drawn as the nemesis
// does: a schedule, not a wait for a condition), then one of the scenario's
// faults is injected — network and disk ones that leave every member
// running, drawn by the seed; a heal is among them.
func (s *script) between() {
	every := s.nm.sc.Every
	time.Sleep(every/2 + time.Duration(s.rng.Int63n(int64(every))))
	if len(s.nm.sc.Faults) == 0 {
		return
	}
	kind := s.nm.sc.Faults[s.rng.Intn(len(s.nm.sc.Faults))]
	if what := s.nm.do(kind); what != "" {
		s.record(kind, what)
	}
}

// leaderStatus returns a running member that leads, and its status: of
// those that believe they lead, the one in the highest term (one cut off
// may not know yet that it was replaced). It waits up to attemptBound for
// one. (Not Cluster.Leader: a member that applied its own removal has
// stopped, and its status cannot be read until the script crashes it.)
func (s *script) leaderStatus(ctx context.Context) (*cluster.Member, raft.Status, error) {
	lctx, cancel := context.WithTimeout(ctx, attemptBound)
	defer cancel()
	for {
		var (
			lead *cluster.Member
			best raft.Status
		)
		for _, m := range s.c.Running() {
			if !m.Node.IsLeader() {
				continue
			}
			st, err := m.Node.Status(lctx)
			if err == nil && st.Role == raft.RoleLeader && st.Term > best.Term {
				lead, best = m, st
			}
		}
		if lead != nil {
			return lead, best, nil
		}
		select {
		case <-lctx.Done():
			return nil, raft.Status{}, fmt.Errorf("no member leads: %w", lctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// noteErr keeps err as the last error a step met, unless it only says that
// ctx — the step's bound — ended.
func noteErr(ctx context.Context, last *error, err error) {
	if err != nil && ctx.Err() == nil {
		*last = err
	}
}

// passing reports whether a step waits out err and tries again: a refusal
// for the quorum at risk (a member just restarted is not active yet), a
// learner not ready yet or a change in progress; or no refusal at all (no
// leader, a timeout, the leader changed or stopped — the configuration then
// says whether the step took effect).
func passing(err error) bool {
	switch confchange.Code(err) {
	case "", "quorum_at_risk", "learner_not_ready", "change_in_progress":
		return true
	}
	return false
}

// until runs step what: attempt on the leader until done reports, on the
// leader's status, that it took effect. Passing refusals are retried;
// another refusal, or no effect within stepBound, fails the run. It
// returns the leader's status that showed the effect.
func (s *script) until(kind, what string, attempt func(ctx context.Context, l *cluster.Member) error, done func(st raft.Status) bool) raft.Status {
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	var (
		last     error
		lastSt   raft.Status
		accepted bool
	)
	for {
		l, st, err := s.leaderStatus(ctx)
		switch {
		case err != nil:
			noteErr(ctx, &last, err)
		case done(st):
			s.changed(kind, fmt.Sprintf("%s: took effect, leader %d has %s", what, l.ID, configOf(st)))
			return st
		case !accepted:
			lastSt = st
			actx, acancel := context.WithTimeout(ctx, attemptBound)
			err = attempt(actx, l)
			acancel()
			if err == nil {
				accepted = true // its effect shows on the leader at once, or soon (a new leader)
				continue
			}
			noteErr(ctx, &last, err)
			if !passing(err) {
				// An earlier attempt of unknown outcome may have taken
				// effect since: then this one is refused as redundant.
				if l, st, serr := s.leaderStatus(ctx); serr == nil && done(st) {
					s.changed(kind, fmt.Sprintf("%s: took effect, leader %d has %s", what, l.ID, configOf(st)))
					return st
				}
				s.fail("%s: refused: %v", what, err)
			}
		default:
			lastSt = st
		}
		if ctx.Err() != nil {
			s.fail("%s: did not take effect within %s (accepted: %v; last error: %v; the leader's configuration: %s)",
				what, stepBound, accepted, last, configOf(lastSt))
		}
		time.Sleep(retryPause)
	}
}

// waitVoters waits until the leader reports exactly n voters outside a
// joint configuration, and fails the run after stepBound.
func (s *script) waitVoters(n int) raft.Status {
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	var (
		last   error
		lastSt raft.Status
	)
	for {
		_, st, err := s.leaderStatus(ctx)
		if err == nil && !st.Joint() && len(st.Voters) == n {
			return st
		}
		if err == nil {
			lastSt = st
		} else {
			noteErr(ctx, &last, err)
		}
		if ctx.Err() != nil {
			s.fail("the leader did not report %d voters outside a joint configuration within %s (last: %s; error: %v)",
				n, stepBound, configOf(lastSt), last)
		}
		time.Sleep(retryPause)
	}
}

// jointCrash is what crashInJoint saw.
type jointCrash struct {
	Leader uint64      // the leader crashed while joint
	Term   uint64      // its term then
	Joint  raft.Status // its status then: the joint configuration
}

// crashInJoint makes a joint change and crashes the leader inside it.
// trigger starts the change on the leader (it is retried on passing
// refusals; done reports that the change completed, which must not happen
// before the crash; a nil error with done false — new settings — means the
// policy makes the change next). From the start until the next leader shows
// the joint configuration, every append carrying a leave-joint entry is
// dropped: the leader enters the joint configuration and cannot leave it.
// It is crashed once it was seen joint and one of its leave-joint appends
// was held back, so the crash lands inside the joint configuration
// deterministically, and the next leader (in a later term) must show that
// it inherited it. The crashed member restarts at once when
// the others cannot elect a leader without it, else once the change is
// complete. It checks that the next leader completes the change: a
// configuration outside a joint state whose voters are the incoming ones.
func (s *script) crashInJoint(what string, trigger func(ctx context.Context, l *cluster.Member) (done bool, err error)) jointCrash {
	ctx, cancel := context.WithTimeout(context.Background(), stepBound)
	defer cancel()
	hold := &leaveHold{}
	s.c.Net.SetFilter(hold.drop)
	defer s.c.Net.SetFilter(nil)

	type outcome struct {
		done bool
		err  error
	}
	results := make(chan outcome, 1)
	pending, accepted := false, false // a call under way; a call that returned nil (settings: the policy acts next)
	defer func() {
		cancel()
		if pending {
			<-results
		}
	}()
	var (
		last error
		jc   jointCrash
		lead *cluster.Member
	)
	// Enter the joint configuration.
	for lead == nil {
		if !pending && !accepted {
			l, _, err := s.leaderStatus(ctx)
			if err == nil {
				pending = true
				go func() {
					actx, acancel := context.WithTimeout(ctx, stepBound)
					defer acancel()
					done, err := trigger(actx, l)
					results <- outcome{done, err}
				}()
			} else {
				noteErr(ctx, &last, err)
			}
		}
		select {
		case o := <-results:
			pending = false
			switch {
			case o.done:
				s.fail("%s: the change completed before the leader could be crashed inside its joint configuration (the leave-joint entry was not held back)", what)
			case o.err != nil && !passing(o.err):
				s.fail("%s: refused: %v", what, o.err)
			case o.err != nil:
				noteErr(ctx, &last, o.err)
				time.Sleep(retryPause)
			default:
				accepted = true
			}
		default:
		}
		for _, m := range s.c.Running() {
			if !m.Node.IsLeader() {
				continue
			}
			if st, err := m.Node.Status(ctx); err == nil && st.Role == raft.RoleLeader && st.Joint() {
				lead, jc = m, jointCrash{Leader: m.ID, Term: st.Term, Joint: st}
				break
			}
		}
		if lead == nil {
			if ctx.Err() != nil {
				s.fail("%s: the leader never showed a joint configuration within %s (last error: %v)", what, stepBound, last)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	// Crash the leader inside it, once it tried to leave it: the filter
	// held back an append carrying its leave-joint entry (so a filter that
	// no longer recognizes the entry fails here, rather than leaving the
	// crash to timing).
	for hold.held(lead.ID) == 0 {
		if st, err := lead.Node.Status(ctx); err == nil && !st.Joint() {
			s.fail("%s: leader %d left the joint configuration %s before it could be crashed inside it: its leave-joint was not held back (now %s)",
				what, lead.ID, configOf(jc.Joint), configOf(st))
		}
		if ctx.Err() != nil {
			s.fail("%s: leader %d in the joint configuration %s sent no append with a leave-joint entry within %s: it was not held back",
				what, lead.ID, configOf(jc.Joint), stepBound)
		}
		time.Sleep(time.Millisecond)
	}
	s.c.Crash(lead.ID)
	s.record(CrashInJoint, fmt.Sprintf("%s: crash leader %d (term %d) in the joint configuration %s, its leave-joint held back",
		what, lead.ID, jc.Term, configOf(jc.Joint)))
	restarted := false
	if !electable(jc.Joint, s.nm.running(), lead.ID) {
		s.c.Restart(lead.ID)
		restarted = true
		s.record(Restart, fmt.Sprintf("restart %d at once: the others cannot elect a leader without it", lead.ID))
	}
	// The crash landed inside the joint configuration: the next leader
	// (in a later term) has it — with the leave still held back, it cannot
	// leave it before the filter goes.
	for !slices.ContainsFunc(s.c.Running(), func(m *cluster.Member) bool {
		st, err := m.Node.Status(ctx)
		return err == nil && st.Role == raft.RoleLeader && st.Term > jc.Term && st.Joint() && sameVoters(st, jc.Joint)
	}) {
		if ctx.Err() != nil {
			s.fail("%s: after the crash of leader %d no next leader showed the joint configuration %s within %s: the crash did not land inside it\nmembers:\n%s",
				what, lead.ID, configOf(jc.Joint), stepBound, s.members())
		}
		time.Sleep(2 * time.Millisecond)
	}
	s.c.Net.SetFilter(nil)

	// The next leader completes the change.
	var lastSt raft.Status
	for {
		l, st, err := s.leaderStatus(ctx)
		if err == nil && !st.Joint() {
			if !slices.Equal(st.Voters, jc.Joint.Voters) {
				s.fail("%s: after the crash of leader %d in %s, leader %d left it for voters %v, not the incoming %v",
					what, lead.ID, configOf(jc.Joint), l.ID, st.Voters, jc.Joint.Voters)
			}
			if st.Term <= jc.Term {
				s.fail("%s: leader %d completed the change in term %d, not after the crash of leader %d in term %d",
					what, l.ID, st.Term, lead.ID, jc.Term)
			}
			s.changed(CrashInJoint, fmt.Sprintf("%s: leader %d (term %d) completed the change: %s", what, l.ID, st.Term, configOf(st)))
			break
		}
		if err == nil {
			lastSt = st
		} else {
			noteErr(ctx, &last, err)
		}
		if ctx.Err() != nil {
			s.fail("%s: no leader completed the joint change %s within %s of the crash of leader %d (last: %s; error: %v)\nmembers:\n%s",
				what, configOf(jc.Joint), stepBound, lead.ID, configOf(lastSt), last, s.members())
		}
		time.Sleep(retryPause)
	}
	if !restarted {
		s.c.Restart(lead.ID)
		s.record(Restart, fmt.Sprintf("restart %d", lead.ID))
	}
	return jc
}

// electable reports whether the running members other than down hold a
// majority of both halves of joint's voters: whether they can elect a
// leader without it.
func electable(joint raft.Status, running []uint64, down uint64) bool {
	for _, half := range [][]uint64{joint.Voters, joint.VotersOutgoing} {
		n := 0
		for _, id := range half {
			if id != down && slices.Contains(running, id) {
				n++
			}
		}
		if len(half) > 0 && n <= len(half)/2 {
			return false
		}
	}
	return true
}

// leaveHold is a network filter that drops every append carrying an entry
// that leaves a joint configuration, and counts them by sender.
type leaveHold struct {
	mu   sync.Mutex
	from map[uint64]int
}

// drop is the filter (Network.SetFilter).
func (lh *leaveHold) drop(from uint64, m *raftpb.Message) bool {
	if !carriesLeaveJoint(m) {
		return false
	}
	lh.mu.Lock()
	if lh.from == nil {
		lh.from = map[uint64]int{}
	}
	lh.from[from]++
	lh.mu.Unlock()
	return true
}

// held returns how many appends from member id were dropped.
func (lh *leaveHold) held(id uint64) int {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	return lh.from[id]
}

// carriesLeaveJoint reports whether m is an append with an entry that
// leaves a joint configuration.
func carriesLeaveJoint(m *raftpb.Message) bool {
	if m.GetType() != raftpb.MsgApp {
		return false
	}
	for _, e := range m.GetEntries() {
		if e.GetType() != raftpb.EntryConfChangeV2 {
			continue
		}
		cc := &raftpb.ConfChangeV2{}
		if proto.Unmarshal(e.GetData(), cc) == nil && cc.LeaveJoint() {
			return true
		}
	}
	return false
}

// transferTo moves leadership to voter id, retrying within stepBound.
func (s *script) transferTo(id uint64) {
	s.until(Transfer, fmt.Sprintf("transfer leadership to %d", id),
		func(ctx context.Context, l *cluster.Member) error { return l.Node.TransferLeadership(ctx, id) },
		func(st raft.Status) bool { return st.ID == id })
}

// configOf draws st's configuration, e.g. "voters=(1 2 4)&&(1 2 3) learners_next=(3)".
func configOf(st raft.Status) string {
	return confchange.Config{Voters: st.Voters, VotersOutgoing: st.VotersOutgoing,
		Learners: st.Learners, LearnersNext: st.LearnersNext}.String()
}

func sameVoters(a, b raft.Status) bool {
	return slices.Equal(a.Voters, b.Voters) && slices.Equal(a.VotersOutgoing, b.VotersOutgoing)
}
