package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// attachKey names a group's sender and receiver: an attachment on a host
// link.
type attachKey struct{ group, from, to uint64 }

// flow is a peer's messages on one link. The link's writer drains the
// flows with queued messages by deficit round robin.
type flow struct {
	p   *peer
	l   *link
	key attachKey
	// queued is guarded by p.mu: the flow is on l.active (or its writer's
	// round), and an enqueue need not put it there again.
	queued bool
	// told is the host liveness last reported to the peer's group for this
	// flow (0 none, 1 live, 2 not live); guarded by l.lv.mu.
	told uint8

	// Owned by l's writer goroutine.
	deficit   int           // bytes it may still write in this round (negative: in debt)
	sentGen   uint64        // the connection its attachment was last written on
	lastWrite time.Duration // for a learner's gathering: since the mux started (0: never)
}

// link is the raft-message connection from this host to the host at addr:
// one per peer address of the mux, shared by every group's peer there
// (a host link, KindLink), or, toward a host of an earlier release that
// speaks no host links, one group's own raft stream (KindStream, solo).
//
// A link owns two goroutines while connected (its writer, which also
// dials, and a reader of pongs and attach replies) and one otherwise.
type link struct {
	m      *Mux
	addr   string
	solo   *flow // a fallback stream: the one flow it carries
	parent *link // the host link a fallback stream stands in for

	ctx      context.Context // canceled by close
	cancel   context.CancelFunc
	wake     chan struct{} // cap 1: work for the writer
	kickc    chan struct{} // cap 1: redial now
	reprobec chan struct{} // cap 1: a fallback stream broke: try a host link again
	// peerMax is the largest frame payload the peer accepts on the
	// connection (its hello reply's), 0 if it did not say.
	peerMax atomic.Int64
	// rtt and rttHist are the round trips measured on the link (ping to
	// pong), which every flow on it shares.
	rtt     atomic.Int64
	rttHist *histogram
	// lv is the peer host's liveness (liveness.go); a host link's only.
	lv liveness

	mu          sync.Mutex
	flows       map[attachKey]*flow // every flow routed to the link
	active      []*flow             // flows with queued messages, in arrival order
	attach      []*flow             // attachments to write (again) on this connection
	gen         uint64              // the connection's generation; 0 while down
	conn        *conn
	failed      bool // the last connection attempt failed, or the connection broke
	closed      bool
	legacy      bool // the peer host speaks no host links: its groups stream on solos
	legacySince time.Time
	solos       map[*flow]*link // legacy: each host flow's own stream
}

func newLink(m *Mux, addr string, parent *link, solo *peer) *link {
	ctx := m.ctx
	if parent != nil {
		ctx = parent.ctx
	}
	l := &link{
		m: m, addr: addr, parent: parent,
		wake: make(chan struct{}, 1), kickc: make(chan struct{}, 1), reprobec: make(chan struct{}, 1),
		flows: make(map[attachKey]*flow, 1), rttHist: newHistogram(rttBounds),
	}
	l.ctx, l.cancel = context.WithCancel(ctx)
	if solo != nil {
		l.solo = &flow{p: solo, l: l, key: solo.key()}
		l.flows[l.solo.key] = l.solo
	}
	return l
}

// join routes p to the host link of addr, creating it (and dialing) if it
// is the first peer there.
func (m *Mux) join(p *peer, addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return // p has no flow: Send drops
	}
	l := m.links[addr]
	if l == nil {
		// Its goroutine starts with its first flow, so that its first
		// connection attempt counts for someone.
		l = newLink(m, addr, nil, nil)
		if !l.addFlow(p) {
			l.cancel()
			return
		}
		m.links[addr] = l
		m.wg.Add(1)
		go l.run()
		return
	}
	l.addFlow(p)
}

// addFlow adds p's host flow to the link. It reports false if p was
// stopped meanwhile.
func (l *link) addFlow(p *peer) bool {
	hf := &flow{p: p, l: l, key: p.key()}
	l.mu.Lock()
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		l.mu.Unlock()
		return false
	}
	p.host, p.flow = hf, hf
	p.down = l.failed
	p.mu.Unlock()
	l.flows[hf.key] = hf
	switch {
	case l.legacy:
		l.startSolo(hf)
	case l.gen != 0:
		l.attach = append(l.attach, hf)
		l.poke()
	}
	l.mu.Unlock()
	l.tellJoined(hf)
	return true
}

// leave takes a peer's host flow off its link; the link closes with its
// last flow.
func (m *Mux) leave(hf *flow) {
	m.mu.Lock()
	l := hf.l
	l.mu.Lock()
	if l.flows[hf.key] == hf {
		delete(l.flows, hf.key)
	}
	solo := l.solos[hf]
	delete(l.solos, hf)
	empty := len(l.flows) == 0
	if empty && m.links[l.addr] == l {
		delete(m.links, l.addr)
	}
	l.mu.Unlock()
	m.mu.Unlock()
	if solo != nil {
		solo.close()
	}
	if empty {
		l.close()
	}
}

// close stops the link: its goroutines end, its connection closes.
func (l *link) close() {
	l.cancel()
	l.closeLiveness()
	l.mu.Lock()
	l.closed = true
	c := l.conn
	solos := l.solos
	l.solos = nil
	l.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	for _, s := range solos {
		s.close()
	}
}

// poke wakes the writer.
func (l *link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// kick makes a link waiting to redial redial now.
func (l *link) kick() {
	select {
	case l.kickc <- struct{}{}:
	default:
	}
}

// activate puts f on the active list.
func (l *link) activate(f *flow) {
	l.mu.Lock()
	l.active = append(l.active, f)
	l.mu.Unlock()
	l.poke()
}

// requestAttach writes f's attachment again on the current connection
// (after a refusal's backoff, or when the peer reached us).
func (l *link) requestAttach(f *flow) {
	l.mu.Lock()
	if l.gen == 0 || l.legacy || l.solo != nil || l.flows[f.key] != f {
		l.mu.Unlock()
		return
	}
	l.attach = append(l.attach, f)
	l.mu.Unlock()
	l.poke()
}

// flowList returns the link's flows.
func (l *link) flowList() []*flow {
	l.mu.Lock()
	defer l.mu.Unlock()
	fs := make([]*flow, 0, len(l.flows))
	for _, f := range l.flows {
		fs = append(fs, f)
	}
	return fs
}

// run keeps the link connected, reconnecting with backoff, until it is
// closed.
func (l *link) run() {
	defer l.m.wg.Done()
	bo := backoff{min: l.m.ls.minBackoff, max: l.m.ls.maxBackoff}
	for l.ctx.Err() == nil {
		if l.isLegacy() {
			l.waitReprobe()
			continue
		}
		c, err := l.connect()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			if l.solo == nil && legacyRefusal(err) {
				l.enterLegacy(err)
				continue
			}
			l.connectFailed(err)
			if !l.wait(&bo) {
				return
			}
			continue
		}
		connected := time.Now()
		err = l.serve(c)
		l.disconnected(c, err)
		// A connection that breaks at once (a peer crashing in a loop, two
		// processes claiming one address) must not become a dial storm:
		// only one that lived longer than MaxBackoff resets the backoff.
		if time.Since(connected) > bo.max {
			bo.reset()
		} else if !l.wait(&bo) {
			return
		}
	}
}

// wait sleeps for the next backoff, or until kicked. It reports false if
// the link closed.
func (l *link) wait(bo *backoff) bool {
	timer := time.NewTimer(bo.next())
	defer timer.Stop()
	select {
	case <-l.ctx.Done():
		return false
	case <-l.kickc:
		bo.reset()
	case <-timer.C:
	}
	return true
}

// connect dials the link: a host link's hello, or a fallback stream's.
func (l *link) connect() (*conn, error) {
	ctx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	var (
		c   *conn
		err error
	)
	if l.solo != nil {
		p := l.solo.p
		c, err = p.t.dial(ctx, l.addr, wire.KindStream, p.id)
	} else {
		// The hello names one of the groups it will carry, so that a host
		// of an earlier release answers "unknown connection kind" (bad
		// hello) rather than a group mismatch; see wire/link.go.
		var h wire.Hello
		for _, f := range l.flowList() {
			h = wire.Hello{Group: f.key.group, Cluster: f.p.t.cluster.Load(), From: f.key.from, To: f.key.to}
			break
		}
		h.Kind, h.HostID = wire.KindLink, l.m.hostID
		c, err = l.m.dialer.dial(ctx, l.addr, h)
	}
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.gen = l.m.gens.Add(1)
	l.conn, l.failed = c, false
	l.peerMax.Store(int64(c.reply.MaxFrame))
	flows := make([]*flow, 0, len(l.flows))
	for _, f := range l.flows {
		flows = append(flows, f)
	}
	if l.solo == nil {
		l.attach = append(l.attach[:0], flows...)
	}
	l.mu.Unlock()
	for _, f := range flows {
		f.p.linkUp(f)
	}
	if l.solo != nil {
		l.solo.p.accepted(l.solo, l.addr)
	} else {
		l.m.linkLog(l.addr, "", "connected to peer host", "addr", l.addr, "groups", len(flows))
	}
	return c, nil
}

// connectFailed reports a failed connection attempt to every flow: a
// fallback stream's refused hello is its group's refusal, and so is a host
// link's refused for another protocol version (true of every group there);
// anything else makes them unreachable. A host link's hello names no
// member that counts (see wire/link.go), so any other refusal of it (say,
// "removed") is a misbehaving peer host's, never a group's: it must not
// tombstone the groups' replicas here, and is only a failed connection.
func (l *link) connectFailed(err error) {
	l.mu.Lock()
	l.failed = true
	l.mu.Unlock()
	if l.solo == nil {
		l.dialFailed(err)
	}
	flows := l.flowList()
	var re *RefusedError
	if errors.As(err, &re) && (l.solo != nil || errors.Is(err, ErrVersion)) {
		for _, f := range flows {
			r := *re
			r.Peer = f.p.id
			f.p.refused(f, &r, false)
		}
		return
	}
	if l.solo != nil {
		p := l.solo.p
		p.t.logOnce(p.id, "unreachable", "cannot connect to peer", "addr", l.addr, "err", err)
		l.parent.maybeReprobe()
	} else {
		l.m.linkLog(l.addr, "unreachable", "cannot connect to peer host", "addr", l.addr, "groups", len(flows), "err", err)
	}
	for _, f := range flows {
		f.p.linkDown(f, true)
	}
}

// disconnected handles the end of a connection: every flow's queue is
// dropped, raft told.
func (l *link) disconnected(c *conn, err error) {
	_ = c.Close()
	l.mu.Lock()
	l.gen, l.conn, l.failed = 0, nil, true
	clear(l.active)
	l.active = l.active[:0]
	clear(l.attach)
	l.attach = l.attach[:0]
	l.mu.Unlock()
	for _, f := range l.flowList() {
		f.p.linkDown(f, false)
	}
	if l.solo != nil {
		l.parent.maybeReprobe()
	}
	if l.ctx.Err() != nil || err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		l.m.log.Debug("link to peer host closed", "addr", l.addr, "err", err)
		return
	}
	reason := reasonOf(err)
	if l.solo != nil {
		p := l.solo.p
		p.t.connErrors.add(reason)
		p.t.logOnce(p.id, "stream_"+reason, "stream to peer broke", "err", err)
		return
	}
	l.m.errorCounter().add(reason)
	l.m.linkLog(l.addr, "link_"+reason, "link to peer host broke", "addr", l.addr, "err", err)
}

// read reads the peer host's pongs and attach replies on an outbound
// connection until it fails. A peer that stops answering is cut off after
// ReadTimeout.
func (l *link) read(c *conn) error {
	c.dr.timeout = l.m.ls.readTimeout
	var group uint64 // a host link pings in group 0
	if l.solo != nil {
		group = l.solo.key.group
	}
	for {
		f, err := c.r.Next()
		if err != nil {
			return err
		}
		switch {
		case f.Type == wire.TypePong && f.Group == group:
			tok, err := wire.ParsePing(f.Payload)
			if err != nil {
				return err
			}
			now := time.Now()
			if rtt := now.Sub(l.m.start) - time.Duration(tok); rtt >= 0 {
				l.observeRTT(rtt)
			}
			if l.solo == nil {
				l.pong(now)
			}
		case f.Type == wire.TypeAttachReply && l.solo == nil:
			r, err := wire.ParseAttachReply(f.Payload)
			if err != nil {
				return err
			}
			l.attachReply(f.Group, r)
		default:
			return fmt.Errorf("%w: %s frame in group %d on an outbound stream", ErrProtocol, f.Type, f.Group)
		}
	}
}

// attachReply hands an attachment's acceptance or refusal to its peer.
func (l *link) attachReply(group uint64, r wire.AttachReply) {
	l.mu.Lock()
	f := l.flows[attachKey{group: group, from: r.From, to: r.To}]
	l.mu.Unlock()
	if f == nil {
		return // the peer left meanwhile
	}
	if r.Code == wire.CodeAccepted {
		f.p.accepted(f, l.addr)
		return
	}
	f.p.refused(f, refusedError(f.p.id, l.addr, wire.HelloReply{Code: r.Code, Cluster: r.Cluster, Reason: r.Reason}), true)
}

// observeRTT records a round trip on the link, for every peer on it:
// O(1), whatever the number of groups.
func (l *link) observeRTT(rtt time.Duration) {
	l.rtt.Store(int64(rtt))
	l.rttHist.observe(rtt)
}
