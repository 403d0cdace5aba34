package confchange

import (
	"strconv"
	"strings"
	"time"
)

// ReasonCode classifies a member's readiness.
type ReasonCode uint8

const (
	// ReasonReady: active, replicating, caught up and stable long enough.
	ReasonReady ReasonCode = iota
	// ReasonLeader: the member is the leader itself.
	ReasonLeader
	// ReasonNotMember: the ID is not in the configuration.
	ReasonNotMember
	// ReasonNoProgress: the leader has no progress for the member yet.
	ReasonNoProgress
	// ReasonNoContact: the leader has not heard from the member within the
	// last election timeout.
	ReasonNoContact
	// ReasonSnapshot: a snapshot is in flight to the member.
	ReasonSnapshot
	// ReasonProbing: the leader is still probing the member, not replicating.
	ReasonProbing
	// ReasonLagging: the member is more entries behind than the threshold.
	ReasonLagging
	// ReasonStabilizing: ready, but not yet for the whole stabilization period.
	ReasonStabilizing
	// ReasonUnpublished: caught up, but its data's incarnation is not in
	// the member table yet while the leader's is (a cluster whose members
	// publish theirs: understudy's hosts do when a member first runs).
	// Promoted so, the member could lose its data and start again empty
	// under its ID without anyone knowing it ran: a voter that forgot what
	// it acknowledged. It is ready once its incarnation is recorded.
	ReasonUnpublished
)

// Reason is a member's readiness with the numbers behind it. Its String is a
// human sentence such as "lag 4,210 entries > 1,000".
type Reason struct {
	Code ReasonCode
	// Lag and MaxLag: entries behind the leader's last index, and the
	// threshold (set for every code from ReasonSnapshot on).
	Lag, MaxLag uint64
	// Snapshot is the index of the snapshot in flight (ReasonSnapshot).
	Snapshot uint64
	// For is how long there has been no contact (ReasonNoContact; 0 when the
	// leader never heard from it), or how long the member has been stable
	// (ReasonStabilizing, ReasonReady).
	For time.Duration
	// Need is the stabilization period (ReasonStabilizing, ReasonReady).
	Need time.Duration
	// LastContact is when the leader last heard from the member
	// (ReasonNoContact; zero when never).
	LastContact time.Time
	// Refused is why the member refuses the leader's connections
	// (ReasonNoContact; Progress.Refused), "" when it does not.
	Refused string
}

// Ready reports whether the member may be promoted (or is the leader).
func (r Reason) Ready() bool { return r.Code == ReasonReady || r.Code == ReasonLeader }

// String returns the human sentence: "ready", "leader", "not a member",
// "no progress known", "no contact for 12s", "never contacted",
// "refused: cluster mismatch", "not recently active",
// "snapshot in flight", "probing, not replicating",
// "lag 4,210 entries > 1,000", "stable for 3s of 10s",
// "incarnation not published yet".
func (r Reason) String() string {
	switch r.Code {
	case ReasonReady:
		return "ready"
	case ReasonLeader:
		return "leader"
	case ReasonNotMember:
		return "not a member"
	case ReasonNoProgress:
		return "no progress known"
	case ReasonNoContact:
		switch {
		case r.Refused != "":
			return "refused: " + strings.ReplaceAll(r.Refused, "_", " ")
		case r.LastContact.IsZero():
			return "never contacted"
		case r.For <= 0:
			return "not recently active"
		}
		return "no contact for " + formatDuration(r.For)
	case ReasonSnapshot:
		if r.Snapshot != 0 {
			return "snapshot in flight (index " + commas(r.Snapshot) + ")"
		}
		return "snapshot in flight"
	case ReasonProbing:
		return "probing, not replicating"
	case ReasonLagging:
		return "lag " + commas(r.Lag) + " entries > " + commas(r.MaxLag)
	case ReasonStabilizing:
		return "stable for " + formatDuration(r.For) + " of " + formatDuration(r.Need)
	case ReasonUnpublished:
		return "incarnation not published yet"
	}
	return "ReasonCode(" + strconv.Itoa(int(r.Code)) + ")"
}

// Readiness returns whether member id could be promoted now and, if not, why.
// A member is ready when the leader heard from it within the last election
// timeout, replicates to it with no snapshot in flight, it is at most
// Settings.MaxLag entries behind the leader's last index, its incarnation is
// recorded if the leader's is (ReasonUnpublished), and all of that has held
// for Settings.Stabilization (v.ReadySince records since when). The
// first condition that fails is the reason. It is defined for voters too (the
// same numbers), and the leader is always ReasonLeader.
func Readiness(v View, s Settings, id uint64) Reason {
	s = s.WithDefaults()
	r := instantReadiness(v, s, id)
	if r.Code != ReasonReady {
		return r
	}
	since, ok := v.ReadySince[id]
	if !ok || since.After(v.Now) {
		since = v.Now
	}
	r.For, r.Need = v.Now.Sub(since), s.Stabilization
	if r.For < s.Stabilization {
		r.Code = ReasonStabilizing
	}
	return r
}

// instantReadiness is Readiness without the stabilization period.
func instantReadiness(v View, s Settings, id uint64) Reason {
	if id != 0 && id == v.Leader {
		return Reason{Code: ReasonLeader}
	}
	if id == 0 || !v.Config.Contains(id) {
		return Reason{Code: ReasonNotMember}
	}
	pr, ok := v.Progress[id]
	if !ok {
		return Reason{Code: ReasonNoProgress}
	}
	if !pr.RecentActive {
		r := Reason{Code: ReasonNoContact, LastContact: pr.LastContact, Refused: pr.Refused}
		if pr.Unheard {
			r.LastContact = time.Time{}
		}
		if !r.LastContact.IsZero() {
			r.For = v.Now.Sub(pr.LastContact)
		}
		return r
	}
	r := Reason{Lag: pr.Lag(v.LastIndex), MaxLag: s.MaxLag}
	switch {
	case pr.State == StateSnapshot || pr.PendingSnapshot != 0:
		r.Code, r.Snapshot = ReasonSnapshot, pr.PendingSnapshot
	case pr.State != StateReplicate:
		r.Code = ReasonProbing
	case r.Lag > s.MaxLag:
		r.Code = ReasonLagging
	case v.Members[id].Incarnation == 0 && v.Members[v.Leader].Incarnation != 0:
		r.Code = ReasonUnpublished
	}
	return r
}

// UpdateReadySince returns the ReadySince map for the next view: every
// configuration member other than the leader that is ready now (not counting
// stabilization) keeps its time from v.ReadySince, or gets v.Now if it has
// none; a member that is probing but otherwise ready (in contact, no
// snapshot, its last known match within MaxLag) keeps its time if it had
// one and gets none if not; every other member is dropped. The caller calls
// it whenever it refreshes the progress (e.g. every tick) and keeps the
// result.
//
// Probing keeps the clock because a single rejected append sends the
// leader back to probing for a round trip: a reordered or lost message
// would otherwise restart a learner's stabilization, and under steady
// reordering it would never become ready. A probing member is still not
// ready (Readiness says "probing"), and one that stays in probe while the
// log grows falls behind MaxLag, which does restart its clock.
func UpdateReadySince(v View, s Settings) map[uint64]time.Time {
	s = s.WithDefaults()
	out := make(map[uint64]time.Time)
	for _, id := range v.Config.IDs() {
		since, ok := v.ReadySince[id]
		if ok && since.After(v.Now) {
			since = v.Now
		}
		switch r := instantReadiness(v, s, id); {
		case r.Code == ReasonReady:
			if !ok {
				since = v.Now
			}
			out[id] = since
		case r.Code == ReasonProbing && r.Lag <= r.MaxLag && ok:
			out[id] = since
		}
	}
	return out
}

// formatDuration prints whole seconds from ten seconds on ("12s", "1m30s"),
// tenths below ("1.5s") and whole milliseconds below one second ("250ms");
// negative durations print as "0s".
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d >= 10*time.Second:
		return d.Truncate(time.Second).String()
	case d >= time.Second:
		return d.Truncate(100 * time.Millisecond).String()
	}
	return d.Truncate(time.Millisecond).String()
}

// commas prints n with thousands separators: 4210 → "4,210".
func commas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
