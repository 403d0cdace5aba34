package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineGrain is how much later than --request-timeout a /kv/ request
// may end: the requests of the same deadlineGrain share one deadline.
const deadlineGrain = 10 * time.Millisecond

// deadlines bounds /kv/ requests by --request-timeout with one timer per
// deadlineGrain of requests instead of a context.WithTimeout (a timer, a
// context and its registration with the request's) per request. The zero
// value is ready to use.
type deadlines struct {
	cur atomic.Pointer[deadline] // the latest deadline handed out
	mu  sync.Mutex               // makes the next one
}

// deadline is one shared end, a context without values: done is closed,
// and expired set first, once at has passed.
type deadline struct {
	at      time.Time
	done    chan struct{}
	expired atomic.Bool
}

// context returns a context that ends (Err context.DeadlineExceeded)
// between timeout and timeout+deadlineGrain from now: a shared deadline,
// nothing allocated. Unlike context.WithTimeout(r.Context(), …) it does not
// end with the request's context, nor carry its values (nothing on the
// /kv/ path reads them): a client that goes away no longer cuts its
// request's wait short; the wait ends with the outcome or the deadline.
func (d *deadlines) context(timeout time.Duration) context.Context {
	return d.after(time.Now().Add(timeout))
}

// after returns a deadline at or after t, at most deadlineGrain later.
func (d *deadlines) after(t time.Time) *deadline {
	if c := d.cur.Load(); c != nil && !c.at.Before(t) && c.at.Sub(t) <= deadlineGrain {
		return c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.cur.Load(); c != nil && !c.at.Before(t) && c.at.Sub(t) <= deadlineGrain {
		return c
	}
	c := &deadline{at: t.Add(deadlineGrain), done: make(chan struct{})}
	time.AfterFunc(time.Until(c.at), func() {
		c.expired.Store(true)
		close(c.done)
	})
	d.cur.Store(c)
	return c
}

// deadline is a context.Context.

func (c *deadline) Deadline() (time.Time, bool) { return c.at, true }
func (c *deadline) Done() <-chan struct{}       { return c.done }
func (c *deadline) Value(any) any               { return nil }

func (c *deadline) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}
