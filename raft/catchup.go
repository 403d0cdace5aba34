package raft

import (
	"time"
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
	Snapshot SnapshotProgress
	// SnapshotBytesPerSec is how fast that snapshot streams: the bytes of
	// its file sent per second, sampled about once a second from the
	// transport's progress (an exponentially weighted average, as
	// EntriesPerSec). 0 when no snapshot streams or until the stream has
	// been sampled twice.
	SnapshotBytesPerSec float64
}

// catchUpTrack measures one member's catch-up rate on the leader's loop.
type catchUpTrack struct {
	match    uint64
	at       time.Time
	rate     float64 // entries per second, EWMA
	measured bool
	emitted  time.Time // last progress event

	// The snapshot stream being sampled (snapIndex 0: none).
	snapIndex    uint64
	snapSent     int64
	snapAt       time.Time
	snapRate     float64 // bytes per second, EWMA
	snapMeasured bool
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
		tr.trackSnapshot(n.snapshotProgress(id), now)
		return tr
	}
	tr.trackSnapshot(n.snapshotProgress(id), now)
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

// trackSnapshot updates the byte rate of the snapshot stream sp.
func (tr *catchUpTrack) trackSnapshot(sp SnapshotProgress, now time.Time) {
	if sp.Index == 0 || sp.Index != tr.snapIndex || sp.Sent < tr.snapSent {
		// None, or another stream (a new snapshot, or a retry from the
		// start): its rate is measured afresh.
		tr.snapIndex, tr.snapSent, tr.snapAt, tr.snapRate, tr.snapMeasured = sp.Index, sp.Sent, now, 0, false
		return
	}
	if dt := now.Sub(tr.snapAt); dt >= catchUpSample {
		r := float64(sp.Sent-tr.snapSent) / dt.Seconds()
		if tr.snapMeasured {
			tr.snapRate = 0.8*tr.snapRate + 0.2*r
		} else {
			tr.snapRate, tr.snapMeasured = r, true
		}
		tr.snapSent, tr.snapAt = sp.Sent, now
	}
}

// snapshotProgress is the transport's progress of a snapshot stream to
// member id (Index 0: none, or a transport that does not say).
func (n *Node) snapshotProgress(id uint64) SnapshotProgress {
	if sp, ok := n.tr.(interface {
		SnapshotProgress(id uint64) SnapshotProgress
	}); ok {
		return sp.SnapshotProgress(id)
	}
	return SnapshotProgress{}
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
	cu.Snapshot = n.snapshotProgress(id)
	if tr != nil && cu.Snapshot.Index != 0 && cu.Snapshot.Index == tr.snapIndex {
		cu.SnapshotBytesPerSec = tr.snapRate
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
