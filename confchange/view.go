package confchange

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/tracker"
)

// ReplState is how the leader replicates to a member (etcd's tracker.StateType).
type ReplState uint8

const (
	// StateProbe: the leader is finding the member's last matching index.
	StateProbe ReplState = iota
	// StateReplicate: the leader streams appends to the member.
	StateReplicate
	// StateSnapshot: the member needs a snapshot, which is in flight.
	StateSnapshot
)

// String returns "probe", "replicate" or "snapshot".
func (s ReplState) String() string {
	switch s {
	case StateProbe:
		return "probe"
	case StateReplicate:
		return "replicate"
	case StateSnapshot:
		return "snapshot"
	}
	return "ReplState(" + strconv.Itoa(int(s)) + ")"
}

// Progress is one member's replication progress as the leader sees it.
type Progress struct {
	// Match is the highest log index known to be on the member.
	Match uint64
	// Next is the next log index the leader sends it.
	Next uint64
	// State is the replication state.
	State ReplState
	// PendingSnapshot is the index of the snapshot in flight to the member,
	// 0 when none.
	PendingSnapshot uint64
	// RecentActive is true when the leader heard from the member within the
	// last election timeout. Only active voters count towards an active
	// majority, and only an active learner can be ready.
	RecentActive bool
	// LastContact is when the leader last heard from the member. The node
	// sets it to the time it became leader for a member it has not heard from
	// yet, so the zero time means "no information": it never triggers a
	// failover or a removal.
	LastContact time.Time
	// Unheard is true when the node has not heard from the member at all
	// (LastContact is then only when the leader started counting):
	// Readiness says "never contacted" rather than a time without contact.
	Unheard bool
	// Refused is why the member refuses the leader's connections, as its
	// handshake said (a transport reason such as "cluster_mismatch": it was
	// started for another cluster), while it cannot be reached; "" otherwise.
	// Readiness says "refused: cluster mismatch".
	Refused string
	// ViaHost is true when the group is quiesced and LastContact (and
	// RecentActive) come from the member's host's liveness, heard later
	// than the group itself (a quiesced group is silent by design).
	ViaHost bool
}

// ProgressFromTracker converts one entry of raft's Status().Progress. Raft
// does not track last contact; the node passes its own.
func ProgressFromTracker(pr tracker.Progress, lastContact time.Time) Progress {
	p := Progress{
		Match:           pr.Match,
		Next:            pr.Next,
		PendingSnapshot: pr.PendingSnapshot,
		RecentActive:    pr.RecentActive,
		LastContact:     lastContact,
	}
	switch pr.State {
	case tracker.StateReplicate:
		p.State = StateReplicate
	case tracker.StateSnapshot:
		p.State = StateSnapshot
	default:
		p.State = StateProbe
	}
	return p
}

// Lag is how many entries the member is behind lastIndex (0 when ahead).
func (p Progress) Lag(lastIndex uint64) uint64 {
	if p.Match >= lastIndex {
		return 0
	}
	return lastIndex - p.Match
}

// String draws the progress without times: replicate match=10 next=11 active.
func (p Progress) String() string {
	var b strings.Builder
	b.WriteString(p.State.String())
	b.WriteString(" match=" + strconv.FormatUint(p.Match, 10))
	b.WriteString(" next=" + strconv.FormatUint(p.Next, 10))
	if p.PendingSnapshot != 0 {
		b.WriteString(" pending_snapshot=" + strconv.FormatUint(p.PendingSnapshot, 10))
	}
	if p.RecentActive {
		b.WriteString(" active")
	} else {
		b.WriteString(" inactive")
	}
	return b.String()
}

// View is everything the checks, the planner and the policy look at: the
// leader's picture of the cluster at one instant. It is plain data; the
// package never keeps it nor changes it.
type View struct {
	// Config is the applied configuration (from raft's ConfState).
	Config Config
	// Members is the membership table, by ID. A configuration member without
	// a record is allowed (its address is unknown); records of IDs outside
	// Config are ignored.
	Members map[uint64]Member
	// Removed are IDs removed from the cluster; they are never reused.
	Removed map[uint64]bool
	// Leader is the ID of the member that computes the view, the leader; it
	// is always active.
	Leader uint64
	// LastIndex is the leader's last log index; lag is measured from it.
	LastIndex uint64
	// Now is the current time. The package never reads a clock.
	Now time.Time
	// Progress is the leader's view of every other member, by ID. A member
	// without an entry is inactive and not ready.
	Progress map[uint64]Progress
	// ReadySince is when each member became ready, not counting the
	// stabilization period; the caller keeps it with UpdateReadySince.
	ReadySince map[uint64]time.Time
	// PendingChange is true while a conf change is proposed but not yet
	// applied (raft accepts only one at a time).
	PendingChange bool
}

// active reports whether id counts towards an active majority: the leader,
// or a member the leader heard from within the last election timeout.
func (v View) active(id uint64) bool {
	return (id == v.Leader && id != 0) || v.Progress[id].RecentActive
}

// majority reports how many of voters are active and whether they are a
// majority. It uses etcd's own vote counting: every active voter votes yes,
// every other one no. An empty config has no majority.
func (v View) majority(voters []uint64, down uint64) (active int, ok bool) {
	if len(voters) == 0 {
		return 0, false
	}
	mc := quorum.MajorityConfig{}
	votes := make(map[uint64]bool, len(voters))
	for _, id := range voters {
		mc[id] = struct{}{}
		votes[id] = id != down && v.active(id)
		if votes[id] {
			active++
		}
	}
	return active, mc.VoteResult(votes) == quorum.VoteWon
}

// String draws the view deterministically, one member per line, with times
// relative to Now.
func (v View) String() string {
	var b strings.Builder
	b.WriteString(v.Config.String())
	b.WriteString(" last=" + strconv.FormatUint(v.LastIndex, 10))
	if v.PendingChange {
		b.WriteString(" pending-change")
	}
	ids := v.Config.IDs()
	for id := range v.Progress {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		b.WriteString("\n" + strconv.FormatUint(id, 10) + " " + v.roleString(id))
		if m, ok := v.Members[id]; ok {
			b.WriteString(" " + m.String())
		}
		if id == v.Leader {
			b.WriteString(" leader")
			continue
		}
		pr, ok := v.Progress[id]
		if !ok {
			b.WriteString(" no-progress")
			continue
		}
		b.WriteString(" " + pr.String())
		b.WriteString(" lag=" + strconv.FormatUint(pr.Lag(v.LastIndex), 10))
		if !pr.LastContact.IsZero() {
			b.WriteString(" contact=" + formatDuration(v.Now.Sub(pr.LastContact)) + "-ago")
		}
		if t, ok := v.ReadySince[id]; ok {
			b.WriteString(" ready-for=" + formatDuration(v.Now.Sub(t)))
		}
	}
	if len(v.Removed) > 0 {
		b.WriteString("\nremoved=" + idList(slices.Sorted(maps.Keys(v.Removed))))
	}
	return b.String()
}

// roleString names id's place in a possibly joint configuration.
func (v View) roleString(id uint64) string {
	c := v.Config
	in, out := slices.Contains(c.Voters, id), slices.Contains(c.VotersOutgoing, id)
	switch {
	case in && (out || !c.Joint()):
		return "voter"
	case in:
		return "voter(incoming)"
	case slices.Contains(c.LearnersNext, id):
		return "voter(outgoing)->learner"
	case out:
		return "voter(outgoing)"
	case slices.Contains(c.Learners, id):
		return "learner"
	}
	return "not-a-member"
}
