// Command httpload measures, side by side in one run, three kvserver
// processes (examples/kvserver, over HTTP) and three etcd server processes
// (etcd v3.7, over gRPC with its own client), all on 127.0.0.1 and both with
// fsync on: writes of fixed-size values at several numbers of concurrent
// clients, and with -reads linearizable reads too. For each system and
// client count it starts a fresh cluster (new data dirs, free ports), warms
// it up, runs the load for a duration or a number of requests, and reports
// requests/s, p50 and p99 latency, and the CPU the servers and the load
// generator used per request; then the medians over -rounds rounds and the
// ratios kvserver/etcd.
//
// Run it from the benchmarks module (it builds both servers unless given
// their binaries):
//
//	cd benchmarks
//	go run ./cmd/httpload                                  # 1, 64, 256 clients, 10s each
//	go run ./cmd/httpload -rounds 3 -reads                 # medians of 3 rounds, reads too
//	go run ./cmd/httpload -clients 64 -duration 5s -systems kvserver
//
// kvserver clients are net/http with keep-alive (one shared Transport, a
// connection per client); client w always talks to member w%3, so two thirds
// of the writes reach a follower, which forwards them to the leader. etcd
// clients are go.etcd.io/etcd/client/v3 clients created with all three
// endpoints (their balancer spreads requests over the members), one client
// per -etcd-clients-per workers, as etcd's own benchmark tool shares --conns.
// -kvserver-leader sends every kvserver client to the leader instead; -v
// prints each member's CPU and storage commits (from its /metrics) after
// each run. Linux only (process groups, /proc for CPU time).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// config is the parsed flags.
type config struct {
	kvBin, etcdBin string
	systems        []string
	clients        []int
	duration       time.Duration
	requests       int64
	warmup         time.Duration
	valueSize      int
	keys           int
	reads          bool
	rounds         int
	etcdPerClient  int
	kvArgs         []string
	etcdArgs       []string
	keep           bool
	verbose        bool
	kvLeader       bool
}

func main() { os.Exit(mainExit()) }

func parseFlags() (*config, error) {
	c := &config{}
	var systems, clients, kvArgs, etcdArgs string
	flag.StringVar(&c.kvBin, "kvserver", "", "kvserver binary (default: go build ../examples/kvserver into a temp dir)")
	flag.StringVar(&c.etcdBin, "etcd", "", "etcd server binary (default: go build ./cmd/etcdserver, etcd server v3.7 as in go.mod, into a temp dir)")
	flag.StringVar(&systems, "systems", "kvserver,etcd", "systems to run, in this order (kvserver, etcd)")
	flag.StringVar(&clients, "clients", "1,64,256", "numbers of concurrent clients, comma-separated")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long each measured run lasts")
	flag.Int64Var(&c.requests, "requests", 0, "if > 0, each measured run sends this many requests instead of lasting -duration")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before each measured run, at the same concurrency")
	flag.IntVar(&c.valueSize, "value", 256, "value size in bytes")
	flag.IntVar(&c.keys, "keys", 1024, "distinct keys: writes overwrite k0 … k(keys-1) in turn; reads pick at random among those written")
	flag.BoolVar(&c.reads, "reads", false, "also measure linearizable GETs (after the writes, on the same cluster)")
	flag.IntVar(&c.rounds, "rounds", 1, "run everything this many times (the systems' order alternating) and report medians")
	flag.IntVar(&c.etcdPerClient, "etcd-clients-per", 16, "etcd: workers sharing one clientv3.Client (etcd benchmark's --clients/--conns)")
	flag.StringVar(&kvArgs, "kvserver-args", "", "extra flags for every kvserver member, space-separated; {id} becomes the member's ID")
	flag.StringVar(&etcdArgs, "etcd-args", "", "extra flags for every etcd member, space-separated; {id} becomes the member's ID")
	flag.BoolVar(&c.kvLeader, "kvserver-leader", false, "kvserver clients all talk to the leader (as found after start-up) instead of member w%3: what forwarding through followers costs")
	flag.BoolVar(&c.verbose, "v", false, "after each run, print each member's CPU and storage commits (rate, mean duration, requests per commit, from its /metrics)")
	flag.BoolVar(&c.keep, "keep", false, "keep the temp dir (data dirs, server logs) and print its path")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	for s := range strings.SplitSeq(systems, ",") {
		s = strings.TrimSpace(s)
		if s != "kvserver" && s != "etcd" {
			return nil, fmt.Errorf("-systems: %q: want kvserver or etcd", s)
		}
		c.systems = append(c.systems, s)
	}
	for s := range strings.SplitSeq(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: %q: want positive integers", s)
		}
		c.clients = append(c.clients, n)
	}
	switch {
	case c.duration <= 0 && c.requests <= 0:
		return nil, errors.New("-duration or -requests must be positive")
	case c.warmup < 0:
		return nil, errors.New("-warmup must not be negative")
	case c.valueSize < 1:
		return nil, errors.New("-value must be positive")
	case c.keys < 1:
		return nil, errors.New("-keys must be positive")
	case c.rounds < 1:
		return nil, errors.New("-rounds must be positive")
	case c.etcdPerClient < 1:
		return nil, errors.New("-etcd-clients-per must be positive")
	}
	c.kvArgs, c.etcdArgs = strings.Fields(kvArgs), strings.Fields(etcdArgs)
	return c, nil
}

func mainExit() int {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintf(os.Stderr, "httpload: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "httpload-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "httpload: %v\n", err)
		return 1
	}
	if cfg.keep {
		fmt.Printf("data dirs and logs under %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if err := run(ctx, cfg, tmp); err != nil {
		fmt.Fprintf(os.Stderr, "httpload: %v\n", err)
		return 1
	}
	return 0
}

// measurement is one measured run.
type measurement struct {
	system  string
	op      op
	clients int
	round   int
	perSec  float64
	p50     time.Duration
	p99     time.Duration
	errors  int
	srvCPU  time.Duration // all three members', per successful request
	cliCPU  time.Duration // this process's, per successful request
	busy    float64       // (servers' + this process's CPU) / wall time: cores in use
	leader  string
	detail  string // each member's CPU and storage commits
}

func run(ctx context.Context, cfg *config, tmp string) error {
	if err := buildBinaries(ctx, cfg, tmp); err != nil {
		return err
	}
	value := strings.Repeat("v", cfg.valueSize)
	bound := fmt.Sprintf("%s each", cfg.duration)
	if cfg.requests > 0 {
		bound = fmt.Sprintf("%d requests each", cfg.requests)
	}
	fmt.Printf("%d-byte values, %d keys, clients %v, %s after a %s warm-up, %d round(s)\n",
		cfg.valueSize, cfg.keys, cfg.clients, bound, cfg.warmup, cfg.rounds)
	if cfg.kvLeader {
		fmt.Println("kvserver clients talk to the leader only (-kvserver-leader)")
	}
	var all []measurement
	for r := range cfg.rounds {
		for _, n := range cfg.clients {
			order := slices.Clone(cfg.systems)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, sys := range order {
				ms, err := measurePoint(ctx, cfg, tmp, sys, n, r, value)
				if err != nil {
					return fmt.Errorf("%s, %d clients, round %d: %w", sys, n, r+1, err)
				}
				for _, m := range ms {
					fmt.Printf("round %d  %-8s %4d clients  %s %8.0f/s  p50 %7.2f ms  p99 %7.2f ms  errors %d  CPU/op server %4.0f µs client %4.0f µs  busy %.2f cores  leader %s\n",
						r+1, m.system, m.clients, m.op, m.perSec, ms2(m.p50), ms2(m.p99), m.errors,
						us(m.srvCPU), us(m.cliCPU), m.busy, m.leader)
					if cfg.verbose {
						fmt.Printf("         %s\n", m.detail)
					}
				}
				all = append(all, ms...)
			}
		}
	}
	report(cfg, all)
	return nil
}

// measurePoint starts a fresh cluster of sys, measures writes (and reads)
// at n clients, and stops it.
func measurePoint(ctx context.Context, cfg *config, tmp, sys string, n, round int, value string) ([]measurement, error) {
	dir, err := os.MkdirTemp(tmp, fmt.Sprintf("%s-c%d-r%d-", sys, n, round+1))
	if err != nil {
		return nil, err
	}
	if !cfg.keep {
		defer os.RemoveAll(dir)
	}
	var (
		c *cluster
		d driver
	)
	switch sys {
	case "kvserver":
		c, err = startKVServer(ctx, cfg.kvBin, dir, cfg.kvArgs)
		if err == nil {
			addrs := c.clients
			if cfg.kvLeader && c.leaderN >= 0 {
				addrs = []string{c.clients[c.leaderN]}
			}
			d = newKVDriver(addrs, n)
		}
	case "etcd":
		c, err = startEtcd(ctx, cfg.etcdBin, dir, cfg.etcdArgs)
		if err == nil {
			d, err = newEtcdDriver(c.clients, n, cfg.etcdPerClient)
			if err != nil {
				c.stop()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	defer c.stop()
	defer d.Close()

	ks := &keySpace{n: cfg.keys}
	ops := []op{opPut}
	if cfg.reads {
		ops = append(ops, opGet)
	}
	var out []measurement
	for _, o := range ops {
		// Every run's requests end by then: a stuck request fails the run
		// instead of hanging it.
		limit := cfg.warmup + cfg.duration + 60*time.Second
		if cfg.requests > 0 {
			limit = cfg.warmup + 30*time.Minute
		}
		rctx, cancel := context.WithTimeout(ctx, limit)
		if cfg.warmup > 0 {
			w := runLoad(rctx, d, ks, value, runSpec{op: o, workers: n, duration: cfg.warmup})
			if w.ops == 0 {
				cancel()
				return nil, fmt.Errorf("%s warm-up: no request succeeded: %v", o, w.firstErr)
			}
		}
		disk0 := scrapeDisk(rctx, c)
		each0 := c.cpuEach()
		srv0, cli0 := c.cpu(), selfCPU()
		res := runLoad(rctx, d, ks, value, runSpec{op: o, workers: n, duration: cfg.duration, requests: cfg.requests})
		srv, cli := c.cpu()-srv0, selfCPU()-cli0
		each1 := c.cpuEach()
		disk1 := scrapeDisk(rctx, c)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.check(); err != nil {
			return nil, err
		}
		if res.ops == 0 {
			return nil, fmt.Errorf("%s: no request succeeded: %v", o, res.firstErr)
		}
		if res.errors > 0 {
			fmt.Fprintf(os.Stderr, "%s %s at %d clients: %d of %d requests failed; first: %v\n",
				sys, o, n, res.errors, res.errors+res.ops, res.firstErr)
		}
		out = append(out, measurement{
			system: sys, op: o, clients: n, round: round,
			perSec: res.perSec(), p50: res.percentile(50), p99: res.percentile(99), errors: res.errors,
			srvCPU: srv / time.Duration(res.ops), cliCPU: cli / time.Duration(res.ops),
			busy:   (srv + cli).Seconds() / res.elapsed.Seconds(),
			leader: c.leader,
			detail: memberCPU(each0, each1, res.elapsed) + "; " + diskReport(sys, disk0, disk1, res.elapsed, res.ops),
		})
	}
	return out, nil
}

// memberCPU says how many cores each member used during a run.
func memberCPU(before, after []time.Duration, elapsed time.Duration) string {
	var ms []string
	for i := range after {
		ms = append(ms, fmt.Sprintf("m%d %.2f", i+1, (after[i]-before[i]).Seconds()/elapsed.Seconds()))
	}
	return "cores: " + strings.Join(ms, ", ")
}

// report prints the medians over the rounds and the ratios kvserver/etcd
// (median of the per-round ratios: the two systems ran back to back in
// each round, which holds better than absolute figures on a machine whose
// speed drifts).
func report(cfg *config, all []measurement) {
	type key struct {
		system  string
		op      op
		clients int
	}
	groups := map[key][]measurement{}
	for _, m := range all {
		k := key{m.system, m.op, m.clients}
		groups[k] = append(groups[k], m)
	}
	ops := []op{opPut}
	if cfg.reads {
		ops = append(ops, opGet)
	}
	fmt.Printf("\nmedians of %d round(s); CPU/op: µs of CPU per request (the three servers; the load generator); busy: cores in use (%d = all)\n", cfg.rounds, runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\top\tclients\tops/s\tp50 ms\tp99 ms\tserver µs/op\tclient µs/op\tbusy\terrors\t")
	for _, o := range ops {
		for _, n := range cfg.clients {
			for _, s := range cfg.systems {
				g := groups[key{s, o, n}]
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.0f\t%.0f\t%.2f\t%d\t\n", s, o, n,
					median(g, func(m measurement) float64 { return m.perSec }),
					median(g, func(m measurement) float64 { return ms2(m.p50) }),
					median(g, func(m measurement) float64 { return ms2(m.p99) }),
					median(g, func(m measurement) float64 { return us(m.srvCPU) }),
					median(g, func(m measurement) float64 { return us(m.cliCPU) }),
					median(g, func(m measurement) float64 { return m.busy }),
					sum(g, func(m measurement) int { return m.errors }))
			}
		}
	}
	tw.Flush()
	if !slices.Contains(cfg.systems, "kvserver") || !slices.Contains(cfg.systems, "etcd") {
		return
	}
	fmt.Printf("\nkvserver / etcd, median of the per-round ratios\n")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tclients\tops/s\tp50\tp99\tserver CPU/op\t")
	for _, o := range ops {
		for _, n := range cfg.clients {
			kvs, es := groups[key{"kvserver", o, n}], groups[key{"etcd", o, n}]
			ratio := func(f func(measurement) float64) float64 {
				var rs []float64
				for _, a := range kvs {
					for _, b := range es {
						if a.round == b.round && f(b) > 0 {
							rs = append(rs, f(a)/f(b))
						}
					}
				}
				return medianOf(rs)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", o, n,
				ratio(func(m measurement) float64 { return m.perSec }),
				ratio(func(m measurement) float64 { return float64(m.p50) }),
				ratio(func(m measurement) float64 { return float64(m.p99) }),
				ratio(func(m measurement) float64 { return float64(m.srvCPU) }))
		}
	}
	tw.Flush()
}

func median(ms []measurement, f func(measurement) float64) float64 {
	var xs []float64
	for _, m := range ms {
		xs = append(xs, f(m))
	}
	return medianOf(xs)
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func sum(ms []measurement, f func(measurement) int) int {
	t := 0
	for _, m := range ms {
		t += f(m)
	}
	return t
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64  { return float64(d) / float64(time.Microsecond) }

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// buildBinaries builds the servers not given by -kvserver and -etcd into
// tmp: kvserver in the root module (as the project builds it), etcd's
// server in this module (its dependencies stay out of the root module).
func buildBinaries(ctx context.Context, cfg *config, tmp string) error {
	if cfg.kvBin == "" && slices.Contains(cfg.systems, "kvserver") {
		out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/understudy-raft/understudy").Output()
		if err != nil {
			return fmt.Errorf("finding the understudy module (run from benchmarks/, or give -kvserver): %v", err)
		}
		root := strings.TrimSpace(string(out))
		cfg.kvBin = filepath.Join(tmp, "kvserver")
		fmt.Printf("building kvserver from %s/examples/kvserver\n", root)
		if err := goBuild(ctx, root, cfg.kvBin, "./examples/kvserver"); err != nil {
			return err
		}
	}
	if cfg.etcdBin == "" && slices.Contains(cfg.systems, "etcd") {
		cfg.etcdBin = filepath.Join(tmp, "etcd")
		fmt.Println("building etcd from ./cmd/etcdserver")
		if err := goBuild(ctx, "", cfg.etcdBin, "github.com/understudy-raft/understudy/benchmarks/cmd/etcdserver"); err != nil {
			return err
		}
	}
	if cfg.etcdBin != "" {
		out, err := exec.CommandContext(ctx, cfg.etcdBin, "--version").Output()
		if err != nil {
			return fmt.Errorf("%s --version: %v", cfg.etcdBin, err)
		}
		fmt.Printf("etcd: %s\n", strings.Join(strings.Fields(strings.SplitN(string(out), "\n", 2)[0]), " "))
	}
	return nil
}

func goBuild(ctx context.Context, dir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
