package robustness_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/netproxy"
)

// TestProcessesReachedThroughProxies runs kvserver as its users run it
// behind NAT, a load balancer or a container's port mapping: every member
// listens on one address and is reached through another — a proxy for its
// peer port and one for its client port, given as --initial-cluster and
// --advertise-client. Every record (GET /members) keeps the proxied
// addresses; cutting one member's peer proxy makes it unreachable to the
// others (it applies nothing written after the cut) — proof that the
// members dial the recorded address, not the listen address the old code
// published at start — and restoring the proxy lets it catch up.
func TestProcessesReachedThroughProxies(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	buildKVServer(t)
	root := t.TempDir()
	var (
		ps    []*proc
		pprox = map[uint64]*netproxy.Proxy{}
		cprox = map[uint64]*netproxy.Proxy{}
		parts []string
		byID  = map[uint64]*proc{}
		proxy = func(target string) *netproxy.Proxy {
			p, err := netproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			return p
		}
	)
	for id := uint64(1); id <= 3; id++ {
		p := newProc(t, root, id)
		ps = append(ps, p)
		byID[id] = p
		pprox[id], cprox[id] = proxy(p.peer), proxy(p.client)
		parts = append(parts, fmt.Sprintf("%d=%s", id, pprox[id].Addr()))
	}
	for _, p := range ps {
		p.start("--initial-cluster", strings.Join(parts, ","), "--advertise-client", cprox[p.id].Addr())
	}
	type member struct {
		ID         uint64 `json:"id"`
		PeerAddr   string `json:"peer_addr"`
		ClientAddr string `json:"client_addr"`
	}
	var leader uint64
	eventually(t, 30*time.Second, func() string {
		code, body := ps[0].req("GET", "/members", "")
		var m struct {
			Leader  uint64   `json:"leader"`
			Members []member `json:"members"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
			return fmt.Sprintf("GET /members: %d %s", code, body)
		}
		if len(m.Members) != 3 {
			return body
		}
		for _, x := range m.Members {
			if x.PeerAddr != pprox[x.ID].Addr() || x.ClientAddr != cprox[x.ID].Addr() {
				return fmt.Sprintf("member %d recorded as peer %s client %s, want %s and %s (its proxies)",
					x.ID, x.PeerAddr, x.ClientAddr, pprox[x.ID].Addr(), cprox[x.ID].Addr())
			}
		}
		leader = m.Leader
		return ""
	})
	applied := func(p *proc) uint64 {
		code, body := p.req("GET", "/status", "")
		var st struct {
			Applied uint64 `json:"applied_index"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("GET /status on member %d: %d %s", p.id, code, body)
		}
		return st.Applied
	}
	var cut *proc
	for _, p := range ps {
		if p.id != leader {
			cut = p
		}
	}
	pprox[cut.id].Cut()
	if code, body := byID[leader].req("PUT", "/kv/after-cut", "1"); code != 204 {
		t.Fatalf("PUT on the leader: %d %s", code, body)
	}
	idx := applied(byID[leader])
	time.Sleep(time.Second) // tens of election timeouts: time enough to reach it by another route
	if got := applied(cut); got >= idx {
		t.Fatalf("member %d applied index %d >= %d, written after its peer proxy was cut: the others reach it by another address", cut.id, got, idx)
	}
	if err := pprox[cut.id].Restore(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() string {
		if got := applied(cut); got < idx {
			return fmt.Sprintf("member %d applied %d, want %d", cut.id, got, idx)
		}
		return ""
	})
	if code, v := cut.req("GET", "/kv/after-cut", ""); code != 200 || v != "1" {
		t.Fatalf("GET on the restored member: %d %q", code, v)
	}
}
