package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWipedDataDirRefused: a member whose data dir was lost (a replaced
// disk), started again with its documented restart command line — the
// same flags, --initial-cluster included — is refused with a one-line
// reason that says what to do, and a non-zero exit, instead of
// bootstrapping an empty voter that would vote under its old ID.
func TestWipedDataDirRefused(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	if code, out := ps[0].req("PUT", "/kv/w", "1"); code != 204 {
		t.Fatalf("PUT: %d %s", code, out)
	}
	// Every member ran and published itself (its client address, and
	// with it its incarnation).
	eventually(t, 20*time.Second, func() string {
		m, ok := ps[0].members(t)
		if !ok {
			return "no membership"
		}
		for _, mm := range m.Members {
			if mm.ClientAddr == "" || mm.Incarnation == "" {
				return fmt.Sprintf("member %d not published yet", mm.ID)
			}
		}
		return ""
	})
	victim := ps[1]
	_ = victim.cmd.Process.Signal(syscall.SIGTERM)
	if code := victim.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, victim.out)
	}
	if err := os.RemoveAll(victim.dir); err != nil {
		t.Fatal(err)
	}
	victim.start(victim.args...) // the restart command line
	code := victim.wait(30 * time.Second)
	out := refusalReason(t, code, victim.out.String())
	for _, want := range []string{"data was lost", "kvctl member remove 2", "new ID", "--join"} {
		if !strings.Contains(out, want) {
			t.Errorf("the reason %q does not say %q", out, want)
		}
	}
	// The cluster serves on.
	if code, v := ps[0].req("GET", "/kv/w", ""); code != 200 || v != "1" {
		t.Fatalf("GET: %d %q", code, v)
	}
}

// TestWipedJoinedDataDirRefused: the same for a member that first joined
// (--join): its restart command line takes the join path with the empty
// data dir, and is refused in one line too — before, it retried for ever
// ("no member answered yet"), its peers refusing it as wiped.
func TestWipedJoinedDataDirRefused(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	p4 := newProc(t, root, 4)
	body := fmt.Sprintf(`{"id": 4, "peer_addr": %q, "client_addr": %q}`, p4.peer, p4.client)
	if code, out := ps[1].req("POST", "/members", body); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	p4.start("--join", "--peers", ps[2].peer)
	p4.waitHealthy(t)
	eventually(t, 20*time.Second, func() string {
		for _, p := range ps {
			m, ok := p.members(t)
			if !ok {
				return "no membership"
			}
			for _, mm := range m.Members {
				// The add carried the client address; the incarnation is
				// what member 4 publishes when it runs, and what proves a
				// later empty data dir wiped (killed before it published,
				// it would be a first join).
				if mm.ID == 4 && (mm.ClientAddr != p4.client || mm.Incarnation == "") {
					return fmt.Sprintf("member 4 not published on %d yet", p.id)
				}
			}
		}
		return ""
	})
	_ = p4.cmd.Process.Signal(syscall.SIGTERM)
	if code := p4.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p4.out)
	}
	if err := os.RemoveAll(p4.dir); err != nil {
		t.Fatal(err)
	}
	p4.start(p4.args...) // the restart command line
	code := p4.wait(30 * time.Second)
	out := refusalReason(t, code, p4.out.String())
	for _, want := range []string{"data was lost", "kvctl member remove 4", "new ID"} {
		if !strings.Contains(out, want) {
			t.Errorf("the reason %q does not say %q", out, want)
		}
	}
}

// refusalReason returns the one-line reason a refused start printed: the
// last line of its output, after which it exited non-zero. What comes
// before it can only be log records (a peer's attachment refused while the
// member checked its data, say).
func refusalReason(t *testing.T, code int, output string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(output), "\n")
	out := lines[len(lines)-1]
	if code == 0 || !strings.HasPrefix(out, "kvserver: ") {
		t.Fatalf("exit %d, output %q: want non-zero and a one-line reason", code, output)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "time=") {
			t.Fatalf("output line %q is neither a log record nor the reason (output %q)", l, output)
		}
	}
	return out
}
