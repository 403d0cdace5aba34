package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one member: its flags, and the process that runs it.
type proc struct {
	flags memberFlags
	// proc runs the member; with -standby-procs the standbys share fewer
	// processes than there are standbys, and a process's members start,
	// stop and die together.
	proc *process
}

// process is one member process, running one member or (standbys with
// -standby-procs) several.
type process struct {
	members []*proc
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	// ended: the process exited, with exitErr; ours: the driver killed or
	// stopped it (not a death).
	ended   bool
	ours    bool
	exitErr error
	logPath string
}

// newProcess makes the process that runs members (at least one).
func newProcess(members ...*proc) *process {
	pr := &process{members: members}
	for _, m := range members {
		m.proc = pr
	}
	return pr
}

// name is how errors name the process: "member 4", or "members 4-9".
func (pr *process) name() string {
	first, last := pr.members[0].flags.id, pr.members[len(pr.members)-1].flags.id
	if first == last {
		return fmt.Sprintf("member %d", first)
	}
	return fmt.Sprintf("members %d-%d", first, last)
}

// args are the process's arguments: each member's flags, the members'
// separated by memberSep.
func (pr *process) args() []string {
	var args []string
	for i, m := range pr.members {
		if i > 0 {
			args = append(args, memberSep)
		}
		args = append(args, m.flags.args()...)
	}
	return args
}

// selfExe is the binary member processes run: this one (under go test,
// the test binary, whose TestMain runs the member role).
var selfExe = func() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

func (p *proc) start(ctx context.Context) error { return p.proc.start(ctx) }
func (p *proc) kill()                           { p.proc.kill() }

// processes returns the distinct processes that run ps, in order.
func processes(ps []*proc) []*process {
	var out []*process
	for _, p := range ps {
		if !slices.Contains(out, p.proc) {
			out = append(out, p.proc)
		}
	}
	return out
}

// start runs the process and waits for its "ready" line (printed once
// every member in it runs).
func (pr *process) start(ctx context.Context) error {
	first := pr.members[0].flags
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(first.dir), fmt.Sprintf("member-%d.log", first.id)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(selfExe(), pr.args()...)
	cmd.Env = append(os.Environ(), memberEnv+"=1")
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	pr.mu.Lock()
	pr.cmd, pr.done, pr.ended, pr.ours, pr.exitErr, pr.logPath = cmd, done, false, false, nil, logf.Name()
	pr.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		pr.mu.Lock()
		if pr.cmd == cmd {
			pr.ended, pr.exitErr = true, err
		}
		pr.mu.Unlock()
		close(done)
	}()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-done
			return fmt.Errorf("%s exited before ready: %w", pr.name(), pr.deathErr())
		}
		return nil
	case <-ctx.Done():
		pr.kill()
		return fmt.Errorf("%s: not ready: %w (see %s)", pr.name(), ctx.Err(), logf.Name())
	}
}

// died returns an error if the process exited without the driver killing
// or stopping it: its exit status and what its log says.
func (pr *process) died() error {
	pr.mu.Lock()
	dead := pr.cmd != nil && pr.ended && !pr.ours
	pr.mu.Unlock()
	if !dead {
		return nil
	}
	return fmt.Errorf("%s died: %w", pr.name(), pr.deathErr())
}

// deathErr describes how the process ended: its exit status and the first
// line of its log that says why (a panic, the member's error), else its
// last line.
func (pr *process) deathErr() error {
	pr.mu.Lock()
	exitErr, path := pr.exitErr, pr.logPath
	pr.mu.Unlock()
	why := ""
	if b, err := os.ReadFile(path); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		why = lines[len(lines)-1]
		for _, l := range lines {
			if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "fleetload member:") {
				why = l
				break
			}
		}
	}
	if len(why) > 300 {
		why = why[:300] + "…"
	}
	return fmt.Errorf("%v: %q (log: %s)", exitErr, why, path)
}

// kill sends SIGKILL and waits for the process to be gone.
func (pr *process) kill() {
	pr.mu.Lock()
	cmd, done := pr.cmd, pr.done
	pr.ours = true
	pr.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop sends SIGTERM, and SIGKILL if the process is not gone within d.
func (pr *process) stop(d time.Duration) {
	pr.mu.Lock()
	cmd, done := pr.cmd, pr.done
	pr.ours = true
	pr.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(d):
		pr.kill()
	}
}

var httpClient = &http.Client{} // bounded by the contexts

// call does method on the member's control endpoint path and decodes the
// JSON answer into out (nil: discard).
func (p *proc) call(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.flags.ctl+path, rd)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("member %d: %s %s: %s", p.flags.id, method, path, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

func (p *proc) status(ctx context.Context) (memberStatus, error) {
	var st memberStatus
	err := p.call(ctx, http.MethodGet, "/status", nil, &st)
	return st, err
}

func (p *proc) add(ctx context.Context, id uint64, addr string) error {
	return p.call(ctx, http.MethodPost, "/add?"+url.Values{"id": {fmt.Sprint(id)}, "addr": {addr}}.Encode(), nil, nil)
}

func (p *proc) samples(ctx context.Context, from, to uint64) ([][2]int64, error) {
	var s [][2]int64
	err := p.call(ctx, http.MethodGet, fmt.Sprintf("/samples?from=%d&to=%d", from, to), nil, &s)
	return s, err
}

// freeAddrs reserves n loopback ports (listen, note, close).
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if sleep(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("%s: %w", what, errors.Join(ctx.Err(), last))
		}
	}
}
