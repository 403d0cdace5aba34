// Command groupload measures many raft groups in one process (issues 29
// and 35): three hosts on 127.0.0.1, N groups each with a voter on every
// host, and W writers in all, spread evenly over the groups (or over the
// first -active of them), each writing 256-byte kv puts through its
// group's leader, one at a time, for a fixed duration after a warm-up.
// Storage syncs are on (the library's default) and the raft timers are the
// library's defaults (tick 100ms) unless -tick says otherwise.
//
// Two layouts (-layout):
//
//   - host: each host is one understudy.NewHost (one data dir in a temp
//     dir, one loopback port with AdvertisePeer set, one storage engine),
//     and every group's replica there is started with StartGroup;
//   - process: the baseline, today's layout: every replica is its own
//     understudy.Start (its own data dir, port, storage file and fsync
//     stream), all in this one OS process.
//
// For each number of groups and layout it starts a fresh cluster, waits
// until every group has a leader, waits -settle more (0 by default),
// measures an idle period (-idle), then runs the load, and prints one
// line:
//
//	layout, groups, writers
//	active         the groups written: the first -active ones (all if 0;
//	               -spread: one in every groups/active instead);
//	               the others stay idle throughout
//	writes/s       successful writes over the measured window
//	p50, p99       latency as the writer sees it (retries after a leader
//	               change included)
//	grp-p99        the p99 of the groups' own p99s
//	gor/host       runtime.NumGoroutine() once every group has a leader,
//	               before any writer, less the goroutines before the
//	               cluster started, divided by 3
//	heap/replica   HeapAlloc after a GC at the end of the idle period, less
//	               HeapAlloc before the cluster started, divided by 3N
//	idle-cpu       the process's CPU time (getrusage) over the idle period,
//	               divided by 3 and by the wall time: a fraction of a core
//	               per host
//	idle-msg       raft messages sent per second and host over the idle
//	               period: the sum over each host's groups of every peer's
//	               transport.PeerStats.MessagesSent (the host links' own
//	               pings and pongs are not in it; -v gives each host's)
//	cpu/write      the process's CPU time over the measured window, per
//	               successful write
//	syncs/s        storage commits (each a bbolt transaction: two
//	               fdatasyncs) per second over the measured window, summed
//	               over the hosts (host: Host.Engine().Metrics(); process:
//	               every replica's Storage().Metrics())
//	grp/commit     groups per commit (the engine's Writes/Commits; 1 in the
//	               process layout)
//	quiesced       groups quiesced during the measured window (-quiesce):
//	               the mean over samples every 250ms of the replicas
//	               quiesced on the 3 hosts (raft.SchedulerStats.Quiesced),
//	               divided by 3
//	leaders        from the first start call until every group had a leader
//
// -kill (host layout) adds a second line. After the load, a second idle
// period (-idle again, so that the groups the load woke quiesce with
// -quiesce) ends with the host that leads the most groups killed: its
// Mux is closed (listener and host links: the peers see its connections
// drop), then the host is closed on a context already done (no leadership
// hand-off, no wait), the in-process equivalent of kill -9. The line
// gives the groups it led and the groups quiesced at the kill; over the
// groups it led, the time from the kill until a replica on a surviving
// host led the group or knew of its leader (raft.EventLeaderChanged,
// polled as a fallback; median, p99, max); the teardown (until the
// killed host's Close returned, while the survivors elect); the process's
// CPU from the kill until the last of those groups had a leader, divided
// by the 2 survivors and that time (the teardown's CPU, where it
// overlaps, included), and that CPU per group it led; and the survivors'
// wake-ups of quiesced replicas over that time by cause
// (raft.SchedulerStats.Wakes), how many waited for the host's wake
// throttle (MaxWakesPerSec: -sched's fourth field) and how many it
// dropped, the replica awake already (WakesSkipped). -restart (implies -kill) then opens the host again on its data
// dir and the same port, starts its groups again (-start-parallel at a
// time), and adds: the time until every start call returned ("running"),
// and until every group had a leader that its replica on the restarted
// host knew ("led and known there"). Both wait at most -start-timeout.
//
// Run it from the benchmarks module:
//
//	cd benchmarks
//	go run ./cmd/groupload -groups 1,10,100 -layout host,process
//	go run ./cmd/groupload -groups 1000 -layout host
//	go run ./cmd/groupload -groups 100 -layout host -cpuprofile cpu.out
//	go run ./cmd/groupload -groups 48,1000 -active 48 -quiesce -restart -idle 10s
//
// The hosts balance their groups' leadership (HostConfig.LeaderBalance,
// the library's default) unless -balance=false.
//
// -cpuprofile profiles each measured window, -startcpuprofile each start
// (until every group has a leader), -idlecpuprofile each idle period,
// -killcpuprofile each -kill window (from the kill until every group the
// killed host led has a leader),
// -memprofile writes the heap at the end of each idle period,
// -loadmemprofile at the end of each measured window,
// -allocprofile the allocations of each measured window (two allocs
// profiles, at its start and end, for pprof's -base, and a line of the
// bytes and objects the process allocated per write in the window: the
// 3 hosts and the writers; the runtime's default MemProfileRate), and
// -trace an execution trace of one second of load before each window. -v adds,
// per configuration: how long the start calls took, the leaders per host,
// the open files, the messages sent per second by each host while idle
// and the groups quiesced at the idle period's end and in the window
// (least to most), the writes and retries, the storage commits' mean
// duration, the goroutines and heap before the cluster, the hosts' task
// runs per write, where the slow writes were (the groups' own p99s, and
// the writes slower than twice the median by 250 ms of the window:
// bursts that every group shares, such as the Go collector's mark phases,
// or a spread), and the Go collections in the window with their CPU. The tool
// raises its soft limit of open files to the hard one (RLIMIT_NOFILE).
// Linux (and other systems with getrusage; open files from
// /proc/self/fd).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the parsed flags.
type config struct {
	groups        []int
	layouts       []string
	writers       int
	duration      time.Duration
	warmup        time.Duration
	idle          time.Duration
	settle        time.Duration
	tick          time.Duration
	quiesce       bool
	inlineApply   bool
	syncWait      string
	balance       bool
	active        int
	spread        bool
	kill, restart bool
	tailCache     int64
	backend       string
	sched         raft.SchedulerConfig
	startParallel int
	startTimeout  time.Duration
	cpuProfile    string
	idleProfile   string
	killProfile   string
	startProfile  string
	tracePath     string
	memProfile    string
	loadMemProf   string
	allocProfile  string
	verbose       bool
	logLevel      string
	out           io.Writer
}

func main() { os.Exit(mainExit()) }

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("groupload", flag.ContinueOnError)
	c := &config{out: os.Stdout}
	var groups, layouts string
	fs.StringVar(&groups, "groups", "1,10,100", "numbers of groups, comma-separated (e.g. 1,10,100,1000)")
	fs.StringVar(&layouts, "layout", "host", "layouts, comma-separated: host (one understudy.Host per host, StartGroup) or process (every replica its own understudy.Start: today's layout, the baseline)")
	fs.IntVar(&c.writers, "writers", 256, "writers in total, spread evenly over the groups, each with one write in flight")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured load per configuration")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before the measured window")
	fs.DurationVar(&c.idle, "idle", 5*time.Second, "idle period measured after every group has a leader, before the load (CPU, then heap)")
	fs.DurationVar(&c.settle, "settle", 0, "unmeasured wait after every group has a leader, before the idle period (a new cluster's replicas publish their incarnations, groups quiesce)")
	fs.DurationVar(&c.tick, "tick", 0, "raft tick (raft.Config.TickInterval; 0: the library's default, 100ms)")
	fs.BoolVar(&c.quiesce, "quiesce", true, "quiesce idle groups (raft.Config.Quiesce, the host's default; -quiesce=false sets GroupConfig.DisableQuiescence): they stop ticking and heartbeating")
	fs.StringVar(&c.syncWait, "sync-wait", "auto", "how the hosts' Pebble fsyncs wait (storage.EngineOptions.SyncWait; host layout): auto (parked while commits carry many groups), blocking (a system call that holds its Go processor) or parked (Linux AIO)")
	fs.BoolVar(&c.inlineApply, "inline-apply", false, "apply small committed batches on the loop's worker (raft.Config.InlineApply; kv.Store's Apply is quick)")
	fs.BoolVar(&c.balance, "balance", true, "the hosts balance their groups' leadership (HostConfig.LeaderBalance, the default; -balance=false disables it)")
	var sched string
	fs.StringVar(&sched, "sched", "", "the hosts' scheduler bounds: loop,io,apply workers[,wakes per second] (e.g. 2,4,4 or 0,0,0,500; empty or 0: the defaults)")
	fs.IntVar(&c.active, "active", 0, "writers write only to the first N groups, the others stay idle (0: every group)")
	fs.BoolVar(&c.spread, "spread", false, "with -active, the written groups are spread evenly over all the groups (one in every groups/active), not the first ones: busy groups among idle ones, as in a service")
	fs.BoolVar(&c.kill, "kill", false, "after the load and a second idle period, kill the host that leads the most groups (host layout) and measure until each group it led has a leader again")
	fs.BoolVar(&c.restart, "restart", false, "after -kill (implied), start the killed host again on its data dir and measure until every group is led and known there")
	fs.StringVar(&c.backend, "backend", "", "storage backend: bbolt or pebble (empty: the library's default: Pebble for the host layout, NewHost; bbolt for the process layout, Start)")
	fs.Int64Var(&c.tailCache, "tail-cache", 0, "storage tail cache per replica in bytes (0: the library's default, 16 MiB; negative: none)")
	fs.IntVar(&c.startParallel, "start-parallel", 64, "start calls (StartGroup / Start) in flight per host")
	fs.DurationVar(&c.startTimeout, "start-timeout", 2*time.Minute, "bound on starting a configuration until every group has a leader")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of each measured window to this file (with several configurations, -<layout>-<groups> is added before the extension)")
	fs.StringVar(&c.startProfile, "startcpuprofile", "", "write a CPU profile of each start (until every group has a leader) to this file (named as -cpuprofile's)")
	fs.StringVar(&c.idleProfile, "idlecpuprofile", "", "write a CPU profile of each idle period to this file (named as -cpuprofile's)")
	fs.StringVar(&c.killProfile, "killcpuprofile", "", "write a CPU profile of each -kill window (from the kill until every group the killed host led has a leader) to this file (named as -cpuprofile's)")
	fs.StringVar(&c.tracePath, "trace", "", "write an execution trace of one second of load, right before each measured window, to this file (named as -cpuprofile's)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile at the end of each idle period to this file (named as -cpuprofile's)")
	fs.StringVar(&c.loadMemProf, "loadmemprofile", "", "write a heap profile at the end of each measured window to this file (named as -cpuprofile's): what the load keeps live")
	fs.StringVar(&c.allocProfile, "allocprofile", "", "write the allocations of each measured window: the allocs profile at the window's start to this file with .base added, at its end to this file (go tool pprof -sample_index=alloc_space -base F.base F), and a line of bytes and objects allocated per write (named as -cpuprofile's)")
	fs.BoolVar(&c.verbose, "v", false, "print start, close and storage details for each configuration")
	fs.StringVar(&c.logLevel, "log", "", "understudy's logs to stderr at this level (debug, info, warn, error); default none")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.sched, err = parseSched(sched); err != nil {
		return nil, err
	}
	c.kill = c.kill || c.restart
	for s := range strings.SplitSeq(groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-groups: %q: want positive integers", s)
		}
		c.groups = append(c.groups, n)
	}
	for s := range strings.SplitSeq(layouts, ",") {
		s = strings.TrimSpace(s)
		if s != layoutHost && s != layoutProcess {
			return nil, fmt.Errorf("-layout: %q: want host or process", s)
		}
		c.layouts = append(c.layouts, s)
	}
	switch {
	case c.writers < 1:
		return nil, errors.New("-writers must be positive")
	case c.duration <= 0:
		return nil, errors.New("-duration must be positive")
	case c.warmup < 0 || c.idle < 0 || c.settle < 0 || c.tick < 0:
		return nil, errors.New("-warmup, -idle, -settle and -tick must not be negative")
	case c.startParallel < 1:
		return nil, errors.New("-start-parallel must be positive")
	case c.active < 0:
		return nil, errors.New("-active must not be negative")
	case c.kill && slices.Contains(c.layouts, layoutProcess):
		return nil, errors.New("-kill and -restart need -layout host")
	}
	switch c.logLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("-log: %q: want debug, info, warn or error", c.logLevel)
	}
	if _, ok := syncWaits[c.syncWait]; !ok {
		return nil, fmt.Errorf("-sync-wait: %q: want auto, blocking or parked", c.syncWait)
	}
	return c, nil
}

func mainExit() int {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "groupload: %v\n", err)
		return 2
	}
	if err := raiseOpenFiles(); err != nil {
		fmt.Fprintf(os.Stderr, "groupload: raising the open files limit: %v\n", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, cfg)
}

// run measures every configuration, in order of groups then layouts, and
// prints a line for each as it completes. It returns the exit code: 1 if
// a configuration failed (said on stderr; the others still run).
func run(ctx context.Context, cfg *config) int {
	failed := 0
	printHeader(cfg.out)
	for _, n := range cfg.groups {
		for _, layout := range cfg.layouts {
			r, err := runOne(ctx, cfg, layout, n)
			if err != nil {
				fmt.Fprintf(os.Stderr, "groupload: %s layout, %d groups: %v\n", layout, n, err)
				failed++
				if ctx.Err() != nil {
					return 1
				}
				continue
			}
			printResult(cfg.out, r)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// syncWaits are -sync-wait's values.
var syncWaits = map[string]storage.SyncWait{
	"auto": storage.SyncWaitAuto, "blocking": storage.SyncWaitBlocking, "parked": storage.SyncWaitParked,
}

// result is one configuration's figures.
type result struct {
	layout           string
	groups, writers  int
	active           int // the groups written
	load             loadResult
	errors           int
	firstErr         error
	retries          int64
	goroutinesHost   float64
	heapReplica      float64 // bytes
	idleCPUHost      float64 // cores
	idleMsgsHost     float64 // messages sent per second and host
	idleQuiesced     float64 // groups quiesced at the end of the idle period
	quiesced         float64 // groups quiesced, mean over the measured window
	failover         *failoverResult
	cpuPerWrite      time.Duration
	syncsPerSec      float64
	groupsPerCommit  float64
	started, leaders time.Duration
	detail           []string
}

func printHeader(w io.Writer) {
	fmt.Fprintf(w, "%-7s %6s %6s %7s %9s %7s %7s %8s %8s %9s %9s %8s %9s %8s %10s %8s %8s %6s\n",
		"layout", "groups", "active", "writers", "writes/s", "p50-ms", "p99-ms", "grp-p99", "gor/host", "heap/rep", "idle-cpu", "idle-msg",
		"cpu/write", "syncs/s", "grp/commit", "quiesced", "leaders", "errors")
}

func printResult(w io.Writer, r *result) {
	fmt.Fprintf(w, "%-7s %6d %6d %7d %9.0f %7.2f %7.2f %8.2f %8.0f %8.1fK %8.1f%% %8.0f %7.0fµs %8.0f %10.1f %8.0f %7.2fs %6d\n",
		r.layout, r.groups, r.active, r.writers, r.load.perSec, ms(r.load.p50), ms(r.load.p99), ms(r.load.groupP99),
		r.goroutinesHost, r.heapReplica/1024, 100*r.idleCPUHost, r.idleMsgsHost, float64(r.cpuPerWrite)/1e3,
		r.syncsPerSec, r.groupsPerCommit, r.quiesced, r.leaders.Seconds(), r.errors)
	if r.failover != nil {
		fmt.Fprintf(w, "        %s\n", r.failover.line())
	}
	for _, d := range r.detail {
		fmt.Fprintf(w, "        %s\n", d)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// runOne measures one configuration on a fresh cluster in a temp dir.
func runOne(ctx context.Context, cfg *config, layout string, n int) (*result, error) {
	dir, err := os.MkdirTemp("", "groupload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	active := n
	if cfg.active > 0 {
		active = min(cfg.active, n)
	}
	r := &result{layout: layout, groups: n, writers: cfg.writers, active: active}

	runtime.GC()
	baseG := runtime.NumGoroutine()
	baseHeap := heapAlloc()

	var stopStart func() error
	if cfg.startProfile != "" {
		if stopStart, err = startCPUProfile(profileName(cfg, cfg.startProfile, layout, n)); err != nil {
			return nil, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.startTimeout)
	c, err := startCluster(sctx, layout, n, dir, clusterOptions{
		tick: cfg.tick, quiesce: cfg.quiesce, inlineApply: cfg.inlineApply, syncWait: syncWaits[cfg.syncWait], tailCache: cfg.tailCache, backend: storage.Backend(cfg.backend), sched: cfg.sched, startParallel: cfg.startParallel, logger: logger(cfg.logLevel),
		noBalance: !cfg.balance,
	})
	cancel()
	if stopStart != nil {
		err = errors.Join(err, stopStart())
	}
	if err != nil {
		if c != nil {
			_, _ = c.close(30 * time.Second)
		}
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			_, _ = c.close(30 * time.Second)
		}
	}()
	r.started, r.leaders = c.started, c.leaders
	r.goroutinesHost = float64(runtime.NumGoroutine()-baseG) / numHosts
	fds := openFiles()

	if err := sleep(ctx, cfg.settle); err != nil {
		return nil, err
	}
	// Idle: CPU over the period, then the heap after a GC.
	var stopIdle func() error
	if cfg.idleProfile != "" {
		if stopIdle, err = startCPUProfile(profileName(cfg, cfg.idleProfile, layout, n)); err != nil {
			return nil, err
		}
	}
	msgs0 := c.messagesSent()
	cpu0, t0 := cpuTime(), time.Now()
	serr := sleep(ctx, cfg.idle)
	cpuIdle, wallIdle := cpuTime()-cpu0, time.Since(t0)
	msgs1 := c.messagesSent()
	if stopIdle != nil {
		serr = errors.Join(serr, stopIdle())
	}
	if serr != nil {
		return nil, serr
	}
	if cfg.idle > 0 {
		r.idleCPUHost = float64(cpuIdle) / numHosts / float64(wallIdle)
	}
	msgsHost := make([]float64, numHosts)
	for i := range msgsHost {
		msgsHost[i] = float64(msgs1[i]-msgs0[i]) / wallIdle.Seconds()
		r.idleMsgsHost += msgsHost[i] / numHosts
	}
	r.idleQuiesced = float64(c.sched(allHosts()).quiesced) / numHosts
	r.heapReplica = float64(int64(heapAlloc())-int64(baseHeap)) / float64(n*numHosts)
	if cfg.memProfile != "" {
		if err := writeHeapProfile(profileName(cfg, cfg.memProfile, layout, n)); err != nil {
			return nil, err
		}
	}
	lph := c.leadersPerHost()

	// The load: warm-up, then the measured window.
	stride := 1
	if cfg.spread {
		stride = n / active
	}
	l := startLoad(ctx, c, cfg.writers, active, stride)
	if err := sleep(ctx, cfg.warmup); err != nil {
		l.finish()
		return nil, err
	}
	if cfg.tracePath != "" {
		// Before the window: a trace slows the process down.
		if err := writeTrace(ctx, profileName(cfg, cfg.tracePath, layout, n), time.Second); err != nil {
			l.finish()
			return nil, err
		}
	}
	var stopProfile func() error
	if cfg.cpuProfile != "" {
		if stopProfile, err = startCPUProfile(profileName(cfg, cfg.cpuProfile, layout, n)); err != nil {
			l.finish()
			return nil, err
		}
	}
	var allocs *allocWindow
	if cfg.allocProfile != "" {
		if allocs, err = startAllocs(profileName(cfg, cfg.allocProfile, layout, n)); err != nil {
			l.finish()
			return nil, err
		}
	}
	from, cpu1, gc1 := time.Since(l.start), cpuTime(), readGC()
	st0, sc0 := c.storage(), c.sched(allHosts())
	qs := c.sampleQuiesced(250 * time.Millisecond)
	serr = sleep(ctx, cfg.duration)
	to := time.Since(l.start)
	st1, sc1 := c.storage(), c.sched(allHosts())
	cpu2, gc2 := cpuTime(), readGC()
	if cfg.loadMemProf != "" {
		if err := writeHeapProfile(profileName(cfg, cfg.loadMemProf, layout, n)); err != nil {
			l.finish()
			return nil, err
		}
	}
	if allocs != nil {
		if err := allocs.stop(); err != nil {
			l.finish()
			return nil, err
		}
	}
	var qlo, qhi float64
	r.quiesced, qlo, qhi = qs.finish()
	if stopProfile != nil {
		if err := stopProfile(); err != nil {
			l.finish()
			return nil, err
		}
	}
	samples, errs, firstErr := l.finish()
	if serr != nil {
		return nil, serr
	}
	r.load = window(samples, active, from, to)
	r.errors, r.firstErr, r.retries = errs, firstErr, l.retries.Load()
	if r.load.writes > 0 {
		r.cpuPerWrite = (cpu2 - cpu1) / time.Duration(r.load.writes)
	}
	if allocs != nil {
		r.detail = append(r.detail, allocs.line(r.load.writes))
	}
	var runs string
	if w := float64(r.load.writes); w > 0 {
		runs = fmt.Sprintf("task runs per write over the hosts: loop %.2f, append %.2f, apply %.2f, inline %.2f",
			float64(sc1.loopRuns-sc0.loopRuns)/w, float64(sc1.appendRuns-sc0.appendRuns)/w,
			float64(sc1.applyRuns-sc0.applyRuns)/w, float64(sc1.inline-sc0.inline)/w)
	}
	secs := (to - from).Seconds()
	commits := st1.commits - st0.commits
	r.syncsPerSec = float64(commits) / secs
	var commitMean, syncMean time.Duration
	var pagesPer, bytesPer float64
	if commits > 0 {
		pagesPer = float64(st1.pages-st0.pages) / float64(commits)
		bytesPer = float64(st1.bytes-st0.bytes) / float64(commits)
		r.groupsPerCommit = float64(st1.writes-st0.writes) / float64(commits)
		commitMean = (st1.commitTime - st0.commitTime) / time.Duration(commits)
		syncMean = (st1.syncTime - st0.syncTime) / time.Duration(commits)
	}

	if cfg.kill {
		// Idle again, so that the groups the load woke quiesce (with
		// -quiesce), then the kill.
		if err := sleep(ctx, cfg.idle); err != nil {
			return nil, err
		}
		var profile string
		if cfg.killProfile != "" {
			profile = profileName(cfg, cfg.killProfile, layout, n)
		}
		f, err := c.failover(ctx, cfg.startTimeout, cfg.restart, profile)
		if err != nil {
			return nil, err
		}
		r.failover = f
	}

	closeDur, cerr := c.close(30 * time.Second)
	closed = true
	if cfg.verbose {
		r.detail = append(r.detail,
			fmt.Sprintf("start calls %s, every group with a leader after %s; leaders per host %v; open files %d (%.1f per replica); close %s",
				r.started.Round(time.Millisecond), r.leaders.Round(time.Millisecond), lph, fds, float64(fds)/float64(n*numHosts), closeDur.Round(time.Millisecond)),
			fmt.Sprintf("idle: messages sent per second by host %.0f; groups quiesced at its end %.0f; in the window %.0f to %.0f",
				msgsHost, r.idleQuiesced, qlo, qhi),
			fmt.Sprintf("writes %d in %.1fs (groups written %d of %d, fewest writes in a group %d); retries %d; storage commits %d, %.1f groups each, %s each on average (disk part %s), %.1f pages (bbolt) and %.0f bytes written each; bbolt free pages %d",
				r.load.writes, secs, r.load.groupsWritten, active, r.load.minGroupWrites, r.retries, commits, r.groupsPerCommit,
				commitMean.Round(time.Microsecond), syncMean.Round(time.Microsecond), pagesPer, bytesPer, st1.free),
			fmt.Sprintf("goroutines %d before the cluster, %.0f per host after; heap %.1f MiB before, %.1f KiB per replica (goroutine stacks, at least 8 KiB each, are not in it)",
				baseG, r.goroutinesHost, float64(baseHeap)/(1<<20), r.heapReplica/1024),
			runs, tail(samples, r.load, from, to),
			fmt.Sprintf("Go collections in the window %d, their CPU %s (%.1f%% of the process's)",
				gc2.cycles-gc1.cycles, (gc2.cpu-gc1.cpu).Round(time.Millisecond), 100*float64(gc2.cpu-gc1.cpu)/float64(max(cpu2-cpu1, 1))))
		if cerr != nil {
			r.detail = append(r.detail, fmt.Sprintf("close: %v", cerr))
		}
	}
	if r.firstErr != nil {
		r.detail = append(r.detail, fmt.Sprintf("first error: %v", r.firstErr))
	}
	return r, nil
}

// logger is understudy's logger at level (none if empty).
func logger(level string) *slog.Logger {
	var l slog.Level
	if level == "" || l.UnmarshalText([]byte(level)) != nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// parseSched parses -sched: loop,io,apply worker bounds, and optionally
// the quiesced groups a host's liveness change wakes per second.
func parseSched(s string) (raft.SchedulerConfig, error) {
	var c raft.SchedulerConfig
	if s == "" {
		return c, nil
	}
	fields := []*int{&c.Workers, &c.IOWorkers, &c.ApplyWorkers, &c.MaxWakesPerSec}
	parts := strings.Split(s, ",")
	if len(parts) < 3 || len(parts) > 4 {
		return c, fmt.Errorf("-sched %q: want loop,io,apply[,wakes] (e.g. 2,4,4)", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return c, fmt.Errorf("-sched %q: want non-negative integers loop,io,apply[,wakes] (e.g. 2,4,4)", s)
		}
		*fields[i] = n
	}
	return c, nil
}
