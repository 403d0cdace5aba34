package transport

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// Stats is a point-in-time copy of the transport's counters, for the node
// to publish as metrics. Counters only grow, for the life of the Transport
// (a removed peer's counters go with it).
type Stats struct {
	// Peers are the known peers, by ascending ID.
	Peers []PeerStats
	// DroppedUnknownPeer counts messages sent to a member that is not a peer.
	DroppedUnknownPeer uint64
	// DroppedReceiveQueueFull counts messages received on a host link and
	// dropped because the group's inbox was full: its Handler (one that is
	// not a BatchHandler) did not keep up, and a shared link never waits
	// for one group.
	DroppedReceiveQueueFull uint64
	// Refused counts inbound connections this member refused, by reason
	// (ReasonRemoved, ReasonClusterMismatch, …).
	Refused map[string]uint64
	// ConnErrors counts inbound and outbound connections closed on an error,
	// by reason (ReasonTLS, ReasonTimeout, ReasonChecksum, …). Dial failures
	// are in PeerStats.DialFailures.
	ConnErrors map[string]uint64
}

// PeerStats are the counters of one peer.
type PeerStats struct {
	ID        uint64
	Addr      string
	Learner   bool
	Connected bool // its attachment on the host link (or its raft stream) is accepted

	MessagesSent, BytesSent         uint64 // raft messages written (frames included in bytes)
	MessagesReceived, BytesReceived uint64 // raft messages read from the peer (its host link or stream)
	DroppedQueueFull                uint64 // messages dropped because the queue was full
	DroppedDisconnected             uint64 // messages dropped because the link was down or broke, or the attachment refused
	DroppedTooLarge                 uint64 // messages over MaxFrameSize or the peer host's frame limit, never sent
	DroppedOldVersion               uint64 // relay envelopes for a peer host of protocol version 3, which takes none (raft.Config.Relay)
	QueuedMessages                  int    // in the queue now
	QueuedBytes                     int64  // in the queue now, as counted against the budget

	Dials        uint64 // accepted attachments on the host link, or connections of a raft stream (the first one included)
	DialFailures uint64 // failed attempts: dial, TLS, refusal
	Refusals     uint64 // attempts the peer refused (any connection kind)
	LastRefusal  string // the reason of the last refusal since the last connection, "" if none

	// RTT is the last round trip measured (ping to pong) on the link the
	// peer's messages ride now, and RTTHistory its distribution there: a
	// host link's, which every group with a member on that host shares,
	// counted since the link was made (a peer that moves to another host
	// link starts from that link's).
	RTT        time.Duration
	RTTHistory Histogram

	SnapshotsSent, SnapshotsFailed, SnapshotsReceived uint64
	SnapshotBytesSent, SnapshotBytesReceived          uint64
	SnapshotSendDuration                              Histogram // from dial to the receiver's ack, successes only
	// SnapshotInFlight is the snapshot being sent to the peer now, if any.
	SnapshotInFlight SnapshotProgress
}

// SnapshotProgress is how far a snapshot stream to a peer has come
// (raftio.SnapshotProgress, which package raft shares).
type SnapshotProgress = raftio.SnapshotProgress

// Histogram is a distribution of durations in fixed buckets, in the shape
// Prometheus wants: Buckets are cumulative and ascending; observations
// above the last bound count only in Count.
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []Bucket
}

// Bucket counts the observations at most UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
}

func (h Histogram) String() string {
	if h.Count == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d mean=%v", h.Count, h.Sum/time.Duration(h.Count))
}

var (
	rttBounds = []time.Duration{
		50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
		time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
		25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	}
	snapshotBounds = []time.Duration{
		10 * time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second, 15 * time.Second,
		time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour,
	}
)

// histogram is the concurrent, lock-free recorder behind a Histogram.
type histogram struct {
	bounds []time.Duration
	counts []atomic.Uint64 // per bucket, not cumulative; one extra for +Inf
	count  atomic.Uint64
	sum    atomic.Int64
}

func newHistogram(bounds []time.Duration) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(h.bounds, d)
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
	h.count.Add(1)
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Count: h.count.Load(), Sum: time.Duration(h.sum.Load()), Buckets: make([]Bucket, len(h.bounds))}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		out.Buckets[i] = Bucket{UpperBound: b, Count: cum}
	}
	return out
}

// peerCounters are one peer's counters, updated without locks: those of
// every message and connection in the peer, the rare ones (drops,
// failures, refusals, snapshots) made with the first of them, so that the
// peers of a host's many idle groups hold none.
type peerCounters struct {
	msgsSent, bytesSent, msgsRecv, bytesRecv atomic.Uint64
	dials                                    atomic.Uint64
	rare                                     atomic.Pointer[rareCounters]
	connected                                atomic.Bool
}

// rareCounters are a peer's counters of what a healthy peer rarely does.
type rareCounters struct {
	dropFull, dropDown, dropLarge atomic.Uint64
	dropVersion                   atomic.Uint64
	dialFailures, refusals        atomic.Uint64
	lastRefusal                   atomic.Pointer[string]
	// snaps are the snapshot counters, made with the first snapshot (a
	// peer refused while its host's groups start has rare counters, and
	// most never snapshot).
	snaps atomic.Pointer[snapCounters]

	// What the peer keeps of rare events, also made with the first
	// (peer.mu guards the fields but largeAt): the timer that re-attaches
	// after a refusal and the backoff between re-attachments (its bounds
	// are the Config's), and when a message too large for it was last
	// logged at warning level (Unix nanoseconds; 0: never).
	retry   *time.Timer
	boCur   time.Duration
	largeAt atomic.Int64
}

// snapCounters are a peer's snapshot counters, and the progress of the
// snapshot in flight to it (nil: none; under peer.mu).
type snapCounters struct {
	sent, failed, recv   atomic.Uint64
	bytesSent, bytesRecv atomic.Uint64
	hist                 lazyHistogram // of snapshotBounds, allocated with the first snapshot sent
	prog                 *SnapshotProgress
}

// noSnapCounters are the snapshot counters of a peer that has none yet:
// read, never written.
var noSnapCounters snapCounters

// snapshots returns the peer's snapshot counters, made with the first.
func (r *rareCounters) snapshots() *snapCounters {
	if s := r.snaps.Load(); s != nil {
		return s
	}
	r.snaps.CompareAndSwap(nil, new(snapCounters))
	return r.snaps.Load()
}

// readSnapshots returns the peer's snapshot counters for reading (all zero
// if none were made).
func (r *rareCounters) readSnapshots() *snapCounters {
	if s := r.snaps.Load(); s != nil {
		return s
	}
	return &noSnapCounters
}

// noRareCounters are the rare counters of a peer that has none yet: read,
// never written.
var noRareCounters rareCounters

// more returns the peer's rare counters, made with the first.
func (c *peerCounters) more() *rareCounters {
	if r := c.rare.Load(); r != nil {
		return r
	}
	c.rare.CompareAndSwap(nil, new(rareCounters))
	return c.rare.Load()
}

// read returns the peer's rare counters for reading (all zero if none
// were made).
func (c *peerCounters) read() *rareCounters {
	if r := c.rare.Load(); r != nil {
		return r
	}
	return &noRareCounters
}

// lazyHistogram is a histogram of snapshotBounds allocated with its first
// observation.
type lazyHistogram struct {
	h atomic.Pointer[histogram]
}

func (l *lazyHistogram) observe(d time.Duration) {
	h := l.h.Load()
	if h == nil {
		l.h.CompareAndSwap(nil, newHistogram(snapshotBounds))
		h = l.h.Load()
	}
	h.observe(d)
}

func (l *lazyHistogram) snapshot() Histogram {
	if h := l.h.Load(); h != nil {
		return h.snapshot()
	}
	return emptyHistogram(snapshotBounds)
}

// emptyHistogram is a Histogram of no observations.
func emptyHistogram(bounds []time.Duration) Histogram {
	return (&histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}).snapshot()
}

// reasonCounter counts by reason: a list, searched, since the reasons
// are a small fixed set and most counters hold one or none (a map would
// cost each of a host's many groups' transports a few hundred bytes).
type reasonCounter struct {
	mu   sync.Mutex
	head *reasonCount
}

type reasonCount struct {
	reason string
	n      uint64
	next   *reasonCount
}

func (c *reasonCounter) add(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.head; e != nil; e = e.next {
		if e.reason == reason {
			e.n++
			return
		}
	}
	c.head = &reasonCount{reason: reason, n: 1, next: c.head}
}

// snapshot returns the counts by reason (nil: none).
func (c *reasonCounter) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var m map[string]uint64
	for e := c.head; e != nil; e = e.next {
		if m == nil {
			m = make(map[string]uint64)
		}
		m[e.reason] = e.n
	}
	return m
}

// String formats the stats on a few lines, for logs and debugging.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dropped(unknown peer)=%d refused=%v conn_errors=%v\n", s.DroppedUnknownPeer, s.Refused, s.ConnErrors)
	for _, p := range s.Peers {
		fmt.Fprintf(&b, "peer %x %s learner=%t connected=%t sent=%d/%dB recv=%d/%dB dropped(full=%d down=%d large=%d) dials=%d/%d failed refusals=%d rtt=%v snapshots(sent=%d failed=%d recv=%d)\n",
			p.ID, p.Addr, p.Learner, p.Connected, p.MessagesSent, p.BytesSent, p.MessagesReceived, p.BytesReceived,
			p.DroppedQueueFull, p.DroppedDisconnected, p.DroppedTooLarge, p.Dials, p.DialFailures, p.Refusals, p.RTT,
			p.SnapshotsSent, p.SnapshotsFailed, p.SnapshotsReceived)
	}
	return b.String()
}
