package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

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

// kvRoutes are the /kv/ routes, served before the mux (kv): keys may hold
// "//" and "..", which the mux would clean. Each method knows its own
// parameter.
var kvRoutes = []route{
	{pattern: "GET /kv/{key}", known: []string{"consistency"}},
	{pattern: "HEAD /kv/{key}", known: []string{"consistency"}},
	{pattern: "PUT /kv/{key}", known: []string{"prev_value"}, body: true},
	{pattern: "DELETE /kv/{key}"},
}

// key returns the key of a /kv/ request; false when it answered.
func (s *server) key(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/kv/")
	k, err := url.PathUnescape(raw)
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

// kv serves /kv/{key}.
func (s *server) kv(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		s.writeError(w, http.StatusMethodNotAllowed, "invalid_request", "method "+r.Method+" not allowed on /kv/")
		return
	}
	key, ok := s.key(w, r)
	if !ok {
		return
	}
	// Each method knows its own parameter (kvRoutes): a ?prev_value on a
	// DELETE is refused, never an unconditional delete.
	var rt route
	for _, k := range kvRoutes {
		if strings.HasPrefix(k.pattern, r.Method+" ") {
			rt = k
		}
	}
	q, err := query(r, rt.known...)
	if err == nil && !rt.body {
		err = noBody(r)
	}
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	ctx, cancel := s.reqCtx(r)
	defer cancel()
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
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.WriteString(w, v)
	case http.MethodPut:
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		cmd := kv.Put(key, string(body))
		if prev, ok := q["prev_value"]; ok {
			cmd = kv.CAS(key, prev[0], string(body))
		}
		if err := s.propose(ctx, cmd); err != nil {
			s.fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		if err := s.propose(ctx, kv.Delete(key)); err != nil {
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
