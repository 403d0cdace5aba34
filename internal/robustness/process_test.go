package robustness_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/robustness"
)

var processSoak = flag.Duration("process-faults", 8*time.Second,
	"how long TestProcessFaults injects faults into the kvserver processes")

// httpEndpoint is one run of a kvserver process as an HTTP client sees it.
type httpEndpoint struct {
	p   *proc
	run int
}

func (e *httpEndpoint) Name() string { return fmt.Sprintf("member %d (run %d)", e.p.id, e.run) }

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// do sends one request; sent reports whether it may have reached the
// server (false: the connection was refused, nothing was sent).
func (e *httpEndpoint) do(ctx context.Context, method, path, body string) (code int, out string, sent bool) {
	r, err := http.NewRequestWithContext(ctx, method, e.p.url(path), strings.NewReader(body))
	if err != nil {
		return 0, err.Error(), false
	}
	resp, err := httpClient.Do(r)
	if err != nil {
		return 0, err.Error(), !errors.Is(err, syscall.ECONNREFUSED)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), true
}

func (e *httpEndpoint) StaleGet(key string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	switch code, v, _ := e.do(ctx, "GET", "/kv/"+url.PathEscape(key)+"?consistency=stale", ""); code {
	case 200:
		return v, true
	case 404:
		return "", true
	}
	return "", false
}

func (e *httpEndpoint) Do(ctx context.Context, _ [2]uint64, in robustness.Input) (robustness.Output, robustness.Result) {
	var out robustness.Output
	path := "/kv/" + url.PathEscape(in.Key)
	var code int
	var sent bool
	switch in.Op {
	case "get":
		var v string
		code, v, _ = e.do(ctx, "GET", path, "")
		switch code {
		case 200:
			out.Value = v
		case 404:
		default:
			return out, robustness.NoEffect
		}
		return out, robustness.Done
	case "put":
		code, _, sent = e.do(ctx, "PUT", path, in.Value)
	case "cas":
		code, _, sent = e.do(ctx, "PUT", path+"?prev_value="+url.QueryEscape(in.Prev), in.Value)
	case "delete":
		code, _, sent = e.do(ctx, "DELETE", path, "")
	}
	switch {
	case code == 204:
		out.OK = true
		return out, robustness.Done
	case code == 412:
		return out, robustness.Done // compare_failed
	case code == 400 || code == 413 || !sent:
		return out, robustness.NoEffect
	default:
		return out, robustness.Unknown // 503 unavailable, a timeout, a process killed mid-request
	}
}

// TestProcessFaults runs examples/kvserver processes (built with -race) on
// 127.0.0.1 under HTTP clients
// (put, get, compare-and-swap, delete, stale reads, on every member) while a
// nemesis kills members with SIGKILL and restarts them from their data
// dirs, freezes them with SIGSTOP (and SIGCONT), and adds and removes
// members over HTTP. The history must be linearizable, stale reads must not
// go backwards on a run of a member, and the cluster must serve a write
// after the faults. -process-faults sets how long the faults last.
func TestProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	buildKVServer(t)
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	seed := time.Now().UnixNano()
	if s := os.Getenv("ROBUSTNESS_SEED"); s != "" {
		_, _ = fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (replay the nemesis's choices with ROBUSTNESS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	h := robustness.NewHistory()

	var (
		mu      sync.Mutex
		up      = map[uint64]*httpEndpoint{} // running, not frozen
		all     = map[uint64]*proc{}
		runs    = map[uint64]int{}
		eps     = map[[2]uint64]*httpEndpoint{} // one per run of a member: stale reads are compared within a run
		nextID  = uint64(4)
		changes int
	)
	ep := func(id uint64) *httpEndpoint { // mu held
		k := [2]uint64{id, uint64(runs[id])}
		if eps[k] == nil {
			eps[k] = &httpEndpoint{p: all[id], run: runs[id]}
		}
		return eps[k]
	}
	// setUp counts p up; a new member starts its first run. (A run ends
	// when its process is killed: the restarted process replays its log
	// and its stale reads are compared among themselves.)
	setUp := func(p *proc) {
		mu.Lock()
		defer mu.Unlock()
		if runs[p.id] == 0 {
			runs[p.id] = 1
		}
		all[p.id] = p
		up[p.id] = ep(p.id)
	}
	for _, p := range ps {
		setUp(p)
	}
	pick := func(rng *rand.Rand) robustness.Endpoint {
		mu.Lock()
		defer mu.Unlock()
		ids := make([]uint64, 0, len(all))
		for id := range all {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			return nil
		}
		id := ids[rng.Intn(len(ids))]
		if e, ok := up[id]; ok {
			return e
		}
		// A frozen member: requests to it hang until the client gives up.
		return ep(id)
	}
	traffic := robustness.Traffic{Clients: 8, Keys: []string{"a", "b", "c", "d"}, CounterKey: "n", Pick: pick}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var tstats robustness.TrafficStats
	var problems []string
	go func() {
		defer close(done)
		tstats, problems = traffic.Run(ctx, seed, h)
	}()

	fatal := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: %s\nfault timeline:\n%s", seed, fmt.Sprintf(format, args...), robustness.FormatTimeline(h.Timeline()))
	}
	// gone forgets a member that exited because it was removed (a removal
	// whose answer was lost — a 503, a member killed mid-request — may
	// still have gone through; the member learns it, and exits, later).
	gone := func(p *proc) {
		mu.Lock()
		delete(up, p.id)
		delete(all, p.id)
		mu.Unlock()
		h.Fault("removed", fmt.Sprintf("member %d exited: it was removed", p.id))
	}
	wasRemoved := func(p *proc) bool {
		return strings.Contains(p.out.String(), "was removed from the cluster")
	}
	// healthy waits until p answers /healthz and reports true, or false if
	// it exited because it was removed; it fails the test with the timeline
	// if it exits otherwise or is not healthy within 20 s.
	healthy := func(p *proc) bool {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if code, _ := p.req("GET", "/healthz", ""); code == 200 {
				return true
			}
			select {
			case <-p.done:
				if wasRemoved(p) {
					return false
				}
				fatal("member %d exited (%d): %s", p.id, p.exitCode, p.out)
			default:
			}
			if time.Now().After(deadline) {
				fatal("member %d not healthy within 20s: %s", p.id, p.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var (
		killed   *proc
		killedAt time.Time
	)
	restart := func() {
		if killed == nil {
			return
		}
		killed.start(killed.args...)
		if healthy(killed) {
			h.Fault("restart", fmt.Sprintf("restart %d", killed.id))
			setUp(killed)
		} else {
			gone(killed)
		}
		killed = nil
	}
	randomUp := func() *proc {
		mu.Lock()
		defer mu.Unlock()
		var c []*proc
		for _, e := range up {
			c = append(c, e.p)
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.Intn(len(c))]
	}
	deadline := time.Now().Add(*processSoak)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(200+rng.Intn(500)) * time.Millisecond) // the fault schedule
		if killed != nil && time.Since(killedAt) > time.Second {
			restart()
			continue
		}
		mu.Lock()
		var exited []*proc
		for _, e := range up {
			select {
			case <-e.p.done:
				exited = append(exited, e.p)
			default:
			}
		}
		mu.Unlock()
		for _, p := range exited {
			if !wasRemoved(p) {
				fatal("member %d exited (%d): %s", p.id, p.exitCode, p.out)
			}
			gone(p)
		}
		p := randomUp()
		if p == nil {
			continue
		}
		switch k := rng.Intn(10); {
		case k < 3:
			if killed != nil {
				restart()
				continue
			}
			mu.Lock()
			delete(up, p.id)
			runs[p.id]++
			mu.Unlock()
			p.kill()
			killed, killedAt = p, time.Now()
			h.Fault("sigkill", fmt.Sprintf("SIGKILL %d", p.id))
		case k < 6:
			d := time.Duration(100+rng.Intn(900)) * time.Millisecond
			mu.Lock()
			delete(up, p.id)
			mu.Unlock()
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			h.Fault("sigstop", fmt.Sprintf("SIGSTOP %d for %s", p.id, d))
			time.Sleep(d)
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			mu.Lock()
			up[p.id] = ep(p.id)
			mu.Unlock()
		case k < 8:
			// A new member joins over HTTP, through any member.
			n := newProc(t, root, nextID)
			body := fmt.Sprintf(`{"id": %d, "peer_addr": %q, "client_addr": %q}`, n.id, n.peer, n.client)
			code, out := p.req("POST", "/members", body)
			if code != 201 {
				h.Fault("add", fmt.Sprintf("add %d refused: %d %s", n.id, code, strings.TrimSpace(out)))
				continue
			}
			nextID++
			n.start("--join", "--peers", p.peer)
			if !healthy(n) {
				gone(n)
				continue
			}
			setUp(n)
			changes++
			h.Fault("add", fmt.Sprintf("add %d (joined through %d)", n.id, p.id))
		default:
			// Remove a learner over HTTP (never one that is down).
			m, ok := p.members(t)
			if !ok {
				continue
			}
			var victim uint64
			for _, x := range m.Members {
				if x.Role == "learner" && (killed == nil || x.ID != killed.id) {
					victim = x.ID
				}
			}
			if victim == 0 {
				continue
			}
			code, out := p.req("DELETE", fmt.Sprintf("/members/%d", victim), "")
			if code != 200 {
				what := "refused"
				if code == 503 {
					what = "unanswered, the outcome unknown" // it may still go through: gone, below
				}
				h.Fault("remove", fmt.Sprintf("remove %d %s: %d %s", victim, what, code, strings.TrimSpace(out)))
				continue
			}
			mu.Lock()
			v := all[victim]
			delete(up, victim)
			delete(all, victim)
			mu.Unlock()
			if v != nil {
				select { // a removed member learns it (from the log, or its peers' refusals) and exits
				case <-v.done:
				case <-time.After(15 * time.Second):
					fatal("member %d still runs 15s after its removal: %s", victim, v.out)
				}
			}
			changes++
			h.Fault("remove", fmt.Sprintf("remove learner %d", victim))
		}
	}
	restart()
	h.Fault("heal", "faults end")
	// Recovery: a write through every member.
	mu.Lock()
	final := make([]*httpEndpoint, 0, len(up))
	for _, e := range up {
		final = append(final, e)
	}
	mu.Unlock()
	// A member whose removal was answered with an error (a 503: the
	// outcome unknown) may have been removed all the same, and learns it,
	// and exits, only now: it is gone, not failed.
	removedLate := map[uint64]bool{}
	for _, e := range final {
		eventually(t, 30*time.Second, func() string {
			select {
			case <-e.p.done:
				if wasRemoved(e.p) {
					removedLate[e.p.id] = true
					gone(e.p)
					return ""
				}
			default:
			}
			rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			in := robustness.Input{Op: "put", Key: "z", Value: fmt.Sprintf("after-%d", e.p.id)}
			call := time.Now()
			out, res := e.Do(rctx, [2]uint64{}, in)
			switch res {
			case robustness.Done:
				h.Op(1000, in, out, call, time.Now())
				return ""
			case robustness.Unknown:
				out.Unknown = true
				h.Op(1000, in, out, call, time.Now())
			}
			// What the member says of itself, for the failure's message.
			_, st := e.p.req("GET", "/status", "")
			_, ms := e.p.req("GET", "/members", "")
			log := e.p.out.String()
			if len(log) > 4000 {
				log = "…" + log[len(log)-4000:]
			}
			return fmt.Sprintf("a write through member %d after the faults failed (%v)\nstatus: %s\nmembers: %s\nlog tail:\n%s\nfault timeline:\n%s",
				e.p.id, res, st, ms, log, robustness.FormatTimeline(h.Timeline()))
		})
	}
	stop()
	<-done
	for _, e := range final {
		if removedLate[e.p.id] {
			continue
		}
		for _, k := range append(traffic.Keys, "n", "z") {
			call := time.Now()
			out, res := e.Do(context.Background(), [2]uint64{}, robustness.Input{Op: "get", Key: k})
			if res != robustness.Done {
				fatal("final read of %q on member %d failed", k, e.p.id)
			}
			h.Op(2000+int(e.p.id), robustness.Input{Op: "get", Key: k}, out, call, time.Now())
		}
	}
	timeline := robustness.FormatTimeline(h.Timeline())
	if len(problems) > 0 {
		t.Fatalf("stale reads:\n  %s\nfault timeline:\n%s", strings.Join(problems, "\n  "), timeline)
	}
	if _, err := h.Check(fmt.Sprintf("understudy-kvserver-seed%d", seed), os.TempDir(), 60*time.Second); err != nil {
		t.Fatalf("seed %d: %v\nfault timeline:\n%s", seed, err, timeline)
	}
	if tstats.OK == 0 {
		t.Fatal("no operation succeeded")
	}
	t.Logf("%d ops checked (%d ok, %d unknown outcome, %d without effect, %d stale reads); %d faults, %d membership changes\nfault timeline:\n%s",
		h.Len(), tstats.OK, tstats.Unknown, tstats.NoEffect, tstats.Stale, len(h.Timeline()), changes, timeline)
}
