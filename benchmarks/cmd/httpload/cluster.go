package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// members is the size of every cluster.
const members = 3

// proc is one server process, in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string // its stdout and stderr
	done chan struct{}
	err  error // Wait's, once done is closed
}

func startProc(name, bin string, args []string, logPath string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error if the process is no longer running.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, p.tail())
	default:
		return nil
	}
}

// tail is the end of the process's output, on one line.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | ")
}

// stop ends the process's group: SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL) // anything it left in its group
}

// cpu is the CPU time (user + system) the process has used, from
// /proc/PID/stat; 0 if unreadable.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	// After the command: state is field 3, utime 14, stime 15 (proc(5)).
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// cluster is a running three-member cluster of one system.
type cluster struct {
	system  string
	dir     string
	procs   []*proc
	clients []string // each member's client address, host:port
	leader  string   // what the system said after start-up, for the report
	leaderN int      // the leader's index in clients, -1 if unknown
}

// cpu is the CPU time used by all members so far.
func (c *cluster) cpu() time.Duration {
	var t time.Duration
	for _, p := range c.procs {
		t += p.cpu()
	}
	return t
}

// cpuEach is the CPU time used by each member so far.
func (c *cluster) cpuEach() []time.Duration {
	var ts []time.Duration
	for _, p := range c.procs {
		ts = append(ts, p.cpu())
	}
	return ts
}

func (c *cluster) check() error {
	for _, p := range c.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		p.stop()
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// expand replaces {id} in each of the extra flags.
func expand(extra []string, id int) []string {
	out := make([]string, len(extra))
	for i, a := range extra {
		out[i] = strings.ReplaceAll(a, "{id}", strconv.Itoa(id))
	}
	return out
}

// startKVServer starts three kvserver members with data under dir and
// returns once each answers /healthz and a write through member 1 was
// applied.
func startKVServer(ctx context.Context, bin, dir string, extra []string) (*cluster, error) {
	ports, err := freePorts(2 * members)
	if err != nil {
		return nil, err
	}
	c := &cluster{system: "kvserver", dir: dir, leaderN: -1}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("%d=127.0.0.1:%d", i+1, ports[members+i]))
		c.clients = append(c.clients, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	for i := range members {
		id := i + 1
		args := []string{
			"--id", strconv.Itoa(id),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("kv%d", id)),
			"--listen-client", c.clients[i],
			"--listen-peer", fmt.Sprintf("127.0.0.1:%d", ports[members+i]),
			"--initial-cluster", strings.Join(initial, ","),
			"--log-level", "warn",
		}
		p, err := startProc(fmt.Sprintf("kvserver %d", id), bin, append(args, expand(extra, id)...), filepath.Join(dir, fmt.Sprintf("kv%d.log", id)))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	d := newKVDriver(c.clients, 1)
	defer d.Close()
	err = waitFor(ctx, c, 60*time.Second, func(ctx context.Context) error {
		for _, a := range c.clients {
			resp, err := d.hc.Get("http://" + a + "/healthz")
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/healthz: %s", a, resp.Status)
			}
		}
		return d.Put(ctx, 0, "ready", "1")
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	var st struct {
		Leader uint64 `json:"leader"`
	}
	if resp, err := d.hc.Get("http://" + c.clients[0] + "/status"); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		c.leader = fmt.Sprintf("member %d", st.Leader)
		if st.Leader >= 1 && st.Leader <= members {
			c.leaderN = int(st.Leader) - 1
		}
	}
	return c, nil
}

// startEtcd starts three etcd members with data under dir and returns once
// a Put through a client of all three endpoints succeeded.
func startEtcd(ctx context.Context, bin, dir string, extra []string) (*cluster, error) {
	ports, err := freePorts(2 * members)
	if err != nil {
		return nil, err
	}
	c := &cluster{system: "etcd", dir: dir, leaderN: -1}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i+1, ports[members+i]))
		c.clients = append(c.clients, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	for i := range members {
		id := i + 1
		client := "http://" + c.clients[i]
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[members+i])
		args := []string{
			"--name", fmt.Sprintf("m%d", id),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("etcd%d", id)),
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir),
			"--log-level", "error",
		}
		p, err := startProc(fmt.Sprintf("etcd %d", id), bin, append(args, expand(extra, id)...), filepath.Join(dir, fmt.Sprintf("etcd%d.log", id)))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	d, err := newEtcdDriver(c.clients, 1, 1)
	if err != nil {
		c.stop()
		return nil, err
	}
	defer d.Close()
	err = waitFor(ctx, c, 60*time.Second, func(ctx context.Context) error {
		for _, a := range c.clients {
			if _, err := d.cs[0].Status(ctx, "http://"+a); err != nil {
				return err
			}
		}
		return d.Put(ctx, 0, "ready", "1")
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	if st, err := d.cs[0].Status(ctx, "http://"+c.clients[0]); err == nil {
		c.leader = fmt.Sprintf("member %x", st.Leader)
	}
	return c, nil
}

// waitFor retries probe (each try bounded by 2s) until it succeeds, a
// member exits, or timeout passes.
func waitFor(ctx context.Context, c *cluster, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := c.check(); err != nil {
			return err
		}
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		last = probe(tctx)
		tcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s cluster not ready after %s: %v", c.system, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kvDriver sends HTTP/1.1 requests with keep-alive through one shared
// transport; worker w sticks to member w%3.
type kvDriver struct {
	tr    *http.Transport
	hc    *http.Client
	bases []string // "http://host:port/kv/"
}

func newKVDriver(addrs []string, workers int) *kvDriver {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        workers + members,
		MaxIdleConnsPerHost: workers + members,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	d := &kvDriver{tr: tr, hc: &http.Client{Transport: tr}}
	for _, a := range addrs {
		d.bases = append(d.bases, "http://"+a+"/kv/")
	}
	return d
}

func (d *kvDriver) Put(ctx context.Context, w int, key, value string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, d.bases[w%len(d.bases)]+key, strings.NewReader(value))
	if err != nil {
		return err
	}
	_, err = d.do(req, http.StatusNoContent)
	return err
}

func (d *kvDriver) Get(ctx context.Context, w int, key string, size int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.bases[w%len(d.bases)]+key, nil)
	if err != nil {
		return err
	}
	n, err := d.do(req, http.StatusOK)
	if err == nil && n != int64(size) {
		return fmt.Errorf("GET %s: a value of %d bytes, want %d", key, n, size)
	}
	return err
}

// do sends req and reads the answer to its end (so that the connection is
// reused), returning the body's size; a status other than want is an error.
func (d *kvDriver) do(req *http.Request, want int) (int64, error) {
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	return io.Copy(io.Discard, resp.Body)
}

func (d *kvDriver) Close() { d.tr.CloseIdleConnections() }

// etcdDriver shares clientv3 clients (each with all three endpoints, its
// balancer spreading requests over them) among the workers: worker w uses
// client w%len, as etcd's benchmark tool does with --conns.
type etcdDriver struct {
	cs []*clientv3.Client
}

func newEtcdDriver(addrs []string, workers, perClient int) (*etcdDriver, error) {
	var eps []string
	for _, a := range addrs {
		eps = append(eps, "http://"+a)
	}
	n := max(1, (workers+perClient-1)/perClient)
	d := &etcdDriver{}
	for range n {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   eps,
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			d.Close()
			return nil, err
		}
		d.cs = append(d.cs, c)
	}
	return d, nil
}

func (d *etcdDriver) Put(ctx context.Context, w int, key, value string) error {
	_, err := d.cs[w%len(d.cs)].Put(ctx, key, value)
	return err
}

var errNotFound = errors.New("key not found")

func (d *etcdDriver) Get(ctx context.Context, w int, key string, size int) error {
	resp, err := d.cs[w%len(d.cs)].Get(ctx, key) // linearizable: etcd's default
	switch {
	case err != nil:
		return err
	case len(resp.Kvs) == 0:
		return fmt.Errorf("get %s: %w", key, errNotFound)
	case len(resp.Kvs[0].Value) != size:
		return fmt.Errorf("get %s: a value of %d bytes, want %d", key, len(resp.Kvs[0].Value), size)
	}
	return nil
}

func (d *etcdDriver) Close() {
	for _, c := range d.cs {
		_ = c.Close()
	}
}
