package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdvertiseFlags: what a member records and others dial is never a
// listen-everywhere address, and the refusal names the flag to set; by
// default a member advertises its --initial-cluster entry, not where it
// listens.
func TestAdvertiseFlags(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--data-dir", dir}
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"--listen-peer", "0.0.0.0:7001"}, "--advertise-peer"},
		{[]string{"--listen-peer", "[::]:7001"}, "--advertise-peer"},
		{[]string{"--listen-client", "0.0.0.0:8001"}, "--advertise-client"},
		{[]string{"--advertise-peer", "0.0.0.0:7001"}, "unspecified"},
		{[]string{"--advertise-client", "[::]:8001"}, "unspecified"},
		{[]string{"--advertise-peer", "10.0.0.1"}, "--advertise-peer"},
		{[]string{"--initial-cluster", "1=0.0.0.0:7001"}, "unspecified"},
		{[]string{"--join", "--peers", "127.0.0.1:7002", "--join-timeout", "-1s"}, "--join-timeout"},
		{[]string{"--max-learners", "0"}, "--max-learners"}, // the replicated setting refuses 0
	}
	for _, c := range refused {
		_, err := parseFlags(append(base, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a refusal naming %s", c.args, err, c.want)
		}
		if code := mainExit(append(base, c.args...)); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
	}
	accepted := []struct {
		args                []string
		peer, advPeer, advC string
	}{
		// Listening everywhere, recorded as the cluster knows it.
		{[]string{"--listen-peer", "0.0.0.0:7001", "--advertise-peer", "10.0.0.1:7001", "--listen-client", "0.0.0.0:8001", "--advertise-client", "10.0.0.1:8001"},
			"10.0.0.1:7001", "10.0.0.1:7001", "10.0.0.1:8001"},
		{[]string{"--listen-peer", "0.0.0.0:7001", "--initial-cluster", "1=10.0.0.1:7001,2=10.0.0.2:7001"}, "10.0.0.1:7001", "", "127.0.0.1:8001"},
		// A joiner advertises the address it was added with (the library's
		// default): nothing to check here.
		{[]string{"--listen-peer", "0.0.0.0:7001", "--join", "--peers", "10.0.0.2:7001"}, "", "", "127.0.0.1:8001"},
		{nil, "127.0.0.1:7001", "", "127.0.0.1:8001"},
	}
	for _, c := range accepted {
		o, err := parseFlags(append(base, c.args...))
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		var self string
		for _, m := range o.initialCluster {
			if m.ID == o.id {
				self = m.PeerAddr
			}
		}
		if self != c.peer || o.advPeer != c.advPeer || o.advClient != c.advC {
			t.Errorf("%v: initial record %q, --advertise-peer %q, client %q; want %q, %q, %q", c.args, self, o.advPeer, o.advClient, c.peer, c.advPeer, c.advC)
		}
	}
}

// TestJoinFailsLoudly: a member started with --join that the cluster does
// not list exits 1 with a one-line reason that says to add it first, once
// the grace for an add still on its way is over (before, it kept running
// silently); one joining through an address where nobody answers logs what
// it waits for and through which address, and gives up after
// --join-timeout (before, it waited for ever).
func TestJoinFailsLoudly(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 1)

	p2 := newProc(t, root, 2)
	p2.start("--join", "--peers", ps[0].peer, "--log-level", "info")
	if code := p2.wait(30 * time.Second); code != 1 {
		t.Fatalf("a joiner the cluster does not list: exit %d, want 1; output:\n%s", code, p2.out)
	}
	last := lastLine(p2.out.String())
	if !strings.Contains(last, "add it first") || !strings.Contains(last, "member 2") {
		t.Fatalf("last line %q, want the reason and what to do", last)
	}

	p3 := newProc(t, root, 3)
	nobody := freePort(t)
	p3.start("--join", "--peers", nobody, "--join-timeout", "7s", "--log-level", "info")
	if code := p3.wait(40 * time.Second); code != 1 {
		t.Fatalf("a joiner nobody answers: exit %d, want 1; output:\n%s", code, p3.out)
	}
	out := p3.out.String()
	if !strings.Contains(out, "still waiting to join") || !strings.Contains(out, nobody) {
		t.Fatalf("no progress line naming %s while waiting; output:\n%s", nobody, out)
	}
	if last := lastLine(out); !strings.Contains(last, nobody) || !strings.Contains(last, "--join-timeout") {
		t.Fatalf("last line %q, want the address and the timeout", last)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestForgottenJoinIsLoud: a member started without --join by mistake
// says at start that it bootstrapped a brand-new cluster and how to join
// one instead; started again with --join, its data dir of that other
// cluster is refused with what to do (before: an identity mismatch that
// did not say).
func TestForgottenJoinIsLoud(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 1)
	p2 := newProc(t, root, 2)
	p2.start("--log-level", "info") // forgot --join --peers
	p2.waitHealthy(t)
	if out := p2.out.String(); !strings.Contains(out, "bootstrapped a brand-new one-member cluster") || !strings.Contains(out, "--join") {
		t.Fatalf("no start line saying a new cluster was bootstrapped; output:\n%s", out)
	}
	p2.kill()
	body := fmt.Sprintf(`{"id": 2, "peer_addr": %q}`, p2.peer)
	if code, out := ps[0].req("POST", "/members", body); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	p2.start("--join", "--peers", ps[0].peer)
	if code := p2.wait(30 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, p2.out)
	}
	if last := lastLine(p2.out.String()); !strings.Contains(last, "delete "+p2.dir) || !strings.Contains(last, "another cluster") {
		t.Fatalf("last line %q, want what to do", last)
	}
}
