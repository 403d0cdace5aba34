package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

const (
	// flushSize is how many encoded bytes the stream writer gathers before
	// a write when the queue holds more.
	flushSize = 256 << 10
	// maxKeptBuffer is the largest write buffer kept between batches.
	maxKeptBuffer = 4 << 20
)

// peer is one remote member: its outgoing queue, the goroutine that keeps
// a raft stream to it and writes the queue, its inbound connections and
// its counters.
type peer struct {
	t      *Transport
	id     uint64
	ctx    context.Context // canceled by stop
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the queue is not empty
	// learner is set by SetLearner: a smaller queue budget, and messages
	// gathered (LearnerBatchDelay). Atomic: the stream writer reads it on
	// every round without the lock.
	learner atomic.Bool
	redial  chan struct{} // cap 1: the address changed, or the peer connected to us
	c       *peerCounters
	kicked  bool // owned by run: woken through redial

	// mu guards the fields below; never held during I/O or Handler calls.
	mu         sync.Mutex
	addr       string
	urgent     bool // the queue holds a message a learner must get at once
	down       bool // the stream is down: Send drops rather than queue
	queue      []*raftpb.Message
	spare      []*raftpb.Message // the previous batch's slice, for reuse
	queueBytes int64
	out        net.Conn           // the current outbound stream
	dialCancel context.CancelFunc // cancels a dial in progress
	inbound    map[net.Conn]wire.Kind
	snapping   bool             // a snapshot to this peer is in flight
	snapProg   SnapshotProgress // its progress (Index 0: none)
	stopped    bool
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	p := &peer{
		t:       t,
		id:      id,
		addr:    addr,
		wake:    make(chan struct{}, 1),
		redial:  make(chan struct{}, 1),
		c:       newPeerCounters(),
		inbound: make(map[net.Conn]wire.Kind),
	}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	return p
}

func (p *peer) hexID() string { return fmt.Sprintf("%x", p.id) }

// stop ends the peer: its goroutines return and its connections close.
func (p *peer) stop() {
	p.cancel()
	p.mu.Lock()
	p.stopped = true
	var conns []net.Conn
	if p.out != nil {
		conns = append(conns, p.out)
	}
	for c := range p.inbound {
		conns = append(conns, c)
	}
	p.queue, p.spare, p.queueBytes = nil, nil, 0
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	if addr == p.addr {
		p.mu.Unlock()
		return
	}
	p.addr = addr
	out, cancel := p.out, p.dialCancel
	p.mu.Unlock()
	p.t.log.Info("peer address changed", "peer", p.hexID(), "addr", addr)
	if out != nil {
		_ = out.Close()
	}
	if cancel != nil {
		cancel()
	}
	select {
	case p.redial <- struct{}{}:
	default:
	}
}

// enqueue queues m for the stream writer, or drops it. It never blocks.
func (p *peer) enqueue(m *raftpb.Message) {
	size := int64(wire.MessageSize(m))
	p.mu.Lock()
	if p.down || p.stopped {
		p.mu.Unlock()
		p.c.dropDown.Add(1)
		p.t.markUnreachable(p.id)
		return
	}
	budget := p.t.cfg.MaxQueueBytes
	if p.learner.Load() {
		budget = p.t.cfg.MaxLearnerQueueBytes
	}
	if len(p.queue) >= p.t.cfg.MaxQueueMessages || (len(p.queue) > 0 && p.queueBytes+size > budget) {
		p.mu.Unlock()
		p.c.dropFull.Add(1)
		p.t.markUnreachable(p.id)
		return
	}
	p.queue = append(p.queue, m)
	p.queueBytes += size
	if p.learner.Load() && urgentForLearner(m) {
		p.urgent = true
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take empties the queue and returns what it held.
func (p *peer) take() []*raftpb.Message {
	p.mu.Lock()
	q := p.queue
	p.queue, p.spare, p.queueBytes, p.urgent = p.spare[:0], nil, 0, false
	merge := p.learner.Load() && p.t.cfg.LearnerBatchDelay > 0
	p.mu.Unlock()
	if merge { // outside the lock: Send must not wait for it
		q = mergeAppends(q, min(maxMergedBytes, p.t.cfg.MaxFrameSize/2))
	}
	return q
}

// recycle keeps a written batch's slice for the next swap.
func (p *peer) recycle(batch []*raftpb.Message) {
	clear(batch) // let the messages go
	p.mu.Lock()
	if p.spare == nil && !p.stopped {
		p.spare = batch[:0]
	}
	p.mu.Unlock()
}

// run keeps a raft stream to the peer, reconnecting with backoff, until
// the peer is stopped.
func (p *peer) run() {
	defer p.t.wg.Done()
	bo := backoff{min: p.t.cfg.MinBackoff, max: p.t.cfg.MaxBackoff}
	for p.ctx.Err() == nil {
		if p.kicked {
			// The address changed, or the peer just connected to us (it
			// restarted): dial at once, and from the shortest backoff.
			p.kicked = false
			bo.reset()
		}
		c, addr, err := p.connect()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.connectFailed(addr, err)
			if !p.wait(bo.next()) {
				return
			}
			continue
		}
		connected := time.Now()
		err = p.stream(c)
		p.disconnected(c, err)
		// A stream that breaks at once (a peer crashing in a loop, two
		// processes claiming one member ID) must not become a dial storm:
		// only a stream that lived longer than MaxBackoff resets the backoff.
		if time.Since(connected) > p.t.cfg.MaxBackoff {
			bo.reset()
		} else if !p.wait(bo.next()) {
			return
		}
	}
}

func (p *peer) connect() (*conn, string, error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	p.mu.Lock()
	addr := p.addr
	p.dialCancel = cancel
	p.mu.Unlock()
	c, err := p.t.dial(ctx, addr, wire.KindStream, p.id)
	p.mu.Lock()
	p.dialCancel = nil
	if err == nil && (p.stopped || addr != p.addr) {
		err = errors.New("transport: peer stopped or moved while dialing")
		_ = c.Close()
	}
	if err == nil {
		p.out = c
		p.down = false
	}
	p.mu.Unlock()
	if err != nil {
		return nil, addr, err
	}
	p.c.dials.Add(1)
	p.c.connected.Store(true)
	p.c.lastRefusal.Store(nil) // a refusal before this connection is stale
	if p.c.dials.Load() > 1 || p.c.dialFailures.Load() > 0 {
		p.t.log.Info("connected to peer", "peer", p.hexID(), "addr", addr)
	}
	p.t.logged.Delete(logKey{p.id, "unreachable"})
	return c, addr, nil
}

// connectFailed handles a failed connection attempt: the queue is dropped,
// raft told, a refusal reported to the handler.
func (p *peer) connectFailed(addr string, err error) {
	p.c.dialFailures.Add(1)
	p.markDown()
	var re *RefusedError
	if errors.As(err, &re) {
		p.c.refusals.Add(1)
		p.c.lastRefusal.Store(&re.Reason)
		p.t.logOnce(p.id, re.Reason, "peer refused our connection", "addr", addr, "detail", re.Detail)
		p.t.handler.ReportRefused(p.id, err)
		return
	}
	p.t.logOnce(p.id, "unreachable", "cannot connect to peer", "addr", addr, "err", err)
}

// markDown makes Send drop messages for the peer until it reconnects, and
// drops what is queued.
func (p *peer) markDown() {
	p.mu.Lock()
	dropped := len(p.queue)
	clear(p.queue)
	p.queue, p.queueBytes = p.queue[:0], 0
	p.down = true
	p.out = nil
	p.mu.Unlock()
	p.c.connected.Store(false)
	p.c.dropDown.Add(uint64(dropped))
	p.t.markUnreachable(p.id)
}

func (p *peer) disconnected(c *conn, err error) {
	_ = c.Close()
	p.markDown()
	if p.ctx.Err() != nil || err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		p.t.log.Debug("stream to peer closed", "peer", p.hexID(), "err", err)
		return
	}
	reason := reasonOf(err)
	p.t.connErrors.add(reason)
	p.t.logOnce(p.id, "stream_"+reason, "stream to peer broke", "err", err)
}

// wait sleeps for d, or until the address changes. It reports false if
// the peer stopped.
func (p *peer) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-p.redial:
		p.kicked = true
	case <-timer.C:
	}
	return true
}

// stream writes queued messages and pings to c until c breaks or the peer
// stops. A second goroutine reads the pongs.
func (p *peer) stream(c *conn) error {
	readErr := make(chan error, 1)
	go func() { readErr <- p.readPongs(c) }()
	defer func() {
		_ = c.Close()
		<-readErr
	}()
	ticker := time.NewTicker(p.t.cfg.PingInterval)
	defer ticker.Stop()
	var (
		buf       []byte
		lastWrite time.Time
		gather    *time.Timer
	)
	defer func() {
		if gather != nil {
			gather.Stop()
		}
	}()
	ping := true // at once, for a first RTT
	for {
		if d := p.gatherFor(lastWrite); d > 0 {
			// A learner's messages are gathered (see LearnerBatchDelay).
			if gather == nil {
				gather = time.NewTimer(d)
			} else {
				gather.Reset(d)
			}
			select {
			case <-p.ctx.Done():
				return nil
			case err := <-readErr:
				readErr <- err
				return err
			case <-p.wake:
				// More queued: an urgent message or a full queue ends
				// the wait early.
				gather.Stop() // Go 1.23 timers: no stale tick after Stop
				continue
			case <-gather.C:
			}
		}
		batch := p.take()
		if len(batch) > 0 || ping {
			var err error
			buf, err = p.writeBatch(c, buf, batch, ping)
			p.recycle(batch)
			if err != nil {
				return err
			}
			if len(batch) > 0 {
				lastWrite = time.Now()
			}
			ping = false
			if cap(buf) > maxKeptBuffer {
				buf = nil
			}
			continue // flush only when the queue runs dry
		}
		select {
		case <-p.ctx.Done():
			return nil
		case err := <-readErr:
			readErr <- err // for the deferred receive
			return err
		case <-p.wake:
		case <-ticker.C:
			ping = true
		}
	}
}

// writeBatch encodes batch (and a ping) into buf and writes it, in writes
// of about flushSize bytes.
func (p *peer) writeBatch(c *conn, buf []byte, batch []*raftpb.Message, ping bool) ([]byte, error) {
	group := p.t.cfg.GroupID
	maxFrame := p.t.cfg.MaxFrameSize
	buf = buf[:0]
	pending := 0 // messages in buf
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_ = c.SetWriteDeadline(time.Now().Add(p.t.cfg.WriteTimeout))
		if _, err := c.Write(buf); err != nil {
			return err
		}
		p.c.msgsSent.Add(uint64(pending))
		p.c.bytesSent.Add(uint64(len(buf)))
		buf, pending = buf[:0], 0
		return nil
	}
	if ping {
		buf = wire.AppendFrame(buf, wire.TypePing, group, wire.AppendPing(nil, uint64(time.Since(p.t.epoch()))))
	}
	for i, m := range batch {
		start := len(buf)
		var err error
		buf, err = wire.AppendMessageFrame(buf, group, m)
		switch {
		case err != nil:
			p.c.dropLarge.Add(1)
			p.t.logOnce(p.id, "encode", "cannot encode message", "type", m.GetType().String(), "err", err)
			continue
		case len(buf)-start-wire.HeaderSize > maxFrame:
			buf = buf[:start]
			p.c.dropLarge.Add(1)
			p.t.logOnce(p.id, "too_large", "message larger than MaxFrameSize dropped", "type", m.GetType().String(), "bytes", len(buf)-start)
			continue
		}
		pending++
		if len(buf) >= flushSize {
			if err := flush(); err != nil {
				p.c.dropDown.Add(uint64(pending + len(batch) - i - 1))
				return buf, err
			}
		}
	}
	if err := flush(); err != nil {
		p.c.dropDown.Add(uint64(pending))
		return buf, err
	}
	return buf, nil
}

// readPongs reads the listener's pongs on the outbound stream, recording
// round-trip times, until the connection fails. A listener that stops
// answering is cut off after ReadTimeout.
func (p *peer) readPongs(c *conn) error {
	c.dr.timeout = p.t.cfg.ReadTimeout
	for {
		f, err := c.r.Next()
		if err != nil {
			return err
		}
		if f.Type != wire.TypePong || f.Group != p.t.cfg.GroupID {
			return fmt.Errorf("%w: %s frame on an outbound stream", ErrProtocol, f.Type)
		}
		tok, err := wire.ParsePing(f.Payload)
		if err != nil {
			return err
		}
		rtt := time.Since(p.t.epoch()) - time.Duration(tok)
		if rtt >= 0 {
			p.c.rtt.Store(int64(rtt))
			p.c.rttHist.observe(rtt)
		}
	}
}

func (p *peer) stats() PeerStats {
	p.mu.Lock()
	s := PeerStats{
		ID:             p.id,
		Addr:           p.addr,
		Learner:        p.learner.Load(),
		QueuedMessages: len(p.queue),
		QueuedBytes:    p.queueBytes,
	}
	p.mu.Unlock()
	c := p.c
	s.Connected = c.connected.Load()
	s.MessagesSent, s.BytesSent = c.msgsSent.Load(), c.bytesSent.Load()
	s.MessagesReceived, s.BytesReceived = c.msgsRecv.Load(), c.bytesRecv.Load()
	s.DroppedQueueFull, s.DroppedDisconnected, s.DroppedTooLarge = c.dropFull.Load(), c.dropDown.Load(), c.dropLarge.Load()
	s.Dials, s.DialFailures, s.Refusals = c.dials.Load(), c.dialFailures.Load(), c.refusals.Load()
	if r := c.lastRefusal.Load(); r != nil {
		s.LastRefusal = *r
	}
	s.RTT = time.Duration(c.rtt.Load())
	s.RTTHistory = c.rttHist.snapshot()
	s.SnapshotsSent, s.SnapshotsFailed, s.SnapshotsReceived = c.snapsSent.Load(), c.snapsFailed.Load(), c.snapsRecv.Load()
	s.SnapshotBytesSent, s.SnapshotBytesReceived = c.snapBytesSent.Load(), c.snapBytesRecv.Load()
	s.SnapshotSendDuration = c.snapHist.snapshot()
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
	p.inbound[c] = kind
	down := p.down || p.out == nil
	p.mu.Unlock()
	if kind == wire.KindStream && down {
		// The peer reached us while our stream to it is down: it is up
		// again (a restart), so redial now rather than on the backoff timer.
		select {
		case p.redial <- struct{}{}:
		default:
		}
	}
	for _, oc := range old {
		_ = oc.Close()
	}
	return true
}

func (p *peer) removeInbound(c net.Conn) {
	p.mu.Lock()
	delete(p.inbound, c)
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
	return p.snapProg
}

func (p *peer) setSnapshotProgress(sp SnapshotProgress) {
	p.mu.Lock()
	p.snapProg = sp
	p.mu.Unlock()
}
