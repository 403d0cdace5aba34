package raft

import (
	"time"

	"github.com/understudy-raft/understudy/transport"
)

// CatchUp is how a member is catching up with the leader, as the leader
// measures it: what an operator watches while a new learner fills.
type CatchUp struct {
	// EntriesBehind is how many entries the member is behind the leader's
	// last index (its lag).
	EntriesBehind uint64
	// EntriesPerSec is how fast its match index advanced lately (an
	// exponentially weighted average over about five seconds); 0 until
	// measured.
	EntriesPerSec float64
	// ETA estimates when its lag will be within the readiness threshold
	// (confchange.Settings.MaxLag), at the current rate: 0 when it already
	// is, or when no progress was measured yet.
	ETA time.Duration
	// Snapshot is the snapshot being streamed to it, if any (Index 0: none;
	// Sent and Total in bytes), as the transport reports it.
	Snapshot transport.SnapshotProgress
}

// catchUpTrack measures one member's catch-up rate on the leader's loop.
type catchUpTrack struct {
	match    uint64
	at       time.Time
	rate     float64 // entries per second, EWMA
	measured bool
	emitted  time.Time // last progress event
}

// catchUpSample is the sampling period of the rate.
const catchUpSample = time.Second

// trackCatchUp updates the rate of member id (match now) on the loop.
func (n *Node) trackCatchUp(id, match uint64, now time.Time) *catchUpTrack {
	l := &n.loop
	if l.catchUp == nil {
		l.catchUp = make(map[uint64]*catchUpTrack)
	}
	tr := l.catchUp[id]
	if tr == nil || match < tr.match {
		tr = &catchUpTrack{match: match, at: now}
		l.catchUp[id] = tr
		return tr
	}
	if dt := now.Sub(tr.at); dt >= catchUpSample {
		r := float64(match-tr.match) / dt.Seconds()
		if tr.measured {
			tr.rate = 0.8*tr.rate + 0.2*r
		} else {
			tr.rate, tr.measured = r, true
		}
		tr.match, tr.at = match, now
	}
	return tr
}

// catchUp builds member id's CatchUp from its lag and tracked rate.
func (n *Node) catchUp(id, lag uint64, tr *catchUpTrack) CatchUp {
	cu := CatchUp{EntriesBehind: lag}
	if tr != nil {
		cu.EntriesPerSec = tr.rate
		if maxLag := n.cfg.Membership.MaxLag; lag > maxLag && tr.rate > 0 {
			cu.ETA = time.Duration(float64(lag-maxLag) / tr.rate * float64(time.Second))
		}
	}
	if sp, ok := n.tr.(interface {
		SnapshotProgress(id uint64) transport.SnapshotProgress
	}); ok {
		cu.Snapshot = sp.SnapshotProgress(id)
	}
	return cu
}

// emitCatchUp sends an EventCatchUp for member id, at most once per
// sampling period, while it is behind the readiness threshold or receives a
// snapshot (on the leader's loop).
func (n *Node) emitCatchUp(id uint64, cu CatchUp, tr *catchUpTrack, now time.Time) {
	if tr == nil || (cu.EntriesBehind <= n.cfg.Membership.MaxLag && cu.Snapshot.Index == 0) || now.Sub(tr.emitted) < catchUpSample {
		return
	}
	tr.emitted = now
	c := cu
	n.events.emit(Event{Type: EventCatchUp, Member: id, Term: n.loop.term, CatchUp: &c})
}
