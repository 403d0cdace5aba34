package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStrictInput: a request the server would half understand is refused
// (400, nothing changed): a dry_run value strconv.ParseBool does not take
// (while every one it takes is a dry run, never real), a query parameter
// the route does not know on every route, one given twice, a body on a
// route that takes none, and a JSON body that is not exactly one object of
// the documented fields.
func TestStrictInput(t *testing.T) {
	root := t.TempDir()
	a := startCluster(t, root, 1, "--auto-promote=false")[0]
	// A learner at an address nobody listens on: harmless, removable.
	if code, out := a.req("POST", "/members", `{"id": 8, "peer_addr": "127.0.0.1:1"}`); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	if code, _ := a.req("PUT", "/kv/k", "v"); code != 204 {
		t.Fatal("PUT")
	}
	has8 := func() bool {
		m, ok := a.members(t)
		return ok && roleOf(m, 8) == "learner"
	}
	settings := func() string {
		_, out := a.req("GET", "/cluster", "")
		return out
	}
	before := settings()
	bad := func(method, path, body, wantCode string) {
		t.Helper()
		code, out := a.req(method, path, body)
		var e struct {
			Code string `json:"code"`
		}
		if code != 400 || json.Unmarshal([]byte(out), &e) != nil || e.Code != wantCode {
			t.Errorf("%s %s %q: %d %s, want 400 %s", method, path, body, code, out, wantCode)
		}
	}
	dryRunOK := func(method, path, body string) {
		t.Helper()
		code, out := a.req(method, path, body)
		if code != 200 || !strings.Contains(out, `"plan"`) || !strings.Contains(out, `"refusals"`) {
			t.Errorf("%s %s: %d %s, want a dry run's answer", method, path, code, out)
		}
	}

	// Every spelling strconv.ParseBool takes as true is a dry run; as
	// false, the real thing (checked last).
	for _, v := range []string{"1", "t", "T", "true", "TRUE", "True"} {
		dryRunOK("DELETE", "/members/8?dry_run="+v, "")
		dryRunOK("PATCH", "/cluster?dry_run="+v, `{"failover_after": "41s"}`)
		dryRunOK("POST", "/members/8/promote?dry_run="+v, "")
		dryRunOK("PUT", "/members/8?dry_run="+v, `{"peer_addr": "127.0.0.1:2"}`)
		dryRunOK("POST", "/members?dry_run="+v, `{"id": 9, "peer_addr": "127.0.0.1:3"}`)
	}
	// What it does not take, and parameters it does not know: 400.
	for _, q := range []string{"dry_run=yes", "dry_run=", "dry_run", "dry_run=on", "dry-run=true", "dryrun=true",
		"dry_run=true&dry_run=false", "dry_run=true&force=1"} {
		bad("DELETE", "/members/8?"+q, "", "invalid_request")
		bad("PATCH", "/cluster?"+q, `{"failover_after": "41s"}`, "invalid_request")
		bad("POST", "/members/8/demote?"+q, "", "invalid_request")
		bad("PUT", "/members/8?"+q, `{"peer_addr": "127.0.0.1:2"}`, "invalid_request")
		bad("POST", "/members?"+q, `{"id": 9, "peer_addr": "127.0.0.1:3"}`, "invalid_request")
	}
	// Every route refuses a parameter it does not know.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/members", ""}, {"POST", "/members", `{"id": 9, "peer_addr": "127.0.0.1:3"}`},
		{"PUT", "/members/8", `{"peer_addr": "127.0.0.1:2"}`}, {"POST", "/members/8/promote", ""},
		{"POST", "/members/8/demote", ""}, {"DELETE", "/members/8", ""}, {"POST", "/leader/transfer?to=1", ""},
		{"GET", "/cluster", ""}, {"PATCH", "/cluster", `{"failover_after": "41s"}`}, {"GET", "/status", ""},
		{"GET", "/healthz", ""}, {"GET", "/metrics", ""}, {"GET", "/kv/k", ""}, {"PUT", "/kv/k", "w"},
		{"DELETE", "/kv/k", ""},
	} {
		sep := "?"
		if strings.Contains(r.path, "?") {
			sep = "&"
		}
		bad(r.method, r.path+sep+"bogus=1", r.body, "invalid_request")
	}
	// /kv/ knows its parameters per method: a compare on a DELETE, or a
	// consistency on a PUT, is refused, never done unconditionally.
	bad("DELETE", "/kv/k?prev_value=v", "", "invalid_request")
	bad("PUT", "/kv/k?consistency=stale", "w", "invalid_request")
	bad("GET", "/kv/k?prev_value=v", "", "invalid_request")
	bad("PUT", "/kv/k?prev_value=v&prev_value=x", "w", "invalid_request")
	bad("POST", "/leader/transfer?to=1&to=1", "", "invalid_request")

	// Bodies: exactly one object of the documented fields.
	for _, body := range []string{
		`{"id": 9, "peer_addr": "127.0.0.1:3"} x`,
		`{"id": 9, "peer_addr": "127.0.0.1:3"}{"id": 10, "peer_addr": "127.0.0.1:4"}`,
		`{"id": 9, "peer_addr": "127.0.0.1:3", "bogus": 1}`,
		`{"ID": 9, "peer_addr": "127.0.0.1:3"}`,
		`{"id": 9, "id": 10, "peer_addr": "127.0.0.1:3"}`,
		`null`, `[]`, ``, `"x"`,
	} {
		bad("POST", "/members", body, "invalid_member")
	}
	for _, body := range []string{
		`{"failover_after": "41s"} x`, `{"failover_after": "41s"}{"failover_after": "42s"}`,
		`{"Failover_After": "41s"}`, `null`, `{"failover_after": "41s", "failover_after": "42s"}`,
	} {
		bad("PATCH", "/cluster", body, "invalid_setting")
	}
	for _, body := range []string{
		`{"peer_addr": "127.0.0.1:2"} x`, `{"peer_addr": "127.0.0.1:2", "id": 9}`, `{}`, `null`,
		`{"peer_addr": "127.0.0.1:2"}{"peer_addr": "127.0.0.1:3"}`,
	} {
		bad("PUT", "/members/8", body, "invalid_member")
	}
	// A body on a route that takes none would be ignored: refused.
	bad("POST", "/members/8/promote", `{"dry_run": true}`, "invalid_request")
	bad("DELETE", "/members/8", `{"dry_run": true}`, "invalid_request")
	bad("POST", "/leader/transfer?to=1", `{}`, "invalid_request")
	bad("DELETE", "/kv/k", `x`, "invalid_request")

	// Nothing changed.
	if !has8() {
		t.Fatal("member 8 was removed by a request that was a dry run or malformed")
	}
	if after := settings(); after != before {
		t.Fatalf("the settings changed: %s, before %s", after, before)
	}
	if m, _ := a.members(t); len(m.Members) != 2 {
		t.Fatalf("the membership changed: %+v", m)
	}
	if code, v := a.req("GET", "/kv/k", ""); code != 200 || v != "v" {
		t.Fatalf("the key changed: %d %q", code, v)
	}
	// A false dry_run is the real thing.
	if code, out := a.req("DELETE", "/members/8?dry_run=0", ""); code != 200 || has8() {
		t.Fatalf("DELETE /members/8?dry_run=0: %d %s", code, out)
	}
	if code, out := a.req("PATCH", "/cluster?dry_run=false", `{"failover_after": "41s"}`); code != 200 || !strings.Contains(settings(), `"41s"`) {
		t.Fatalf("PATCH /cluster?dry_run=false: %d %s", code, out)
	}
}
