package transport

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

const (
	// maxPassMessages and maxPassBytes bound what the reader gathers before
	// handing it to the groups.
	maxPassMessages = 4096
	maxPassBytes    = 8 << 20
	// maxControlBacklog bounds the pongs and attach replies waiting for a
	// peer host that does not read them: past it, the link closes.
	maxControlBacklog = 1 << 20
	// maxControlFrame bounds the payload of a host link's frames but its
	// messages (attachments and pings: at most a few hundred bytes).
	maxControlFrame = 4 << 10
)

// inLink is an inbound host link: the raft messages of every group from
// one peer host. Its reader admits attachments (each checked by its
// group's transport exactly as a raft stream's hello), drops the messages
// of what it did not admit, and hands what one read pass got to each group
// once; a second goroutine writes pongs and attach replies.
//
// What an unadmitted peer can make it allocate is bounded: a message
// frame of a group with no admission on the link, or one over the host's
// MaxFrameSize, is skipped (read through a small buffer, CRC checked, and
// counted) without breaking the link; any other frame is a few hundred
// bytes at most; and a large frame's buffer grows as its bytes arrive.
type inLink struct {
	m       *Mux
	raw, nc net.Conn
	dr      *deadlineReader
	br      *bufio.Reader
	r       *wire.Reader
	version uint16
	remote  string
	hostID  uint64 // the dialer's host ID, from the hello (0: unknown)
	cert    string // the identity of its certificate (identity.go), "" without TLS

	// amu guards the admissions: the reader's, which a group's peer
	// stopping forgets (so that the link holds no closed group).
	amu      sync.Mutex
	admitted map[attachKey]admission
	groups   map[uint64]int // admissions per group
	lastKey  attachKey      // the last message's attachment, and its admission
	last     admission      // (zero: none): a run of one flow's messages skips the map

	// Owned by the reader goroutine.
	rbuf      []byte // the message payloads' buffer (handleMessage)
	pass      []delivery
	passIdx   map[*Transport]int
	passMsgs  int
	passBytes int

	mu     sync.Mutex
	out    []byte // control frames to write
	closed bool
	wake   chan struct{} // cap 1: out is not empty
	done   chan struct{} // closed when the link ends
}

// admission is an accepted attachment: the receiving group's transport,
// its peer for the sender, and the incarnation the attachment presented.
type admission struct {
	t   *Transport
	p   *peer
	inc uint64
}

// delivery is what one read pass got for one group.
type delivery struct {
	t    *Transport
	msgs []*raftpb.Message
}

// serveLink serves an inbound host link whose hello the mux read, until
// it closes.
func (m *Mux) serveLink(hs *handshake) {
	defer m.untrack(hs.raw)
	defer func() { _ = hs.raw.Close() }()
	h := hs.hello
	remote := hs.raw.RemoteAddr().String()
	lo, hi := m.versions()
	version := min(h.MaxVersion, hi)
	if version < max(h.MinVersion, lo) || h.MinVersion > h.MaxVersion {
		why := fmt.Sprintf("peer speaks protocol versions %d..%d, this member %d..%d (members of different versions refuse each other: upgrade one member at a time)", h.MinVersion, h.MaxVersion, lo, hi)
		m.refusedCounter().add(ReasonVersion)
		m.logError("refused_"+ReasonVersion, "refused inbound connection", "kind", h.Kind.String(), "remote", remote, "detail", why)
		r := wire.HelloReply{Code: wire.CodeVersion, Reason: why}
		if m.private != nil {
			r.Cluster, r.Member = m.private.cluster.Load(), m.private.cfg.ID
		}
		writeReply(hs.nc, h.Group, r)
		return
	}
	cert := certIdentity(hs.nc)
	if !m.certMatches(h.HostID, cert) {
		why := fmt.Sprintf("host %016x owns members here with another certificate than this link's", h.HostID)
		m.refusedCounter().add(ReasonUnknownSender)
		m.logError("refused_host_certificate", "refused inbound link: its host ID is bound to another certificate", "remote", remote, "host", fmt.Sprintf("%016x", h.HostID), "cert", cert)
		writeReply(hs.nc, h.Group, wire.HelloReply{Code: wire.CodeUnknownSender, Reason: why})
		return
	}
	r := wire.HelloReply{Version: version, MaxFrame: uint32(m.ls.maxFrame)}
	if m.private != nil {
		r.Cluster, r.Member = m.private.cluster.Load(), m.private.cfg.ID
	}
	if _, err := hs.nc.Write(wire.AppendFrame(nil, wire.TypeHelloReply, h.Group, wire.AppendHelloReply(nil, r))); err != nil {
		if m.ctx.Err() == nil {
			m.errorCounter().add(reasonOf(err))
		}
		return
	}
	_ = hs.raw.SetDeadline(time.Time{})
	il := &inLink{
		m: m, raw: hs.raw, nc: hs.nc, dr: hs.dr, version: version, remote: remote, hostID: h.HostID, cert: cert,
		admitted: make(map[attachKey]admission),
		groups:   make(map[uint64]int),
		passIdx:  make(map[*Transport]int),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	// The handshake's reader (16 KiB) may hold frames already: read on
	// with it. A frame larger than it is read straight into its payload.
	// The frames' sizes are checked by next, frame by frame.
	il.br = hs.br
	il.r = wire.NewReader(il.br, math.MaxUint32)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.inLinks[il] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	go il.writeLoop()
	err := il.readLoop()
	il.shutdown()
	m.mu.Lock()
	delete(m.inLinks, il)
	m.mu.Unlock()
	if m.ctx.Err() == nil && !isClosed(err) {
		reason := reasonOf(err)
		m.errorCounter().add(reason)
		m.logError("link_"+reason, "inbound link from peer host failed", "remote", remote, "err", err)
	}
}

// readLoop reads frames until the connection fails or a frame is bad, and
// returns why (never nil). What it read before a bad frame is delivered.
func (il *inLink) readLoop() error {
	il.dr.timeout = il.m.ls.readTimeout
	for {
		if il.passMsgs > 0 && !il.frameBuffered() {
			il.deliver() // the next read waits for the network
		}
		if err := il.next(); err != nil {
			il.deliver()
			return err
		}
		if il.passMsgs >= maxPassMessages || il.passBytes >= maxPassBytes {
			il.deliver()
		}
	}
}

// frameBuffered reports whether the next frame is already in the buffer.
func (il *inLink) frameBuffered() bool {
	b, _ := il.br.Peek(il.br.Buffered())
	return wire.FrameBuffered(b)
}

// next reads one frame and handles it. Before its payload is read, its
// header decides whether it is worth its size: a message of a group with
// no admission on the link, or one over the host's MaxFrameSize (from a
// sender that did not learn the limit from the hello reply), is skipped
// and counted, and the link goes on; any other frame over maxControlFrame
// breaks it.
func (il *inLink) next() error {
	h, err := il.r.NextHeader()
	if err != nil {
		return err
	}
	if h.Type != wire.TypeMessage && h.Type != wire.TypeRelay {
		if h.Length > maxControlFrame {
			return fmt.Errorf("%w: %s frame of %d bytes on a host link, the limit is %d", wire.ErrFrameTooLarge, h.Type, h.Length, maxControlFrame)
		}
	} else if !il.groupAdmitted(h.Group) {
		il.m.droppedUnadmitted.Add(1)
		return il.r.Skip(h)
	} else if int64(h.Length) > int64(il.m.ls.maxFrame) {
		il.m.droppedTooLarge.Add(1)
		il.m.logError("too_large", "message larger than this host's MaxFrameSize dropped from a host link (raft resends it, and it is dropped again: raise MaxFrameSize here or make the sender's entries smaller)",
			"remote", il.remote, "group", h.Group, "bytes", h.Length, "limit", il.m.ls.maxFrame)
		return il.r.Skip(h)
	}
	if h.Type == wire.TypeMessage {
		f, err := il.r.PayloadInto(h, il.rbuf)
		if err != nil {
			return err
		}
		return il.handleMessage(f)
	}
	f, err := il.r.Payload(h)
	if err != nil {
		return err
	}
	return il.handle(f)
}

// maxKeptPayload bounds the payload buffer a link reuses for its messages.
const maxKeptPayload = 1 << 10

// handleMessage handles a message frame read into the link's payload
// buffer (rbuf, when it fit): a message that refers to its payload (it
// carries entries or a context) takes the buffer with it, and the next
// frame is read into a new one; an answer or a heartbeat, most of what a
// link reads, leaves it for the next frame. Nothing is copied.
func (il *inLink) handleMessage(f wire.Frame) error {
	m, shared, err := wire.UnmarshalMessageShared(f.Payload)
	switch {
	case shared || err != nil:
		il.rbuf = nil
	case cap(f.Payload) <= maxKeptPayload:
		il.rbuf = f.Payload[:0]
	}
	if err != nil {
		return err
	}
	return il.handleDecoded(f, m)
}

// handleDecoded gathers m, decoded from message frame f, for its group.
func (il *inLink) handleDecoded(f wire.Frame, m *raftpb.Message) error {
	a, ok := il.admission(attachKey{group: f.Group, from: m.GetFrom(), to: m.GetTo()})
	if !ok {
		il.m.droppedUnadmitted.Add(1)
		return nil
	}
	if m.GetType() == raftpb.MsgSnap {
		return fmt.Errorf("%w: MsgSnap on a host link", ErrProtocol)
	}
	size := wire.HeaderSize + len(f.Payload)
	a.p.c.msgsRecv.Add(1)
	a.p.c.bytesRecv.Add(uint64(size))
	il.add(a.t, m, size)
	return nil
}

// groupAdmitted reports whether the link admitted an attachment of group.
func (il *inLink) groupAdmitted(group uint64) bool {
	il.amu.Lock()
	defer il.amu.Unlock()
	return il.groups[group] > 0
}

// admission returns the admission of key, if any and not revoked.
func (il *inLink) admission(key attachKey) (admission, bool) {
	il.amu.Lock()
	defer il.amu.Unlock()
	a, ok := il.last, il.last.p != nil && key == il.lastKey
	if !ok {
		a, ok = il.admitted[key]
	}
	if ok && a.p.gone.Load() { // revoked: the sender was removed, the group stopped
		il.unadmitLocked(key)
		ok = false
	}
	if ok {
		if wiped, why := a.p.wiped(a.inc); wiped {
			// Its incarnation was recorded since it was admitted, and it
			// is another: revoke it, saying why.
			il.unadmitLocked(key)
			ok = false
			il.last = admission{}
			il.amu.Unlock()
			a.p.removeInLink(il) // the link holds nothing of it now
			il.revoke(a.p, wire.CodeWiped, why)
			il.amu.Lock()
		}
	}
	if ok {
		il.lastKey, il.last = key, a
	} else {
		il.last = admission{}
	}
	return a, ok
}

// admit records key's admission. il.amu is held.
func (il *inLink) admitLocked(key attachKey, a admission) {
	if _, ok := il.admitted[key]; !ok {
		il.groups[key.group]++
	}
	il.admitted[key] = a
}

// unadmitLocked forgets key's admission. il.amu is held.
func (il *inLink) unadmitLocked(key attachKey) {
	if _, ok := il.admitted[key]; !ok {
		return
	}
	delete(il.admitted, key)
	if il.groups[key.group]--; il.groups[key.group] <= 0 {
		delete(il.groups, key.group)
	}
	if il.lastKey == key {
		il.last = admission{}
	}
}

// forget drops p's admissions (p stopped: its group closed, or the sender
// was removed), so that the link keeps no reference to its group.
func (il *inLink) forget(p *peer) {
	il.amu.Lock()
	defer il.amu.Unlock()
	for key, a := range il.admitted {
		if a.p == p {
			il.unadmitLocked(key)
		}
	}
	if il.last.p == p {
		il.last = admission{}
	}
}

func (il *inLink) handle(f wire.Frame) error {
	switch f.Type {
	case wire.TypeMessage:
		m, err := wire.UnmarshalMessage(f.Payload)
		if err != nil {
			return err
		}
		return il.handleDecoded(f, m)
	case wire.TypeRelay:
		m, err := wire.ParseRelay(f.Payload)
		if err != nil {
			return err
		}
		a, ok := il.admission(attachKey{group: f.Group, from: m.GetFrom(), to: m.GetTo()})
		if !ok {
			il.m.droppedUnadmitted.Add(1)
			return nil
		}
		size := wire.HeaderSize + len(f.Payload)
		a.p.c.msgsRecv.Add(1)
		a.p.c.bytesRecv.Add(uint64(size))
		il.add(a.t, m, size)
	case wire.TypeAttach:
		return il.attach(f)
	case wire.TypePing:
		if _, err := wire.ParsePing(f.Payload); err != nil {
			return err
		}
		il.send(wire.TypePong, f.Group, f.Payload)
	default:
		return fmt.Errorf("%w: %s frame on a host link", ErrProtocol, f.Type)
	}
	return nil
}

// attach checks an attachment with its group's transport and answers it.
// A group the host does not run is refused (and never created).
func (il *inLink) attach(f wire.Frame) error {
	a, err := wire.ParseAttach(f.Payload)
	if err != nil {
		return err
	}
	key := attachKey{group: f.Group, from: a.From, to: a.To}
	il.amu.Lock()
	il.unadmitLocked(key) // a new attachment replaces the old one
	il.amu.Unlock()
	reply := wire.AttachReply{From: a.From, To: a.To}
	t := il.m.group(f.Group)
	if t == nil {
		reply.Code = wire.CodeGroupMismatch
		reply.Reason = fmt.Sprintf("group %d is not run by this host", f.Group)
		if pt := il.m.private; pt != nil { // a single group's member says who it is, as before
			reply.Cluster = pt.cluster.Load()
			reply.Reason = fmt.Sprintf("group %d, this member serves group %d", f.Group, pt.cfg.GroupID)
		}
		il.m.refusedCounter().add(ReasonGroupMismatch)
		il.m.logError("refused_"+ReasonGroupMismatch, "refused attachment", "remote", il.remote, "detail", reply.Reason)
		il.reply(f.Group, reply)
		return nil
	}
	p, code, why := t.checkAttach(f.Group, a, il.version)
	first := false
	if code == wire.CodeAccepted {
		code, why, first = il.checkOwner(p, a)
	}
	if code == wire.CodeAccepted {
		// Recorded before the peer learns of the link, so that the peer
		// stopping from now on forgets it (peer.stop); if it stopped
		// already, it is forgotten here.
		il.amu.Lock()
		il.admitLocked(key, admission{t: t, p: p, inc: a.Incarnation})
		il.amu.Unlock()
		if !p.addInLink(il) {
			il.amu.Lock()
			il.unadmitLocked(key)
			il.amu.Unlock()
			code, why = wire.CodeUnknownSender, fmt.Sprintf("member %x is not a member known to member %x", a.From, t.cfg.ID)
		}
	}
	reply.Cluster = t.cluster.Load()
	if code != wire.CodeAccepted {
		reason := codeErrors[code].reason
		t.refused.add(reason)
		// One line per peer host, whatever the number of groups refused.
		il.m.hostLog.log(t.log, il.hostKey(), "refused_"+reason, "refused inbound connection",
			"kind", wire.KindLink.String(), "group", f.Group, "claimed_sender", fmt.Sprintf("%x", a.From), "remote", il.remote, "detail", why)
		reply.Code, reply.Reason = code, why
		il.reply(f.Group, reply)
		return nil
	}
	il.reply(f.Group, reply)
	if a.Addr != "" && il.hostID != 0 {
		// Its owner's link: where the member's host is now.
		p.mu.Lock()
		recorded := p.recorded
		p.mu.Unlock()
		if il.m.learnAddress(il.hostID, recorded, a.Addr) {
			return nil // every peer re-routed
		}
	}
	if first {
		p.reroute() // its host is known now: the book may route it
	}
	return nil
}

// checkOwner decides whether the link may speak for p, the sender of
// attachment a (identity.go): the attachment's host ID must be the link's,
// and the link's host the member's owner (it becomes so if the member has
// none), bound to the link's certificate. first reports that the link's
// host became the owner.
func (il *inLink) checkOwner(p *peer, a wire.Attach) (code wire.Code, why string, first bool) {
	if a.HostID != il.hostID {
		return wire.CodeBadHello, fmt.Sprintf("attachment from host %016x on the link of host %016x", a.HostID, il.hostID), false
	}
	if il.hostID != 0 && !il.m.certMatches(il.hostID, il.cert) {
		return wire.CodeUnknownSender, fmt.Sprintf("host %016x owns members here with another certificate than this link's", il.hostID), false
	}
	owner, first := p.claim(il.hostID)
	if owner != il.hostID {
		return wire.CodeUnknownSender, fmt.Sprintf("member %x speaks from host %016x here, not from host %016x", a.From, owner, il.hostID), false
	}
	if first && !il.m.bindCert(il.hostID, il.cert) {
		// Bound to another certificate meanwhile (by another link).
		return wire.CodeUnknownSender, fmt.Sprintf("host %016x owns members here with another certificate than this link's", il.hostID), false
	}
	return wire.CodeAccepted, "", first
}

// hostKey names the link's peer host in logs: its host ID, or the address
// it connects from if it sent none.
func (il *inLink) hostKey() string {
	if il.hostID != 0 {
		return fmt.Sprintf("host %016x", il.hostID)
	}
	if host, _, err := net.SplitHostPort(il.remote); err == nil {
		return host
	}
	return il.remote
}

func (il *inLink) reply(group uint64, r wire.AttachReply) {
	il.send(wire.TypeAttachReply, group, wire.AppendAttachReply(nil, r))
}

// revoke tells the peer host that peer p's attachment (p of the receiving
// group: the sender) is no longer admitted.
func (il *inLink) revoke(p *peer, code wire.Code, why string) {
	t := p.t
	switch code {
	case wire.CodeRemoved:
		t.refused.add(ReasonRemoved)
	case wire.CodeWiped:
		t.refused.add(ReasonWiped)
		t.logOnce(p.id, "refused_"+ReasonWiped, "revoked an attachment", "remote", il.remote, "detail", why)
	}
	il.reply(t.cfg.GroupID, wire.AttachReply{Code: code, From: p.id, To: t.cfg.ID, Cluster: t.cluster.Load(), Reason: why})
}

// add gathers m for t's next delivery.
func (il *inLink) add(t *Transport, m *raftpb.Message, size int) {
	var i int
	var ok bool
	if n := len(il.pass); n > 0 && il.pass[n-1].t == t {
		i, ok = n-1, true
	} else {
		i, ok = il.passIdx[t]
	}
	if !ok {
		i = len(il.pass)
		if i < cap(il.pass) {
			il.pass = il.pass[:i+1] // its msgs: an earlier pass's buffer, emptied
			il.pass[i].t = t
		} else {
			il.pass = append(il.pass, delivery{t: t})
		}
		il.passIdx[t] = i
	}
	il.pass[i].msgs = append(il.pass[i].msgs, m)
	il.passMsgs++
	il.passBytes += size
}

// maxKeptDelivery bounds the messages' buffer of a pass's delivery that
// the next passes reuse: a larger one (a burst) is let go.
const maxKeptDelivery = 256

// deliver hands each group what the pass got for it, once. The slices go
// back to the pass (BatchHandler's ProcessBatch does not keep ms, only its
// messages): a busy link allocates no buffer per group per read.
func (il *inLink) deliver() {
	for i := range il.pass {
		d := &il.pass[i]
		d.t.deliver(d.msgs)
		clear(d.msgs)
		if cap(d.msgs) > maxKeptDelivery {
			d.msgs = nil
		}
		d.t, d.msgs = nil, d.msgs[:0]
	}
	il.pass = il.pass[:0]
	clear(il.passIdx)
	il.passMsgs, il.passBytes = 0, 0
}

// send queues a control frame for the writer. It never blocks.
func (il *inLink) send(typ wire.Type, group uint64, payload []byte) {
	il.mu.Lock()
	if il.closed {
		il.mu.Unlock()
		return
	}
	il.out = wire.AppendFrame(il.out, typ, group, payload)
	stuck := len(il.out) > maxControlBacklog
	il.mu.Unlock()
	if stuck { // the peer host reads nothing
		_ = il.raw.Close()
		return
	}
	select {
	case il.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes the control frames until the link ends.
func (il *inLink) writeLoop() {
	defer il.m.wg.Done()
	var buf []byte
	for {
		select {
		case <-il.wake:
		case <-il.done:
			return
		}
		il.mu.Lock()
		buf, il.out = il.out, buf[:0]
		il.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		_ = il.nc.SetWriteDeadline(time.Now().Add(il.m.ls.writeTimeout))
		if _, err := il.nc.Write(buf); err != nil {
			_ = il.raw.Close()
			return
		}
		if cap(buf) > 64<<10 {
			buf = nil
		}
	}
}

// shutdown ends the link's writer and forgets its admissions.
func (il *inLink) shutdown() {
	il.mu.Lock()
	il.closed = true
	il.out = nil
	il.mu.Unlock()
	close(il.done)
	_ = il.raw.Close()
	il.amu.Lock()
	admitted := make([]*peer, 0, len(il.admitted))
	for _, a := range il.admitted {
		admitted = append(admitted, a.p)
	}
	clear(il.admitted)
	clear(il.groups)
	il.last = admission{}
	il.amu.Unlock()
	for _, p := range admitted {
		p.removeInLink(il)
	}
}
