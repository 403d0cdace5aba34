package raft

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"
)

// Readiness across leader changes.
//
// A learner is ready once the leader has seen it caught up and in contact
// for Settings.Stabilization (10 s by default). Only the leader sees a
// learner's progress, so a new leader would start that clock again from
// zero. Instead, the leader replicates each learner's readiness transitions
// as small entries of the node's own ("member 4 became ready", "… is no
// longer ready"), written at most once per election timeout per member.
// Every member notes, on its own clock, when it applied a "ready" record;
// a new leader credits a learner that is ready under it within an election
// timeout of taking over with that time, so a leader change costs the
// stabilization at most the replication delay of the record. No clock is
// compared across machines. Records are not part of snapshots: a member
// that installs one forgets the records it had (a learner's clock then
// starts over if that member leads next). The once-per-election-timeout
// limit also means a "no longer ready" record can lag the transition by up
// to an election timeout, and is lost if the leader crashes meanwhile: the
// next leader may then credit a learner that was briefly not ready — but
// only one that it sees ready itself, within an election timeout of taking
// over. TestReadinessSurvivesLeaderChange covers a hand-off and a crash.

// entryReadiness is the kind of a readiness record (see entry.go).
const entryReadiness byte = 4

// appendReadiness appends a readiness record's payload.
func appendReadiness(b []byte, id requestID, member uint64, ready bool) []byte {
	b = append(b, entryReadiness)
	b = binary.BigEndian.AppendUint64(b, id.proposer)
	b = binary.BigEndian.AppendUint64(b, id.seq)
	b = binary.AppendUvarint(b, member)
	if ready {
		return append(b, 1)
	}
	return append(b, 0)
}

// decodeReadiness splits a readiness record's payload.
func decodeReadiness(b []byte) (id requestID, member uint64, ready bool, err error) {
	if len(b) < entryHeaderSize+2 || b[0] != entryReadiness {
		return id, 0, false, fmt.Errorf("%w: not a readiness record", ErrCorruptEntry)
	}
	id = requestID{proposer: binary.BigEndian.Uint64(b[1:9]), seq: binary.BigEndian.Uint64(b[9:17])}
	member, n := binary.Uvarint(b[entryHeaderSize:])
	rest := b[entryHeaderSize+max(n, 0):]
	if n <= 0 || n != len(binary.AppendUvarint(nil, member)) || member == 0 || len(rest) != 1 || rest[0] > 1 {
		return id, 0, false, fmt.Errorf("%w: malformed readiness record", ErrCorruptEntry)
	}
	return id, member, rest[0] == 1, nil
}

// readyRecords are the readiness records this member applied: when (on its
// own clock) it learned that each member became ready.
type readyRecords struct {
	mu sync.Mutex
	m  map[uint64]time.Time
}

func (r *readyRecords) set(member uint64, ready bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uint64]time.Time)
	}
	if !ready {
		delete(r.m, member)
	} else if _, ok := r.m[member]; !ok {
		r.m[member] = now
	}
}

func (r *readyRecords) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = nil
}

func (r *readyRecords) snapshot() map[uint64]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.m)
}

// applyReadiness applies a readiness record (on the apply task).
func (n *Node) applyReadiness(idx uint64, data []byte) error {
	a := &n.apply
	if err := n.flushCommands(); err != nil {
		return err
	}
	id, member, ready, err := decodeReadiness(data)
	a.applied = idx
	if err != nil {
		n.log.Warn("ignoring a readiness record that does not decode", slog.Uint64("index", idx), slog.Any("err", err))
		return nil
	}
	if a.dedup.add(id) {
		n.ready.set(member, ready, time.Now())
	}
	return nil
}

// inheritReadiness, at the start of a term, takes the readiness records
// this member applied as what it may credit.
func (n *Node) inheritReadiness() {
	b := n.loop.ms.leaderBook()
	b.inherited = n.ready.snapshot()
	b.recorded = make(map[uint64]bool, len(b.inherited))
	for id := range b.inherited {
		b.recorded[id] = true
	}
	b.recordedAt = make(map[uint64]uint64)
}

// creditReadiness backdates the stabilization clock of members ready under
// this leader to when their readiness was recorded, within an election
// timeout of taking over; then records the transitions of this term.
func (n *Node) creditReadiness(now time.Time) {
	l := &n.loop
	b := l.ms.leaderBook()
	for id, since := range b.inherited {
		if cur, ok := b.readySince[id]; ok {
			if since.Before(cur) {
				b.readySince[id] = since
			}
			delete(b.inherited, id)
		} else if now.Sub(b.leaderSince) > n.electionTimeout() {
			delete(b.inherited, id) // not ready again in time: the clock starts over
		}
	}
	t := n.members.Load()
	for _, id := range t.confState.GetLearners() {
		_, ready := b.readySince[id]
		if ready == b.recorded[id] || l.ticks < b.recordedAt[id] {
			continue
		}
		if err := n.proposeOwn(func(rid requestID) []byte { return appendReadiness(nil, rid, id, ready) }); err != nil {
			continue // retried next tick
		}
		b.recorded[id] = ready
		b.recordedAt[id] = l.ticks + uint64(n.cfg.ElectionTicks)
	}
}

// withInherited is readySince with the inherited records of members it
// lacks: a member instantly ready under this leader reads as stable since
// its record even before the next tick credits it.
func withInherited(readySince, inherited map[uint64]time.Time) map[uint64]time.Time {
	if len(inherited) == 0 {
		return readySince
	}
	out := maps.Clone(readySince)
	if out == nil {
		out = make(map[uint64]time.Time, len(inherited))
	}
	for id, t := range inherited {
		if _, ok := out[id]; !ok {
			out[id] = t
		}
	}
	return out
}
