package raft

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// watched is a value that goroutines can wait on: the applied index, the
// leadership state. Every change closes the current channel and makes a new
// one, waking every waiter to check its condition again.
type watched[T comparable] struct {
	mu sync.Mutex
	v  T
	// ch is closed when v changes; made by the first waiter (nil: nobody
	// waits), so that an update nobody waits for allocates nothing.
	ch chan struct{}
}

func newWatched[T comparable](v T) *watched[T] {
	return &watched[T]{v: v}
}

func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.v
}

// update replaces the value with f's result if f says so and it differs.
func (w *watched[T]) update(f func(cur T) (T, bool)) {
	w.mu.Lock()
	if v, ok := f(w.v); ok && v != w.v {
		w.v = v
		if w.ch != nil {
			close(w.ch)
			w.ch = nil
		}
	}
	w.mu.Unlock()
}

func (w *watched[T]) set(v T) { w.update(func(T) (T, bool) { return v, true }) }

// waitFor waits on w for n's callers: nil once ok holds, the node's stop
// error (with its fatal cause) if it stops first, else ctx's error (with
// ErrNoLeader attached when no leader is known).
func waitFor[T comparable](n *Node, ctx context.Context, w *watched[T], ok func(T) bool) error {
	err := w.wait(ctx, n.stopc, ok)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStopped):
		return n.stopErr()
	}
	return n.ctxErr(ctx)
}

// wait returns nil once ok(value) holds, ctx.Err() when ctx ends, and
// ErrStopped when stop is closed first.
func (w *watched[T]) wait(ctx context.Context, stop <-chan struct{}, ok func(T) bool) error {
	for {
		w.mu.Lock()
		v := w.v
		w.mu.Unlock()
		if ok(v) {
			return nil
		}
		w.mu.Lock()
		if w.v != v { // changed meanwhile: look again
			w.mu.Unlock()
			continue
		}
		if w.ch == nil {
			w.ch = make(chan struct{})
		}
		ch := w.ch
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrStopped
		}
	}
}

// advanceTo raises a watched index to idx (never lowers it).
func advanceTo(w *watched[uint64], idx uint64) {
	w.update(func(cur uint64) (uint64, bool) { return idx, idx > cur })
}

// mailbox carries messages from the append and apply tasks back to the
// run loop without ever blocking the sender. Its size is bounded by the
// work in flight.
type mailbox struct {
	mu   sync.Mutex
	msgs []*raftpb.Message
	wake func() // signals the loop
}

func newMailbox(wake func()) *mailbox { return &mailbox{wake: wake} }

func (mb *mailbox) put(msgs ...*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	mb.mu.Lock()
	mb.msgs = append(mb.msgs, msgs...)
	mb.mu.Unlock()
	mb.wake()
}

// putQuiet queues msgs without signaling the loop: its next run, which
// the node's tick bounds, steps them with whatever else it has
// (quietanswers.go).
func (mb *mailbox) putQuiet(msgs ...*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	mb.mu.Lock()
	mb.msgs = append(mb.msgs, msgs...)
	mb.mu.Unlock()
}

// len is the number of messages queued.
func (mb *mailbox) len() int {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return len(mb.msgs)
}

// take moves the queued messages into buf (which it returns) and empties the box.
func (mb *mailbox) take(buf []*raftpb.Message) []*raftpb.Message {
	mb.mu.Lock()
	buf = append(buf, mb.msgs...)
	clear(mb.msgs)
	mb.msgs = mb.msgs[:0]
	mb.mu.Unlock()
	return buf
}
