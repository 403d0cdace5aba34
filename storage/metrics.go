package storage

import (
	"fmt"
	"sync/atomic"
)

type metrics struct {
	commits, saves, entries, bytes atomic.Uint64
	tailHits, tailMisses           atomic.Uint64
	snapshots, snapshotBytes       atomic.Uint64
}

// Metrics are counters since Open, and the current size of the tail cache.
type Metrics struct {
	// Commits counts bbolt write transactions committed (each is two
	// fdatasyncs, more when the file grows). A Save is one commit.
	Commits uint64
	// Saves counts Saves that wrote something; Entries and Bytes are the
	// entries and encoded entry bytes they appended.
	Saves, Entries, Bytes uint64
	// TailHits and TailMisses count entries (and terms) served from the
	// in-memory tail and read from bbolt by Entries and Term.
	TailHits, TailMisses uint64
	// Snapshots counts snapshots created; SnapshotBytes counts the bytes of
	// snapshot files written, created or received.
	Snapshots, SnapshotBytes uint64
	// TailEntries and TailBytes are the tail's current size.
	TailEntries int
	TailBytes   int64
}

// Metrics returns the store's counters.
func (s *Store) Metrics() Metrics {
	s.mu.RLock()
	n, b := len(s.tail.ents), s.tail.bytes
	s.mu.RUnlock()
	return Metrics{
		Commits:       s.m.commits.Load(),
		Saves:         s.m.saves.Load(),
		Entries:       s.m.entries.Load(),
		Bytes:         s.m.bytes.Load(),
		TailHits:      s.m.tailHits.Load(),
		TailMisses:    s.m.tailMisses.Load(),
		Snapshots:     s.m.snapshots.Load(),
		SnapshotBytes: s.m.snapshotBytes.Load(),
		TailEntries:   n,
		TailBytes:     b,
	}
}

// String formats the metrics on one line.
func (m Metrics) String() string {
	per := 0.0
	if m.Commits > 0 {
		per = float64(m.Entries) / float64(m.Commits)
	}
	return fmt.Sprintf("commits=%d saves=%d entries=%d (%.1f/commit) bytes=%d tail=%d/%d hits=%d misses=%d snapshots=%d (%d B)",
		m.Commits, m.Saves, m.Entries, per, m.Bytes, m.TailEntries, m.TailBytes, m.TailHits, m.TailMisses, m.Snapshots, m.SnapshotBytes)
}
