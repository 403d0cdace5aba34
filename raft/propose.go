package raft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Proposals and reads: the calls, and the waiters that answer them.

// Propose replicates cmd and returns the state machine's result for it once
// this member has applied it. It works on any member: followers and learners
// forward the command to the leader. While no leader is known the proposal
// waits, within ctx.
//
// Errors: ctx.Err() when ctx ends (the command may still be applied later);
// ErrLeaderChanged when the term changed after the command was handed to
// raft, and ErrTimeout when it had no outcome within Config.RequestTimeout
// (in both, the outcome is unknown: retry with ProposeWithID to have a retry
// applied at most once); ErrProposalDropped when raft refused it (not
// applied, safe to retry); ErrTooLarge; ErrStopped. When the call ends
// before the command reached raft (e.g. no leader was known before ctx
// ended), the error also matches ErrNotProposed: it will never be applied,
// and a retry is safe. A Result.Err set by the state machine is returned as
// the error, with Result.Value.
//
// cmd must not be modified until Propose returns; it is not kept after.
func (n *Node) Propose(ctx context.Context, cmd []byte) ([]byte, error) {
	return n.propose(ctx, RequestID{}, cmd)
}

// ProposeWithID is Propose for a request of a client session, so that
// retries are applied once: a caller whose attempt ended with an unknown
// outcome (ErrLeaderChanged, ErrTimeout, a context's end) retries with the
// same id, through any member, also after restarts, leader changes and
// snapshots. id.Client is a session from RegisterClient; id.Seq numbers
// the client's requests from 1 upwards (see RequestID).
//
// The answer to a retry of a request applied before is that request's
// first answer — its Result.Value, and its Result.Err as a message (an
// error that matches, with errors.Is, an error of the same message: a
// sentinel the state machine returned as it is) — and the command is not
// applied again. Other answers, without applying the command: a retry whose
// first answer was larger than Config.MaxSessionResultSize gets
// ErrDuplicateRequest (applied once; read to learn the outcome); a request
// of an unknown session (expired: Config.MaxClientSessions more recently
// used sessions were registered; or never registered), or at or below the
// part of its session that was forgotten (acknowledged with Acked, or more
// than 16 newer requests applied), gets ErrSessionExpired: it may have been
// applied before, and will not be now — register a new session for new
// requests. ErrInvalidRequest: Client or Seq zero, or Acked not below Seq.
// Every other error is Propose's.
func (n *Node) ProposeWithID(ctx context.Context, id RequestID, cmd []byte) ([]byte, error) {
	switch {
	case id.Client == 0:
		return nil, fmt.Errorf("%w: RequestID.Client must be non-zero (a session from RegisterClient)", ErrInvalidRequest)
	case id.Seq == 0:
		return nil, fmt.Errorf("%w: RequestID.Seq must be non-zero", ErrInvalidRequest)
	case id.Acked >= id.Seq:
		return nil, fmt.Errorf("%w: RequestID.Acked (%d) must be below Seq (%d)", ErrInvalidRequest, id.Acked, id.Seq)
	}
	return n.propose(ctx, id, cmd)
}

func (n *Node) propose(ctx context.Context, rid RequestID, cmd []byte) ([]byte, error) {
	return n.proposeEntry(ctx, rid, cmd, 0)
}

// proposeEntry proposes cmd — a command (kind 0), or the payload of an
// entry of the node's own kind (entrySettings, entryRegisterClient) — and
// waits for its result.
func (n *Node) proposeEntry(ctx context.Context, rid RequestID, cmd []byte, kind byte) ([]byte, error) {
	if len(cmd) > n.cfg.MaxCommandSize {
		return nil, fmt.Errorf("%w: %d bytes > MaxCommandSize %d", ErrTooLarge, len(cmd), n.cfg.MaxCommandSize)
	}
	if err := n.usable(); err != nil {
		return nil, err
	}
	seq := n.seq.Add(1)
	p := proposalPool.Get().(*proposal)
	p.seq, p.rid, p.cmd, p.kind = seq, rid, cmd, kind
	if err := n.props.put(ctx, n.stopc, p); err != nil {
		p.release()
		if errors.Is(err, errStopping) {
			return nil, notProposed(n.stopErr())
		}
		return nil, notProposed(n.ctxErr(ctx))
	}
	n.loopTask.Signal()
	select {
	case r := <-p.done:
		p.release() // delivered: nobody refers to p any more
		return r.Value, r.Err
	case <-ctx.Done():
		// p may still be referred to (queued, or about to be resolved): it
		// is left to the garbage collector, not reused.
		if !n.waiters.cancel(p) {
			return nil, notProposed(n.ctxErr(ctx))
		}
		return nil, n.ctxErr(ctx)
	case <-n.stopc:
		if !n.waiters.cancel(p) {
			return nil, notProposed(n.stopErr())
		}
		return nil, n.stopErr()
	}
}

// Read answers query linearizably: it learns the commit index through
// raft's ReadIndex (on the leader, or asked of the leader by a follower or
// learner), waits until this member has applied it, then calls the state
// machine's Lookup. Concurrent reads share one ReadIndex round.
//
// Errors: those of ReadBarrier, and the state machine's Lookup error as is.
// A read changes nothing: any error is safe to retry.
func (n *Node) Read(ctx context.Context, query []byte) ([]byte, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	return n.lookup(query)
}

// ReadBarrier returns once this member has applied everything committed
// before the call: a Lookup after it is linearizable.
//
// Errors: ctx's error (joined with ErrNoLeader when no leader is known: the
// read waited for one; retry, perhaps on another member); ErrNotStarted;
// ErrStopped or the error that stopped the node (FatalError, ErrRemoved).
// While more reads wait than the node holds (4096), it waits within ctx.
func (n *Node) ReadBarrier(ctx context.Context) error {
	if err := n.usable(); err != nil {
		return err
	}
	r := &readRequest{done: make(chan readResult, 1)}
	if err := n.reads.put(ctx, n.stopc, r); err != nil {
		if errors.Is(err, errStopping) {
			return n.stopErr()
		}
		return n.ctxErr(ctx)
	}
	n.loopTask.Signal()
	var res readResult
	select {
	case res = <-r.done:
	case <-ctx.Done():
		r.canceled.Store(true)
		return n.ctxErr(ctx)
	case <-n.stopc:
		return n.stopErr()
	}
	if res.err != nil {
		return res.err
	}
	return n.waitApplied(ctx, res.index)
}

// StaleRead answers query from this member's state without any round trip:
// it may miss recent writes (on any member, learners included).
//
// Errors: ErrNotStarted; ErrStopped or the error that stopped the node; the
// state machine's Lookup error as is.
func (n *Node) StaleRead(query []byte) ([]byte, error) {
	if err := n.usable(); err != nil {
		return nil, err
	}
	return n.lookup(query)
}

// proposal is one Propose call in flight. Proposals (with their result
// channel) are reused through proposalPool once their result was received.
type proposal struct {
	seq      uint64
	rid      RequestID // the caller's request ID (ProposeWithID), or zero
	kind     byte      // 0: cmd is a command; else the entry kind of its payload (settings, a registration)
	cmd      []byte    // the caller's command: read by the loop, not kept after Propose returns
	term     uint64    // the term it was handed to raft in; written by the loop under waiters.mu
	tick     uint64    // the loop's tick when it was handed to raft; likewise
	done     chan Result
	canceled atomic.Bool
}

var proposalPool = sync.Pool{New: func() any { return &proposal{done: make(chan Result, 1)} }}

// release returns p to the pool. Only the Propose call that owns p calls it,
// when no other goroutine can refer to p any more.
func (p *proposal) release() {
	p.seq, p.rid, p.cmd, p.term, p.tick, p.kind = 0, RequestID{}, nil, 0, 0, 0
	p.canceled.Store(false)
	proposalPool.Put(p)
}

// waiterSet holds the proposals handed to raft, by sequence number, until
// they are applied (the apply task resolves them) or fail.
type waiterSet struct {
	mu sync.Mutex
	m  map[uint64]*proposal
}

// cancel marks p canceled and forgets it, and reports whether p had been
// handed to raft. Under the lock the loop encodes proposals with, so once
// cancel returns the loop no longer reads p.cmd (the caller's buffer) and
// never hands p to raft if it had not yet.
func (w *waiterSet) cancel(p *proposal) (handed bool) {
	w.mu.Lock()
	p.canceled.Store(true)
	delete(w.m, p.seq)
	handed = p.term != 0
	w.mu.Unlock()
	return handed
}

// notProposed marks err as the end of a proposal that never reached raft.
func notProposed(err error) error { return fmt.Errorf("%w: %w", ErrNotProposed, err) }

// resolve delivers r to the proposal with seq, if anyone waits for it.
func (w *waiterSet) resolve(seq uint64, r Result) {
	w.mu.Lock()
	p, ok := w.m[seq]
	if ok {
		delete(w.m, seq)
	}
	w.mu.Unlock()
	if ok {
		p.done <- r
	}
}

// failOlder fails every proposal handed to raft in a term before term.
func (w *waiterSet) failOlder(term uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for seq, p := range w.m {
		if p.term < term {
			delete(w.m, seq)
			p.done <- Result{Err: err}
		}
	}
}

// failExpired fails every proposal handed to raft at or before tick.
func (w *waiterSet) failExpired(tick uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for seq, p := range w.m {
		if p.tick <= tick {
			delete(w.m, seq)
			p.done <- Result{Err: err}
		}
	}
}

func (w *waiterSet) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for seq, p := range w.m {
		delete(w.m, seq)
		p.done <- Result{Err: err}
	}
}

// readRequest is one linearizable read waiting for a read index.
type readRequest struct {
	done     chan readResult
	canceled atomic.Bool
}

type readResult struct {
	index uint64
	err   error
}
