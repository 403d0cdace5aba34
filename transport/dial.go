package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// helloLimit bounds the payload of the first frame on a connection, read
// before the peer is known: a hello or hello reply is a few dozen bytes.
const helloLimit = 4096

// conn is an established, accepted connection.
type conn struct {
	net.Conn
	dr    *deadlineReader // under br; set dr.timeout for idle cut-off
	r     *wire.Reader    // frames up to MaxFrameSize
	reply wire.HelloReply
}

// dialer holds what a handshake needs: the transport's settings, or the
// mux's for host links.
type dialer struct {
	tls                           *tls.Config
	dialTimeout, handshakeTimeout time.Duration
	maxFrame                      int
	lo, hi                        uint16         // protocol versions spoken
	connErrors                    *reasonCounter // where TLS failures are counted
	readBuffer                    int            // of the returned conn's reader
}

func (t *Transport) dialer() *dialer {
	lo, hi := t.cfg.versions()
	return &dialer{
		tls: t.cfg.TLS, dialTimeout: t.cfg.DialTimeout, handshakeTimeout: t.cfg.HandshakeTimeout,
		maxFrame: t.cfg.MaxFrameSize, lo: lo, hi: hi, connErrors: &t.connErrors,
		// A dialer reads little (pongs, acknowledgements, answers to
		// requests: small frames); its buffer is per connection, and a host
		// of many groups has many.
		readBuffer: 4 << 10,
	}
}

// dial connects to addr, runs the TLS handshake if configured and the
// hello exchange, and returns the connection once the peer accepted it. A
// refusal is a *RefusedError. ctx bounds the whole exchange.
func (t *Transport) dial(ctx context.Context, addr string, kind wire.Kind, to uint64) (*conn, error) {
	c, err := t.dialer().dial(ctx, addr, wire.Hello{
		Kind:    kind,
		Group:   t.cfg.GroupID,
		Cluster: t.cluster.Load(),
		From:    t.cfg.ID,
		To:      to,
		// Which copy of its data this member runs from: a peer that
		// recorded another one refuses it (wiped).
		Incarnation: t.inc.Load(),
	})
	if err != nil {
		return nil, err
	}
	if to != 0 && c.reply.Member != to {
		_ = c.Close()
		return nil, fmt.Errorf("%w: dialed member %x at %s, member %x answered", ErrProtocol, to, addr, c.reply.Member)
	}
	return c, nil
}

// dial connects to addr and sends h (its version range set here).
func (d *dialer) dial(ctx context.Context, addr string, h wire.Hello) (*conn, error) {
	nd := net.Dialer{Timeout: d.dialTimeout}
	nc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: dialing %s: %w", addr, err)
	}
	c, err := d.handshake(ctx, nc, addr, h)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

func (d *dialer) handshake(ctx context.Context, nc net.Conn, addr string, h wire.Hello) (*conn, error) {
	deadline := time.Now().Add(d.handshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	raw := nc // nc becomes the TLS connection below
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if d.tls != nil {
		cfg := d.tls
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			err = fmt.Errorf("%w with %s: %w", errTLS, addr, err)
			d.connErrors.add(reasonOf(err))
			return nil, err
		}
		nc = tc
	}
	h.MinVersion, h.MaxVersion = d.lo, d.hi
	hello := wire.AppendFrame(nil, wire.TypeHello, h.Group, wire.AppendHello(nil, h))
	if _, err := nc.Write(hello); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("transport: sending hello to %s: %w", addr, err))
	}
	dr := &deadlineReader{c: nc}
	br := bufio.NewReaderSize(dr, d.readBuffer)
	f, err := wire.NewReader(br, helloLimit).Next()
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("transport: reading hello reply from %s: %w", addr, err))
	}
	if f.Type != wire.TypeHelloReply {
		return nil, fmt.Errorf("%w: %s sent a %s frame instead of a hello reply", ErrProtocol, addr, f.Type)
	}
	reply, err := wire.ParseHelloReply(f.Payload)
	if err != nil {
		return nil, fmt.Errorf("transport: hello reply from %s: %w", addr, err)
	}
	if reply.Code != wire.CodeAccepted {
		return nil, refusedError(h.To, addr, reply)
	}
	if reply.Version < d.lo || reply.Version > d.hi {
		return nil, fmt.Errorf("%w: %s chose protocol version %d", ErrProtocol, addr, reply.Version)
	}
	_ = nc.SetDeadline(time.Time{})
	return &conn{Conn: nc, dr: dr, r: wire.NewReader(br, uint32(d.maxFrame)), reply: reply}, nil
}

// ctxErr prefers the context's error, so a canceled call reports
// context.Canceled rather than the I/O error the cancellation caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	// The connection's deadline is the context's: its timeout can fire a
	// moment before the context notices.
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// errTLS marks the errors of a failed TLS handshake.
var errTLS = errors.New("transport: TLS handshake")

// reasonOf classifies a connection error for Stats.ConnErrors.
func reasonOf(err error) string {
	var ne net.Error
	var alert tls.AlertError
	var rhe tls.RecordHeaderError
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case errors.Is(err, errTLS):
		return ReasonTLS
	case errors.Is(err, wire.ErrFrameTooLarge):
		return ReasonFrameTooLarge
	case errors.Is(err, wire.ErrChecksum):
		return ReasonChecksum
	case errors.Is(err, wire.ErrMalformed):
		return ReasonMalformed
	case errors.Is(err, ErrProtocol):
		return ReasonProtocol
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonUnexpectedEOF
	case errors.As(err, &alert), errors.As(err, &rhe), errors.As(err, &cve), errors.As(err, &uae):
		return ReasonTLS
	}
	return ReasonIO
}

// deadlineReader sets a read deadline before every read of the underlying
// connection when timeout is set, so that a peer that goes silent
// mid-stream (or never sends its next frame) is cut off after timeout.
// Reads go through a bufio.Reader, so the deadline is set once per buffer
// fill, not once per frame. With timeout 0 the connection's own deadline
// applies.
type deadlineReader struct {
	c       net.Conn
	timeout time.Duration
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	if r.timeout > 0 {
		if err := r.c.SetReadDeadline(time.Now().Add(r.timeout)); err != nil {
			return 0, err
		}
	}
	return r.c.Read(p)
}
