package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/understudy-raft/understudy/kv"
)

// The key-value API, /kv/{key}: the hot path of the server.

// maxKey is the longest key, in bytes.
const maxKey = 4096

// kvNode is what /kv/ asks of the member (an *understudy.Group): an
// interface so that the path's own costs are measured without raft's
// (alloc_test.go).
type kvNode interface {
	Propose(ctx context.Context, cmd []byte) ([]byte, error)
	ReadBarrier(ctx context.Context) error
	Leader() uint64
}

// The /kv/ routes, served before the mux (kv): keys may hold "//" and "..",
// which the mux would clean. Each method knows its own parameter.
var (
	kvGet    = route{pattern: "GET /kv/{key}", known: []string{"consistency"}}
	kvHead   = route{pattern: "HEAD /kv/{key}", known: []string{"consistency"}}
	kvPut    = route{pattern: "PUT /kv/{key}", known: []string{"prev_value"}, body: true}
	kvDelete = route{pattern: "DELETE /kv/{key}"}
	kvRoutes = []route{kvGet, kvHead, kvPut, kvDelete}
)

// octetStream is the Content-Type of a value, one slice for every answer
// (Header.Set would make one per answer; nothing writes into it: Add and
// Set replace a full slice).
var octetStream = []string{"application/octet-stream"}

// key returns the key of a /kv/ request, whose escaped path after "/kv/"
// is raw; false when it answered.
func (s *server) key(w http.ResponseWriter, raw string) (string, bool) {
	k, err := url.PathUnescape(raw) // raw itself when nothing is escaped
	switch {
	case err != nil:
		s.writeError(w, http.StatusBadRequest, "invalid_key", "the key is not percent-encoded correctly")
	case k == "":
		s.writeError(w, http.StatusBadRequest, "invalid_key", "empty key")
	case len(k) > maxKey:
		s.writeError(w, http.StatusBadRequest, "invalid_key", fmt.Sprintf("key of %d bytes (at most %d)", len(k), maxKey))
	case strings.IndexByte(k, 0) >= 0:
		s.writeError(w, http.StatusBadRequest, "invalid_key", "the key contains NUL")
	default:
		return k, true
	}
	return "", false
}

// kv serves /kv/{key}; raw is the escaped path after "/kv/". It is the hot
// path: a request without a query parses none, a value is read into a
// buffer that is reused and encoded into another (kvBuf), and the wait is
// bounded by a deadline shared with the requests of the same few
// milliseconds (deadlines) instead of a timer of its own.
func (s *server) kv(w http.ResponseWriter, r *http.Request, raw string) {
	var rt *route
	switch r.Method {
	case http.MethodGet:
		rt = &kvGet
	case http.MethodHead:
		rt = &kvHead
	case http.MethodPut:
		rt = &kvPut
	case http.MethodDelete:
		rt = &kvDelete
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		s.writeError(w, http.StatusMethodNotAllowed, "invalid_request", "method "+r.Method+" not allowed on /kv/")
		return
	}
	key, ok := s.key(w, raw)
	if !ok {
		return
	}
	// Each method knows its own parameter: a ?prev_value on a DELETE is
	// refused, never an unconditional delete.
	var (
		q   url.Values
		err error
	)
	if r.URL.RawQuery != "" {
		q, err = query(r, rt.known...)
	}
	if err == nil && !rt.body {
		err = noBody(r)
	}
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	ctx := s.deadlines.context(s.o.requestTimeout)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch c := q.Get("consistency"); c {
		case "", "linearizable":
			if err := s.node.ReadBarrier(ctx); err != nil {
				s.fail(w, err)
				return
			}
		case "stale":
		default:
			s.writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("consistency %q: want linearizable or stale", c))
			return
		}
		v, found := s.sm.Get(key)
		if !found {
			s.writeError(w, http.StatusNotFound, "not_found", "no such key")
			return
		}
		w.Header()["Content-Type"] = octetStream
		_, _ = io.WriteString(w, v)
	case http.MethodPut:
		b := kvBufs.Get().(*kvBuf)
		defer b.release()
		body, ok := s.readBodyInto(w, r, b.body[:0])
		if !ok {
			return
		}
		b.body = body
		if prev, ok := q["prev_value"]; ok {
			b.cmd = kv.AppendCAS(b.cmd[:0], key, prev[0], body)
		} else {
			b.cmd = kv.AppendPut(b.cmd[:0], key, body)
		}
		// Propose reads the command only until it returns (also when ctx
		// ends first): the buffer is free again after.
		if err := s.propose(ctx, b.cmd); err != nil {
			s.fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		b := kvBufs.Get().(*kvBuf)
		defer b.release()
		b.cmd = kv.AppendDelete(b.cmd[:0], key)
		if err := s.propose(ctx, b.cmd); err != nil {
			s.fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *server) propose(ctx context.Context, cmd []byte) error {
	s.m.pending.Inc()
	defer s.m.pending.Dec()
	_, err := s.node.Propose(ctx, cmd)
	if err != nil && !errors.Is(err, kv.ErrCompareFailed) {
		s.m.failed.Inc()
	}
	return err
}

// kvBuf is a PUT's value and command (or a DELETE's command), reused
// through kvBufs.
type kvBuf struct{ body, cmd []byte }

var kvBufs = sync.Pool{New: func() any { return new(kvBuf) }}

// maxPooledBuf is the largest buffer kept for reuse: a rare large value
// is left to the garbage collector rather than held by the pool.
const maxPooledBuf = 64 << 10

func (b *kvBuf) release() {
	if cap(b.body) > maxPooledBuf || cap(b.cmd) > maxPooledBuf {
		return
	}
	kvBufs.Put(b)
}

// readBodyInto reads r's body of at most --max-body bytes into b (from its
// start) and returns it; false when it answered. A body of a known length
// is read in place; one of unknown length (chunked) or over --max-body
// goes through readBody.
func (s *server) readBodyInto(w http.ResponseWriter, r *http.Request, b []byte) ([]byte, bool) {
	n := r.ContentLength
	if n < 0 || n > s.o.maxBody {
		return s.readBody(w, r)
	}
	b = slices.Grow(b[:0], int(n))[:n]
	if _, err := io.ReadFull(r.Body, b); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request", "reading the body: "+err.Error())
		return nil, false
	}
	return b, true
}
