package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// Host liveness: whether a peer host answers on the host link to it.
//
// A host link pings its peer host every PingInterval (linkwrite.go) and the
// peer answers each ping with a pong. The link records its last pong; the
// host is live from the first pong on, and stays live while pongs keep
// coming within LivenessTimeout. It is no longer live when
//
//   - no pong came for LivenessTimeout (a host that stopped, a stalled
//     process, a cut network, or one cut one way: it is the round trip on
//     our outbound link that counts), checked by a timer of the link's, or
//   - the connection broke and the next dial failed: a killed process
//     refuses the dial at once (the first redial comes MinBackoff after
//     the break), well before its pongs are late.
//
// A connection that breaks and redials at once is no death: nothing
// changes unless a redial fails or the pongs are late. A pong makes the
// host live again. Each change is reported to every group with a member
// there (LivenessHandler): O(groups) per change, never per pong — a pong
// costs a few atomic operations whatever the number of groups.

// liveness is a host link's view of its peer host.
type liveness struct {
	lastPong atomic.Int64 // unix nanoseconds of the last pong; 0: none yet
	live     atomic.Bool

	// mu serializes the changes and their reports (in order), and guards
	// the fields below.
	mu           sync.Mutex
	known        bool // a pong ever came, or a dial failed
	notLiveSince time.Time
	transitions  uint64
	timer        *time.Timer // fires when the last pong may be too late
	closed       bool
	// hostID is the peer host's ID as last learned from the flows riding
	// the link (hostLiveness): kept when they leave it, as after the host
	// stopped, so that its row still names it.
	hostID uint64
}

// HostLiveness is a peer host's liveness as this host sees it on its host
// link to it (MuxStats.Hosts).
type HostLiveness struct {
	// HostID is the peer host's ID, as its members' attachments to this
	// host said it (0 until one did, or for a host without one).
	HostID uint64
	// Addr is the address the link dials.
	Addr string
	// Live reports whether the host is live: a pong came within
	// LivenessTimeout (and no redial failed since).
	Live bool
	// LastPong is when the host last answered a ping (zero: never).
	LastPong time.Time
	// NotLiveSince is when the host turned not live (zero while live, or
	// while nothing is known yet).
	NotLiveSince time.Time
	// Transitions counts the changes of Live, the first pong's included: a
	// host that died and came back once has 3.
	Transitions uint64
}

// pong records a pong on a host link, and makes the host live if it was
// not. O(1) unless it changes the host's liveness.
func (l *link) pong(now time.Time) {
	l.lv.lastPong.Store(now.UnixNano())
	if !l.lv.live.Load() {
		l.setLive(now)
	}
}

// setLive makes the host live after a pong at now.
func (l *link) setLive(now time.Time) {
	lv := &l.lv
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.closed || lv.live.Load() {
		return
	}
	lv.live.Store(true)
	lv.known = true
	lv.transitions++
	l.learnHostIDLocked()
	lv.notLiveSince = time.Time{}
	timeout := l.m.ls.livenessTimeout
	if lv.timer == nil {
		lv.timer = time.AfterFunc(timeout, l.checkLive)
	} else {
		lv.timer.Reset(timeout)
	}
	if lv.transitions > 1 {
		l.m.linkLog(l.addr, "", "peer host live again", "addr", l.addr)
	}
	l.reportLiveness(true, now)
}

// checkLive runs on the link's liveness timer: the host is no longer live
// if its last pong is LivenessTimeout old, else the timer waits for the
// rest.
func (l *link) checkLive() {
	lv := &l.lv
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.closed || !lv.live.Load() {
		return
	}
	now := time.Now()
	last := time.Unix(0, lv.lastPong.Load())
	timeout := l.m.ls.livenessTimeout
	if late := now.Sub(last); late < timeout {
		lv.timer.Reset(timeout - late)
		return
	}
	l.setNotLiveLocked(now, "no pong within the liveness timeout", "last_pong", last, "timeout", timeout)
}

// dialFailed is called when a host link failed to connect: its host is
// not live (a connection that broke and redials at once never gets here).
func (l *link) dialFailed(err error) {
	lv := &l.lv
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.closed {
		return
	}
	if !lv.live.Load() {
		if !lv.known {
			lv.known, lv.notLiveSince = true, time.Now()
		}
		return
	}
	l.setNotLiveLocked(time.Now(), "the link broke and its redial failed", "err", err)
}

// setNotLiveLocked makes the host not live. lv.mu is held.
func (l *link) setNotLiveLocked(now time.Time, why string, args ...any) {
	lv := &l.lv
	lv.live.Store(false)
	lv.transitions++
	l.learnHostIDLocked()
	lv.notLiveSince = now
	lv.timer.Stop()
	l.m.linkLog(l.addr, "not_live", "peer host not live: "+why, append([]any{"addr", l.addr}, args...)...)
	l.reportLiveness(false, time.Unix(0, lv.lastPong.Load()))
}

// reportLiveness tells every group with a member on the host. lv.mu is
// held: reports reach each group in the order of the changes, each flow
// told a state once.
func (l *link) reportLiveness(live bool, since time.Time) {
	state := uint8(2)
	if live {
		state = 1
	}
	for _, f := range l.flowList() {
		if f.told == state {
			continue
		}
		f.told = state
		f.p.reportLiveness(f, live, since)
	}
}

// tellJoined tells the group of a flow that joined the link that its
// host is live, if it is: a group that joins a live link hears the state
// it joins, then every change (l.mu is not held).
func (l *link) tellJoined(f *flow) {
	lv := &l.lv
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.closed || !lv.live.Load() || f.told == 1 {
		return
	}
	f.told = 1
	f.p.reportLiveness(f, true, time.Unix(0, lv.lastPong.Load()))
}

// closeLiveness stops the link's liveness timer; nothing is reported after.
func (l *link) closeLiveness() {
	lv := &l.lv
	lv.mu.Lock()
	lv.closed = true
	if lv.timer != nil {
		lv.timer.Stop()
	}
	lv.mu.Unlock()
}

// contact is the host's liveness for HostContact: (now, true) while live,
// else (its last pong, false).
func (l *link) contact(now time.Time) (time.Time, bool) {
	if l.lv.live.Load() {
		return now, true
	}
	if ns := l.lv.lastPong.Load(); ns != 0 {
		return time.Unix(0, ns), false
	}
	return time.Time{}, false
}

// hostLiveness returns the link's row of MuxStats.Hosts.
func (l *link) hostLiveness() HostLiveness {
	h := HostLiveness{Addr: l.addr}
	l.lv.mu.Lock()
	h.Live, h.NotLiveSince, h.Transitions = l.lv.live.Load(), l.lv.notLiveSince, l.lv.transitions
	l.learnHostIDLocked()
	h.HostID = l.lv.hostID
	l.lv.mu.Unlock()
	if ns := l.lv.lastPong.Load(); ns != 0 {
		h.LastPong = time.Unix(0, ns)
	}
	return h
}

// learnHostIDLocked records the peer host's ID from the flows riding the
// link, if one knows it (their peers' owner). lv.mu is held (the order
// lv.mu, then a peer's mu, is reportLiveness's too).
func (l *link) learnHostIDLocked() {
	for _, f := range l.flowList() {
		f.p.mu.Lock()
		owner := f.p.owner
		f.p.mu.Unlock()
		if owner != 0 {
			l.lv.hostID = owner
			return
		}
	}
}

// reportLiveness calls the group's LivenessHandler, if it is one, for the
// peer's member, unless the peer's messages no longer ride f (it moved,
// stopped, or streams on a fallback).
func (p *peer) reportLiveness(f *flow, live bool, since time.Time) {
	lh, ok := p.t.handler.(LivenessHandler)
	if !ok {
		return
	}
	p.mu.Lock()
	current := p.flow == f && p.host == f && !p.stopped
	p.mu.Unlock()
	if !current {
		return
	}
	t := p.t
	t.hmu.RLock()
	if !t.hclosed {
		lh.HostLiveness(p.id, live, since)
	}
	t.hmu.RUnlock()
}

// HostContact reports the liveness of the host that member id's
// attachment rides on (the host link to its address): (now, true) while
// that host is live (it answered a ping within LivenessTimeout) and the
// member's attachment there is not refused; otherwise the host's last
// pong and false (the zero time if it never answered). It returns the zero
// time and false when nothing is known: id is not a peer, its host was
// never reached, its attachment was refused (its group does not run there,
// or refuses it), or it streams on a fallback (a host of an earlier
// release, which has no host link).
//
// A live host says the member's process answers, not that its group does:
// its group's own traffic may be cut while its host is live.
func (t *Transport) HostContact(id uint64) (at time.Time, live bool) {
	p := t.peer(id)
	if p == nil {
		return time.Time{}, false
	}
	p.mu.Lock()
	f, refused := p.host, p.hostRefused
	onHost := f != nil && p.flow == f && !p.stopped
	p.mu.Unlock()
	if !onHost || refused {
		return time.Time{}, false
	}
	return f.l.contact(time.Now())
}
