package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// route is one route of the mux: its pattern, the query parameters it
// knows (any other answers 400), whether it takes a body, and its handler.
type route struct {
	pattern string
	known   []string
	body    bool
	h       func(http.ResponseWriter, *http.Request, url.Values)
}

// The query parameters each route knows.
var (
	noParams   []string
	dryRunOnly = []string{"dry_run"}
)

// routeTable is the HTTP API (docs/kvserver.md) but /kv/.
func (s *server) routeTable() []route {
	return []route{
		{"GET /members", noParams, false, s.listMembers},
		{"POST /members", []string{"role", "dry_run"}, true, s.addMember},
		{"PUT /members/{id}", dryRunOnly, true, s.updateMember},
		{"POST /members/{id}/promote", dryRunOnly, false, s.memberOp("promote")},
		{"POST /members/{id}/demote", dryRunOnly, false, s.memberOp("demote")},
		{"DELETE /members/{id}", dryRunOnly, false, s.memberOp("remove")},
		{"POST /leader/transfer", []string{"to"}, false, s.transferLeader},
		{"GET /cluster", noParams, false, s.getCluster},
		{"PATCH /cluster", dryRunOnly, true, s.patchCluster},
		{"GET /status", noParams, false, s.status},
		{"GET /healthz", noParams, false, s.healthz},
		{"GET /metrics", noParams, false, func(w http.ResponseWriter, r *http.Request, _ url.Values) { s.m.handler().ServeHTTP(w, r) }},
	}
}

// routes is the HTTP API: /kv/ first, then the mux.
func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.HandleFunc(rt.pattern, s.strict(rt))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Keys may hold anything but NUL, "//" and ".." included: /kv/ is
		// routed here, before the mux cleans paths.
		if p := r.URL.EscapedPath(); strings.HasPrefix(p, "/kv/") {
			s.kv(w, r, p[len("/kv/"):])
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// strict refuses, before rt's handler runs, a query parameter the route
// does not know, one given twice, a dry_run value that is not a boolean,
// and a body on a route that takes none: 400 invalid_request, nothing
// changed.
func (s *server) strict(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := query(r, rt.known...)
		if err == nil {
			_, err = dryRunParam(q)
		}
		if err == nil && !rt.body {
			err = noBody(r)
		}
		if err != nil {
			s.writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		rt.h(w, r, q)
	}
}

// apiError is the body of every error answer.
type apiError struct {
	Error  string `json:"error"`
	Code   string `json:"code"`
	Leader uint64 `json:"leader"`
}

func (s *server) writeError(w http.ResponseWriter, status int, code, msg string) {
	s.m.httpErrors.WithLabelValues(code).Inc()
	writeJSON(w, status, apiError{Error: msg, Code: code, Leader: s.node.Leader()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// refusalStatus is the HTTP status of each refusal code.
var refusalStatus = map[string]int{
	"member_exists":       http.StatusConflict,
	"change_in_progress":  http.StatusConflict,
	"invalid_member":      http.StatusBadRequest,
	"invalid_request":     http.StatusBadRequest,
	"invalid_setting":     http.StatusBadRequest,
	"bad_context":         http.StatusBadRequest,
	"too_many_learners":   http.StatusPreconditionFailed,
	"quorum_at_risk":      http.StatusPreconditionFailed,
	"learner_not_ready":   http.StatusPreconditionFailed,
	"too_many_voters":     http.StatusPreconditionFailed,
	"member_read_only":    http.StatusPreconditionFailed,
	"learner_cannot_lead": http.StatusPreconditionFailed,
	"policy_would_undo":   http.StatusPreconditionFailed,
	"unknown_member":      http.StatusNotFound,
}

// fail answers err with its status and stable code.
func (s *server) fail(w http.ResponseWriter, err error) {
	if code := confchange.Code(err); code != "" {
		status, ok := refusalStatus[code]
		if !ok {
			status = http.StatusBadRequest
		}
		s.writeError(w, status, code, err.Error())
		return
	}
	switch {
	case errors.Is(err, kv.ErrCompareFailed):
		s.writeError(w, http.StatusPreconditionFailed, "compare_failed", err.Error())
	case errors.Is(err, raft.ErrTooLarge):
		s.writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", err.Error())
	case errors.Is(err, raft.ErrInvalidRequest), errors.Is(err, kv.ErrBadCommand):
		s.writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
	default:
		// No leader, a leader change, a timeout, a stopping member: the
		// cluster could not serve it in time. The outcome of a write may be
		// unknown (the message says so); a read or a retry is safe.
		s.writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	}
}

// reqCtx bounds a request by --request-timeout.
func (s *server) reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.o.requestTimeout)
}

// readBody reads a body of at most --max-body bytes; false when it answered.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("body over %d bytes (--max-body)", s.o.maxBody))
		} else {
			s.writeError(w, http.StatusBadRequest, "invalid_request", "reading the body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

// clusterJSON is GET /cluster: the replicated cluster settings.
type clusterJSON struct {
	TargetVoters    int    `json:"target_voters"`
	MaxLearners     int    `json:"max_learners"`
	AutoPromote     bool   `json:"auto_promote"`
	FailoverAfter   string `json:"failover_after"`
	RemoveDeadAfter string `json:"remove_dead_after"`
}

func toClusterJSON(cs confchange.ClusterSettings) clusterJSON {
	return clusterJSON{
		TargetVoters: cs.TargetVoters, MaxLearners: cs.MaxLearners, AutoPromote: cs.AutoPromote,
		FailoverAfter: cs.FailoverAfter.String(), RemoveDeadAfter: cs.RemoveDeadAfter.String(),
	}
}

func (s *server) getCluster(w http.ResponseWriter, r *http.Request, _ url.Values) {
	writeJSON(w, http.StatusOK, toClusterJSON(s.h.Settings()))
}

// patchCluster changes any of the settings; the others keep their values.
func (s *server) patchCluster(w http.ResponseWriter, r *http.Request, q url.Values) {
	dry, _ := dryRunParam(q) // checked by strict
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req struct {
		TargetVoters    *int    `json:"target_voters"`
		MaxLearners     *int    `json:"max_learners"`
		AutoPromote     *bool   `json:"auto_promote"`
		FailoverAfter   *string `json:"failover_after"`
		RemoveDeadAfter *string `json:"remove_dead_after"`
	}
	if err := decodeObject(body, &req, "target_voters", "max_learners", "auto_promote", "failover_after", "remove_dead_after"); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_setting", "the body is not cluster settings: "+err.Error())
		return
	}
	// merge puts the fields given on base, and returns every invalid field.
	merge := func(base confchange.ClusterSettings) (confchange.ClusterSettings, []error) {
		cs := base
		if req.TargetVoters != nil {
			cs.TargetVoters = *req.TargetVoters
		}
		if req.MaxLearners != nil {
			cs.MaxLearners = *req.MaxLearners
		}
		if req.AutoPromote != nil {
			cs.AutoPromote = *req.AutoPromote
		}
		var bad []error
		for _, d := range []struct {
			name string
			in   *string
			out  *time.Duration
		}{{"failover_after", req.FailoverAfter, &cs.FailoverAfter}, {"remove_dead_after", req.RemoveDeadAfter, &cs.RemoveDeadAfter}} {
			if d.in == nil {
				continue
			}
			v, err := time.ParseDuration(*d.in)
			if err != nil {
				bad = append(bad, fmt.Errorf("%w: %s %q: a Go duration, e.g. \"30s\"", confchange.ErrInvalidSettings, d.name, *d.in))
				continue
			}
			*d.out = v
		}
		if err := cs.Validate(); err != nil {
			bad = append(bad, unjoin(err)...)
		}
		return cs, bad
	}
	answer := func(cs confchange.ClusterSettings, plan string, bad []error) {
		if !dry {
			s.writeError(w, http.StatusBadRequest, "invalid_setting", errors.Join(bad...).Error())
			return
		}
		out := struct {
			Plan     string        `json:"plan"`
			Refusals []refusalJSON `json:"refusals"`
		}{Plan: plan, Refusals: []refusalJSON{}}
		for _, e := range bad {
			out.Refusals = append(out.Refusals, refusalJSON{Code: "invalid_setting", Error: e.Error()})
		}
		writeJSON(w, http.StatusOK, out)
	}
	// Invalid input is refused at once, leader or not, on this member's
	// copy of the settings; …
	if cs, bad := merge(s.h.Settings()); len(bad) > 0 {
		answer(cs, "set "+cs.String(), bad)
		return
	}
	// … otherwise the fields not given keep their current values, read
	// once this member has applied everything committed.
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	if err := s.h.ReadBarrier(ctx); err != nil {
		s.fail(w, err)
		return
	}
	cs, bad := merge(s.h.Settings())
	if len(bad) > 0 {
		answer(cs, "set "+cs.String(), bad)
		return
	}
	if dry {
		// The plan says what the policy would do next under the new
		// settings.
		plan, err := s.h.CheckSettings(ctx, cs)
		if err != nil && !errors.Is(err, confchange.ErrInvalidSettings) {
			s.fail(w, err)
			return
		}
		if err != nil {
			bad = unjoin(err)
		}
		answer(cs, plan, bad)
		return
	}
	if err := s.h.UpdateSettings(ctx, cs); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toClusterJSON(s.h.Settings()))
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// statusJSON is GET /status.
type statusJSON struct {
	ID           uint64 `json:"id"`
	Role         string `json:"role"`
	Term         uint64 `json:"term"`
	Leader       uint64 `json:"leader"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	ClusterID    string `json:"cluster_id"`
	// Relay is this member's --relay (whether, as the leader, it feeds
	// standbys through relays).
	Relay bool `json:"relay"`
	// RelayedOn counts the leader's messages this member handed on to
	// standbys as a relay.
	RelayedOn uint64 `json:"relayed_on"`
	// RelayedStandbys is, on the leader, how many standbys it feeds
	// through relays now (0 elsewhere).
	RelayedStandbys int `json:"relayed_standbys"`
	// Quiesced is whether the group is quiesced on this member (--quiesce:
	// it neither ticks nor sends); QuiescedSince when it quiesced (RFC
	// 3339, empty while awake); LastWake the cause of its latest wake
	// from quiescence (empty if it never woke).
	Quiesced      bool   `json:"quiesced"`
	QuiescedSince string `json:"quiesced_since"`
	LastWake      string `json:"last_wake"`
}

func (s *server) status(w http.ResponseWriter, r *http.Request, _ url.Values) {
	ctx, cancel := s.reqCtx(r)
	defer cancel()
	st, err := s.h.Status(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, statusJSON{
		ID: st.ID, Role: roleName(st.Role), Term: st.Term, Leader: st.Leader,
		CommitIndex: st.Commit, AppliedIndex: st.Applied, ClusterID: fmt.Sprintf("%x", s.h.ClusterID()),
		Relay: s.o.relay, RelayedOn: st.RelayedOn, RelayedStandbys: relayedStandbys(st),
		Quiesced: st.Quiesced, QuiescedSince: quiescedSince(st), LastWake: st.LastWake,
	})
}

// quiescedSince is when the group quiesced on this member, RFC 3339, or ""
// while it is awake.
func quiescedSince(st raft.Status) string {
	if !st.Quiesced || st.QuiescedSince.IsZero() {
		return ""
	}
	return st.QuiescedSince.UTC().Format(time.RFC3339Nano)
}

// relayedStandbys is how many standbys the leader feeds through relays
// (0 on a member that does not lead: its Progress is empty).
func relayedStandbys(st raft.Status) int {
	n := 0
	for _, p := range st.Progress {
		if p.RelayedBy != 0 {
			n++
		}
	}
	return n
}

// roleName is a member's role as GET /status says it.
func roleName(r raft.Role) string {
	switch r {
	case raft.RoleLeader:
		return "leader"
	case raft.RoleLearner:
		return "learner"
	}
	return "voter" // a follower or a candidate
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request, _ url.Values) {
	ctx, cancel := context.WithTimeout(r.Context(), min(s.o.requestTimeout, 2*time.Second))
	defer cancel()
	if s.h.Leader() == 0 {
		s.writeError(w, http.StatusServiceUnavailable, "unavailable", "no leader known")
		return
	}
	if err := s.h.WaitReady(ctx); err != nil {
		s.writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"health": "ok"})
}
