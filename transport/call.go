package transport

import (
	"context"
	"fmt"
	"github.com/understudy-raft/understudy/raft/raftio"
	"time"

	"github.com/understudy-raft/understudy/internal/wire"
)

// Reply is the answer to CallAddr: the response and who gave it.
type Reply = raftio.Reply

// Call sends req to member to and returns its Handler.ServeRequest
// response. It waits for the answer until ctx ends. Each call uses a new
// connection, with the same handshake and TLS as raft traffic.
//
// Errors: ErrUnknownPeer; ErrNoCluster before SetClusterID; a
// *RefusedError (errors.Is ErrRefused and the reason); a *RemoteError if
// the peer's handler failed; ctx's error; ErrClosed; I/O errors. Those that
// match ErrNotSent certainly did not reach the peer (a retry is safe).
func (t *Transport) Call(ctx context.Context, to uint64, req []byte) ([]byte, error) {
	p := t.peer(to)
	if p == nil {
		return nil, notSent(fmt.Errorf("%w: %x", ErrUnknownPeer, to))
	}
	if t.cluster.Load() == 0 {
		return nil, notSent(ErrNoCluster)
	}
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	r, err := t.call(ctx, addr, to, req)
	if err != nil {
		return nil, err
	}
	return r.Payload, nil
}

// CallAddr is Call by address, for a member that does not know who is
// there, typically a joiner that has only a list of peer addresses. The
// request carries this member's cluster ID, or 0 if it has not learned it
// yet: a peer accepts a request with cluster ID 0 from a member it knows
// (it must have been added first), so that the joiner can discover the
// cluster. The Reply says which cluster and member answered.
//
// Errors: as Call's (ErrUnknownPeer aside): a *RefusedError (e.g. the peer
// does not list this member yet, or is of another cluster); a *RemoteError;
// ErrProtocol for an answer that is not a response; ctx's error; ErrClosed;
// I/O errors (try another address). Those that match ErrNotSent did not
// reach the peer.
func (t *Transport) CallAddr(ctx context.Context, addr string, req []byte) (*Reply, error) {
	return t.call(ctx, addr, 0, req)
}

func (t *Transport) call(ctx context.Context, addr string, to uint64, req []byte) (*Reply, error) {
	if t.closing.Load() {
		return nil, notSent(ErrClosed)
	}
	payload := wire.AppendRequest(nil, budget(ctx), req)
	if len(payload) > t.cfg.MaxFrameSize {
		return nil, fmt.Errorf("transport: request of %d bytes exceeds MaxFrameSize", len(req))
	}
	// Close cancels every call in flight.
	ctx, cancel := t.calls.with(&t.mu, ctx, 0)
	defer cancel()

	c, err := t.dial(ctx, addr, wire.KindRequest, to)
	if err != nil {
		return nil, notSent(t.callErr(err))
	}
	defer func() { _ = c.Close() }()
	if !t.track(c) {
		return nil, notSent(ErrClosed)
	}
	defer t.untrack(c)
	// A call without a deadline still cannot hang on a silent peer: the
	// peer gives up after MaxRequestDuration, and so do we, a little later.
	deadline := time.Now().Add(t.cfg.MaxRequestDuration + t.cfg.WriteTimeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stopConn := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stopConn()

	if _, err := c.Write(wire.AppendFrame(nil, wire.TypeRequest, t.cfg.GroupID, payload)); err != nil {
		return nil, t.callErr(ctxErr(ctx, fmt.Errorf("transport: sending request to %s: %w", addr, err)))
	}
	f, err := c.r.Next()
	if err != nil {
		return nil, t.callErr(ctxErr(ctx, fmt.Errorf("transport: reading response from %s: %w", addr, err)))
	}
	if f.Type != wire.TypeResponse {
		return nil, fmt.Errorf("%w: %s sent a %s frame instead of a response", ErrProtocol, addr, f.Type)
	}
	ok, data, err := wire.ParseStatus(f.Payload)
	if err != nil {
		return nil, fmt.Errorf("transport: response from %s: %w", addr, err)
	}
	if !ok {
		return nil, &RemoteError{Peer: c.reply.Member, Message: string(data)}
	}
	return &Reply{Payload: data, ClusterID: c.reply.Cluster, MemberID: c.reply.Member}, nil
}

// callErr turns the errors of a call interrupted by Close into ErrClosed.
func (t *Transport) callErr(err error) error {
	if t.closing.Load() {
		return fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	return err
}

// budget is the time left before ctx's deadline in nanoseconds, 0 if none.
func budget(ctx context.Context) uint64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return uint64(max(time.Until(d), 1))
}
