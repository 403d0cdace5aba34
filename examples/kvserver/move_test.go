package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMoveMember: PUT /members/{id} changes a member's recorded peer and
// client addresses (either may be omitted and keeps its value), refuses an
// address nobody can dial or a malformed one (400 invalid_member), an
// unknown member (404 unknown_member) and an address another member has
// (409 member_exists); ?dry_run changes nothing; kvctl member update
// does the same.
func TestMoveMember(t *testing.T) {
	root := t.TempDir()
	a := startCluster(t, root, 1, "--auto-promote=false")[0]
	if code, out := a.req("POST", "/members", `{"id": 8, "peer_addr": "127.0.0.1:1", "client_addr": "127.0.0.1:2"}`); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	addrs := func() (peer, client string) {
		t.Helper()
		m, ok := a.members(t)
		if !ok {
			t.Fatal("GET /members")
		}
		for _, x := range m.Members {
			if x.ID == 8 {
				return x.PeerAddr, x.ClientAddr
			}
		}
		t.Fatalf("no member 8: %+v", m)
		return "", ""
	}
	want := func(peer, client string) {
		t.Helper()
		if p, c := addrs(); p != peer || c != client {
			t.Fatalf("member 8 at %s (client %s), want %s (client %s)", p, c, peer, client)
		}
	}
	code, out := a.req("PUT", "/members/8", `{"peer_addr": "127.0.0.1:3"}`)
	var ch struct {
		ID    uint64 `json:"id"`
		Index uint64 `json:"index"`
		Plan  string `json:"plan"`
	}
	if code != 200 || json.Unmarshal([]byte(out), &ch) != nil || ch.ID != 8 || ch.Index == 0 || !strings.Contains(ch.Plan, "127.0.0.1:3") {
		t.Fatalf("PUT /members/8 peer_addr: %d %s", code, out)
	}
	want("127.0.0.1:3", "127.0.0.1:2")
	if code, out := a.req("PUT", "/members/8", `{"client_addr": "127.0.0.1:4"}`); code != 200 {
		t.Fatalf("PUT /members/8 client_addr: %d %s", code, out)
	}
	want("127.0.0.1:3", "127.0.0.1:4")

	check := func(path, body string, wantStatus int, wantCode string) {
		t.Helper()
		code, out := a.req("PUT", path, body)
		var e struct {
			Code string `json:"code"`
		}
		if code != wantStatus || json.Unmarshal([]byte(out), &e) != nil || e.Code != wantCode {
			t.Errorf("PUT %s %s: %d %s, want %d %s", path, body, code, out, wantStatus, wantCode)
		}
	}
	for _, bad := range []string{"0.0.0.0:7001", "[::]:7001", ":7001", "nope", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", "h/x:1"} {
		check("/members/8", fmt.Sprintf(`{"peer_addr": %q}`, bad), 400, "invalid_member")
		check("/members/8", fmt.Sprintf(`{"client_addr": %q}`, bad), 400, "invalid_member")
	}
	check("/members/99", `{"peer_addr": "127.0.0.1:5"}`, 404, "unknown_member")
	check("/members/0", `{"peer_addr": "127.0.0.1:5"}`, 400, "invalid_member")
	check("/members/8", fmt.Sprintf(`{"peer_addr": %q}`, a.peer), 409, "member_exists")
	// Dry runs: the plan or the refusals, nothing changed.
	if code, out := a.req("PUT", "/members/8?dry_run=true", `{"peer_addr": "127.0.0.1:5"}`); code != 200 || !strings.Contains(out, `"refusals":[]`) || !strings.Contains(out, "127.0.0.1:5") {
		t.Fatalf("PUT /members/8?dry_run=true: %d %s", code, out)
	}
	if code, out := a.req("PUT", "/members/99?dry_run=true", `{"peer_addr": "127.0.0.1:5"}`); code != 200 || !strings.Contains(out, `"code":"unknown_member"`) {
		t.Fatalf("PUT /members/99?dry_run=true: %d %s", code, out)
	}
	want("127.0.0.1:3", "127.0.0.1:4")

	// kvctl.
	out, err := kvctl(t, "--endpoints", a.client, "member", "update", "8", "--peer-addr", "127.0.0.1:6", "--client-addr", "127.0.0.1:7")
	if err != nil || !strings.Contains(out, "member 8 updated at index") {
		t.Fatalf("kvctl member update: %v %s", err, out)
	}
	want("127.0.0.1:6", "127.0.0.1:7")
	out, err = kvctl(t, "--endpoints", a.client, "member", "update", "8", "--peer-addr", "0.0.0.0:7008")
	if exitCode(err) != 1 || !strings.Contains(out, "invalid_member") {
		t.Fatalf("kvctl member update to 0.0.0.0: %v %s", err, out)
	}
	want("127.0.0.1:6", "127.0.0.1:7")
}

// TestNotReadyReasons: a learner the leader never heard from says "never
// contacted" (not "no contact for 1ms"), and one that refuses the leader
// as another cluster's says "refused: cluster mismatch" (not "no contact
// for 1.9s"), in GET /members and kvctl member list.
func TestNotReadyReasons(t *testing.T) {
	root := t.TempDir()
	a := startCluster(t, root, 1, "--auto-promote=false")[0]
	other := newProc(t, filepath.Join(root, "other"), 1) // a cluster of its own
	other.start()
	other.waitHealthy(t)
	for _, body := range []string{`{"id": 8, "peer_addr": "127.0.0.1:1"}`, fmt.Sprintf(`{"id": 9, "peer_addr": %q}`, other.peer)} {
		if code, out := a.req("POST", "/members", body); code != 201 {
			t.Fatalf("POST /members %s: %d %s", body, code, out)
		}
	}
	eventually(t, 10*time.Second, func() string {
		m, ok := a.members(t)
		if !ok {
			return "no members"
		}
		want := map[uint64]string{8: "never contacted", 9: "refused: cluster mismatch"}
		for _, x := range m.Members {
			if w, ok := want[x.ID]; ok && (x.Progress == nil || x.Progress.NotReadyReason != w) {
				return fmt.Sprintf("member %d: %+v, want not_ready_reason %q", x.ID, x.Progress, w)
			}
		}
		return ""
	})
	out, err := kvctl(t, "--endpoints", a.client, "member", "list")
	if err != nil || !strings.Contains(out, "never contacted") || strings.Count(out, "cluster mismatch")+strings.Count(out, "cluster_mismatch") != 1 {
		t.Fatalf("kvctl member list: %v\n%s", err, out)
	}
}
