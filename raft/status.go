package raft

import (
	"context"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/understudy-raft/understudy/confchange"
)

// Status is a member's view of itself and, on the leader, of every peer's
// replication progress.
type Status struct {
	ID      uint64
	Role    Role
	Term    uint64
	Leader  uint64 // 0 when none is known
	Commit  uint64 // commit index
	Applied uint64 // index applied to the state machine
	// LastIndex is the index of this member's last log entry.
	LastIndex uint64

	// Voters, Learners: the configuration (sorted IDs). While the
	// configuration is joint, VotersOutgoing holds the outgoing voters and
	// LearnersNext the voters that become learners when it is left.
	Voters         []uint64
	VotersOutgoing []uint64
	Learners       []uint64
	LearnersNext   []uint64

	// Progress is set on the leader only: one entry per other member.
	Progress map[uint64]PeerProgress

	// EventsDropped counts events that subscribers were too slow to take.
	EventsDropped uint64
	// PeerMessagesDropped counts received raft messages dropped because
	// more than 4,096 waited for the run loop (raft retransmits; a steady
	// growth means the host's loop workers cannot keep up).
	PeerMessagesDropped uint64
	// HostLivenessReports counts the changes of its peers' hosts'
	// liveness the transport reported to this member (one per peer on a
	// host that turned live or not live). Only a quiesced group acts on
	// them (Config.Quiesce).
	HostLivenessReports uint64
	// Quiesced reports whether the group is quiesced on this member
	// (Config.Quiesce): it neither ticks nor sends until something wakes
	// it. QuiescedSince is when it quiesced; a quiesced leader's
	// leadership is as of then, unverified since (a read wakes it and
	// verifies it first).
	Quiesced      bool
	QuiescedSince time.Time
	// Wakes counts this member's wakes from quiescence, by cause (the
	// causes of SchedulerStats.Wakes, which counts the host's; only those
	// that occurred, nil when none), and LastWake is the cause of the
	// latest ("" when none): which group keeps waking, and why.
	Wakes    map[string]uint64
	LastWake string
	// RelayedOn counts the leader's messages this member handed on to
	// standbys as a relay (Config.Relay).
	RelayedOn uint64
	// AnswersHandedOn counts its standbys' answers this member handed on
	// to their leader as a relay; RelayedAnswers the answers of relayed
	// standbys this member stepped as leader that came through their
	// relay, and RelayedAnswersDropped those it dropped: handed on by a
	// member that did not relay that standby at the time (or to a member
	// that no longer led).
	AnswersHandedOn, RelayedAnswers, RelayedAnswersDropped uint64
}

// Joint reports whether the configuration is joint (a multi-member change
// in progress).
func (s Status) Joint() bool { return len(s.VotersOutgoing) > 0 }

// PeerProgress is the leader's view of one member's replication.
type PeerProgress struct {
	Match uint64 // highest index known to be replicated to the member
	Next  uint64 // next index to send
	// Lag is the leader's last index minus Match.
	Lag uint64
	// State is "probe", "replicate" or "snapshot".
	State string
	// PendingSnapshot is the index of the snapshot being sent, or 0.
	PendingSnapshot uint64
	// RecentActive reports whether this member heard from it within the
	// last election timeout.
	RecentActive bool
	// LastContact is when this member last received a message from it (the
	// zero time if never since start).
	LastContact time.Time
	Learner     bool
	// HostLive reports whether the host the member runs on is live: its
	// host link answers pings (see "Host liveness" in
	// docs/architecture.md). It says the member's process answers, not that
	// its group does: RecentActive and LastContact say that. False when
	// the transport does not know (it is no LivenessTransport, the member's
	// host was never reached, or it refused the member's attachment).
	HostLive bool
	// HostContact is when the member's host was last heard: now while it
	// is live, else its last answer to a ping (the zero time: never).
	HostContact time.Time
	// ContactViaHost reports that the group is quiesced and the member's
	// host was heard from later than its group: RecentActive and
	// LastContact are then its host's (a quiesced group is silent by
	// design).
	ContactViaHost bool
	// RelayedBy is the member that relays the leader's appends and
	// heartbeats to this standby (Config.Relay), 0 when the leader sends
	// them directly.
	RelayedBy uint64
}

// Status returns this member's status, taken on the run loop.
//
// Errors: ctx's error (the loop is busy: retry); ErrNotStarted; ErrStopped
// or the error that stopped the node.
func (n *Node) Status(ctx context.Context) (Status, error) {
	var st Status
	if err := n.doQuiet(ctx, func() { st = n.status() }); err != nil {
		return Status{}, err // the loop may still run f: st is not read
	}
	return st, nil
}

func (n *Node) status() Status {
	l := &n.loop
	rs := l.rn.Status()
	// The last index handed to storage: the leader's log may be ahead of
	// what its storage holds (it replicates before its own fsync).
	last := l.ms.lastIndex
	cfg := confchange.ConfigFromTracker(rs.Config)
	st := Status{
		ID:                  n.cfg.ID,
		Role:                l.role,
		Term:                rs.GetTerm(),
		Leader:              rs.Lead,
		Commit:              rs.GetCommit(),
		Applied:             n.applied.get(),
		Voters:              cfg.Voters,
		VotersOutgoing:      cfg.VotersOutgoing,
		Learners:            cfg.Learners,
		LearnersNext:        cfg.LearnersNext,
		EventsDropped:       n.events.droppedCount(),
		PeerMessagesDropped: n.recv.droppedCount(),
		HostLivenessReports: n.hostReports.Load(),
		Quiesced:            l.q.on,
	}
	st.AnswersHandedOn, st.RelayedAnswers, st.RelayedAnswersDropped, st.RelayedOn = n.answers.counts()
	if l.q.on {
		st.QuiescedSince = l.q.since
	}
	for c, k := range l.q.wakeCounts() {
		if k > 0 {
			if st.Wakes == nil {
				st.Wakes = make(map[string]uint64, numWakeCauses)
			}
			st.Wakes[wakeCauseNames[c]] = k
		}
	}
	if st.Wakes != nil {
		st.LastWake = l.q.last.String()
	}
	if rs.RaftState == etcdraft.StateLeader {
		st.Progress = make(map[uint64]PeerProgress, len(rs.Progress))
		now := time.Now()
		lt, hosts := n.tr.(LivenessTransport)
		for id, pr := range rs.Progress {
			if id == n.cfg.ID {
				continue
			}
			heard, viaHost := n.hostHeard(id, l.lastContact.get(id))
			pp := PeerProgress{
				Match:           pr.Match,
				Next:            pr.Next,
				State:           pr.State.String(),
				PendingSnapshot: pr.PendingSnapshot,
				RecentActive:    n.recentlyActive(heard, now),
				LastContact:     heard,
				Learner:         pr.IsLearner,
				ContactViaHost:  viaHost,
				RelayedBy:       n.relayedBy(id),
			}
			if last > pr.Match {
				pp.Lag = last - pr.Match
			}
			if hosts {
				pp.HostContact, pp.HostLive = lt.HostContact(id)
			}
			st.Progress[id] = pp
		}
	}
	st.LastIndex = last
	return st
}

// Leader returns the ID of the leader this member knows of, 0 if none.
// It reads what the run loop last published: no round trip.
func (n *Node) Leader() uint64 {
	if n.life.Load() != lifeStarted {
		return 0
	}
	return n.state.get().leader
}

// Term returns the current term as the run loop last published it.
func (n *Node) Term() uint64 {
	if n.life.Load() != lifeStarted {
		return 0
	}
	return n.state.get().term
}

// IsLeader reports whether this member leads, as the run loop last published
// it (it may have lost leadership a moment ago without knowing yet; use
// ReadBarrier when that matters).
func (n *Node) IsLeader() bool {
	if n.life.Load() != lifeStarted {
		return false
	}
	return n.state.get().role == RoleLeader
}

// WaitReady waits until this member can serve: it knows a leader and has
// applied everything the cluster had committed when WaitReady was called
// (a ReadBarrier). It is what a health check or a host's start-up calls
// before it takes traffic.
//
// Errors: ctx.Err() (with ErrNoLeader attached when no leader is known);
// ErrStopped (with the fatal error, if any); ErrNotStarted.
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.usable(); err != nil {
		return err
	}
	if err := waitFor(n, ctx, n.state, func(s nodeState) bool { return s.leader != 0 }); err != nil {
		return err
	}
	return n.ReadBarrier(ctx)
}
