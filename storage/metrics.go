package storage

import (
	"fmt"
	"sync/atomic"
	"time"
)

type metrics struct {
	commits, saves, entries, bytes atomic.Uint64
	tailHits, tailMisses           atomic.Uint64
	snapshots, snapshotBytes       atomic.Uint64
	commitDur, snapshotDur         durations
	syncDur                        durations
}

// durationBounds are the histograms' upper bounds: 0.5 ms doubling to about
// 8 s (etcd's backend commit histogram has the same shape).
var durationBounds = func() []time.Duration {
	b := make([]time.Duration, 15)
	for i := range b {
		b[i] = 500 * time.Microsecond << i
	}
	return b
}()

// durations is a lock-free histogram of durations.
type durations struct {
	count, sum atomic.Uint64
	buckets    [15]atomic.Uint64 // non-cumulative, by durationBounds
}

func (d *durations) observe(v time.Duration) {
	d.count.Add(1)
	d.sum.Add(uint64(v))
	for i, b := range durationBounds {
		if v <= b {
			d.buckets[i].Add(1)
			return
		}
	}
}

func (d *durations) snapshot() Histogram {
	h := Histogram{Count: d.count.Load(), Sum: time.Duration(d.sum.Load()), Buckets: make([]Bucket, len(durationBounds))}
	var cum uint64
	for i, b := range durationBounds {
		cum += d.buckets[i].Load()
		h.Buckets[i] = Bucket{UpperBound: b, Count: cum}
	}
	return h
}

// Histogram is a distribution of durations in fixed buckets, in the shape
// Prometheus wants: Buckets are cumulative and ascending; observations above
// the last bound count only in Count.
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []Bucket
}

// Bucket is one bucket of a Histogram: how many observations were at most
// UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
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
	// CommitDuration is how long each bbolt commit took (the fsyncs
	// included): the latency every replicated write pays once per member.
	CommitDuration Histogram
	// SyncDuration is, for each bbolt commit, how long bbolt took to write
	// it to the file and make it durable: its dirty pages written and
	// fdatasynced, then its meta page written and fdatasynced (bbolt's
	// Tx write time). It is CommitDuration without the in-memory work
	// (rebalancing, spilling): the disk's part. bbolt does not time its
	// fdatasyncs alone, but its writes only reach the page cache, so the
	// two fdatasyncs make most of it. Empty with Options.NoSync.
	SyncDuration Histogram
	// SnapshotDuration is how long writing each local snapshot file took.
	SnapshotDuration Histogram
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

		CommitDuration:   s.m.commitDur.snapshot(),
		SyncDuration:     s.m.syncDur.snapshot(),
		SnapshotDuration: s.m.snapshotDur.snapshot(),
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
