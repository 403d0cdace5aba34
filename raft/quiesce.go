package raft

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"log/slog"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/understudy-raft/understudy/internal/sched"
)

// Quiescence (Config.Quiesce): an idle group stops ticking and sending.
// See "Quiescence" in docs/architecture.md for the conditions and the
// safety argument. Everything here runs on the run loop, but for the
// HostLiveness and refusal handlers (quiesceHostLiveness, quiesceRefused),
// which read atomics only.

// wakeCause is why a quiesced node woke (SchedulerStats.Wakes).
type wakeCause int

const (
	wakeProposal wakeCause = iota
	wakeRead
	wakeCall
	wakeMessage
	wakeRefused
	wakeNudge
	wakeLeaderDead
	wakeHostDown
	wakeLeaderGone
	wakePolicy
	wakeHostUp
	numWakeCauses
)

var wakeCauseNames = [numWakeCauses]string{"proposal", "read", "call", "message", "refused", "nudge", "leaderDead", "hostDown", "leaderGone", "policy", "hostUp"}

func (c wakeCause) String() string { return wakeCauseNames[c] }

// wakeCounts returns the scheduler's wake-ups by cause.
func (s *Scheduler) wakeCounts() map[string]uint64 {
	m := make(map[string]uint64, numWakeCauses)
	for i := range s.woken {
		m[wakeCauseNames[i]] = s.woken[i].Load()
	}
	return m
}

const (
	// quiesceAfterTicks is how many ticks a leader's group must have been
	// idle before it quiesces; each refusal doubles it, up to
	// maxQuiesceAfterTicks, and activity resets it.
	quiesceAfterTicks    = 6
	maxQuiesceAfterTicks = 64
)

// The quiesce marker rides in a heartbeat's context: 8 zero bytes (etcd
// raft reads any MsgHeartbeatResp context as an 8-byte little-endian read
// position: zero acknowledges no read, and a real read context is exactly
// 8 bytes, so the marker never equals one), "usqz" and a kind.
const (
	quiesceKind byte = 1 // leader to follower: quiesce
	nudgeKind   byte = 2 // follower to leader: wake up
)

var quiesceMagic = []byte("usqz")

func quiesceContext(kind byte) []byte {
	b := make([]byte, 13)
	copy(b[8:], quiesceMagic)
	b[12] = kind
	return b
}

// quiesceKindOf returns the kind of a quiesce marker, 0 if ctx is none.
func quiesceKindOf(ctx []byte) byte {
	if len(ctx) != 13 || binary.LittleEndian.Uint64(ctx) != 0 || !bytes.Equal(ctx[8:12], quiesceMagic) {
		return 0
	}
	return ctx[12]
}

// quiesceState is the run loop's quiescence state.
type quiesceState struct {
	// on: the group is quiesced (since when); busy: something that is not
	// idle happened since the last tick (see lastBusy); stirred: something
	// that wakes a quiesced node happened in this run of the loop (cause,
	// and the sender of a message).
	on, busy, stirred bool
	since             time.Time
	// set are the members the leader told to quiesce (nil on a follower);
	// lag those on a host not live, left untold, and the policy's timer
	// (quiesce_lagging.go; nil: none, as for most of a host's leaders).
	set []uint64
	lag *quietLag
	// lastBusy is the tick at which the group was last busy; sig is what
	// it had done then (last index, applied, term).
	lastBusy uint64
	sig      [3]uint64
	// after is the current idle threshold in ticks (0: quiesceAfterTicks).
	after uint64
	cause wakeCause
	from  uint64
	// woken counts this node's wakes by cause (made with the first),
	// last the latest (Status).
	woken *[numWakeCauses]uint64
	last  wakeCause
}

// wakeCounts returns the node's wakes by cause (zero before the first).
func (q *quiesceState) wakeCounts() [numWakeCauses]uint64 {
	if q.woken == nil {
		return [numWakeCauses]uint64{}
	}
	return *q.woken
}

// stir notes something that is not idle: it wakes a quiesced node at the
// end of the loop's intake, and makes an awake leader count its idle ticks
// afresh.
func (n *Node) stir(cause wakeCause, from uint64) {
	q := &n.loop.q
	q.busy = true
	if q.on && !q.stirred {
		q.stirred, q.cause, q.from = true, cause, from
	}
}

// noteIdle runs on each tick of a node with Quiesce on: the group was busy
// at this tick if anything moved since the last one.
func (n *Node) noteIdle() {
	l := &n.loop
	q := &l.q
	sig := [3]uint64{l.ms.lastIndex, n.applied.get(), l.term}
	if q.busy || sig != q.sig {
		q.busy, q.sig, q.lastBusy = false, sig, l.ticks
	}
}

// maybeQuiesce quiesces the group if this member leads it, it was idle
// for the threshold, nothing is pending, everything is durable and
// applied, the configuration is at rest, every member on a live host is
// caught up and, for a learner, ready, stable and recorded so, and the
// members on a host not live (lagging: told nothing) leave a quorum of
// caught-up live voters and a policy decision whose time is known
// (laggingDeadline). It runs at the end of a loop run that took a tick.
func (n *Node) maybeQuiesce() {
	l := &n.loop
	q := &l.q
	after := q.after
	if after == 0 {
		after = quiesceAfterTicks
	}
	if q.on || l.role != RoleLeader || l.ticks-q.lastBusy < after || n.stopped() {
		return
	}
	lt, ok := n.tr.(LivenessTransport)
	if !ok || n.settings.Load() == nil {
		return
	}
	if !n.nothingPending(true) {
		return
	}
	// The policy is asked now: a group it would change, or that it could
	// not ask (a change pending, a joint configuration), does not quiesce.
	// What follows judges the members at the instant the policy did: a
	// learner whose stabilization ended since would read as stable here
	// and as stabilizing to the policy, and the promotion due would never
	// be made.
	atRest, now := n.membershipDecide()
	if !atRest {
		return
	}
	st := l.rn.Status()
	ms := &l.ms
	applied := n.applied.get()
	if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != 0 ||
		st.GetCommit() != ms.lastIndex || st.Applied != st.GetCommit() || applied != st.GetCommit() ||
		len(st.Config.Voters[1]) > 0 || len(st.Config.LearnersNext) > 0 {
		return
	}
	settings := n.membershipSettings()
	set := make([]uint64, 0, len(st.Progress))
	var lagging []uint64
	votes := map[uint64]bool{n.cfg.ID: true}
	for id, pr := range st.Progress {
		if id == n.cfg.ID {
			if pr.Match != ms.lastIndex {
				return
			}
			continue
		}
		if at, live := lt.HostContact(id); !live {
			// A member on a host not live is left lagging, once its
			// silence is what the policy would see after a wake (not
			// heard within an election timeout, by its group or its
			// host) and no snapshot is in flight to it.
			if n.recentlyActive(later(l.lastContact.get(id), at), now) || pr.PendingSnapshot != 0 {
				return
			}
			lagging = append(lagging, id)
			continue
		}
		if pr.Match != ms.lastIndex || pr.State != tracker.StateReplicate || pr.PendingSnapshot != 0 {
			return
		}
		if pr.IsLearner {
			since, ready := ms.readySince()[id]
			if !ready || ms.book == nil || !ms.book.recorded[id] || now.Sub(since) < settings.Stabilization {
				return // a learner catching up or stabilizing keeps the group awake
			}
		}
		votes[id] = true
		set = append(set, id)
	}
	var deadline time.Time
	if len(lagging) > 0 {
		// The caught-up live voters and the leader must be a quorum, or
		// the group stays awake so that CheckQuorum acts.
		if st.Config.Voters[0].VoteResult(votes) != quorum.VoteWon {
			return
		}
		var ok bool
		if deadline, ok = n.laggingDeadline(lagging, now); !ok {
			return
		}
	}
	slices.Sort(set)
	slices.Sort(lagging)
	self, term, commit := n.cfg.ID, l.term, st.GetCommit()
	msgs := make([]*raftpb.Message, len(set))
	for i := range set {
		to := set[i]
		msgs[i] = &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: &self, To: &to, Term: &term, Commit: &commit, Context: quiesceContext(quiesceKind)}
	}
	n.quiesceLagging(lagging, deadline) // published before the node reads as quiesced
	n.quiesce(set, self)
	n.recheckHosts(lt)
	if len(msgs) > 0 {
		// A relayed standby's marker goes the way its heartbeats went,
		// through its relay: sent directly, it could overtake the last
		// relayed heartbeat, which would then wake the standby with its
		// leader quiesced, awake for good. Through a relay left lagging
		// (its host not live) it would be lost: it goes directly.
		var direct []*raftpb.Message
		msgs = slices.DeleteFunc(msgs, func(m *raftpb.Message) bool {
			if via := l.relayVia(m.GetTo()); via != 0 && slices.Contains(lagging, via) {
				direct = append(direct, m)
				return true
			}
			return false
		})
		if len(direct) > 0 {
			n.tr.Send(direct)
		}
		if len(msgs) > 0 {
			n.sendOut(msgs)
		}
	}
}

// nothingPending reports whether no proposal, read, call, message,
// change or snapshot waits anywhere in the node.
// A Ready is pending work on a leader; on a follower it holds the answer
// to the heartbeat that came with the quiesce message (sent after).
func (n *Node) nothingPending(leader bool) bool {
	l := &n.loop
	if len(l.pending) > 0 || n.props.len() > 0 || len(l.readQueue) > 0 || len(l.readRounds) > 0 ||
		len(l.heldReadIndex) > 0 || n.reads.len() > 0 || n.acts.len() > 0 || n.recv.len() > 0 ||
		len(l.snapBackoff) > 0 || l.ms.checking != 0 || l.ms.confGate > n.applied.get() || (leader && l.rn.HasReady()) {
		return false
	}
	n.waiters.mu.Lock()
	waiting := len(n.waiters.m)
	n.waiters.mu.Unlock()
	n.changes.mu.Lock()
	waiting += len(n.changes.m)
	n.changes.mu.Unlock()
	return waiting == 0
}

// acceptQuiesce reports whether a follower or learner takes the leader's
// quiesce message m: same term and leader, the same commit, which is its
// last index and applied, and nothing of its own waiting.
func (n *Node) acceptQuiesce(m *raftpb.Message) bool {
	l := &n.loop
	if !n.cfg.Quiesce {
		return false // stepped: the leader learns it from raft's answer
	}
	if l.q.on {
		return m.GetFrom() == n.quietLeader.Load() && m.GetTerm() == l.term
	}
	st := l.rn.BasicStatus()
	return st.RaftState == etcdraft.StateFollower && st.GetTerm() == m.GetTerm() && st.Lead == m.GetFrom() &&
		st.GetCommit() == m.GetCommit() && st.GetCommit() == l.ms.lastIndex && n.applied.get() == st.GetCommit() &&
		n.nothingPending(false)
}

// quiesce stops the node's ticks; leader is the group's leader (this
// member when it leads), set the members the leader told.
func (n *Node) quiesce(set []uint64, leader uint64) {
	l := &n.loop
	q := &l.q
	q.on, q.since, q.set, q.stirred = true, time.Now(), set, false
	n.cancelTick()
	n.cancelTick = func() {}
	n.quietLeader.Store(leader)
	n.quietHeir.Store(leader != n.cfg.ID && n.rankAmongVoters(leader, nil) == 0)
	n.quiesced.Store(true)
	if n.local.len() > 0 {
		n.loopTask.Signal() // a quiet answer queued before it read quiesced (quietanswers.go)
	}
	n.sched.quiesced.Add(1)
	n.log.Debug("quiesced", slog.Uint64("leader", leader), slog.Uint64("term", l.term))
}

// dropBuffers lets an idle node's loop buffers go (at the end of a run),
// and the rest of its idle memory (dropIdle).
func (n *Node) dropBuffers() {
	l := &n.loop
	l.bufs = nil
	n.dropIdle()
}

// wake ends the node's quiescence: its ticks resume, the policy's timer
// stops, the members the leader had told or left lagging get their host's
// contact as group contact (a member on a live host counts as heard now,
// one on a host not live as of its host's last answer), and a follower
// woken by anything but its leader asks the leader to wake, so that the
// leader heartbeats before it times out.
func (n *Node) wake(cause wakeCause, from uint64) {
	l := &n.loop
	q := &l.q
	if !q.on {
		return
	}
	q.on, q.stirred, q.lastBusy, q.busy = false, false, l.ticks, false
	if cause != wakeRefused && cause != wakeNudge {
		q.after = 0
	}
	n.quiesced.Store(false)
	n.quietLeader.Store(0)
	n.sched.quiesced.Add(-1)
	n.sched.woken[cause].Add(1)
	if q.woken == nil {
		q.woken = new([numWakeCauses]uint64)
	}
	q.woken[cause]++
	q.last = cause
	n.cancelTick = n.sched.clock.Every(n.cfg.TickInterval, n.onTick)
	if lt, ok := n.tr.(LivenessTransport); ok {
		now := time.Now()
		for _, id := range slices.Concat(q.set, q.laggingIDs()) {
			at, live := lt.HostContact(id)
			if live {
				at = now
			}
			if at.After(l.lastContact.get(id)) {
				l.lastContact.set(id, at)
			}
		}
	}
	n.endLagging()
	q.set = nil
	l.catchUp = nil // rates over a quiet spell mean nothing
	n.log.Debug("woke", slog.String("cause", cause.String()))
	if l.role != RoleLeader && l.leader != 0 && l.leader != n.cfg.ID &&
		cause != wakeLeaderDead && cause != wakeLeaderGone && (cause != wakeMessage || from != l.leader) {
		self, to, term := n.cfg.ID, l.leader, l.term
		n.tr.Send([]*raftpb.Message{{Type: raftpb.MsgHeartbeatResp.Enum(), From: &self, To: &to, Term: &term, Context: quiesceContext(nudgeKind)}})
	}
}

// endQuiesce drops the scheduler's count of a node that exits quiesced.
func (n *Node) endQuiesce() {
	if n.loop.q.on {
		n.loop.q.on = false
		n.endLagging()
		n.quiesced.Store(false)
		n.sched.quiesced.Add(-1)
	}
}

// quietStep handles the quiescence side of a peer message before it is
// stepped: it reports whether m is quiet (does not wake a quiesced node)
// and whether it was consumed (not to be stepped).
func (n *Node) quietStep(m *raftpb.Message) (quiet, consumed bool) {
	l := &n.loop
	switch m.GetType() {
	case raftpb.MsgHeartbeat:
		if quiesceKindOf(m.GetContext()) == quiesceKind && n.acceptQuiesce(m) {
			if !l.q.on {
				n.quiesce(nil, m.GetFrom())
			}
			return true, true
		}
		// Stepped as it is: raft answers with the marker, a refusal.
	case raftpb.MsgHeartbeatResp:
		switch quiesceKindOf(m.GetContext()) {
		case quiesceKind:
			// A follower refused: wake, and wait longer next time. The
			// marker never reaches raft (it reads contexts as read acks).
			m.Context = nil
			l.q.after = min(max(l.q.after, quiesceAfterTicks)*2, maxQuiesceAfterTicks)
			n.stir(wakeRefused, m.GetFrom())
			return false, false
		case nudgeKind:
			m.Context = nil
			n.stir(wakeNudge, m.GetFrom())
			return false, false
		}
		return m.GetTerm() == l.term, false
	case raftpb.MsgAppResp:
		return !m.GetReject() && m.GetTerm() == l.term, false
	case raftpb.MsgPreVote, raftpb.MsgVote:
		n.maybeForgetDeadLeader(m.GetFrom())
	}
	return false, false
}

// maybeForgetDeadLeader: a vote request from another member while the
// leader's host is known not live makes this follower forget the leader,
// so that it may grant it instead of sitting out a lease its frozen ticks
// would make last forever (etcd raft's ForgetLeader, for an external
// failure detector).
func (n *Node) maybeForgetDeadLeader(from uint64) {
	l := &n.loop
	if !n.cfg.Quiesce || l.leader == 0 || l.leader == from || l.leader == n.cfg.ID || l.role == RoleLeader {
		return
	}
	if n.hostKnownDead(l.leader) {
		_ = l.rn.ForgetLeader()
	}
}

// hostKnownDead reports whether member id's host was heard once and is
// not live now.
func (n *Node) hostKnownDead(id uint64) bool {
	lt, ok := n.tr.(LivenessTransport)
	if !ok {
		return false
	}
	at, live := lt.HostContact(id)
	return !live && !at.IsZero()
}

// quiesceHostLiveness is the HostLiveness report on a quiesced node: a
// quiesced follower whose leader's host died is woken through the
// scheduler's throttle (a dead host's groups wake at a bounded rate, the
// heirs first: wakeLane), and a quiesced leader one of whose members' host
// died is looked at through it (hostDied: it leaves the member lagging, or
// wakes); so is a quiesced leader that left a member lagging whose host
// turned live again (hostBack). Reads atomics only; what is queued checks
// again on the loop and wakes nothing else.
func (n *Node) quiesceHostLiveness(member uint64, live bool) {
	if !n.cfg.Quiesce || !n.quiesced.Load() {
		return
	}
	lead := n.quietLeader.Load()
	if live {
		if lag := n.quietLagging.Load(); lead == n.cfg.ID && lag != nil && slices.Contains(*lag, member) {
			n.sched.wakes.PushLane(wakeKey{n, wakeHostUp, member}, sched.LaneLater, n.awake, func() { n.postQuiet(func() { n.hostBack(member) }) })
		}
		return
	}
	if lead != n.cfg.ID && member != lead {
		return
	}
	n.sched.wakes.PushLane(wakeKey{n, wakeHostDown, member}, n.wakeLane(lead), n.awake, func() { n.postQuiet(func() { n.hostDied(member) }) })
}

// wakeLane is the throttle's lane for a wake of this quiesced node about
// its group's leader lead: a follower whose leader is gone goes first if it
// is the one to campaign (quietHeir), next if not (it only forgets the
// leader; the heir's vote request wakes it anyway); a leader's own wakes
// (a member's host died or came back, the policy's timer) go last: nothing
// waits on them.
func (n *Node) wakeLane(lead uint64) int {
	switch {
	case lead == n.cfg.ID:
		return sched.LaneLater
	case n.quietHeir.Load():
		return sched.LaneUrgent
	default:
		return sched.LaneSoon
	}
}

// awake reports whether the node no longer reads as quiesced: a wake
// queued for it then has nothing to do (the throttle drops it).
func (n *Node) awake() bool { return !n.quiesced.Load() }

// quiesceRefused is a refusal of a quiesced follower's connection by its
// leader (its group stopped there: "group not run", a revoked attachment)
// while the leader's host lives: host liveness cannot see a group's death,
// so the follower wakes (through the throttle, as for a dead host) and,
// hearing nothing from the leader, elects another within an election
// timeout, prevote first. Reads atomics only.
func (n *Node) quiesceRefused(from uint64) {
	if !n.cfg.Quiesce || !n.quiesced.Load() || from != n.quietLeader.Load() || from == n.cfg.ID {
		return
	}
	n.sched.wakes.PushLane(wakeKey{n, wakeLeaderGone, from}, n.wakeLane(from), n.awake, func() {
		n.postQuiet(func() {
			if l := &n.loop; l.q.on && l.leader == from {
				n.wake(wakeLeaderGone, 0)
			}
		})
	})
}

// hostDied runs on the loop for a quiesced node told that member's host
// died: a leader that told that member to quiesce leaves it lagging and
// stays quiesced until the policy's next decision about it (lagInPlace),
// or wakes so that the policy may act when it cannot (one it left lagging
// has its timer already); a follower
// whose leader it was wakes, forgets the leader, and campaigns at once if
// it ranks first among the live voters (the others grant it; they
// campaign on their own after an election timeout if it does not win).
// Learners only wait.
func (n *Node) hostDied(member uint64) {
	l := &n.loop
	if !l.q.on || !n.hostKnownDead(member) {
		return
	}
	if l.role == RoleLeader {
		if slices.Contains(l.q.set, member) && !n.lagInPlace(member) {
			n.wake(wakeHostDown, 0)
		}
		return
	}
	if member != l.leader {
		return
	}
	n.wake(wakeLeaderDead, 0)
	if l.role == RoleLearner {
		return
	}
	_ = l.rn.ForgetLeader()
	if n.campaignRank(member) == 0 {
		_ = l.rn.Campaign()
	}
}

// campaignRank is this member's place among the voters but dead, whose
// hosts are live, in an order every member computes alike and that spreads
// leaders across hosts: by a hash of the cluster ID and the member ID.
func (n *Node) campaignRank(dead uint64) int {
	lt, _ := n.tr.(LivenessTransport)
	return n.rankAmongVoters(dead, lt)
}

// rankAmongVoters is campaignRank over the voters but dead, those on a
// host lt does not see live left out (lt nil: every voter).
func (n *Node) rankAmongVoters(dead uint64, lt LivenessTransport) int {
	var ids []uint64
	for id := range n.loop.rn.Status().Config.Voters.IDs() {
		if id == dead {
			continue
		}
		if id != n.cfg.ID && lt != nil {
			if _, live := lt.HostContact(id); !live {
				continue
			}
		}
		ids = append(ids, id)
	}
	order := voterOrder(n.clusterID.Load(), ids)
	if i := slices.Index(order, n.cfg.ID); i >= 0 {
		return i
	}
	return len(order)
}

// voterOrder sorts ids by a hash of the cluster ID and the member ID (ties
// by ID): an order every member computes alike, which spreads the first
// places over members, and so leaders over hosts, as the hash does. The
// hash is splitmix64's finalizer, which mixes every bit: FNV over the two
// IDs put member 1 first in half of all clusters (IDs that differ in their
// last bits hash to values in the same order).
func voterOrder(clusterID uint64, ids []uint64) []uint64 {
	type ranked struct{ id, h uint64 }
	rs := make([]ranked, 0, len(ids))
	for _, id := range ids {
		rs = append(rs, ranked{id, mix64(clusterID ^ mix64(id))})
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return out
}

// mix64 is splitmix64's finalizer: a bijection of uint64 whose every
// output bit depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hostHeard returns when a member of the quiesce set, or one left
// lagging, was last heard, the later of its group's last contact and its
// host's (and whether the host's was later): while quiesced, the group is
// silent by design.
func (n *Node) hostHeard(id uint64, heard time.Time) (time.Time, bool) {
	q := &n.loop.q
	if !q.on || (!slices.Contains(q.set, id) && !slices.Contains(q.laggingIDs(), id)) {
		return heard, false
	}
	lt, ok := n.tr.(LivenessTransport)
	if !ok {
		return heard, false
	}
	at, live := lt.HostContact(id)
	if live {
		at = time.Now()
	}
	if at.After(heard) {
		return at, true
	}
	return heard, false
}
