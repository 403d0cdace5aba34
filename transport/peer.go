package transport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// peer is one remote member of the group: its outgoing queue (drained by
// the writer of the link it is routed to), its attachment's state, its
// inbound connections and its counters. It owns no goroutine.
type peer struct {
	t  *Transport
	id uint64
	// learner is set by SetLearner: a smaller queue budget, and messages
	// gathered (LearnerBatchDelay). Atomic: the link's writer reads it on
	// every round without the lock.
	learner atomic.Bool
	// gone is set by stop: admissions of the peer on inbound links are void.
	gone atomic.Bool
	// inc is the peer's incarnation as recorded (SetPeerIncarnation), 0
	// while unknown: what it presents must match (wiped).
	inc atomic.Uint64
	c   peerCounters

	// routeMu serializes the peer's moves between host links (reroute):
	// each leaves the link the one before it joined, so that the peer has
	// one flow, on the link of its address. Taken before any other lock.
	routeMu sync.Mutex

	// mu guards the fields below; never held during I/O or Handler calls,
	// and never while taking a link's or the mux's lock.
	mu       sync.Mutex
	recorded string // the address the node gave (AddPeer, UpdatePeer)
	owner    uint64 // the host ID that first spoke for the member on this host's links (identity.go); 0: none yet
	addr     string // where it is dialed: recorded, through the mux's address book
	flow     *flow  // where its messages go now: host (or its fallback stream); nil once stopped
	host     *flow  // its flow on the host link of addr
	urgent   bool   // the queue holds a message a learner must get at once
	idle     bool   // its group quiesced (DropCaches): the queue's buffer goes once drained
	down     bool   // the link is down or the attachment refused: Send drops rather than queue
	snapping bool   // a snapshot to this peer is in flight
	stopped  bool
	// hostRefused: its attachment on the host link was refused since it
	// was last accepted (HostContact then knows nothing of the member).
	hostRefused bool
	queue       []*raftpb.Message
	head        int                    // queue[head:] is queued
	queueBytes  int64                  // of queue[head:]
	inbound     map[net.Conn]wire.Kind // nil: none
	inLinks     []*inLink              // inbound host links it is admitted on (usually one)
	// ops are its requests and snapshots in flight, canceled by stop.
	ops opSet
	// What it keeps of rare events (its re-attach timer and backoff after
	// refusals, its snapshot in flight, its last warning of a message too
	// large) is in c's rare counters, and their snapshot counters.
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	p := &peer{
		t:        t,
		id:       id,
		recorded: addr,
		addr:     t.mux.resolve(0, addr),
	}
	return p
}

func (p *peer) hexID() string { return fmt.Sprintf("%x", p.id) }

// wiped reports whether presented, the incarnation a connection or an
// attachment of the peer presents, is not the one recorded for it; why
// says so, and what to do.
func (p *peer) wiped(presented uint64) (bool, string) {
	rec := p.inc.Load()
	if rec == 0 || presented == rec {
		return false, ""
	}
	return true, fmt.Sprintf("member %x presents incarnation %x, but the cluster recorded %x for it: its data was lost and it started afresh, "+
		"so its votes and acknowledgements no longer count; remove member %x and add it again under a new ID", p.id, presented, rec, p.id)
}

// key is the peer's attachment on a host link.
func (p *peer) key() attachKey {
	return attachKey{group: p.t.cfg.GroupID, from: p.t.cfg.ID, to: p.id}
}

// start routes the peer to the host link of its address.
func (p *peer) start() {
	p.routeMu.Lock()
	defer p.routeMu.Unlock()
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	p.t.mux.join(p, addr)
}

// stop ends the peer: it leaves its link, its inbound connections close,
// and its admissions on inbound host links are revoked with code and why
// (the sender learns of them as a refusal) unless code is CodeAccepted.
func (p *peer) stop(code wire.Code, why string) {
	p.ops.stop(&p.mu)
	p.gone.Store(true)
	p.mu.Lock()
	p.stopped = true
	host := p.host
	p.flow, p.host = nil, nil
	p.stopRetry()
	conns := make([]net.Conn, 0, len(p.inbound))
	for c := range p.inbound {
		conns = append(conns, c)
	}
	links := p.inLinks
	p.inLinks = nil
	clear(p.queue)
	p.queue, p.head, p.queueBytes = nil, 0, 0
	p.mu.Unlock()
	if host != nil {
		p.t.mux.leave(host)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	for _, il := range links {
		il.forget(p) // the links keep nothing of a stopped peer's group
		if code != wire.CodeAccepted {
			il.revoke(p, code, why)
		}
	}
}

// setRecorded sets the address the node gives the peer, and dials it
// where the mux's address book says that host is now.
func (p *peer) setRecorded(addr string) {
	p.mu.Lock()
	p.recorded = addr
	p.mu.Unlock()
	p.reroute()
}

// reroute dials the peer where the mux's address book says the host of
// its record is now. Concurrent calls (the node updating the record while
// the book learns a move) are serialized, and each resolves the record as
// it is then: the last one routes by the newest record and book.
func (p *peer) reroute() {
	p.routeMu.Lock()
	defer p.routeMu.Unlock()
	p.mu.Lock()
	rec, owner := p.recorded, p.owner
	p.mu.Unlock()
	p.moveTo(p.t.mux.resolve(owner, rec))
}

// moveTo moves the peer to the host link of addr: its queue is dropped,
// and it attaches there at once. p.routeMu is held.
func (p *peer) moveTo(addr string) {
	p.mu.Lock()
	if addr == p.addr || p.stopped {
		p.mu.Unlock()
		return
	}
	p.addr = addr
	old := p.host
	p.hostRefused = false // a refusal of the host it left
	p.mu.Unlock()
	p.t.log.Info("peer address changed", "peer", p.hexID(), "addr", addr)
	if old != nil {
		p.t.mux.leave(old)
	}
	p.dropQueue(false)
	p.c.connected.Store(false)
	p.t.mux.join(p, addr)
}

// enqueue queues m for the link's writer, or drops it. It never blocks.
func (p *peer) enqueue(m *raftpb.Message) {
	size := int64(wire.MessageSize(m))
	p.mu.Lock()
	f := p.flow
	if p.down || p.stopped || f == nil {
		p.mu.Unlock()
		p.c.more().dropDown.Add(1)
		p.t.markUnreachable(p.id)
		return
	}
	learner := p.learner.Load()
	budget := p.t.cfg.MaxQueueBytes
	if learner {
		budget = p.t.cfg.MaxLearnerQueueBytes
	}
	n := len(p.queue) - p.head
	if n >= p.t.cfg.MaxQueueMessages || (n > 0 && p.queueBytes+size > budget) {
		p.mu.Unlock()
		p.c.more().dropFull.Add(1)
		p.t.markUnreachable(p.id)
		return
	}
	p.queue = append(p.queue, m)
	p.queueBytes += size
	poke := false
	if learner && (urgentForLearner(m) || p.queueBytes >= p.learnerFlushBytes()) {
		// Ends a learner's gathering early.
		p.urgent = p.urgent || urgentForLearner(m)
		poke = true
	}
	activate := !f.queued
	f.queued = true
	p.mu.Unlock()
	switch {
	case activate:
		f.l.activate(f)
	case poke:
		f.l.poke()
	}
}

// take pops, for f's writer, the next messages to write, appending them to
// dst: about limit bytes of them (at least one), or for a gathering
// learner the whole queue, its appends merged. more reports whether
// messages are left; if not, f leaves the link's active list (a later
// enqueue puts it back).
func (p *peer) take(f *flow, limit int, dst []*raftpb.Message) (out []*raftpb.Message, more bool) {
	p.mu.Lock()
	if p.flow != f {
		f.queued = false
		p.mu.Unlock()
		return dst, false
	}
	merge := p.learner.Load() && p.t.cfg.LearnerBatchDelay > 0
	start, n, i := len(dst), 0, p.head
	for ; i < len(p.queue); i++ {
		s := wire.MessageSize(p.queue[i])
		if !merge && i > p.head && n+s > limit {
			break
		}
		n += s
		dst = append(dst, p.queue[i])
		p.queue[i] = nil
	}
	p.head = i
	p.queueBytes -= int64(n)
	if p.head == len(p.queue) {
		p.resetQueue()
		if p.idle {
			p.queue, p.idle = nil, false
		}
		p.urgent = false
		f.queued = false
	}
	more = f.queued
	p.mu.Unlock()
	if merge { // outside the lock: Send must not wait for it
		dst = append(dst[:start], mergeAppends(dst[start:], min(maxMergedBytes, f.frameLimit()/2))...)
	}
	return dst, more
}

// tooLarge drops m, size bytes encoded, which is over limit (this
// member's MaxFrameSize or the peer host's): counted in the peer's
// DroppedTooLarge and logged at warning level once per
// refusalLogInterval, so that a group whose appends never reach a peer
// (raft resends them, and they are dropped again) is not silent.
func (p *peer) tooLarge(m *raftpb.Message, size, limit int) {
	n := p.c.more().dropLarge.Add(1)
	msg := "message larger than the frame limit dropped; raft resends it, and it is dropped again: raise MaxFrameSize (on every host) or write smaller entries"
	args := []any{"peer", p.hexID(), "type", m.GetType().String(), "bytes", size, "limit", limit, "dropped_too_large", n}
	if limit < p.t.cfg.MaxFrameSize {
		args = append(args, "detail", "the limit is the peer host's MaxFrameSize, smaller than this member's")
	}
	now := time.Now()
	r := p.c.more()
	if last := r.largeAt.Load(); (last == 0 || now.Sub(time.Unix(0, last)) >= refusalLogInterval) && r.largeAt.CompareAndSwap(last, now.UnixNano()) {
		p.t.log.Warn(msg, args...)
		return
	}
	p.t.log.Debug(msg, args...)
}

// stillQueued reports whether f is still p's flow with queued messages:
// on its link's active list or its writer's rounds.
func (p *peer) stillQueued(f *flow) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flow == f && f.queued
}

// resetQueue empties the queue, keeping a small backing array for reuse
// and freeing a large one (an idle peer holds little). p.mu is held.
func (p *peer) resetQueue() {
	if cap(p.queue) > 256 {
		p.queue = nil
	} else {
		clear(p.queue)
		p.queue = p.queue[:0]
	}
	p.head, p.queueBytes = 0, 0
}

// dropQueue drops what is queued (counted as dropped for a down stream)
// and, if down, makes Send drop until the attachment is accepted again.
func (p *peer) dropQueue(down bool) {
	p.mu.Lock()
	dropped := len(p.queue) - p.head
	p.resetQueue()
	p.urgent = false
	if p.flow != nil {
		p.flow.queued = false
	}
	if down {
		p.down = true
	} else if !p.stopped {
		p.down = false
	}
	p.mu.Unlock()
	if dropped > 0 {
		p.c.more().dropDown.Add(uint64(dropped))
	}
}

// linkUp is called when f's link connected: the peer may queue again (its
// attachment is written first).
func (p *peer) linkUp(f *flow) {
	p.mu.Lock()
	if p.flow == f && !p.stopped {
		p.down = false
		p.stopRetry() // the new connection attaches anew
	}
	p.mu.Unlock()
}

// linkDown is called when f's link broke or could not connect: the queue
// is dropped, raft told.
func (p *peer) linkDown(f *flow, dialFailed bool) {
	p.mu.Lock()
	current := p.flow == f
	p.mu.Unlock()
	if !current {
		return
	}
	if dialFailed {
		p.c.more().dialFailures.Add(1)
	}
	p.dropQueue(true)
	p.c.connected.Store(false)
	p.t.markUnreachable(p.id)
}

// accepted is called when f's attachment (or, on a fallback stream, its
// hello) was accepted.
func (p *peer) accepted(f *flow, addr string) {
	p.mu.Lock()
	if p.flow != f || p.stopped {
		p.mu.Unlock()
		return
	}
	p.down = false
	if f == p.host {
		p.hostRefused = false
	}
	if r := p.c.rare.Load(); r != nil {
		if r.retry != nil {
			r.retry.Stop()
		}
		r.boCur = 0
	}
	p.mu.Unlock()
	if r := p.c.rare.Load(); r != nil {
		r.lastRefusal.Store(nil) // a refusal before this connection is stale
	}
	p.c.dials.Add(1)
	p.c.connected.Store(true) // last: whoever sees it connected sees the rest
	if p.c.dials.Load() > 1 || p.c.read().dialFailures.Load() > 0 {
		p.t.log.Info("connected to peer", "peer", p.hexID(), "addr", addr)
	}
	if r := p.t.rare.Load(); r != nil {
		r.logged.Delete(logKey{p.id, "unreachable"})
	}
}

// refused is called when the peer refused f's attachment (or hello), or
// revoked it: the queue is dropped, raft told, the refusal reported. With
// retry, the attachment is written again after the peer's backoff (a
// fallback stream or a refused link redials instead).
func (p *peer) refused(f *flow, re *RefusedError, retry bool) {
	p.mu.Lock()
	if p.flow != f || p.stopped {
		p.mu.Unlock()
		return
	}
	if f == p.host {
		p.hostRefused = true
	}
	if retry {
		r := p.c.more()
		if r.retry != nil {
			r.retry.Stop()
		}
		l := f.l
		var t *time.Timer
		bo := backoff{min: p.t.cfg.MinBackoff, max: p.t.cfg.MaxBackoff, cur: r.boCur}
		wait := bo.next()
		r.boCur = bo.cur
		t = time.AfterFunc(wait, func() {
			p.mu.Lock()
			if r.retry == t {
				r.retry = nil // fired: an idle peer keeps no timer
			}
			p.mu.Unlock()
			l.requestAttach(f)
		})
		r.retry = t
	}
	p.mu.Unlock()
	p.dropQueue(true)
	p.c.connected.Store(false)
	p.c.more().dialFailures.Add(1)
	p.c.more().refusals.Add(1)
	p.c.more().lastRefusal.Store(&re.Reason)
	p.t.markUnreachable(p.id)
	if p.t.ownMux {
		p.t.logOnce(p.id, re.Reason, "peer refused our connection", "addr", re.Addr, "detail", re.Detail)
	} else { // one line per peer host, whatever the number of groups refused
		p.t.mux.hostLog.log(p.t.log, re.Addr, re.Reason, "peer refused our connection",
			"group", p.t.cfg.GroupID, "peer", p.hexID(), "addr", re.Addr, "detail", re.Detail)
	}
	p.t.report(func() { p.t.handler.ReportRefused(p.id, re) })
}

// stopRetry stops the re-attach timer, if any. p.mu is held.
func (p *peer) stopRetry() {
	if r := p.c.rare.Load(); r != nil && r.retry != nil {
		r.retry.Stop()
	}
}

// kick is called when the peer reached us (it restarted, or learned of
// us): a link that is down redials at once rather than on its backoff
// timer, and a refused attachment is tried again at once.
func (p *peer) kick() {
	p.mu.Lock()
	f, down := p.flow, p.down
	retry := false
	if r := p.c.rare.Load(); r != nil && r.retry != nil {
		retry = r.retry.Stop()
	}
	p.mu.Unlock()
	if f == nil {
		return
	}
	if retry {
		f.l.requestAttach(f)
	}
	if down {
		f.l.kick()
	}
}

// learnerFlushBytes is the queue size that ends a learner's gathering.
func (p *peer) learnerFlushBytes() int64 {
	return min(learnerFlushBytes, p.t.cfg.MaxLearnerQueueBytes/4)
}

func (p *peer) stats() PeerStats {
	p.mu.Lock()
	s := PeerStats{
		ID:             p.id,
		Addr:           p.addr,
		Learner:        p.learner.Load(),
		QueuedMessages: len(p.queue) - p.head,
		QueuedBytes:    p.queueBytes,
	}
	f := p.flow
	p.mu.Unlock()
	c, r := &p.c, p.c.read()
	s.Connected = c.connected.Load()
	s.MessagesSent, s.BytesSent = c.msgsSent.Load(), c.bytesSent.Load()
	s.MessagesReceived, s.BytesReceived = c.msgsRecv.Load(), c.bytesRecv.Load()
	s.DroppedQueueFull, s.DroppedDisconnected, s.DroppedTooLarge = r.dropFull.Load(), r.dropDown.Load(), r.dropLarge.Load()
	s.DroppedOldVersion = r.dropVersion.Load()
	s.Dials, s.DialFailures, s.Refusals = c.dials.Load(), r.dialFailures.Load(), r.refusals.Load()
	if lr := r.lastRefusal.Load(); lr != nil {
		s.LastRefusal = *lr
	}
	if f != nil {
		s.RTT = time.Duration(f.l.rtt.Load())
		s.RTTHistory = f.l.rttHist.snapshot()
	} else {
		s.RTTHistory = emptyHistogram(rttBounds)
	}
	sc := r.readSnapshots()
	s.SnapshotsSent, s.SnapshotsFailed, s.SnapshotsReceived = sc.sent.Load(), sc.failed.Load(), sc.recv.Load()
	s.SnapshotBytesSent, s.SnapshotBytesReceived = sc.bytesSent.Load(), sc.bytesRecv.Load()
	s.SnapshotSendDuration = sc.hist.snapshot()
	s.SnapshotInFlight = p.snapshotProgress()
	return s
}

// addInbound registers an accepted connection from the peer; a new raft
// stream replaces (closes) an older one. It reports false if the peer was
// stopped.
func (p *peer) addInbound(c net.Conn, kind wire.Kind) bool {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return false
	}
	var old []net.Conn
	if kind == wire.KindStream {
		for oc, k := range p.inbound {
			if k == wire.KindStream {
				old = append(old, oc)
				delete(p.inbound, oc)
			}
		}
	}
	if p.inbound == nil {
		p.inbound = make(map[net.Conn]wire.Kind)
	}
	p.inbound[c] = kind
	p.mu.Unlock()
	if kind == wire.KindStream {
		// The peer reached us: if our link to it is down, it is up again (a
		// restart), so redial now rather than on the backoff timer.
		p.kick()
	}
	for _, oc := range old {
		_ = oc.Close()
	}
	return true
}

func (p *peer) removeInbound(c net.Conn) {
	p.mu.Lock()
	delete(p.inbound, c)
	if len(p.inbound) == 0 {
		p.inbound = nil // a map once grown keeps its memory
	}
	p.mu.Unlock()
}

// addInLink records that the peer is admitted on inbound host link il. It
// reports false if the peer was stopped.
func (p *peer) addInLink(il *inLink) bool {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return false
	}
	if !slices.Contains(p.inLinks, il) {
		p.inLinks = append(p.inLinks, il)
	}
	p.mu.Unlock()
	p.kick()
	return true
}

func (p *peer) removeInLink(il *inLink) {
	p.mu.Lock()
	if i := slices.Index(p.inLinks, il); i >= 0 {
		p.inLinks = slices.Delete(p.inLinks, i, i+1)
		if len(p.inLinks) == 0 {
			p.inLinks = nil
		}
	}
	p.mu.Unlock()
}

// backoff is exponential backoff with jitter: each wait is drawn from
// [d/2, d), d doubling from min up to max.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) reset() { b.cur = 0 }

func (p *peer) snapshotProgress() SnapshotProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.c.rare.Load(); r != nil {
		if sc := r.snaps.Load(); sc != nil && sc.prog != nil {
			return *sc.prog
		}
	}
	return SnapshotProgress{}
}

func (p *peer) setSnapshotProgress(sp SnapshotProgress) {
	sc := p.c.more().snapshots()
	p.mu.Lock()
	if sc.prog == nil {
		sc.prog = new(SnapshotProgress)
	}
	*sc.prog = sp
	p.mu.Unlock()
}
