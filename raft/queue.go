package raft

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// The queues into a node's tasks. Each allocates its buffer with its first
// item and drops a large one once drained: an idle replica (a host may run
// thousands) holds none.

// queue is a FIFO that never blocks its producers; its size is bounded by
// the work raft has in flight (appends not yet persisted, committed entries
// not yet applied: both limited by raft's flow control).
type queue[T any] struct {
	mu    sync.Mutex
	items []T
}

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
}

// takeInto moves up to limit items (all for limit <= 0) into buf.
func (q *queue[T]) takeInto(buf []T, limit int) []T {
	q.mu.Lock()
	n := len(q.items)
	if limit > 0 && n > limit {
		n = limit
	}
	buf = append(buf, q.items[:n]...)
	rest := copy(q.items, q.items[n:])
	clear(q.items[rest:])
	q.items = q.items[:rest]
	if rest == 0 && cap(q.items) > 256 {
		q.items = nil // an idle node keeps no large buffer
	}
	q.mu.Unlock()
	return buf
}

func (q *queue[T]) pop() (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero
	if len(q.items) == 1 && cap(q.items) <= 256 {
		// The last item: keep the buffer from its start for the next push
		// (a busy node's queue holds one item at a time, mostly); an idle
		// node lets it go (release).
		q.items = q.items[:0]
	} else if q.items = q.items[1:]; len(q.items) == 0 {
		q.items = nil
	}
	return v, true
}

// peek returns the first item without taking it.
func (q *queue[T]) peek() (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return v, false
	}
	return q.items[0], true
}

func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// maxQueuedPeerMessages bounds the peer messages waiting for a node's loop:
// beyond it they are dropped (raft retransmits), so that a slow node never
// holds up a connection other groups share.
const maxQueuedPeerMessages = 4096

// inbox holds the peer messages received for the loop.
type inbox struct {
	mu      sync.Mutex
	msgs    []*raftpb.Message
	dropped uint64
}

// put queues ms, dropping beyond maxQueuedPeerMessages (never a snapshot:
// its file was received already). It reports whether anything was queued.
func (b *inbox) put(ms ...*raftpb.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	queued := false
	for _, m := range ms {
		if len(b.msgs) >= maxQueuedPeerMessages && m.GetType() != raftpb.MsgSnap {
			b.dropped++
			continue
		}
		b.msgs = append(b.msgs, m)
		queued = true
	}
	return queued
}

// take moves up to limit queued messages into buf.
func (b *inbox) take(buf []*raftpb.Message, limit int) []*raftpb.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.msgs), limit)
	buf = append(buf, b.msgs[:n]...)
	rest := copy(b.msgs, b.msgs[n:])
	clear(b.msgs[rest:])
	b.msgs = b.msgs[:rest]
	if rest == 0 && cap(b.msgs) > 512 {
		b.msgs = nil
	}
	return buf
}

func (b *inbox) droppedCount() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// boundedQueue is a FIFO whose producers wait, within their context, while
// it holds max items (back-pressure on Propose and ReadBarrier).
type boundedQueue[T any] struct {
	mu    sync.Mutex
	items []T
	max   int
	space chan struct{} // closed when items are taken; nil while nobody waits
}

// put queues v, waiting while the queue is full. It returns ctx's error if
// ctx ends first, errStopping if stop is closed first.
func (q *boundedQueue[T]) put(ctx context.Context, stop <-chan struct{}, v T) error {
	for {
		q.mu.Lock()
		if len(q.items) < q.max {
			q.items = append(q.items, v)
			q.mu.Unlock()
			return nil
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errStopping
		}
	}
}

// takeInto moves up to limit items into buf and wakes the waiting producers.
func (q *boundedQueue[T]) takeInto(buf []T, limit int) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.items), limit)
	if n == 0 {
		return buf
	}
	buf = append(buf, q.items[:n]...)
	rest := copy(q.items, q.items[n:])
	clear(q.items[rest:])
	q.items = q.items[:rest]
	if rest == 0 && cap(q.items) > 64 {
		q.items = nil
	}
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
	return buf
}

func (q *boundedQueue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// errStopping: the node stops (the caller reports its stop error).
var errStopping = errors.New("raft: stopping")
