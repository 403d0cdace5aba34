package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMembershipStory is the README's walkthrough: three members, a fourth
// added as a learner that catches up and stays a standby, a voter killed
// and its seat taken by the standby, the lost member back as a standby, then
// removed — and a removed member's data dir refused.
func TestMembershipStory(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	for i := range 50 {
		if code, body := ps[i%3].req("PUT", fmt.Sprintf("/kv/key%d", i), fmt.Sprint(i)); code != 204 {
			t.Fatalf("PUT: %d %s", code, body)
		}
	}
	p4 := newProc(t, root, 4)
	body := fmt.Sprintf(`{"id": 4, "peer_addr": %q, "client_addr": %q}`, p4.peer, p4.client)
	if code, out := ps[1].req("POST", "/members", body); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	p4.start("--join", "--peers", ps[2].peer)
	p4.waitHealthy(t)
	if code, v := p4.req("GET", "/kv/key7", ""); code != 200 || v != "7" {
		t.Fatalf("GET on the joined member: %d %q", code, v)
	}
	eventually(t, 10*time.Second, func() string {
		m, ok := ps[0].members(t)
		if !ok {
			return "no members"
		}
		for _, x := range m.Members {
			if x.ID == 4 && (x.Progress == nil || !x.Progress.Ready || x.Role != "learner" || x.ClientAddr != p4.client) {
				return fmt.Sprintf("member 4: %+v", x)
			}
		}
		return ""
	})
	// A standby: the target is three voters.
	time.Sleep(500 * time.Millisecond)
	if m, _ := ps[0].members(t); roleOf(m, 4) != "learner" {
		t.Fatalf("member 4 is %s, want a standby learner", roleOf(m, 4))
	}

	// Kill a voter that does not lead: the standby takes its seat.
	m, _ := ps[0].members(t)
	var victim *proc
	for _, p := range ps {
		if p.id != m.Leader {
			victim = p
		}
	}
	victim.kill()
	var live *proc
	for _, p := range ps {
		if p != victim {
			live = p
		}
	}
	eventually(t, 20*time.Second, func() string {
		m, ok := live.members(t)
		if !ok || roleOf(m, 4) != "voter" || roleOf(m, victim.id) != "learner" || m.Joint {
			return fmt.Sprintf("after killing %d: %+v", victim.id, m)
		}
		return ""
	})
	if code, out := p4.req("PUT", "/kv/after", "failover"); code != 204 {
		t.Fatalf("PUT after failover: %d %s", code, out)
	}
	// The lost member comes back as a standby and catches up.
	victim.start(victim.args...)
	victim.waitHealthy(t)
	eventually(t, 10*time.Second, func() string {
		if code, v := victim.req("GET", "/kv/after?consistency=stale", ""); code != 200 || v != "failover" {
			return fmt.Sprintf("stale read on the restarted member: %d %q", code, v)
		}
		return ""
	})
	// Removed: it exits non-zero, and its data dir is refused.
	if code, out := live.req("DELETE", fmt.Sprintf("/members/%d", victim.id), ""); code != 200 {
		t.Fatalf("DELETE /members/%d: %d %s", victim.id, code, out)
	}
	if code := victim.wait(20 * time.Second); code == 0 {
		t.Fatalf("a removed member exited 0; output:\n%s", victim.out)
	}
	victim.start(victim.args...)
	if code := victim.wait(20 * time.Second); code == 0 || !strings.Contains(victim.out.String(), "removed") {
		t.Fatalf("restarting a removed member: exit %d, output:\n%s", code, victim.out)
	}
	if lines := strings.Count(strings.TrimSpace(victim.out.String()), "\n"); lines != 0 {
		t.Fatalf("the reason is not one line:\n%s", victim.out)
	}
}

// TestSIGTERMAndRestartKeepsData: SIGTERM exits 0; a restart with the same
// flags resumes from the data dir.
func TestSIGTERMAndRestartKeepsData(t *testing.T) {
	root := t.TempDir()
	p := newProc(t, root, 1)
	p.start()
	p.waitHealthy(t)
	if code, out := p.req("PUT", "/kv/a/b//c", "v1"); code != 204 {
		t.Fatalf("PUT: %d %s", code, out)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.out)
	}
	p.start()
	p.waitHealthy(t)
	if code, v := p.req("GET", "/kv/a/b//c", ""); code != 200 || v != "v1" {
		t.Fatalf("after restart: %d %q", code, v)
	}
}

// TestSIGKILLLeaderUnderWrites: killing the leader while clients write
// loses no acknowledged write.
func TestSIGKILLLeaderUnderWrites(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprint(i)
				p := ps[(w+i)%3]
				if code, _ := p.req("PUT", "/kv/"+k, v); code == 204 {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	m, _ := ps[0].members(t)
	leader := ps[m.Leader-1]
	leader.kill()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	leader.start(leader.args...)
	leader.waitHealthy(t)
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
	for _, p := range ps {
		for k, v := range acked {
			if code, got := p.req("GET", "/kv/"+k, ""); code != 200 || got != v {
				t.Fatalf("member %d lost acknowledged %s=%s: %d %q", p.id, k, v, code, got)
			}
		}
	}
	t.Logf("%d acknowledged writes, all present on every member after killing leader %d", len(acked), leader.id)
}

// TestForceNewCluster: after two of three members are lost for good, the
// survivor started once with --force-new-cluster serves every acknowledged
// write as a one-member cluster, and restarts normally after.
func TestForceNewCluster(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	for i := range 30 {
		if code, _ := ps[i%3].req("PUT", fmt.Sprintf("/kv/k%d", i), fmt.Sprint(i)); code != 204 {
			t.Fatal("PUT")
		}
	}
	s := ps[1]
	// The operator recovers from the most up-to-date survivor: a
	// linearizable read on it returns once it has applied (and so stored)
	// every acknowledged write.
	if code, v := s.req("GET", "/kv/k29", ""); code != 200 || v != "29" {
		t.Fatalf("k29 before the loss: %d %q", code, v)
	}
	for _, p := range ps {
		p.kill()
	}
	normal := slicesClone(s.args)
	s.start(append(slicesClone(normal), "--force-new-cluster")...)
	s.waitHealthy(t)
	for i := range 30 {
		if code, v := s.req("GET", fmt.Sprintf("/kv/k%d", i), ""); code != 200 || v != fmt.Sprint(i) {
			t.Fatalf("k%d after --force-new-cluster: %d %q", i, code, v)
		}
	}
	m, _ := s.members(t)
	if len(m.Members) != 1 || m.Members[0].ID != s.id || m.Leader != s.id {
		t.Fatalf("members after --force-new-cluster: %+v", m)
	}
	if code, _ := s.req("PUT", "/kv/after", "yes"); code != 204 {
		t.Fatal("PUT after --force-new-cluster")
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: %d", code)
	}
	s.start(normal...)
	s.waitHealthy(t)
	if code, v := s.req("GET", "/kv/after", ""); code != 200 || v != "yes" {
		t.Fatalf("after a normal restart: %d %q", code, v)
	}
}

// TestScaleUpAndDown: raising the replicated target voter count with kvctl
// promotes two ready standbys at once; lowering it demotes two voters, who
// stay as standbys — and every member reports the same settings.
func TestScaleUpAndDown(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	for _, id := range []uint64{4, 5} {
		p := newProc(t, root, id)
		if code, out := ps[0].req("POST", "/members", fmt.Sprintf(`{"id": %d, "peer_addr": %q, "client_addr": %q}`, id, p.peer, p.client)); code != 201 {
			t.Fatalf("POST /members: %d %s", code, out)
		}
		p.start("--join", "--peers", ps[0].peer)
		p.waitHealthy(t)
		ps = append(ps, p)
	}
	eps := ps[0].client + "," + ps[1].client
	voters := func(want int) {
		t.Helper()
		eventuallyOr(t, 20*time.Second, func() string {
			m, ok := ps[0].members(t)
			n := 0
			for _, x := range m.Members {
				if x.Role == "voter" {
					n++
				}
			}
			if !ok || n != want || m.Joint {
				return fmt.Sprintf("want %d voters: %+v", want, m)
			}
			return ""
		}, func() string { return dumpMembers(ps) })
	}
	if out, err := kvctl(t, "--endpoints", eps, "cluster", "set", "target-voters", "5"); err != nil || !strings.Contains(out, "target-voters      5") {
		t.Fatalf("cluster set target-voters 5: %v\n%s", err, out)
	}
	voters(5)
	if out, err := kvctl(t, "--endpoints", eps, "cluster", "set", "target-voters", "3"); err != nil {
		t.Fatalf("cluster set target-voters 3: %v\n%s", err, out)
	}
	voters(3)
	// Each member applies the setting in its own time.
	settled := func(field string) {
		t.Helper()
		for _, p := range ps {
			eventually(t, 30*time.Second, func() string {
				out, err := kvctl(t, "--endpoints", p.client, "-w", "json", "cluster", "get")
				if err != nil || !strings.Contains(out, field) {
					return fmt.Sprintf("member %d's settings: %v %s", p.id, err, out)
				}
				return ""
			})
		}
	}
	settled(`"target_voters":3`)
	if out, err := kvctl(t, "--endpoints", eps, "cluster", "set", "target-voters", "4"); err == nil || !strings.Contains(out, "invalid_setting") {
		t.Fatalf("an even target: %v %s", err, out)
	}

	// The policy owns the voter count while auto-promote is on: a manual
	// promotion past the target, or a demotion below it with standbys
	// ready, is refused (412 policy_would_undo, saying what to change),
	// and the dry run says so; with auto-promote off it goes through.
	m, _ := ps[0].members(t)
	var standby, voter uint64
	for _, x := range m.Members {
		switch {
		case x.Role == "learner" && standby == 0:
			standby = x.ID
		case x.Role == "voter" && x.ID != m.Leader && voter == 0:
			voter = x.ID
		}
	}
	code, out := ps[0].req("POST", fmt.Sprintf("/members/%d/promote", standby), "")
	if code != 412 || !strings.Contains(out, `"policy_would_undo"`) || !strings.Contains(out, "raise target-voters to 5") {
		t.Fatalf("promoting standby %d past the target: %d %s", standby, code, out)
	}
	if code, out := ps[0].req("POST", fmt.Sprintf("/members/%d/demote", voter), ""); code != 412 || !strings.Contains(out, `"policy_would_undo"`) {
		t.Fatalf("demoting voter %d below the target: %d %s", voter, code, out)
	}
	out, err := kvctl(t, "--endpoints", eps, "member", "promote", fmt.Sprint(standby), "--dry-run")
	if exitCode(err) != 3 || !strings.Contains(out, "refused: policy_would_undo") {
		t.Fatalf("member promote --dry-run: %v\n%s", err, out)
	}
	voters(3)
	if out, err := kvctl(t, "--endpoints", eps, "cluster", "set", "auto-promote", "false"); err != nil {
		t.Fatalf("cluster set auto-promote false: %v\n%s", err, out)
	}
	// The leader checks the promotion against the settings it applied,
	// which the member that answered may have applied first.
	settled(`"auto_promote":false`)
	if out, err := kvctl(t, "--endpoints", eps, "member", "promote", fmt.Sprint(standby)); err != nil {
		t.Fatalf("promoting %d with auto-promote off: %v\n%s", standby, err, out)
	}
	voters(4)
}

// TestNoLeader: a member that knows no leader (one of a two-member initial
// cluster, alone) answers 503 unavailable with leader 0 to the routes that
// need one — GET /members and a linearizable read once --request-timeout
// has passed, GET /healthz at once — and its /metrics scrape does not wait
// for a leader (the member families are left out). Once the other member
// starts, both export every member's row.
func TestNoLeader(t *testing.T) {
	root := t.TempDir()
	p1, p2 := newProc(t, root, 1), newProc(t, root, 2)
	ic := fmt.Sprintf("1=%s,2=%s", p1.peer, p2.peer)
	p1.start("--initial-cluster", ic, "--request-timeout", "1s")
	eventually(t, 20*time.Second, func() string {
		if code, out := p1.req("GET", "/status", ""); code != 200 {
			return fmt.Sprintf("GET /status: %d %s; output: %s", code, out, p1.out)
		}
		return ""
	})
	for _, path := range []string{"/members", "/healthz", "/kv/x"} {
		t0 := time.Now()
		code, out := p1.req("GET", path, "")
		took := time.Since(t0)
		var e struct {
			Code   string  `json:"code"`
			Error  string  `json:"error"`
			Leader *uint64 `json:"leader"`
		}
		if code != 503 || json.Unmarshal([]byte(out), &e) != nil || e.Code != "unavailable" || e.Error == "" || e.Leader == nil || *e.Leader != 0 {
			t.Fatalf("GET %s without a leader: %d %s, want 503 unavailable with leader 0", path, code, out)
		}
		if took > 5*time.Second {
			t.Fatalf("GET %s without a leader took %v (--request-timeout 1s)", path, took)
		}
	}
	// Malformed input is refused as such, leader or not; a valid change
	// waits for a leader like any other.
	if code, out := p1.req("PATCH", "/cluster", `{"target_voters": 4}`); code != 400 || !strings.Contains(out, `"invalid_setting"`) {
		t.Fatalf("PATCH /cluster with an even target, no leader: %d %s, want 400 invalid_setting", code, out)
	}
	if code, out := p1.req("PATCH", "/cluster?dry_run=true", `{"target_voters": 4}`); code != 200 || !strings.Contains(out, `"invalid_setting"`) {
		t.Fatalf("PATCH /cluster?dry_run=true with an even target, no leader: %d %s, want 200 with the refusal", code, out)
	}
	if code, out := p1.req("PATCH", "/cluster", `{"target_voters": 5}`); code != 503 || !strings.Contains(out, `"unavailable"`) {
		t.Fatalf("PATCH /cluster, no leader: %d %s, want 503 unavailable", code, out)
	}
	// A scrape never waits on a leader nobody knows (bounded far above
	// the 500 ms a scrape may wait for the leader's view).
	t0 := time.Now()
	code, body := p1.req("GET", "/metrics", "")
	if took := time.Since(t0); code != 200 || took > 5*time.Second || !strings.Contains(body, "understudy_server_has_leader 0") ||
		strings.Contains(body, "understudy_member_lag_entries{") {
		t.Fatalf("GET /metrics without a leader: %d in %v:\n%s", code, took, body)
	}

	p2.start("--initial-cluster", ic)
	p1.waitHealthy(t)
	p2.waitHealthy(t)
	for _, p := range []*proc{p1, p2} {
		scrapeMetrics(t, p, "understudy_server_has_leader 1", `understudy_member_lag_entries{member="1"}`,
			`understudy_member_lag_entries{member="2"}`, `understudy_member_ready{member="1",`,
			`understudy_member_ready{member="2",`) // (the policy may make one a learner: an odd voter count)
	}
}

// TestSnapshotRate: while the leader streams a snapshot to a new learner
// (paced by --snapshot-bytes-per-sec), GET /members shows how fast it
// streams and kvctl member watch prints it in snapshot MB/s.
func TestSnapshotRate(t *testing.T) {
	root := t.TempDir()
	p1 := newProc(t, root, 1)
	p1.start("--snapshot-count", "20", "--snapshot-bytes-per-sec", "1000000")
	p1.waitHealthy(t)
	// About 6 MB of state: the stream lasts about 5 s at 1 MB/s.
	letters := []byte("abcdefghijklmnopqrstuvwxyz")
	for i := range 60 {
		v := make([]byte, 100_000)
		for j := range v {
			v[j] = letters[rand.IntN(len(letters))]
		}
		if code, out := p1.req("PUT", fmt.Sprintf("/kv/big%d", i), string(v)); code != 204 {
			t.Fatalf("PUT: %d %s", code, out)
		}
	}
	p2 := newProc(t, root, 2)
	if code, out := p1.req("POST", "/members", fmt.Sprintf(`{"id": 2, "peer_addr": %q, "client_addr": %q}`, p2.peer, p2.client)); code != 201 {
		t.Fatalf("POST /members: %d %s", code, out)
	}
	p2.start("--join", "--peers", p1.peer)
	var seen string
	eventually(t, 30*time.Second, func() string {
		code, out := p1.req("GET", "/members", "")
		var m struct {
			Members []struct {
				ID       uint64 `json:"id"`
				Progress *struct {
					SnapshotTotal int64   `json:"snapshot_total"`
					SnapshotRate  float64 `json:"snapshot_bytes_per_sec"`
				} `json:"progress"`
			} `json:"members"`
		}
		if code != 200 || json.Unmarshal([]byte(out), &m) != nil {
			return fmt.Sprintf("GET /members: %d %s", code, out)
		}
		for _, x := range m.Members {
			if x.ID == 2 && x.Progress != nil && x.Progress.SnapshotRate > 0 {
				if x.Progress.SnapshotTotal < 5_000_000 || x.Progress.SnapshotRate > 3_000_000 {
					t.Fatalf("snapshot of %d bytes at %.0f bytes/s (paced at 1 MB/s)", x.Progress.SnapshotTotal, x.Progress.SnapshotRate)
				}
				return ""
			}
		}
		seen = out
		return "no snapshot rate for member 2: " + seen
	})
	eventually(t, 10*time.Second, func() string {
		out, err := kvctl(t, "--endpoints", p1.client, "member", "watch", "--count", "1")
		if err != nil || !strings.Contains(out, "snapshot MB/s") {
			return fmt.Sprintf("member watch: %v\n%s", err, out)
		}
		return ""
	})
	p2.waitHealthy(t)
}
