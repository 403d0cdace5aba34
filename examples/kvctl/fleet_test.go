package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fleet is a 30-member cluster as GET /members answers from its leader
// (member 2): 3 voters and 27 standbys, the standbys 4-27 fed through the
// two followers (12 each), 28 catching up through a snapshot, 29 not
// ready (far behind, its contact from its host), 30 never contacted.
func fleet() members {
	ms := members{Leader: 2, LastIndex: 123_456, RelaysKnown: true}
	addr := func(base, id int) string { return fmt.Sprintf("127.0.0.1:%d", base+id) }
	for id := 30; id >= 1; id-- { // the server's order is not relied on
		m := member{ID: uint64(id), Role: "learner", PeerAddr: addr(17000, id), ClientAddr: addr(18000, id)}
		p := &progress{Match: 123_456, State: "replicate", Ready: true, Contact: "group"}
		switch {
		case id <= 3:
			m.Role = "voter"
			if id != 2 {
				m.Relaying = 12
			}
		case id <= 15:
			m.RelayedBy = 1
		case id <= 27:
			m.RelayedBy = 3
		case id == 28:
			p = &progress{Match: 0, Lag: 123_456, State: "snapshot", NotReadyReason: "snapshot in flight",
				SnapshotSent: 40_000_000, SnapshotTotal: 100_000_000, Contact: "group"}
		case id == 29:
			p = &progress{Match: 119_246, Lag: 4_210, State: "replicate", NotReadyReason: "lag 4,210 entries > 1,000",
				EntriesPerSec: 850, Contact: "host"}
		case id == 30:
			p = &progress{State: "probe", Lag: 123_456, NotReadyReason: "never contacted", Contact: "group"}
		}
		if id == 2 {
			p = nil
		}
		m.Progress = p
		ms.Members = append(ms.Members, m)
	}
	return ms
}

// TestMemberListAtThirtyMembers: at 30 members member list is one line per
// member within 120 columns, the leader first, then the voters, then the
// learners; RELAY says each standby's relay and how many each relay feeds;
// LAG is compact.
func TestMemberListAtThirtyMembers(t *testing.T) {
	var b strings.Builder
	printMembers(&b, fleet())
	out := b.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1+30+1 {
		t.Fatalf("%d lines, want a header, 30 members and the relay summary:\n%s", len(lines), out)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("line %d is %d columns wide:\n%s", i, n, l)
		}
	}
	want := map[int]string{
		0:  "ID  ROLE     PEER ADDR        CLIENT ADDR      LAG   STATE      READY  RELAY     REASON",
		1:  "2*  leader   127.0.0.1:17002  127.0.0.1:18002  -     -          -      -",
		2:  "1   voter    127.0.0.1:17001  127.0.0.1:18001  0     replicate  yes    feeds 12",
		3:  "3   voter    127.0.0.1:17003  127.0.0.1:18003  0     replicate  yes    feeds 12",
		4:  "4   learner  127.0.0.1:17004  127.0.0.1:18004  0     replicate  yes    via 1",
		27: "27  learner  127.0.0.1:17027  127.0.0.1:18027  0     replicate  yes    via 3",
		28: "28  learner  127.0.0.1:17028  127.0.0.1:18028  123k  snapshot   no     -         snapshot in flight",
		29: "29  learner  127.0.0.1:17029  127.0.0.1:18029  4.2k  replicate  no     -         lag 4,210 entries > 1,000 (via host)",
		30: "30  learner  127.0.0.1:17030  127.0.0.1:18030  123k  probe      no     -         never contacted",
		31: "(24 of 27 learners fed through relays)",
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d:\n%q\nwant\n%q", i, lines[i], w)
		}
	}
	if t.Failed() {
		t.Logf("member list:\n%s", out)
	}
	// Without relays the table is as before: no RELAY column, no summary.
	ms := fleet()
	for i := range ms.Members {
		ms.Members[i].RelayedBy, ms.Members[i].Relaying = 0, 0
	}
	b.Reset()
	printMembers(&b, ms)
	if strings.Contains(b.String(), "RELAY") || strings.Contains(b.String(), "relays") {
		t.Fatalf("member list without relays:\n%s", b.String())
	}
}

func TestCompactCount(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1.0k", 4210: "4.2k", 123_456: "123k",
		1_300_000: "1.3M", 45_000_000: "45M", 7_000_000_000: "7G"} {
		if got := compactCount(n); got != want || len(got) > 5 {
			t.Errorf("compactCount(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestWatchPrintsChangesOnly: member watch prints every member once, then
// only the members whose line changed, under the time; a round where
// nothing changed prints nothing.
func TestWatchPrintsChangesOnly(t *testing.T) {
	rounds := []members{fleet(), fleet(), fleet()}
	// Round 2: standby 28's snapshot is installed and 10 falls back to
	// direct sends; round 3: nothing changes.
	for _, r := range rounds[1:] {
		for i := range r.Members {
			switch m := &r.Members[i]; m.ID {
			case 28:
				m.Progress = &progress{Match: 123_456, State: "replicate", NotReadyReason: "stable for 1s of 10s",
					StableFor: "1s", Stabilization: "10s", Contact: "group"}
			case 10:
				m.RelayedBy = 0
			case 1:
				m.Relaying = 11
			}
		}
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(rounds[min(n, len(rounds)-1)])
		n++
	}))
	defer srv.Close()
	var out strings.Builder
	c := &client{endpoints: []string{strings.TrimPrefix(srv.URL, "http://")}, scheme: "http", http: srv.Client(), out: &out, format: "table"}
	if err := c.watch(context.Background(), time.Millisecond, 3); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// The title, the heading, 30 members; then the time and the 3 changed.
	if len(lines) != 2+30+1+3 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	changed := strings.Join(lines[len(lines)-3:], "\n")
	for _, w := range []string{"    1 voter ", "   10 learner", "   28 learner", "stable 1s of 10s", "feeds 11"} {
		if !strings.Contains(changed, w) {
			t.Errorf("the changes do not show %q:\n%s", w, changed)
		}
	}
	if l := lines[len(lines)-2]; !strings.Contains(l, "  10 learner") || strings.Contains(l, "via") {
		t.Errorf("member 10 should be fed directly now: %s", l)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("line %d is %d columns wide: %s", i, n, l)
		}
	}
}

// TestMemberListAsksTheLeaderForRelays: a member that is not the leader
// does not know the relays (relays_known false): member list asks the
// leader's client address again and prints the leader's answer.
func TestMemberListAsksTheLeaderForRelays(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, `{"leader": 1, "relays_known": true, "members": [{"id": 1, "role": "voter"}, {"id": 2, "role": "voter", "relaying": 1,
			"progress": {"state": "replicate", "ready": true}}, {"id": 4, "role": "learner", "relayed_by": 2, "progress": {"state": "replicate", "ready": true}}]}`)
	}))
	defer leader.Close()
	laddr := strings.TrimPrefix(leader.URL, "http://")
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, `{"leader": 1, "relays_known": false, "members": [{"id": 1, "role": "voter", "client_addr": %q}, {"id": 2, "role": "voter",
			"progress": {"state": "replicate", "ready": true}}, {"id": 4, "role": "learner", "progress": {"state": "replicate", "ready": true}}]}`, laddr)
	}))
	defer follower.Close()
	code, out, stderr := run(t, "--endpoints", strings.TrimPrefix(follower.URL, "http://"), "member", "list")
	if code != 0 || !strings.Contains(out, "via 2") || !strings.Contains(out, "feeds 1") {
		t.Fatalf("member list through a follower: exit %d (%s)\n%s", code, stderr, out)
	}
}
