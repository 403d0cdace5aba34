package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer answers like a kvserver and records the requests it got.
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []string // "METHOD /path?query body"
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		f.mu.Unlock()
		switch {
		case r.URL.Path == "/status":
			_ = json.NewEncoder(w).Encode(map[string]any{"id": 1, "role": "leader", "term": 2, "leader": 1, "commit_index": 5, "applied_index": 5, "cluster_id": "c0ffee"})
		case r.Method == http.MethodGet && r.URL.Path == "/members":
			_, _ = io.WriteString(w, `{"leader": 1, "members": [{"id": 1, "peer_addr": "127.0.0.1:7001"}, {"id": 2, "peer_addr": "127.0.0.1:7002"}, {"id": 4, "peer_addr": "127.0.0.1:7004"}]}`)
		case r.URL.Query().Get("dry_run") == "true" && strings.HasPrefix(r.URL.Path, "/members/9"):
			_, _ = io.WriteString(w, `{"plan": "the plan", "refusals": [{"code": "learner_not_ready", "error": "member 9: lag 5 entries > 1"}]}`)
		case r.URL.Query().Get("dry_run") == "true":
			_, _ = io.WriteString(w, `{"plan": "the plan", "refusals": []}`)
		case strings.HasPrefix(r.URL.Path, "/members"):
			_, _ = io.WriteString(w, `{"index": 7, "plan": "the plan"}`)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) addr() string { return strings.TrimPrefix(f.URL, "http://") }

// last returns the last request and forgets them all.
func (f *fakeServer) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return ""
	}
	r := f.reqs[len(f.reqs)-1]
	f.reqs = nil
	return r
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(args, &o, &e)
	return code, o.String(), e.String()
}

// TestArgumentsThatStartWithADash: a negative number is a value, "--" ends
// the flags, and flags still work after the arguments.
func TestArgumentsThatStartWithADash(t *testing.T) {
	f := newFakeServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"put", "x", "-1"}, "PUT /kv/x -1"},
		{[]string{"put", "x", "-1.5"}, "PUT /kv/x -1.5"},
		{[]string{"put", "--", "-k", "-v"}, "PUT /kv/-k -v"},
		{[]string{"put", "k", "--", "--v"}, "PUT /kv/k --v"},
		{[]string{"put", "k", "v", "--prev-value", "-2"}, "PUT /kv/k?prev_value=-2 v"},
		{[]string{"put", "--prev-value", "old", "k", "-3"}, "PUT /kv/k?prev_value=old -3"},
		{[]string{"get", "-7"}, "GET /kv/-7 "},
		{[]string{"get", "--", "-k"}, "GET /kv/-k "},
		{[]string{"del", "-k"}, "DELETE /kv/-k "},
		{[]string{"del", "--", "-k"}, "DELETE /kv/-k "},
	} {
		code, _, stderr := run(t, append([]string{"--endpoints", f.addr()}, c.args...)...)
		if got := f.last(); code != 0 || got != c.want {
			t.Errorf("kvctl %q: exit %d (%s), sent %q, want %q", c.args, code, stderr, got, c.want)
		}
	}
	// A word that starts with "-" without "--" is an unknown flag: refused,
	// with the way out.
	code, _, stderr := run(t, "--endpoints", f.addr(), "put", "k", "-v")
	if code != 2 || !strings.Contains(stderr, `"--"`) || f.last() != "" {
		t.Fatalf("put k -v: exit %d, %q", code, stderr)
	}
}

// TestDryRunAnywhere: --dry-run may come before or after the member ID of
// promote, demote and remove.
func TestDryRunAnywhere(t *testing.T) {
	f := newFakeServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"member", "promote", "--dry-run", "4"}, "POST /members/4/promote?dry_run=true "},
		{[]string{"member", "promote", "4", "--dry-run"}, "POST /members/4/promote?dry_run=true "},
		{[]string{"member", "demote", "-dry-run", "4"}, "POST /members/4/demote?dry_run=true "},
		{[]string{"member", "remove", "--dry-run", "4"}, "DELETE /members/4?dry_run=true "},
		{[]string{"member", "remove", "4"}, "DELETE /members/4 "},
	} {
		code, out, stderr := run(t, append([]string{"--endpoints", f.addr()}, c.args...)...)
		if got := f.last(); code != 0 || got != c.want {
			t.Errorf("kvctl %q: exit %d (%s), sent %q, want %q", c.args, code, stderr, got, c.want)
		}
		if strings.Contains(c.want, "dry_run") != strings.Contains(out, "plan: the plan") {
			t.Errorf("kvctl %q printed %q", c.args, out)
		}
	}
	for _, bad := range [][]string{{"member", "promote"}, {"member", "promote", "4", "5"}, {"member", "remove", "--force", "4"}} {
		if code, _, _ := run(t, append([]string{"--endpoints", f.addr()}, bad...)...); code != 2 || f.last() != "" {
			t.Errorf("kvctl %q: exit %d, want 2 and no request", bad, code)
		}
	}
}

// TestStatusUnreachableColumn: an unreachable endpoint's reason is in a
// last column, so the ROLE column keeps the width of the roles.
func TestStatusUnreachableColumn(t *testing.T) {
	f := newFakeServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	code, out, _ := run(t, "--endpoints", f.addr()+","+dead, "status")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "ERROR") {
		t.Fatalf("status:\n%s", out)
	}
	// "ROLE" and "leader" (the widest role) set the column: two spaces of
	// padding after "leader".
	if role, term := strings.Index(lines[0], "ROLE"), strings.Index(lines[0], "TERM"); term-role != len("leader")+2 {
		t.Fatalf("the ROLE column is %d wide:\n%s", term-role, out)
	}
	if !strings.Contains(lines[2], dead) || !strings.Contains(lines[2], "unreachable: ") ||
		strings.Index(lines[2], "unreachable") < strings.Index(lines[0], "ERROR") {
		t.Fatalf("the unreachable row:\n%s", out)
	}
	// All reachable: no ERROR column.
	if code, out, _ := run(t, "--endpoints", f.addr(), "status"); code != 0 || strings.Contains(out, "ERROR") {
		t.Fatalf("status of a reachable endpoint: exit %d\n%s", code, out)
	}
}

// TestWatchSnapshotRate: member watch prints the snapshot's MB/s while one
// streams, and none otherwise.
func TestWatchSnapshotRate(t *testing.T) {
	ms := members{Leader: 1, LastIndex: 100, Members: []member{
		{ID: 1, Role: "voter", PeerAddr: "127.0.0.1:7001"},
		{ID: 4, Role: "learner", PeerAddr: "127.0.0.1:7004", Progress: &progress{
			Match: 10, Lag: 90, State: "snapshot", SnapshotSent: 3_000_000, SnapshotTotal: 8_000_000,
			SnapshotRate:   2_500_000,
			NotReadyReason: "receiving a snapshot"}},
		{ID: 5, Role: "learner", PeerAddr: "127.0.0.1:7005", Progress: &progress{
			Match: 100, State: "replicate", EntriesPerSec: 40, Ready: true}},
	}}
	var b strings.Builder
	_, lines := watchLines(ms)
	for _, l := range lines {
		fmt.Fprintln(&b, l.text)
	}
	out := b.String()
	if !strings.Contains(out, "snapshot 3.0/8.0 MB at 2.5 snapshot MB/s") {
		t.Fatalf("no snapshot rate:\n%s", out)
	}
	// While the snapshot streams the bar shows its bytes (the match does
	// not move until it is installed).
	if !strings.Contains(out, "]  37.5% of the snapshot  lag 90") {
		t.Fatalf("the bar does not follow the snapshot's bytes:\n%s", out)
	}
	// A ready member's rate is left out: at steady state it would change
	// the line (and so print it) every round.
	if strings.Count(out, "MB/s") != 1 || strings.Contains(out, "40 entries/s") {
		t.Fatalf("watch:\n%s", out)
	}
}

// TestMemberListContact: member list says which members' contact comes
// from their host (a quiesced group), and nothing for the others.
func TestMemberListContact(t *testing.T) {
	ms := members{Leader: 1, Members: []member{
		{ID: 1, Role: "voter", PeerAddr: "127.0.0.1:7001"},
		{ID: 2, Role: "voter", PeerAddr: "127.0.0.1:7002", Progress: &progress{
			Match: 100, State: "replicate", Ready: true, Contact: "host"}},
		{ID: 3, Role: "voter", PeerAddr: "127.0.0.1:7003", Progress: &progress{
			Match: 100, State: "replicate", Ready: true, Contact: "group"}},
	}}
	var b strings.Builder
	printMembers(&b, ms)
	out := b.String()
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || !strings.HasSuffix(lines[2], "yes    (via host)") ||
		!strings.HasSuffix(lines[3], "yes") {
		t.Fatalf("member list:\n%s", out)
	}
}

// TestTableTrimsTrailingPadding: a row whose last cells are empty ends
// where its text ends, with the columns still aligned.
func TestTableTrimsTrailingPadding(t *testing.T) {
	var b strings.Builder
	tw := newTable(&b)
	fmt.Fprintln(tw, "ID\tREADY\tREASON")
	fmt.Fprintln(tw, "1\tyes\t")
	fmt.Fprintln(tw, "22\tno\tno contact")
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "ID  READY  REASON\n1   yes\n22  no     no contact\n"
	if b.String() != want {
		t.Fatalf("table:\n%q\nwant\n%q", b.String(), want)
	}
}

// TestMisplacedFlagsRefused: a flag kvctl does not take where it is given
// (a global flag after the command, an unknown one, an argument too many)
// is a usage error — exit 2, the usage printed, no request sent — never
// silently ignored.
func TestMisplacedFlagsRefused(t *testing.T) {
	f := newFakeServer(t)
	for _, bad := range [][]string{
		{"status", "--endpoints", "127.0.0.1:1"},
		{"status", "extra"},
		{"member", "list", "-w", "json"},
		{"member", "list", "--bogus"},
		{"member", "list", "extra"},
		{"member", "watch", "--count", "1", "extra"},
		{"member", "watch", "--bogus"},
		{"cluster", "get", "-w", "json"},
		{"cluster", "set", "target-voters", "5", "--bogus"},
		{"leader", "transfer", "2", "--dry-run"},
		{"leader", "transfer", "2", "3"},
		{"del", "k", "--prev-value", "x"},
		{"get", "k", "-w", "json"},
		{"member", "update", "4"},
		{"member", "update", "4", "--peer"},
	} {
		code, _, stderr := run(t, append([]string{"--endpoints", f.addr()}, bad...)...)
		if code != 2 || !strings.Contains(stderr, "Error: ") || !strings.Contains(stderr, "Commands:") || f.last() != "" {
			t.Errorf("kvctl %q: exit %d, stderr %q; want 2 with the usage and no request", bad, code, stderr)
		}
	}
	// A global flag after the command says where it goes.
	if _, _, stderr := run(t, "--endpoints", f.addr(), "member", "list", "-w", "json"); !strings.Contains(stderr, "global flag") {
		t.Errorf("member list -w json: %q", stderr)
	}
	// In its place it works.
	if code, _, stderr := run(t, "--endpoints", f.addr(), "-w", "json", "member", "list"); code != 0 || f.last() != "GET /members " {
		t.Errorf("-w json member list: exit %d %s", code, stderr)
	}
}

// TestDryRunRefusedExitCode: a dry run that answers "it would be refused"
// exits 3 (its refusals printed), one that would go through exits 0, in
// both output formats.
func TestDryRunRefusedExitCode(t *testing.T) {
	f := newFakeServer(t)
	for _, format := range []string{"table", "json"} {
		code, out, _ := run(t, "--endpoints", f.addr(), "-w", format, "member", "promote", "9", "--dry-run")
		if code != 3 || !strings.Contains(out, "learner_not_ready") {
			t.Errorf("-w %s: a refused dry run: exit %d %q, want 3 with the refusal", format, code, out)
		}
		if code, out, _ := run(t, "--endpoints", f.addr(), "-w", format, "member", "promote", "4", "--dry-run"); code != 0 {
			t.Errorf("-w %s: a dry run that would go through: exit %d %q", format, code, out)
		}
	}
}

// TestMemberUpdate: member update sends PUT /members/{id} with the
// addresses given, and only those.
func TestMemberUpdate(t *testing.T) {
	f := newFakeServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"member", "update", "4", "--peer-addr", "10.0.0.9:7004"}, `PUT /members/4 {"peer_addr":"10.0.0.9:7004"}`},
		{[]string{"member", "update", "--client-addr", "10.0.0.9:8004", "4"}, `PUT /members/4 {"client_addr":"10.0.0.9:8004"}`},
		{[]string{"member", "update", "4", "--peer-addr", "a:1", "--client-addr", "a:2", "--dry-run"}, `PUT /members/4?dry_run=true {"client_addr":"a:2","peer_addr":"a:1"}`},
	} {
		code, out, stderr := run(t, append([]string{"--endpoints", f.addr()}, c.args...)...)
		if got := f.last(); code != 0 || got != c.want {
			t.Errorf("kvctl %q: exit %d (%s %s), sent %q, want %q", c.args, code, out, stderr, got, c.want)
		}
	}
}

// TestWatchWritesNoEscapesIntoAFile: member watch never clears the screen
// (it prints changes only), so nothing but text reaches a pipe or a file.
func TestWatchWritesNoEscapesIntoAFile(t *testing.T) {
	f := newFakeServer(t)
	var out bytes.Buffer
	c := &client{endpoints: []string{f.addr()}, scheme: "http", http: &http.Client{}, out: &out, format: "table"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one round, then stop
	if err := c.watch(ctx, time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if out.Len() == 0 || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("watch into a buffer: %q", out.String())
	}
}

// TestMemberAddPrintsTheStartCommand: member add prints the command that
// starts the new member, with the other members' peer addresses, as
// etcdctl does; -w json prints the server's answer only.
func TestMemberAddPrintsTheStartCommand(t *testing.T) {
	f := newFakeServer(t)
	code, out, stderr := run(t, "--endpoints", f.addr(), "member", "add", "4", "127.0.0.1:7004", "--client-addr", "127.0.0.1:8004")
	want := "kvserver --id 4 --join --peers 127.0.0.1:7001,127.0.0.1:7002 --listen-peer 127.0.0.1:7004 --listen-client 127.0.0.1:8004"
	if code != 0 || !strings.Contains(out, "member 4 added at index 7") || !strings.Contains(out, want) {
		t.Fatalf("member add: exit %d %s\n%s", code, stderr, out)
	}
	if code, out, _ := run(t, "--endpoints", f.addr(), "-w", "json", "member", "add", "4", "127.0.0.1:7004"); code != 0 || strings.Contains(out, "kvserver --id") {
		t.Fatalf("member add -w json: exit %d\n%s", code, out)
	}
}

// TestStatusShowsTheClusterID: kvctl status has the cluster ID of each
// endpoint (two clusters behind one --endpoints list show as such).
func TestStatusShowsTheClusterID(t *testing.T) {
	f := newFakeServer(t)
	code, out, _ := run(t, "--endpoints", f.addr(), "status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "CLUSTER") || !strings.Contains(lines[1], "c0ffee") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
}

// TestQuietColumn: kvctl status's QUIESCED column says since when a member
// is quiesced, or the cause of its latest wake.
func TestQuietColumn(t *testing.T) {
	since := time.Now().Add(-12 * time.Second).UTC().Format(time.RFC3339Nano)
	for _, c := range []struct {
		quiesced        bool
		since, lastWake string
		want            string
	}{
		{true, since, "", "since 12s"},
		{true, "", "", "yes"},
		{false, "", "proposal", "no (woken: proposal)"},
		{false, "", "", "no"},
	} {
		if got := quietColumn(c.quiesced, c.since, c.lastWake); got != c.want {
			t.Errorf("quietColumn(%t, %q, %q) = %q, want %q", c.quiesced, c.since, c.lastWake, got, c.want)
		}
	}
}
