package storage

import (
	"fmt"
	"sync/atomic"
	"time"
)

type metrics struct {
	commits, saves, entries, bytes atomic.Uint64
	tailHits, tailMisses           atomic.Uint64
	commitDur, syncDur             durations
	// snap (the snapshots' count, bytes and durations) is made with the
	// first snapshot: most of a host's groups snapshot rarely, and a Store
	// is per group.
	snap atomic.Pointer[snapMetrics]
}

// snapMetrics are a Store's snapshot metrics.
type snapMetrics struct {
	count, bytes atomic.Uint64
	dur          durations
}

// snapMetrics returns the snapshot metrics, made with the first.
func (m *metrics) snapMetrics() *snapMetrics {
	if p := m.snap.Load(); p != nil {
		return p
	}
	m.snap.CompareAndSwap(nil, new(snapMetrics))
	return m.snap.Load()
}

// snapshots returns the snapshot count, bytes and durations.
func (m *metrics) snapshots() (count, bytes uint64, dur Histogram) {
	if p := m.snap.Load(); p != nil {
		return p.count.Load(), p.bytes.Load(), p.dur.snapshot()
	}
	return 0, 0, new(durations).snapshot()
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
	// Commits counts the bbolt transactions committed that carried this
	// group's writes (each is two fdatasyncs, more when the file grows). A
	// Save is in one commit, shared with other groups' writes when the
	// group's Engine holds many (EngineMetrics).
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
	// CommitDuration is how long each bbolt commit of this group's writes
	// took (the fsyncs included): the latency every replicated write pays
	// once per member.
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
	n, b := s.tail.len(), s.tail.bytes
	s.mu.RUnlock()
	snaps, snapBytes, snapDur := s.m.snapshots()
	// A commit is counted before its sync (commitDone): read the syncs
	// first, so that a commit landing meanwhile never shows a sync
	// without its commit.
	syncDur := s.m.syncDur.snapshot()
	return Metrics{
		Commits:       s.m.commits.Load(),
		Saves:         s.m.saves.Load(),
		Entries:       s.m.entries.Load(),
		Bytes:         s.m.bytes.Load(),
		TailHits:      s.m.tailHits.Load(),
		TailMisses:    s.m.tailMisses.Load(),
		Snapshots:     snaps,
		SnapshotBytes: snapBytes,
		TailEntries:   n,
		TailBytes:     b,

		CommitDuration:   s.m.commitDur.snapshot(),
		SyncDuration:     syncDur,
		SnapshotDuration: snapDur,
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

type engineMetrics struct {
	commits, writes, saves, maxWrites, tailTrims atomic.Uint64
	pagesWritten, bytesWritten                   atomic.Uint64 // bbolt's; Pebble counts its own
	commitDur, syncDur                           durations
}

// EngineMetrics are an Engine's counters since OpenEngine: its commits,
// each carrying the writes of any number of groups. Each group's Store has
// its own Metrics besides.
type EngineMetrics struct {
	// Commits counts bbolt transactions committed (each is two fdatasyncs,
	// more when the file grows).
	Commits uint64
	// Writes counts the writes those commits carried: Saves, and the other
	// records (Compact's bounds, a snapshot's, the identity, the tombstone, a
	// new group's buckets). A group has at most one write in a commit (its
	// writes are serialised), so Writes/Commits is also the groups per
	// commit (GroupsPerCommit).
	Writes uint64
	// Saves counts the Saves among Writes (SavesPerCommit).
	Saves uint64
	// MaxWritesPerCommit is the most writes (groups) one commit carried.
	MaxWritesPerCommit uint64
	// OpenGroups is how many groups' Stores are open now.
	OpenGroups int
	// TailBytes is what every group's in-memory tail holds now (bounded
	// by EngineOptions.TailCacheBytes).
	TailBytes int64
	// TailTrims counts the times the groups' tails were trimmed to the
	// engine's budget.
	TailTrims uint64
	// CommitDuration is how long each commit took, its fsyncs included: what
	// every write in it waited for, once it was taken up.
	CommitDuration Histogram
	// SyncDuration is bbolt's write time of each commit (pages written and
	// fdatasynced, then the meta page): the disk's part. Empty with
	// EngineOptions.NoSync.
	SyncDuration Histogram
	// PagesWritten counts the pages bbolt's commits wrote: the pages each
	// commit copied (the B+tree's pages it touched, the freelist's when it
	// is synced) and its meta page. Zero with BackendPebble.
	PagesWritten uint64
	// BytesWritten counts the bytes the commits wrote: bbolt's pages
	// (PagesWritten), or the batches Pebble's write-ahead log took.
	BytesWritten uint64
	// FreePages is how many pages of the bbolt file are free now (the
	// freelist's length). Zero with BackendPebble.
	FreePages int
}

// GroupsPerCommit is the mean number of groups a commit wrote.
func (m EngineMetrics) GroupsPerCommit() float64 {
	if m.Commits == 0 {
		return 0
	}
	return float64(m.Writes) / float64(m.Commits)
}

// SavesPerCommit is the mean number of Saves a commit carried.
func (m EngineMetrics) SavesPerCommit() float64 {
	if m.Commits == 0 {
		return 0
	}
	return float64(m.Saves) / float64(m.Commits)
}

// String formats the metrics on one line.
func (m EngineMetrics) String() string {
	return fmt.Sprintf("commits=%d writes=%d (%.1f groups/commit, max %d) saves=%d (%.1f/commit) open_groups=%d",
		m.Commits, m.Writes, m.GroupsPerCommit(), m.MaxWritesPerCommit, m.Saves, m.SavesPerCommit(), m.OpenGroups)
}

// Metrics returns the engine's counters.
func (e *Engine) Metrics() EngineMetrics {
	e.mu.Lock()
	open := 0
	for _, s := range e.groups {
		if s != nil {
			open++
		}
	}
	e.mu.Unlock()
	var tails int64
	if e.tails != nil {
		tails = e.tails.bytes.Load()
	}
	written := e.m.bytesWritten.Load()
	var free int
	if e.pdb != nil {
		written = e.pdb.bytesWritten.Load()
	} else if e.poisoned.Load() == nil {
		free = e.db.Stats().FreePageN
	}
	syncDur := e.m.syncDur.snapshot() // before the commits, as in Store.Metrics
	return EngineMetrics{
		PagesWritten:       e.m.pagesWritten.Load(),
		BytesWritten:       written,
		FreePages:          free,
		TailBytes:          tails,
		TailTrims:          e.m.tailTrims.Load(),
		Commits:            e.m.commits.Load(),
		Writes:             e.m.writes.Load(),
		Saves:              e.m.saves.Load(),
		MaxWritesPerCommit: e.m.maxWrites.Load(),
		OpenGroups:         open,
		CommitDuration:     e.m.commitDur.snapshot(),
		SyncDuration:       syncDur,
	}
}
