package transport

import (
	"errors"
	"time"
)

// A host of the previous release speaks no host links: it answers a link
// hello with a refusal, "unknown connection kind" (bad hello) if it runs
// the group the hello names, else a group mismatch. Toward such a host the
// link falls back to what that release speaks: each group's peer gets a
// raft stream of its own (a solo link: KindStream, the group's hello, no
// attachments), as before host links. The host link tries its own kind
// again when a fallback stream breaks or cannot connect (the peer host may
// have been upgraded), at most once per Mux.legacyHold. Since protocol
// version 3, such a host (version 2) is refused at the hello for its version
// first: the fallback serves a build that speaks version 2 again.

// defaultLegacyHold is how long a link stays on fallback streams at least.
const defaultLegacyHold = 30 * time.Second

// legacyRefusal reports whether err is how a host of the previous release
// refuses a link hello.
func legacyRefusal(err error) bool {
	var re *RefusedError
	return errors.As(err, &re) && (errors.Is(err, ErrBadHello) || errors.Is(err, ErrGroupMismatch))
}

func (l *link) isLegacy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.legacy
}

// enterLegacy moves every flow of the link to a fallback stream of its own.
func (l *link) enterLegacy(err error) {
	l.m.linkLog(l.addr, "legacy", "peer host speaks no host links (an earlier release): each group streams on a connection of its own", "addr", l.addr, "detail", err)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.legacy, l.legacySince, l.failed = true, time.Now(), false
	if l.solos == nil {
		l.solos = make(map[*flow]*link)
	}
	for _, hf := range l.flows {
		l.startSolo(hf)
	}
}

// startSolo starts hf's fallback stream and moves its peer there. l.mu is
// held.
func (l *link) startSolo(hf *flow) {
	if l.solos == nil {
		l.solos = make(map[*flow]*link)
	}
	s := newLink(l.m, l.addr, l, hf.p)
	l.solos[hf] = s
	if hf.p.switchFlow(hf, s.solo) {
		s.activate(s.solo)
	}
	l.m.wg.Add(1)
	go s.run()
}

// waitReprobe waits, in fallback mode, until a fallback stream asks for a
// host link again (or the link closes), then moves every flow back.
func (l *link) waitReprobe() {
	select {
	case <-l.ctx.Done():
		return
	case <-l.reprobec:
	}
	l.mu.Lock()
	l.legacy = false
	solos := l.solos
	l.solos = nil
	for hf, s := range solos {
		if hf.p.switchFlow(s.solo, hf) {
			l.active = append(l.active, hf)
		}
	}
	l.mu.Unlock()
	for _, s := range solos {
		s.close()
	}
}

// maybeReprobe asks the host link to try its own kind again, if it has
// been on fallback streams for long enough.
func (l *link) maybeReprobe() {
	l.mu.Lock()
	ok := l.legacy && time.Since(l.legacySince) >= l.m.legacyHold
	l.mu.Unlock()
	if ok {
		select {
		case l.reprobec <- struct{}{}:
		default:
		}
	}
}

// switchFlow moves the peer's messages from flow from to flow to, with
// what is queued. It reports whether to must be put on its link's active
// list.
func (p *peer) switchFlow(from, to *flow) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flow != from {
		return false
	}
	p.flow = to
	if from.queued {
		from.queued, to.queued = false, true
		return true
	}
	return false
}
