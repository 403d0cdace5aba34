package transport

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

const (
	// flushSize is how many encoded bytes the link's writer gathers before
	// a write when more is queued.
	flushSize = 256 << 10
	// maxKeptBuffer is the largest write buffer kept between rounds.
	maxKeptBuffer = 4 << 20
	// defaultQuantum is the bytes a flow may write per round of the link's
	// writer (deficit round robin).
	defaultQuantum = 32 << 10
)

// linkWriter is the state of one connection's writer.
type linkWriter struct {
	l       *link
	c       *conn
	gen     uint64
	buf     []byte
	batch   []*raftpb.Message // taken from one flow, being encoded
	pending []sent            // what buf holds, per flow, to count once written
	now     time.Time
}

// frameLimit is the largest message f may write on its link: its
// transport's MaxFrameSize, or the peer host's frame limit (from the
// link's hello reply) if smaller.
func (f *flow) frameLimit() int {
	limit := f.p.t.cfg.MaxFrameSize
	if peer := int(f.l.peerMax.Load()); peer > 0 && peer < limit {
		limit = peer
	}
	return limit
}

// sent is what one flow has in the write buffer.
type sent struct {
	f           *flow
	msgs, bytes int
}

// serve writes to c until it breaks or the link closes: each round takes
// the flows with queued messages — the newly active first, then those
// left from the last round — and lets each write up to a quantum of bytes
// (deficit round robin: a flow that wrote more than its quantum, one large
// message, waits until its deficit is repaid), so that one group's backlog
// delays another group's messages by at most a round. What the rounds
// encode goes out in writes of flushSize, and at once when the queues run
// dry. A second goroutine reads the peer's pongs and attach replies.
func (l *link) serve(c *conn) error {
	l.mu.Lock()
	w := &linkWriter{l: l, c: c, gen: l.gen}
	l.mu.Unlock()
	readErr := make(chan error, 1)
	go func() { readErr <- l.read(c) }()
	defer func() {
		_ = c.Close()
		<-readErr
	}()
	ticker := time.NewTicker(l.m.ls.pingInterval)
	defer ticker.Stop()
	var gather *time.Timer
	defer func() {
		if gather != nil {
			gather.Stop()
		}
	}()
	var round, next, waiting, attach []*flow
	ping := true // at once, for a first RTT
	for {
		if l.ctx.Err() != nil {
			return nil
		}
		// The round: the newly active flows, then last round's, then the
		// gathering learners (to see whether their wait is over).
		l.mu.Lock()
		round = append(round[:0], l.active...)
		clear(l.active)
		l.active = l.active[:0]
		for _, f := range l.attach {
			if l.flows[f.key] == f {
				attach = append(attach, f)
			}
		}
		clear(l.attach)
		l.attach = l.attach[:0]
		l.mu.Unlock()
		round = append(round, next...)
		round = append(round, waiting...)
		clear(next) // an idle link keeps no closed group's flow
		clear(waiting)
		next, waiting = next[:0], waiting[:0]

		w.now = time.Now()
		if ping {
			w.ping()
			ping = false
		}
		for _, f := range attach {
			w.attach(f)
		}
		clear(attach)
		attach = attach[:0]
		var wakeIn time.Duration
		alone := len(round) == 1
		for _, f := range round {
			if d := f.gatherFor(w.now); d > 0 {
				if len(waiting) == 0 || d < wakeIn {
					wakeIn = d
				}
				waiting = append(waiting, f)
				continue
			}
			more, err := w.serveFlow(f, alone)
			if err != nil {
				return err
			}
			if more {
				next = append(next, f)
			}
		}
		clear(round)
		if len(next) > 0 && len(w.buf) < flushSize {
			// More to write at once: the next rounds fill the buffer
			// (in round order) before a write.
			continue
		}
		if err := w.flush(); err != nil {
			return err
		}
		if cap(w.buf) > maxKeptBuffer {
			w.buf = nil
		}
		if len(next) > 0 {
			select { // busy: only a look at the ping timer and the reader
			case err := <-readErr:
				readErr <- err // for the deferred receive
				return err
			case <-ticker.C:
				ping = true
			default:
			}
			continue
		}
		var gc <-chan time.Time
		if len(waiting) > 0 {
			if gather == nil {
				gather = time.NewTimer(wakeIn)
			} else {
				gather.Reset(wakeIn)
			}
			gc = gather.C
		}
		select {
		case <-l.ctx.Done():
			return nil
		case err := <-readErr:
			readErr <- err
			return err
		case <-l.wake:
		case <-ticker.C:
			ping = true
		case <-gc:
		}
		if gather != nil {
			gather.Stop() // Go 1.23 timers: no stale tick after Stop
		}
	}
}

// serveFlow lets f write up to its deficit. It reports whether f has
// messages left: whether it stays in the rounds. A flow in debt (its last
// message was larger than its deficit) writes nothing until the quanta of
// the rounds it sits out have repaid it, and stays in the rounds meanwhile.
func (w *linkWriter) serveFlow(f *flow, alone bool) (more bool, err error) {
	if alone && f.deficit < 0 {
		f.deficit = 0 // no other flow to be fair to
	}
	f.deficit += w.l.m.quantum
	if f.deficit <= 0 {
		// Still in debt: it sits this round out but stays in the rounds
		// (its queue is marked as on the active list, so no enqueue would
		// put it back), unless its queue was dropped meanwhile.
		return f.p.stillQueued(f), nil
	}
	for f.deficit > 0 {
		w.batch, more = f.p.take(f, f.deficit, w.batch[:0])
		if len(w.batch) == 0 {
			break
		}
		if w.l.solo == nil && f.sentGen != w.gen {
			w.attach(f) // before the first message on this connection
		}
		f.deficit -= w.encode(f, w.batch)
		clear(w.batch)
		f.lastWrite = max(w.now.Sub(w.l.m.start), 1)
		if len(w.buf) >= flushSize {
			if err := w.flush(); err != nil {
				return false, err
			}
		}
		if !more {
			break
		}
	}
	if !more && f.deficit > 0 {
		f.deficit = 0 // an idle flow keeps no credit
	}
	return more, nil
}

// encode appends batch's frames to the buffer and returns their size.
func (w *linkWriter) encode(f *flow, batch []*raftpb.Message) int {
	p := f.p
	maxFrame := f.frameLimit()
	start, msgs := len(w.buf), 0
	batch = gatherAnswers(batch)
	for _, m := range batch {
		at := len(w.buf)
		var err error
		if wire.IsRelayCarrier(m) {
			if w.c.reply.Version < wire.AnswersVersion && wire.RelayAnswers(m) {
				// Relayed answers for a peer of a previous release: lost
				// (a relay takes answers only when its link to the
				// leader's host carries them; raft tolerates the loss).
				p.c.more().dropVersion.Add(1)
				continue
			}
			if w.c.reply.Version < wire.RelayVersion {
				// A peer of the previous release (version 3) takes no
				// relay frame: the envelope is lost, and the member
				// reported unreachable, so that the leader feeds its
				// standbys directly (the relay is marked down).
				p.c.more().dropVersion.Add(1)
				p.t.markUnreachable(p.id)
				continue
			}
			w.buf, err = wire.AppendRelayFrame(w.buf, f.key.group, m, w.c.reply.Version >= wire.DeltaVersion)
		} else {
			w.buf, err = wire.AppendMessageFrame(w.buf, f.key.group, m)
		}
		switch {
		case err != nil:
			p.c.more().dropLarge.Add(1)
			p.t.logOnce(p.id, "encode", "cannot encode message", "type", m.GetType().String(), "err", err)
			continue
		case len(w.buf)-at-wire.HeaderSize > maxFrame:
			size := len(w.buf) - at - wire.HeaderSize
			w.buf = w.buf[:at]
			p.tooLarge(m, size, maxFrame)
			continue
		}
		msgs++
	}
	n := len(w.buf) - start
	if k := len(w.pending); k > 0 && w.pending[k-1].f == f {
		w.pending[k-1].msgs += msgs
		w.pending[k-1].bytes += n
	} else {
		w.pending = append(w.pending, sent{f: f, msgs: msgs, bytes: n})
	}
	return n
}

// attach appends f's attachment.
func (w *linkWriter) attach(f *flow) {
	var a [wire.AttachSize + 64]byte
	w.buf = wire.AppendFrame(w.buf, wire.TypeAttach, f.key.group, wire.AppendAttach(a[:0], wire.Attach{
		Cluster: f.p.t.cluster.Load(), From: f.key.from, To: f.key.to, Addr: *f.p.t.advert.Load(), HostID: w.l.m.hostID,
		Incarnation: f.p.t.inc.Load(),
	}))
	f.sentGen = w.gen
}

// ping appends a ping (in group 0 on a host link, in the group on a
// fallback stream, as the previous release expects).
func (w *linkWriter) ping() {
	var group uint64
	if w.l.solo != nil {
		group = w.l.solo.key.group
	}
	var tok [wire.PingSize]byte
	w.buf = wire.AppendFrame(w.buf, wire.TypePing, group, wire.AppendPing(tok[:0], uint64(time.Since(w.l.m.start))))
}

// flush writes the buffer and counts what it carried.
func (w *linkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_ = w.c.SetWriteDeadline(time.Now().Add(w.l.m.ls.writeTimeout))
	_, err := w.c.Write(w.buf)
	for _, s := range w.pending {
		if err != nil {
			s.f.p.c.more().dropDown.Add(uint64(s.msgs))
			continue
		}
		s.f.p.c.msgsSent.Add(uint64(s.msgs))
		s.f.p.c.bytesSent.Add(uint64(s.bytes))
	}
	clear(w.pending)
	w.pending = w.pending[:0]
	w.buf = w.buf[:0]
	return err
}

// gatherFor returns how long the writer leaves f's messages queued: 0
// unless f's peer is a learner whose last write was less than
// LearnerBatchDelay ago and whose queue holds nothing urgent and not much.
func (f *flow) gatherFor(now time.Time) time.Duration {
	p := f.p
	delay := p.t.cfg.LearnerBatchDelay
	if delay <= 0 || !p.learner.Load() {
		return 0 // a voter's messages go at once, without taking the lock
	}
	p.mu.Lock()
	gather := !p.urgent && len(p.queue) > p.head && p.queueBytes < p.learnerFlushBytes()
	p.mu.Unlock()
	if !gather {
		return 0
	}
	if f.lastWrite == 0 {
		return 0 // never written
	}
	return delay - (now.Sub(f.l.m.start) - f.lastWrite)
}
