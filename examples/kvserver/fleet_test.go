package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var fleetFull = flag.Bool("fleet.full", false, "TestFleet: 3 voters and 24 standbys (default 3 + 6); or KVSERVER_FLEET_FULL=1")

// fleetMembers is what TestFleet reads of GET /members.
type fleetMembers struct {
	Leader      uint64 `json:"leader"`
	RelaysKnown bool   `json:"relays_known"`
	Members     []struct {
		ID        uint64 `json:"id"`
		Role      string `json:"role"`
		RelayedBy uint64 `json:"relayed_by"`
		Relaying  int    `json:"relaying"`
		Progress  *struct {
			Lag   uint64 `json:"lag"`
			State string `json:"state"`
			Ready bool   `json:"ready"`
		} `json:"progress"`
	} `json:"members"`
}

type fleetStatus struct {
	Role            string `json:"role"`
	Leader          uint64 `json:"leader"`
	CommitIndex     uint64 `json:"commit_index"`
	AppliedIndex    uint64 `json:"applied_index"`
	RelayedOn       uint64 `json:"relayed_on"`
	RelayedStandbys int    `json:"relayed_standbys"`
}

func getJSON(p *proc, path string, v any) bool {
	code, body := p.req("GET", path, "")
	return code == 200 && json.Unmarshal([]byte(body), v) == nil
}

// TestFleet runs what fleet.sh runs, with real processes: 3 voters with
// --relay and a learner cap raised to the fleet, then standbys added as
// an operator does (POST /members, then --join), one at a time, without
// fsync. All standbys join and stay learners, each is fed through a relay
// once caught up (relayed_by in the leader's GET /members), a write through
// a standby lands, linearizable reads from every standby see it, killing
// a relay's process leaves its standbys caught up (the leader feeds them
// directly or through another relay), and kvctl member list fits 120
// columns. 3 + 6 by default; 3 + 24 with -fleet.full or
// KVSERVER_FLEET_FULL=1.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of real processes: not with -short")
	}
	standbys := 6
	if *fleetFull || os.Getenv("KVSERVER_FLEET_FULL") == "1" {
		standbys = 24
	}
	root := t.TempDir()
	// --failover-after is long: a relay that is a voter is killed below,
	// and its seat is not what this test is about (the standbys stay
	// learners).
	common := []string{"--relay", "--failover-after", "10m", "--request-timeout", "10s"}
	voters := startCluster(t, root, 3, append([]string{"--max-learners", fmt.Sprint(standbys)}, common...)...)
	var peers []string
	for _, v := range voters {
		peers = append(peers, v.peer)
	}
	all := slices.Clone(voters)
	var sbs []*proc
	for id := uint64(4); id < uint64(4+standbys); id++ {
		p := newProc(t, root, id)
		body := fmt.Sprintf(`{"id": %d, "peer_addr": %q, "client_addr": %q}`, id, p.peer, p.client)
		eventually(t, 30*time.Second, func() string {
			if code, out := voters[int(id)%3].req("POST", "/members", body); code != 201 {
				return fmt.Sprintf("adding %d: %d %s", id, code, out)
			}
			return ""
		})
		p.start(append([]string{"--join", "--peers", strings.Join(peers, ","), "--unsafe-no-fsync"}, common...)...)
		p.waitHealthy(t) // paced: the next joins once this one serves
		sbs = append(sbs, p)
		all = append(all, p)
	}
	byID := func(id uint64) *proc {
		for _, p := range all {
			if p.id == id {
				return p
			}
		}
		return nil
	}
	// leaderMembers is the leader's own GET /members (the only one with
	// the relays).
	leaderMembers := func(ps []*proc) (fleetMembers, string) {
		var st fleetStatus
		for _, p := range ps {
			if getJSON(p, "/status", &st) && st.Leader != 0 {
				break
			}
		}
		l := byID(st.Leader)
		if l == nil {
			return fleetMembers{}, "no leader known"
		}
		var m fleetMembers
		if !getJSON(l, "/members", &m) {
			return m, fmt.Sprintf("leader %d does not answer GET /members", st.Leader)
		}
		if !m.RelaysKnown {
			return m, fmt.Sprintf("member %d's answer has relays_known false: it no longer leads?", st.Leader)
		}
		return m, ""
	}
	// Every standby joins, stays a learner, and is relayed once caught up.
	// Relays are assigned on the leader's ticks, and an idle group
	// quiesces: a standby that fell back to a direct feed for a moment (a
	// loaded machine) would stay so until the next write. So a write
	// nudges the group now and then while the wait goes on, as a client's
	// would.
	var relayed fleetMembers
	nudged := time.Now()
	eventuallyOr(t, 90*time.Second, func() string {
		if time.Since(nudged) > 250*time.Millisecond {
			all[0].req("PUT", "/kv/nudge", "1")
			nudged = time.Now()
		}
		m, msg := leaderMembers(all)
		if msg != "" {
			return msg
		}
		if len(m.Members) != 3+standbys {
			return fmt.Sprintf("%d members", len(m.Members))
		}
		for _, x := range m.Members {
			if x.ID < 4 {
				if x.Role != "voter" {
					return fmt.Sprintf("member %d is a %s", x.ID, x.Role)
				}
				continue
			}
			if x.Role != "learner" {
				return fmt.Sprintf("standby %d is a %s", x.ID, x.Role)
			}
			if x.Progress == nil || !x.Progress.Ready || x.RelayedBy == 0 {
				return fmt.Sprintf("standby %d not ready and relayed: %+v relayed_by %d", x.ID, x.Progress, x.RelayedBy)
			}
		}
		// The leader's GET /status and /metrics count them too (asked
		// after GET /members: a fallback meanwhile means another round).
		l := byID(m.Leader)
		if l == nil {
			return fmt.Sprintf("GET /members names leader %d", m.Leader)
		}
		var st fleetStatus
		if !getJSON(l, "/status", &st) || st.RelayedStandbys != standbys {
			return fmt.Sprintf("the leader's GET /status: %+v, want relayed_standbys %d", st, standbys)
		}
		if code, out := l.req("GET", "/metrics", ""); code != 200 || !strings.Contains(out, fmt.Sprintf("\nunderstudy_relayed_standbys %d\n", standbys)) {
			return fmt.Sprintf("the leader's /metrics: %d, no understudy_relayed_standbys %d", code, standbys)
		}
		relayed = m
		return ""
	}, func() string { return dumpMembers(all) })
	// Another member's answer carries the leader's relays too (its
	// membership is asked of the leader).
	var other fleetMembers
	if !getJSON(sbs[0], "/members", &other) || !other.RelaysKnown || other.Leader != relayed.Leader {
		t.Fatalf("standby %d's GET /members: relays_known %v, leader %d", sbs[0].id, other.RelaysKnown, other.Leader)
	}
	relayedThere := 0
	for _, x := range other.Members {
		if x.RelayedBy != 0 {
			relayedThere++
		}
	}
	if relayedThere == 0 {
		t.Fatalf("standby %d's GET /members shows no relayed standby: %+v", sbs[0].id, other.Members)
	}

	// A write through a standby lands; linearizable reads from every
	// standby see it.
	if code, out := sbs[len(sbs)-1].req("PUT", "/kv/fleet", "one"); code != 204 {
		t.Fatalf("PUT through standby %d: %d %s", sbs[len(sbs)-1].id, code, out)
	}
	for _, p := range sbs {
		if code, got := p.req("GET", "/kv/fleet", ""); code != 200 || got != "one" {
			t.Fatalf("linearizable GET on standby %d: %d %q", p.id, code, got)
		}
	}

	// Kill the process of the relay that feeds the most standbys.
	var relay uint64
	fed := map[uint64][]uint64{}
	for _, x := range relayed.Members {
		if x.RelayedBy != 0 {
			fed[x.RelayedBy] = append(fed[x.RelayedBy], x.ID)
			if relay == 0 || len(fed[x.RelayedBy]) > len(fed[relay]) {
				relay = x.RelayedBy
			}
		}
	}
	var relayedOn fleetStatus
	if !getJSON(byID(relay), "/status", &relayedOn) || relayedOn.RelayedOn == 0 {
		t.Fatalf("relay %d's GET /status: %+v (relayed_on 0: it handed nothing on?)", relay, relayedOn)
	}
	if code, out := byID(relay).req("GET", "/metrics", ""); code != 200 || !strings.Contains(out, "\nunderstudy_relay_handed_on_total ") ||
		strings.Contains(out, "\nunderstudy_relay_handed_on_total 0\n") {
		t.Fatalf("relay %d's /metrics: %d, understudy_relay_handed_on_total missing or 0", relay, code)
	}
	byID(relay).kill()
	alive := slices.DeleteFunc(slices.Clone(all), func(p *proc) bool { return p.id == relay })
	t.Logf("killed relay %d, which fed %v", relay, fed[relay])
	// Its standbys catch up with writes made after it died: fed directly,
	// or through another relay.
	for i := range 5 {
		eventually(t, 30*time.Second, func() string {
			if code, out := sbs[i%len(sbs)].req("PUT", "/kv/after", fmt.Sprint(i)); code != 204 && sbs[i%len(sbs)].id != relay {
				return fmt.Sprintf("PUT after the relay died: %d %s", code, out)
			}
			return ""
		})
	}
	var commit uint64
	eventually(t, 30*time.Second, func() string {
		m, msg := leaderMembers(alive)
		if msg != "" {
			return msg
		}
		var st fleetStatus
		if !getJSON(byID(m.Leader), "/status", &st) {
			return "the leader's status"
		}
		commit = st.CommitIndex
		return ""
	})
	eventuallyOr(t, 60*time.Second, func() string {
		for _, id := range fed[relay] {
			p := byID(id)
			var st fleetStatus
			if !getJSON(p, "/status", &st) || st.AppliedIndex < commit {
				return fmt.Sprintf("standby %d of the dead relay %d applied %d < %d", id, relay, st.AppliedIndex, commit)
			}
			if code, got := p.req("GET", "/kv/after?consistency=stale", ""); code != 200 || got != "4" {
				return fmt.Sprintf("standby %d: stale GET after = %d %q", id, code, got)
			}
		}
		m, msg := leaderMembers(alive)
		if msg != "" {
			return msg
		}
		for _, x := range m.Members {
			if x.RelayedBy == relay {
				return fmt.Sprintf("standby %d is still relayed by the dead %d", x.ID, relay)
			}
		}
		return ""
	}, func() string { return dumpMembers(alive) })

	// kvctl member list, through a standby: one line per member, within
	// 120 columns, the relays asked of the leader.
	var eps []string
	for _, p := range sbs {
		eps = append(eps, p.client)
	}
	out, err := exec.Command(ctlBin, "--endpoints", strings.Join(eps, ","), "member", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("kvctl member list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	rows := 0
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("a line of %d columns: %s", n, l)
		}
		if l != "" && l[0] >= '0' && l[0] <= '9' {
			rows++
		}
	}
	if rows != 3+standbys || !strings.Contains(lines[0], "RELAY") {
		t.Fatalf("kvctl member list: %d member lines, want %d, and a RELAY column:\n%s", rows, 3+standbys, out)
	}
	t.Logf("kvctl member list:\n%s", out)
}
