package main

// Multi-process tests: the kvserver binary, built once in TestMain, runs as
// real processes on 127.0.0.1 (ports picked free, never fixed).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	bin    string // the kvserver binary
	ctlBin string // the kvctl binary
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvserver-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "kvserver")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building kvserver: %v\n%s", err, out)
		os.Exit(1)
	}
	ctlBin = filepath.Join(dir, "kvctl")
	if out, err := exec.Command("go", "build", "-o", ctlBin, "../kvctl").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kvctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback address nobody listens on, below the
// kernel's ephemeral port range: a port the kernel picked (":0") and that
// was released can be taken meanwhile as the source port of one of the
// many connections the members open to each other. Ports come from
// [10000, 21000) — internal/robustness's process test, which may run at
// the same time, takes its own from above — and none is handed out twice
// (a port checked free is only bound once its process starts).
func freePort(t *testing.T) string {
	t.Helper()
	lo, hi := ephemeralRange()
	top := min(21000, lo)
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(max(top-10000, 1000))
		if (port >= lo && port <= hi) || portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		portsGiven[port] = true
		return addr
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralRange is the kernel's range of source ports (Linux), or a
// conservative guess.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 65535
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if n, _ := fmt.Sscan(string(b), &a, &z); n == 2 && a > 10000+1000 {
			lo, hi = a, z
		}
	}
	return lo, hi
}

// proc is one kvserver process.
type proc struct {
	t        *testing.T
	id       uint64
	client   string
	peer     string
	dir      string
	args     []string
	cmd      *exec.Cmd
	out      *syncBuffer
	done     chan struct{}
	exitCode int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fastFlags shorten the timers so that the story takes seconds.
var fastFlags = []string{"--tick", "20ms", "--stabilization", "300ms", "--failover-after", "1500ms", "--request-timeout", "3s"}

// newProc prepares member id (not started).
func newProc(t *testing.T, root string, id uint64) *proc {
	return &proc{t: t, id: id, client: freePort(t), peer: freePort(t), dir: filepath.Join(root, fmt.Sprint(id))}
}

// start runs the process with its base flags plus args.
func (p *proc) start(args ...string) {
	p.t.Helper()
	full := append([]string{"--id", fmt.Sprint(p.id), "--data-dir", p.dir, "--listen-client", p.client, "--listen-peer", p.peer,
		"--log-level", cmp.Or(os.Getenv("KVSERVER_TEST_LOG_LEVEL"), "warn")}, fastFlags...)
	full = append(full, args...)
	p.args = args
	p.out = &syncBuffer{}
	p.cmd = exec.Command(bin, full...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() {
		err := p.cmd.Wait()
		p.exitCode = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.exitCode = ee.ExitCode()
		}
		close(p.done)
	}()
	p.t.Cleanup(func() { p.kill() })
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(d):
		p.t.Fatalf("member %d did not exit; output:\n%s", p.id, p.out)
		return -1
	}
}

func (p *proc) url(path string) string { return "http://" + p.client + path }

// req sends a request and returns the status and body.
func (p *proc) req(method, path, body string) (int, string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, p.url(path), strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually retries f until it returns "" (within d), else fails with
// f's last message.
func eventually(t *testing.T, d time.Duration, f func() string) {
	t.Helper()
	eventuallyOr(t, d, f, nil)
}

// eventuallyOr is eventually that, if the condition never holds, adds
// dump's output (state worth seeing in a CI log) to the failure.
func eventuallyOr(t *testing.T, d time.Duration, f func() string, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var msg string
	for time.Now().Before(deadline) {
		if msg = f(); msg == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dump != nil {
		msg += "\n" + dump()
	}
	t.Fatalf("condition never held: %s", msg)
}

// dumpMembers is every member's raw GET /members (each learner's progress:
// ready, lag, contact, via host) and GET /status, the leader's among them.
func dumpMembers(ps []*proc) string {
	var b strings.Builder
	for _, p := range ps {
		_, mj := p.req("GET", "/members", "")
		_, sj := p.req("GET", "/status", "")
		fmt.Fprintf(&b, "member %d GET /members: %s\nmember %d GET /status: %s\n", p.id, mj, p.id, sj)
	}
	for _, p := range ps {
		out := p.out.String()
		if len(out) > 6000 {
			out = "…" + out[len(out)-6000:]
		}
		fmt.Fprintf(&b, "member %d log (tail):\n%s\n", p.id, out)
	}
	return b.String()
}

func (p *proc) waitHealthy(t *testing.T) {
	t.Helper()
	eventually(t, 20*time.Second, func() string {
		if code, body := p.req("GET", "/healthz", ""); code != 200 {
			return fmt.Sprintf("member %d healthz %d %s; output: %s", p.id, code, body, p.out)
		}
		return ""
	})
}

// cluster starts n members with --initial-cluster.
func startCluster(t *testing.T, root string, n int, extra ...string) []*proc {
	t.Helper()
	var ps []*proc
	var parts []string
	for id := uint64(1); id <= uint64(n); id++ {
		p := newProc(t, root, id)
		ps = append(ps, p)
		parts = append(parts, fmt.Sprintf("%d=%s", id, p.peer))
	}
	for _, p := range ps {
		p.start(append([]string{"--initial-cluster", strings.Join(parts, ",")}, extra...)...)
	}
	for _, p := range ps {
		p.waitHealthy(t)
	}
	return ps
}

type membersResp struct {
	Leader  uint64 `json:"leader"`
	Joint   bool   `json:"joint"`
	Members []struct {
		ID          uint64 `json:"id"`
		PeerAddr    string `json:"peer_addr"`
		ClientAddr  string `json:"client_addr"`
		Role        string `json:"role"`
		Incarnation string `json:"incarnation"`
		Progress    *struct {
			Ready          bool   `json:"ready"`
			NotReadyReason string `json:"not_ready_reason"`
		} `json:"progress"`
	} `json:"members"`
}

func (p *proc) members(t *testing.T) (membersResp, bool) {
	code, body := p.req("GET", "/members", "")
	var m membersResp
	if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
		return m, false
	}
	return m, true
}

func roleOf(m membersResp, id uint64) string {
	for _, x := range m.Members {
		if x.ID == id {
			return x.Role
		}
	}
	return "none"
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
