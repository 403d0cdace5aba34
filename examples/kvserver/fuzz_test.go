package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// FuzzHTTP: any method, path and body gets an answer with a status the
// contract knows — never a panic, never a 500 — from a running one-member
// server (in process).
func FuzzHTTP(f *testing.F) {
	for _, c := range [][3]string{
		{"PUT", "/kv/a", "1"},
		{"PUT", "/kv/a?prev_value=1", "2"},
		{"GET", "/kv/a%00b", ""},
		{"GET", "/kv/a?consistency=stale", ""},
		{"DELETE", "/kv//x/../y", ""},
		{"POST", "/members", `{"id": 5, "peer_addr": "127.0.0.1:1", "read_only": true}`},
		{"POST", "/members?dry_run=true", `{"id": 1e30}`},
		{"POST", "/members/7/promote?dry_run=true", ""},
		{"DELETE", "/members/18446744073709551615", ""},
		{"POST", "/leader/transfer?to=-1", ""},
		{"PATCH", "/cluster", `{"target_voters": 9, "failover_after": "-1s"}`},
		{"PATCH", "/cluster?dry_run=true", `{"max_learners": 99999999999999999999}`},
		{"GET", "/members", ""},
		{"GET", "/status", ""},
		{"BREW", "/kv/coffee", "{"},
	} {
		f.Add(c[0], c[1], c[2])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	sm := kv.New()
	h, err := understudy.Start(context.Background(), understudy.Config{
		ID: 1, DataDir: filepath.Join(f.TempDir(), "1"), Listener: ln,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}},
		Raft:           raft.Config{TickInterval: 10 * time.Millisecond},
		Storage:        storage.Options{NoSync: true},
	}, sm)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.Close(context.Background()) })
	if err := h.WaitReady(context.Background()); err != nil {
		f.Fatal(err)
	}
	o := &options{requestTimeout: time.Second, maxBody: 1 << 10, logger: slog.New(slog.DiscardHandler)}
	s := &server{o: o, h: h, node: h, sm: sm, log: o.logger}
	s.m = newMetrics(s)
	handler := s.routes()
	f.Fuzz(func(t *testing.T, method, target, body string) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://kv"+target, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s %s %q: %d %s", method, target, body, rec.Code, rec.Body)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	})
}
