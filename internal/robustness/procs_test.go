package robustness_test

// A small harness for TestProcessFaults: the example server, built once,
// runs as real processes on 127.0.0.1 (ports picked free, never fixed).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
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
	builds sync.Map
)

// built is one binary built for the tests.
type built struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds package pkg (with the race detector) once per test
// binary and returns the binary's path.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &built{})
	b := v.(*built)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "robustness-bin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		if out, err := exec.Command("go", "build", "-race", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// buildKVServer builds examples/kvserver once per test binary.
func buildKVServer(t *testing.T) {
	t.Helper()
	bin = buildBinary(t, "github.com/understudy-raft/understudy/examples/kvserver")
}

// freePort returns a loopback address nobody listens on, below the
// kernel's ephemeral port range: a released port the kernel picked (":0")
// can be taken meanwhile as the source port of a member's connection.
// Ports come from [21000, the ephemeral range) — examples/kvserver's
// tests, which may run at the same time, take theirs from below — and none
// is handed out twice (a port checked free is only bound once its process
// starts).
func freePort(t *testing.T) string {
	t.Helper()
	lo, hi := 32768, 65535
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if n, _ := fmt.Sscan(string(b), &a, &z); n == 2 && a > 22000 {
			lo, hi = a, z
		}
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 21000 + mrand.IntN(max(lo-21000, 1000))
		if (port >= lo && port <= hi) || portsGiven[port] {
			continue
		}
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			addr := ln.Addr().String()
			_ = ln.Close()
			portsGiven[port] = true
			return addr
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// proc is one kvserver process.
type proc struct {
	t        *testing.T
	id       uint64
	client   string
	peer     string
	dir      string
	args     []string
	cmd      *exec.Cmd
	out      *lockedBuffer
	done     chan struct{}
	exitCode int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newProc(t *testing.T, root string, id uint64) *proc {
	return &proc{t: t, id: id, client: freePort(t), peer: freePort(t), dir: filepath.Join(root, fmt.Sprint(id))}
}

// start runs the process with short timers plus args.
func (p *proc) start(args ...string) {
	p.t.Helper()
	full := []string{"--id", fmt.Sprint(p.id), "--data-dir", p.dir, "--listen-client", p.client, "--listen-peer", p.peer,
		"--log-level", "warn", "--tick", "20ms", "--stabilization", "300ms", "--failover-after", "1500ms", "--request-timeout", "3s"}
	p.args = args
	p.out = &lockedBuffer{}
	p.cmd = exec.Command(bin, append(full, args...)...)
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
	p.t.Cleanup(p.kill)
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) url(path string) string { return "http://" + p.client + path }

// req sends a request and returns the status and body (0 and the error
// when it got no answer).
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
	deadline := time.Now().Add(d)
	var msg string
	for time.Now().Before(deadline) {
		if msg = f(); msg == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("condition never held: %s", msg)
}

// startCluster starts n members with --initial-cluster and waits until
// each answers /healthz.
func startCluster(t *testing.T, root string, n int) []*proc {
	t.Helper()
	var ps []*proc
	var parts []string
	for id := uint64(1); id <= uint64(n); id++ {
		p := newProc(t, root, id)
		ps = append(ps, p)
		parts = append(parts, fmt.Sprintf("%d=%s", id, p.peer))
	}
	for _, p := range ps {
		p.start("--initial-cluster", strings.Join(parts, ","))
	}
	for _, p := range ps {
		eventually(t, 20*time.Second, func() string {
			if code, body := p.req("GET", "/healthz", ""); code != 200 {
				return fmt.Sprintf("member %d healthz %d %s; output: %s", p.id, code, body, p.out)
			}
			return ""
		})
	}
	return ps
}

// membersAnswer is GET /members, as far as TestProcessFaults reads it.
type membersAnswer struct {
	Members []struct {
		ID   uint64 `json:"id"`
		Role string `json:"role"`
	} `json:"members"`
}

func (p *proc) members(*testing.T) (membersAnswer, bool) {
	var m membersAnswer
	code, body := p.req("GET", "/members", "")
	return m, code == 200 && json.Unmarshal([]byte(body), &m) == nil
}
