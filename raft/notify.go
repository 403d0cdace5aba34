package raft

import (
	"context"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// indexNotifier lets goroutines wait until a monotonically increasing index
// (the applied index) reaches a value.
type indexNotifier struct {
	mu  sync.Mutex
	idx uint64
	ch  chan struct{} // closed and replaced on every advance
}

func newIndexNotifier(idx uint64) *indexNotifier {
	return &indexNotifier{idx: idx, ch: make(chan struct{})}
}

func (a *indexNotifier) get() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.idx
}

func (a *indexNotifier) advance(idx uint64) {
	a.mu.Lock()
	if idx > a.idx {
		a.idx = idx
		close(a.ch)
		a.ch = make(chan struct{})
	}
	a.mu.Unlock()
}

// wait returns nil once the index is at least idx, ctx.Err() when ctx ends,
// and ErrStopped when stop is closed first.
func (a *indexNotifier) wait(ctx context.Context, idx uint64, stop <-chan struct{}) error {
	for {
		a.mu.Lock()
		cur, ch := a.idx, a.ch
		a.mu.Unlock()
		if cur >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrStopped
		}
	}
}

// mailbox carries messages from the append and apply goroutines back to the
// run loop without ever blocking the sender (the loop may itself be waiting
// to hand those goroutines work). Its size is bounded by the work in flight.
type mailbox struct {
	mu     sync.Mutex
	msgs   []*raftpb.Message
	notify chan struct{} // capacity 1
}

func newMailbox() *mailbox { return &mailbox{notify: make(chan struct{}, 1)} }

func (mb *mailbox) put(msgs ...*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	mb.mu.Lock()
	mb.msgs = append(mb.msgs, msgs...)
	mb.mu.Unlock()
	select {
	case mb.notify <- struct{}{}:
	default:
	}
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
