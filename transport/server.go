package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// accepted is an inbound connection past the handshake.
type accepted struct {
	nc    net.Conn // the TLS connection when TLS is on
	dr    *deadlineReader
	r     *wire.Reader
	hello wire.Hello
	peer  *peer
}

// serveHandshake serves a connection whose hello the mux read: the rest of
// the hello exchange, then the connection's kind.
func (t *Transport) serveHandshake(hs *handshake) {
	raw := hs.raw
	defer t.untrack(raw)
	defer func() { _ = raw.Close() }()
	a, err := t.admit(hs)
	if err != nil {
		if !t.closing.Load() {
			reason := reasonOf(err)
			t.connErrors.add(reason)
			t.logOnce(0, "handshake_"+reason, "inbound connection failed before the handshake completed", "remote", raw.RemoteAddr().String(), "err", err)
		}
		return
	}
	if a == nil { // refused, already counted
		return
	}
	defer a.peer.removeInbound(a.nc)
	switch a.hello.Kind {
	case wire.KindStream:
		err = t.serveStream(a)
	case wire.KindSnapshot:
		defer func() { <-t.mux.snapRecv }()
		err = t.receiveSnapshot(a)
	case wire.KindRequest:
		err = t.serveRequests(a)
	}
	if err != nil && !t.closing.Load() && !a.peer.ops.isStopped(&a.peer.mu) && !isClosed(err) {
		reason := reasonOf(err)
		t.connErrors.add(reason)
		t.logOnce(a.hello.From, a.hello.Kind.String()+"_"+reason, "inbound connection from peer failed", "kind", a.hello.Kind.String(), "err", err)
	}
}

// isClosed reports the errors of a connection closed cleanly between
// frames, by either side.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}

// admit checks the hello the mux read and answers it. It returns nil, nil
// if it refused the hello.
func (t *Transport) admit(hs *handshake) (*accepted, error) {
	raw, nc, dr, br, h := hs.raw, hs.nc, hs.dr, hs.br, hs.hello
	version, p, code, why := t.check(h)
	if code != wire.CodeAccepted {
		reason := codeErrors[code].reason
		t.refused.add(reason)
		t.logRefusal(h, reason, raw.RemoteAddr().String(), why)
		t.reply(nc, wire.HelloReply{Code: code, Cluster: t.cluster.Load(), Member: t.cfg.ID, Reason: why})
		return nil, nil
	}
	if !p.addInbound(nc, h.Kind) {
		if h.Kind == wire.KindSnapshot {
			<-t.mux.snapRecv
		}
		return nil, nil
	}
	if err := t.reply(nc, wire.HelloReply{Version: version, MaxFrame: uint32(t.cfg.MaxFrameSize), Cluster: t.cluster.Load(), Member: t.cfg.ID}); err != nil {
		p.removeInbound(nc)
		if h.Kind == wire.KindSnapshot {
			<-t.mux.snapRecv
		}
		return nil, fmt.Errorf("sending hello reply: %w", err)
	}
	_ = raw.SetDeadline(time.Time{})
	return &accepted{nc: nc, dr: dr, r: wire.NewReader(br, uint32(t.cfg.MaxFrameSize)), hello: h, peer: p}, nil
}

// logRefusal logs a refused hello. The sender ID a hello claims is not
// authenticated (anyone who reaches the port can claim any ID), so no
// memory is keyed on it unless it names a member this transport knows — a
// peer or a removed member, both few and set by the node: each of those is
// logged once per reason (as logOnce does), any other claimed ID at most
// once per refusalLogInterval per reason, and at debug level in between.
// Stats.Refused counts them all.
func (t *Transport) logRefusal(h wire.Hello, reason, remote, why string) {
	const msg = "refused inbound connection"
	args := []any{"kind", h.Kind.String(), "remote", remote, "detail", why}
	if t.removed(h.From) || t.peer(h.From) != nil {
		t.logOnce(h.From, "refused_"+reason, msg, args...)
		return
	}
	args = append(args, "claimed_sender", fmt.Sprintf("%x", h.From), "reason", "refused_"+reason)
	if !t.more().refusalLog.allow(reason, time.Now()) {
		t.log.Debug(msg, args...)
		return
	}
	t.log.Warn(msg, args...)
}

// refusalLogInterval is how often a refusal of a sender that is not a known
// member is logged at warning level, per reason.
const refusalLogInterval = time.Minute

// rateLog remembers when each reason (a small fixed set) was last logged:
// a list, searched, since most hold one reason or none (a map would cost
// each of a host's many groups' transports and peers a few hundred bytes).
type rateLog struct {
	mu   sync.Mutex
	last *loggedAt
}

type loggedAt struct {
	reason string
	at     time.Time
	next   *loggedAt
}

// allow reports whether reason may be logged at warning level now, and
// records it if so.
func (r *rateLog) allow(reason string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for e := r.last; e != nil; e = e.next {
		if e.reason == reason {
			if now.Sub(e.at) < refusalLogInterval {
				return false
			}
			e.at = now
			return true
		}
	}
	r.last = &loggedAt{reason: reason, at: now, next: r.last}
	return true
}

func (t *Transport) reply(nc net.Conn, r wire.HelloReply) error {
	_, err := nc.Write(wire.AppendFrame(nil, wire.TypeHelloReply, t.cfg.GroupID, wire.AppendHelloReply(nil, r)))
	return err
}

// check decides whether to accept a hello. On acceptance it returns the
// protocol version to speak and the sender's peer; for a snapshot it has
// also taken a receive slot (the caller releases it).
//
// The checks, in order: a common version; a known kind; the group; the
// cluster (a request with cluster 0 from a known member is a joiner's
// discovery call and is allowed; a member that has no cluster ID yet
// accepts only requests); the receiver (0 is allowed on requests, for
// CallAddr); the sender not removed; the sender a known peer; for a
// snapshot, a free receive slot.
func (t *Transport) check(h wire.Hello) (version uint16, p *peer, code wire.Code, why string) {
	lo, hi := t.cfg.versions()
	version = min(h.MaxVersion, hi)
	if version < max(h.MinVersion, lo) || h.MinVersion > h.MaxVersion {
		return 0, nil, wire.CodeVersion, fmt.Sprintf("peer speaks protocol versions %d..%d, this member %d..%d (members of different versions refuse each other: upgrade one member at a time)", h.MinVersion, h.MaxVersion, lo, hi)
	}
	if h.Kind != wire.KindStream && h.Kind != wire.KindSnapshot && h.Kind != wire.KindRequest {
		return 0, nil, wire.CodeBadHello, fmt.Sprintf("unknown connection kind %d", h.Kind)
	}
	if h.Group != t.cfg.GroupID {
		return 0, nil, wire.CodeGroupMismatch, fmt.Sprintf("group %d, this member serves group %d", h.Group, t.cfg.GroupID)
	}
	cluster := t.cluster.Load()
	switch {
	case cluster == 0 && h.Kind != wire.KindRequest:
		return 0, nil, wire.CodeClusterMismatch, "this member has not joined a cluster yet"
	case h.Cluster != cluster && !(h.Cluster == 0 && h.Kind == wire.KindRequest):
		return 0, nil, wire.CodeClusterMismatch, fmt.Sprintf("cluster %x, this member is in cluster %x", h.Cluster, cluster)
	}
	if h.To != t.cfg.ID && !(h.To == 0 && h.Kind == wire.KindRequest) {
		return 0, nil, wire.CodeWrongReceiver, fmt.Sprintf("connection for member %x reached member %x", h.To, t.cfg.ID)
	}
	if t.removed(h.From) {
		return 0, nil, wire.CodeRemoved, fmt.Sprintf("member %x was removed from the cluster", h.From)
	}
	p = t.peer(h.From)
	if p == nil {
		return 0, nil, wire.CodeUnknownSender, fmt.Sprintf("member %x is not a member known to member %x", h.From, t.cfg.ID)
	}
	if wiped, why := p.wiped(h.Incarnation); wiped {
		return 0, nil, wire.CodeWiped, why
	}
	if h.Kind == wire.KindSnapshot {
		select {
		case t.mux.snapRecv <- struct{}{}:
		default:
			return 0, nil, wire.CodeBusy, fmt.Sprintf("already receiving %d snapshots", cap(t.mux.snapRecv))
		}
	}
	return version, p, wire.CodeAccepted, ""
}

// checkAttach decides whether to admit an attachment on a host link of
// protocol version v, with exactly the checks of a raft stream's hello.
func (t *Transport) checkAttach(group uint64, a wire.Attach, v uint16) (*peer, wire.Code, string) {
	_, p, code, why := t.check(wire.Hello{MinVersion: v, MaxVersion: v, Kind: wire.KindStream, Group: group, Cluster: a.Cluster, From: a.From, To: a.To, Incarnation: a.Incarnation})
	return p, code, why
}

// serveStream reads raft messages from a peer's stream and hands them to
// the Handler, answering pings, until the stream closes or stays silent
// for ReadTimeout.
func (t *Transport) serveStream(a *accepted) error {
	a.dr.timeout = t.cfg.ReadTimeout
	from := a.hello.From
	for {
		f, err := a.r.Next()
		if err != nil {
			return err
		}
		if f.Group != t.cfg.GroupID {
			return fmt.Errorf("%w: frame for group %d", ErrProtocol, f.Group)
		}
		switch f.Type {
		case wire.TypeMessage:
			m, err := wire.UnmarshalMessage(f.Payload)
			if err != nil {
				return err
			}
			if err := t.checkMessage(m, from); err != nil {
				return err
			}
			if wiped, why := a.peer.wiped(a.hello.Incarnation); wiped {
				// Recorded since the stream was accepted: drop it, and the
				// redial is refused with the reason.
				t.refused.add(ReasonWiped)
				return fmt.Errorf("%w: %s", ErrWiped, why)
			}
			a.peer.c.msgsRecv.Add(1)
			a.peer.c.bytesRecv.Add(uint64(wire.HeaderSize + len(f.Payload)))
			t.handler.Process(m)
		case wire.TypePing:
			if _, err := wire.ParsePing(f.Payload); err != nil {
				return err
			}
			_ = a.nc.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
			if _, err := a.nc.Write(wire.AppendFrame(nil, wire.TypePong, t.cfg.GroupID, f.Payload)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %s frame on a raft stream", ErrProtocol, f.Type)
		}
	}
}

// checkMessage refuses a message that does not come from the stream's
// sender, is not for this member, or is a MsgSnap without its file.
func (t *Transport) checkMessage(m *raftpb.Message, from uint64) error {
	switch {
	case m.GetFrom() != from:
		return fmt.Errorf("%w: message from %x on the stream of member %x", ErrProtocol, m.GetFrom(), from)
	case m.GetTo() != t.cfg.ID:
		return fmt.Errorf("%w: message for member %x", ErrProtocol, m.GetTo())
	case m.GetType() == raftpb.MsgSnap:
		return fmt.Errorf("%w: MsgSnap on a raft stream", ErrProtocol)
	}
	return nil
}

// serveRequests answers requests on a request connection until the caller
// closes it or it stays idle for ReadTimeout.
func (t *Transport) serveRequests(a *accepted) error {
	a.dr.timeout = t.cfg.ReadTimeout
	for {
		f, err := a.r.Next()
		if err != nil {
			return err
		}
		if f.Type != wire.TypeRequest || f.Group != t.cfg.GroupID {
			return fmt.Errorf("%w: %s frame on a request connection", ErrProtocol, f.Type)
		}
		budget, req, err := wire.ParseRequest(f.Payload)
		if err != nil {
			return err
		}
		if wiped, why := a.peer.wiped(a.hello.Incarnation); wiped {
			t.refused.add(ReasonWiped)
			return fmt.Errorf("%w: %s", ErrWiped, why)
		}
		timeout := t.cfg.MaxRequestDuration
		if budget > 0 && time.Duration(budget) < timeout {
			timeout = time.Duration(budget)
		}
		ctx, cancel := a.peer.ops.with(&a.peer.mu, context.Background(), timeout)
		resp, rerr := t.handler.ServeRequest(ctx, a.hello.From, req)
		cancel()
		var out []byte
		if rerr != nil {
			if rerr.Error() == "" {
				rerr = errors.New("error with no text")
			}
			out = wire.AppendStatus(nil, nil, rerr.Error())
		} else {
			out = wire.AppendStatus(nil, resp, "")
		}
		if len(out) > t.cfg.MaxFrameSize {
			out = wire.AppendStatus(nil, nil, fmt.Sprintf("response of %d bytes exceeds MaxFrameSize", len(out)))
		}
		_ = a.nc.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		if _, err := a.nc.Write(wire.AppendFrame(nil, wire.TypeResponse, t.cfg.GroupID, out)); err != nil {
			return err
		}
	}
}
