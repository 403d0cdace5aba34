package main

// The /kv/ path's own costs, in process, against a stub member: what the
// server allocates per request on top of net/http and raft (none: before
// the path was slimmed, a 256-byte PUT made 9 allocations, a DELETE and a
// GET 6 each, and the timeout's context registered with the request's), and
// how it reads bodies and bounds waits.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// stubNode answers every proposal and read barrier at once and keeps the
// last command.
type stubNode struct{ last []byte }

func (n *stubNode) Propose(_ context.Context, cmd []byte) ([]byte, error) {
	n.last = append(n.last[:0], cmd...)
	return nil, nil
}
func (n *stubNode) ReadBarrier(context.Context) error { return nil }
func (n *stubNode) Leader() uint64                    { return 1 }

// nullWriter is a ResponseWriter that keeps the status and the body's size.
type nullWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *nullWriter) Header() http.Header { return w.h }
func (w *nullWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *nullWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(b)
	return len(b), nil
}
func (w *nullWriter) WriteString(s string) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(s)
	return len(s), nil
}
func (w *nullWriter) reset() { clear(w.h); w.status, w.n = 0, 0 }

// reusableBody is a request body that can be read again.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// kvAllocs serves method target with body through the server's handler
// and returns the status and body size of one answer and the allocations
// per request.
func kvAllocs(t *testing.T, s *server, method, target, body string) (status, size int, allocs float64) {
	t.Helper()
	h := s.routes()
	parent, cancel := context.WithCancel(context.Background()) // as net/http's, per request
	defer cancel()
	r, err := http.NewRequestWithContext(parent, method, "http://kv"+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &reusableBody{}
	bodyBytes := []byte(body)
	w := &nullWriter{h: http.Header{}}
	serve := func() {
		w.reset()
		if body != "" {
			b.Reset(bodyBytes)
			r.Body, r.ContentLength = b, int64(len(body))
		} else {
			r.Body, r.ContentLength = http.NoBody, 0
		}
		h.ServeHTTP(w, r)
	}
	serve()
	status, size = w.status, w.n
	return status, size, testing.AllocsPerRun(200, serve)
}

func stubServer(n kvNode) *server {
	o := &options{requestTimeout: 5 * time.Second, maxBody: 1 << 20, logger: slog.New(slog.DiscardHandler)}
	s := &server{o: o, node: n, sm: kv.New(), log: o.logger}
	s.m = newServerMetrics()
	return s
}

func TestKVPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	value := strings.Repeat("v", 256)
	n := &stubNode{}
	s := stubServer(n)
	for _, c := range []struct {
		method, target, body string
		status, size         int
		cmd                  []byte // what the member is asked to propose
		max                  float64
	}{
		{"PUT", "/kv/k1", value, http.StatusNoContent, 0, kv.Put("k1", value), 0},
		{"DELETE", "/kv/k1", "", http.StatusNoContent, 0, kv.Delete("k1"), 0},
		{"GET", "/kv/k2", "", http.StatusOK, len(value), nil, 0},
	} {
		if c.method == "GET" {
			s.sm.Apply([]raft.Command{{Index: 1, Data: kv.Put("k2", value)}}, make([]raft.Result, 1))
		}
		n.last = nil
		status, size, allocs := kvAllocs(t, s, c.method, c.target, c.body)
		if status != c.status || size != c.size {
			t.Fatalf("%s %s: %d with a body of %d bytes, want %d and %d", c.method, c.target, status, size, c.status, c.size)
		}
		if c.cmd != nil && !bytes.Equal(n.last, c.cmd) {
			t.Fatalf("%s %s proposed %x, want %x", c.method, c.target, n.last, c.cmd)
		}
		t.Logf("%s %s: %v allocations per request", c.method, c.target, allocs)
		if allocs > c.max {
			t.Errorf("%s %s: %v allocations per request, want at most %v", c.method, c.target, allocs, c.max)
		}
	}
}

// blockingNode's proposals and reads wait for their context's end.
type blockingNode struct{ stubNode }

func (n *blockingNode) Propose(ctx context.Context, _ []byte) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (n *blockingNode) ReadBarrier(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// A /kv/ request that gets no outcome ends after --request-timeout with
// 503 unavailable, as with a timer of its own.
func TestKVRequestTimeout(t *testing.T) {
	s := stubServer(&blockingNode{})
	s.o.requestTimeout = 20 * time.Millisecond
	h := s.routes()
	for _, method := range []string{"PUT", "DELETE", "GET"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/kv/a", strings.NewReader(map[bool]string{true: "1"}[method == "PUT"])))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":"unavailable"`) ||
			!strings.Contains(rec.Body.String(), context.DeadlineExceeded.Error()) {
			t.Fatalf("%s: %d %s, want 503 unavailable (%v)", method, rec.Code, rec.Body, context.DeadlineExceeded)
		}
	}
}

// A shared deadline is at least the timeout away and at most
// deadlineGrain more; requests close together share one; it ends with
// context.DeadlineExceeded.
func TestDeadlines(t *testing.T) {
	var d deadlines
	const timeout = 30 * time.Millisecond
	before := time.Now()
	a := d.context(timeout)
	b := d.context(timeout)
	after := time.Now()
	for _, c := range []context.Context{a, b} {
		at, ok := c.Deadline()
		if !ok || at.Before(before.Add(timeout)) || at.After(after.Add(timeout+deadlineGrain)) {
			t.Fatalf("deadline %v, want within [%v, %v]", at, before.Add(timeout), after.Add(timeout+deadlineGrain))
		}
		if c.Err() != nil {
			t.Fatalf("Err before the deadline: %v", c.Err())
		}
	}
	if at, _ := b.Deadline(); at.Sub(after.Add(timeout)) > deadlineGrain {
		t.Fatalf("a deadline more than %v past the timeout", deadlineGrain)
	}
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatal("the deadline never ended")
	}
	if !errors.Is(b.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, want context.DeadlineExceeded", b.Err())
	}
	if c := d.context(timeout); c.Err() != nil {
		t.Fatalf("a context made after a deadline ended is ended: %v", c.Err())
	}
}

// PUT bodies: of a known length (read in place), chunked, over --max-body
// either way (413), or shorter than announced (400); the command carries
// the value whole.
func TestKVPutBodies(t *testing.T) {
	n := &stubNode{}
	s := stubServer(n)
	s.o.maxBody = 300
	h := s.routes()
	value := strings.Repeat("x", 300)
	for _, c := range []struct {
		name   string
		body   io.Reader
		length int64
		status int
	}{
		{"known length", strings.NewReader(value), 300, http.StatusNoContent},
		{"chunked", io.MultiReader(strings.NewReader(value[:100]), strings.NewReader(value[100:])), -1, http.StatusNoContent},
		{"empty", http.NoBody, 0, http.StatusNoContent},
		{"too large", strings.NewReader(value + "x"), 301, http.StatusRequestEntityTooLarge},
		{"too large, chunked", strings.NewReader(value + "x"), -1, http.StatusRequestEntityTooLarge},
		{"short", strings.NewReader(value[:10]), 300, http.StatusBadRequest},
	} {
		n.last = nil
		r := httptest.NewRequest("PUT", "/kv/key", c.body)
		r.ContentLength = c.length
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.status)
		}
		want := kv.Put("key", value)
		if c.length == 0 {
			want = kv.Put("key", "")
		}
		if c.status == http.StatusNoContent && !bytes.Equal(n.last, want) {
			t.Fatalf("%s: proposed %q, want %q", c.name, n.last, want)
		}
		if c.status != http.StatusNoContent && n.last != nil {
			t.Fatalf("%s: proposed %q", c.name, n.last)
		}
	}
}
