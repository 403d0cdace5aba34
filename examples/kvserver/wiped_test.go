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
			if mm.ClientAddr == "" {
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
	// The reason is one line, the last; what comes before it can only be
	// log records (a peer's attachment refused while the member checked
	// its bootstrap, say).
	lines := strings.Split(strings.TrimSpace(victim.out.String()), "\n")
	out := lines[len(lines)-1]
	if code == 0 || !strings.HasPrefix(out, "kvserver: ") {
		t.Fatalf("exit %d, output %q: want non-zero and a one-line reason", code, victim.out.String())
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "time=") {
			t.Fatalf("output line %q is neither a log record nor the reason (output %q)", l, victim.out.String())
		}
	}
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
