// Command dbload measures dragonboat v4 in the shape of understudy's
// groupload (benchmarks/cmd/groupload), for figures side by side: three
// NodeHosts in one process on 127.0.0.1, G shards each with a replica (a
// voter) on every NodeHost, an in-memory key-value state machine (a
// regular IStateMachine, as understudy's kv is a map in memory), and W
// writers in all, spread evenly over the first A shards (-active; all by
// default), each writing 256-byte puts through its shard's leader with
// SyncPropose, one at a time, for a fixed duration after a warm-up. The
// LogDB fsyncs every raft state and log write (dragonboat's only mode).
// Every setting dragonboat does not default is in README.md with the
// reason for it.
//
// For each number of shards and LogDB (-logdb pebble,tan) it starts a
// fresh cluster, waits until every shard has a leader, measures an idle
// period (-idle), then runs the load, and prints one line, with
// groupload's columns where dragonboat has them:
//
//	logdb, groups, active, writers
//	writes/s       successful writes over the measured window
//	p50, p99       latency as the writer sees it (retries after a leader
//	               change included)
//	grp-p99        the p99 of the active shards' own p99s
//	gor/host       runtime.NumGoroutine() once every shard has a leader,
//	               before any writer, less the goroutines before the
//	               cluster started, divided by 3
//	heap/replica   HeapAlloc after a GC at the end of the idle period, less
//	               HeapAlloc before the cluster started, divided by 3G
//	               (counts buffers allocated but never touched: Tan's
//	               write buffers are 16 x KVWriteBufferSize per NodeHost)
//	rss/replica    the process's resident set (VmRSS, after
//	               debug.FreeOSMemory) at the end of the idle period, less
//	               the same before the cluster started, divided by 3G: not
//	               in groupload; Pebble's memtables are outside the Go heap
//	idle-cpu/host  the process's CPU time (getrusage) over the idle period,
//	               divided by 3 and by the wall time: a fraction of a core
//	cpu/write      the process's CPU time over the measured window, per
//	               successful write
//	leaders        from the first StartReplica call until every shard had
//	               a leader
//
// groupload's syncs/s and grp/commit have no match: dragonboat's LogDB
// counts no commits outside its Prometheus metrics.
//
// Run it from this module:
//
//	cd benchmarks/dragonboat
//	go run ./cmd/dbload -groups 1,10,100,1000
//	go run ./cmd/dbload -groups 1000 -active 10
//	go run ./cmd/dbload -groups 1000 -quiesce -idle 20s
//
// With -quiesce a shard quiesces after 20 ElectionRTTs without activity
// (dragonboat's node.go and quiesce.go: 10 x 2 x ElectionRTT ticks, 200
// ticks or 20 s at the settings here), so the idle period of -quiesce
// starts after a settling wait (-settle; by default that threshold and 2 s
// more) and measures quiesced shards. -cpuprofile profiles each measured window, -idlecpuprofile
// each idle period, -memprofile writes the heap at the end of each idle
// period. Linux (getrusage, /proc/self).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runConfig is the parsed flags.
type runConfig struct {
	groups         []int
	logdbs         []string
	active         int
	writers        int
	duration       time.Duration
	warmup         time.Duration
	idle           time.Duration
	settle         time.Duration
	proposeTimeout time.Duration
	startTimeout   time.Duration
	cluster        clusterOptions
	cpuProfile     string
	idleProfile    string
	memProfile     string
	verbose        bool
	logLevel       string
	out            io.Writer
}

func main() { os.Exit(mainExit()) }

func parseFlags(args []string) (*runConfig, error) {
	fs := flag.NewFlagSet("dbload", flag.ContinueOnError)
	c := &runConfig{out: os.Stdout}
	var groups, logdbs string
	fs.StringVar(&groups, "groups", "1,10,100", "numbers of shards, comma-separated (e.g. 1,10,100,1000)")
	fs.StringVar(&logdbs, "logdb", logdbPebble, "LogDBs, comma-separated: pebble (dragonboat's default) or tan (plugin/tan)")
	fs.IntVar(&c.active, "active", 0, "shards written, the first N of each configuration's shards (0: all; more than the shards: all)")
	fs.IntVar(&c.writers, "writers", 256, "writers in total, spread evenly over the active shards, each with one write in flight")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured load per configuration")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before the measured window")
	fs.DurationVar(&c.idle, "idle", 5*time.Second, "idle period measured after every shard has a leader, before the load (CPU, then heap)")
	fs.DurationVar(&c.settle, "settle", -1, "unmeasured wait after every shard has a leader, before the idle period (negative: with -quiesce, dragonboat's quiesce threshold and 2s more; without, 0)")
	fs.DurationVar(&c.proposeTimeout, "propose-timeout", 5*time.Second, "deadline of each SyncPropose (a timed-out write is retried)")
	fs.DurationVar(&c.startTimeout, "start-timeout", 2*time.Minute, "bound on starting a configuration until every shard has a leader")
	fs.Uint64Var(&c.cluster.rttMillisecond, "rtt", 100, "NodeHostConfig.RTTMillisecond, dragonboat's tick (100: understudy's default tick)")
	fs.Uint64Var(&c.cluster.electionRTT, "election-rtt", 10, "Config.ElectionRTT in ticks (10: understudy's default election ticks)")
	fs.Uint64Var(&c.cluster.heartbeatRTT, "heartbeat-rtt", 1, "Config.HeartbeatRTT in ticks (1: understudy's default heartbeat ticks)")
	fs.Uint64Var(&c.cluster.snapshotEntries, "snapshot-entries", 10000, "Config.SnapshotEntries (10000: understudy's default SnapshotCount; 0: no automatic snapshots)")
	fs.Uint64Var(&c.cluster.compactionOverhead, "compaction-overhead", 5000, "Config.CompactionOverhead (5000: understudy's default SnapshotCatchUpEntries)")
	fs.StringVar(&c.cluster.logdbMem, "logdb-mem", "large", "NodeHostConfig.Expert.LogDB preset: large (dragonboat's default, up to 8 GB per NodeHost), medium, small or tiny")
	fs.BoolVar(&c.cluster.quiesce, "quiesce", false, "Config.Quiesce: idle shards stop ticking and heartbeating")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of each measured window to this file (with several configurations, -<logdb>-<groups> is added before the extension)")
	fs.StringVar(&c.idleProfile, "idlecpuprofile", "", "write a CPU profile of each idle period to this file (named as -cpuprofile's)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile at the end of each idle period to this file (named as -cpuprofile's)")
	fs.BoolVar(&c.verbose, "v", false, "print start, close, leader and memory details for each configuration")
	fs.StringVar(&c.logLevel, "log", "", "dragonboat's logs to stderr at this level (debug, info, warning, error); default none")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for s := range strings.SplitSeq(groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-groups: %q: want positive integers", s)
		}
		c.groups = append(c.groups, n)
	}
	for s := range strings.SplitSeq(logdbs, ",") {
		s = strings.TrimSpace(s)
		if s != logdbPebble && s != logdbTan {
			return nil, fmt.Errorf("-logdb: %q: want pebble or tan", s)
		}
		c.logdbs = append(c.logdbs, s)
	}
	o := c.cluster
	if _, ok := logdbMems[o.logdbMem]; !ok {
		return nil, fmt.Errorf("-logdb-mem: %q: want large, medium, small or tiny", o.logdbMem)
	}
	switch {
	case c.writers < 1:
		return nil, errors.New("-writers must be positive")
	case c.active < 0:
		return nil, errors.New("-active must not be negative")
	case c.duration <= 0:
		return nil, errors.New("-duration must be positive")
	case c.warmup < 0 || c.idle < 0:
		return nil, errors.New("-warmup and -idle must not be negative")
	case c.proposeTimeout <= 0 || c.startTimeout <= 0:
		return nil, errors.New("-propose-timeout and -start-timeout must be positive")
	case o.rttMillisecond < 1:
		return nil, errors.New("-rtt must be positive")
	case o.heartbeatRTT < 1 || o.electionRTT <= 2*o.heartbeatRTT:
		// dragonboat's Config.Validate.
		return nil, errors.New("-heartbeat-rtt must be positive and -election-rtt more than twice it")
	}
	if c.settle < 0 {
		c.settle = 0
		if o.quiesce {
			c.settle = quiesceAfter(o) + 2*time.Second
		}
	}
	if _, ok := logLevels[c.logLevel]; !ok && c.logLevel != "" {
		return nil, fmt.Errorf("-log: %q: want debug, info, warning or error", c.logLevel)
	}
	return c, nil
}

func mainExit() int {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbload: %v\n", err)
		return 2
	}
	setLogger(cfg.logLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, cfg)
}

// run measures every configuration, in order of groups then LogDBs, and
// prints a line for each as it completes. It returns the exit code: 1 if
// a configuration failed (said on stderr; the others still run).
func run(ctx context.Context, cfg *runConfig) int {
	failed := 0
	printHeader(cfg.out)
	for _, n := range cfg.groups {
		for _, logdb := range cfg.logdbs {
			r, err := runOne(ctx, cfg, logdb, n)
			if err != nil {
				fmt.Fprintf(os.Stderr, "dbload: %s LogDB, %d shards: %v\n", logdb, n, err)
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

// result is one configuration's figures.
type result struct {
	logdb                   string
	groups, active, writers int
	load                    loadResult
	errors                  int
	firstErr                error
	retries                 int64
	goroutinesHost          float64
	heapReplica             float64 // bytes
	rssReplica              float64 // bytes
	idleCPUHost             float64 // cores
	cpuPerWrite             time.Duration
	started, leaders        time.Duration
	detail                  []string
}

func printHeader(w io.Writer) {
	fmt.Fprintf(w, "%-7s %6s %6s %7s %9s %7s %7s %8s %8s %9s %9s %9s %9s %8s %6s\n",
		"logdb", "groups", "active", "writers", "writes/s", "p50-ms", "p99-ms", "grp-p99", "gor/host", "heap/rep", "rss/rep", "idle-cpu", "cpu/write", "leaders", "errors")
}

func printResult(w io.Writer, r *result) {
	fmt.Fprintf(w, "%-7s %6d %6d %7d %9.0f %7.2f %7.2f %8.2f %8.0f %8.1fK %8.1fK %8.1f%% %7.0fµs %7.2fs %6d\n",
		r.logdb, r.groups, r.active, r.writers, r.load.perSec, ms(r.load.p50), ms(r.load.p99), ms(r.load.shardP99),
		r.goroutinesHost, r.heapReplica/1024, r.rssReplica/1024, 100*r.idleCPUHost, float64(r.cpuPerWrite)/1e3,
		r.leaders.Seconds(), r.errors)
	for _, d := range r.detail {
		fmt.Fprintf(w, "        %s\n", d)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// runOne measures one configuration on a fresh cluster in a temp dir.
func runOne(ctx context.Context, cfg *runConfig, logdb string, n int) (*result, error) {
	dir, err := os.MkdirTemp("", "dbload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	active := n
	if cfg.active > 0 && cfg.active < n {
		active = cfg.active
	}
	r := &result{logdb: logdb, groups: n, active: active, writers: cfg.writers}

	runtime.GC()
	baseG := runtime.NumGoroutine()
	baseHeap := heapAlloc()
	baseRSS := rss()

	o := cfg.cluster
	o.logdb = logdb
	sctx, cancel := context.WithTimeout(ctx, cfg.startTimeout)
	c, err := startCluster(sctx, n, dir, o)
	cancel()
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			c.close()
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
		if stopIdle, err = startCPUProfile(profileName(cfg, cfg.idleProfile, logdb, n)); err != nil {
			return nil, err
		}
	}
	cpu0, t0 := cpuTime(), time.Now()
	serr := sleep(ctx, cfg.idle)
	cpuIdle, wallIdle := cpuTime()-cpu0, time.Since(t0)
	if stopIdle != nil {
		serr = errors.Join(serr, stopIdle())
	}
	if serr != nil {
		return nil, serr
	}
	if cfg.idle > 0 {
		r.idleCPUHost = float64(cpuIdle) / numHosts / float64(wallIdle)
	}
	idleHeap, idleRSS := heapAlloc(), rss()
	r.heapReplica = float64(int64(idleHeap)-int64(baseHeap)) / float64(n*numHosts)
	r.rssReplica = float64(int64(idleRSS)-int64(baseRSS)) / float64(n*numHosts)
	if cfg.memProfile != "" {
		if err := writeHeapProfile(profileName(cfg, cfg.memProfile, logdb, n)); err != nil {
			return nil, err
		}
	}
	lph := c.leadersPerHost()

	// The load: warm-up, then the measured window.
	l := startLoad(ctx, c, cfg.writers, active, cfg.proposeTimeout)
	if err := sleep(ctx, cfg.warmup); err != nil {
		l.finish()
		return nil, err
	}
	var stopProfile func() error
	if cfg.cpuProfile != "" {
		if stopProfile, err = startCPUProfile(profileName(cfg, cfg.cpuProfile, logdb, n)); err != nil {
			l.finish()
			return nil, err
		}
	}
	from, cpu1 := time.Since(l.start), cpuTime()
	serr = sleep(ctx, cfg.duration)
	to := time.Since(l.start)
	cpu2 := cpuTime()
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
	loadRSS := rss()
	closeDur := c.close()
	closed = true
	if cfg.verbose {
		secs := (to - from).Seconds()
		r.detail = append(r.detail,
			fmt.Sprintf("start calls %s, every shard with a leader after %s; leaders per host %v; open files %d (%.1f per replica); close %s",
				r.started.Round(time.Millisecond), r.leaders.Round(time.Millisecond), lph, fds, float64(fds)/float64(n*numHosts), closeDur.Round(time.Millisecond)),
			fmt.Sprintf("writes %d in %.1fs (shards written %d of %d active, fewest writes in a shard %d); retries %d",
				r.load.writes, secs, r.load.shardsWritten, active, r.load.minShardWrites, r.retries),
			fmt.Sprintf("goroutines %d before the cluster, %.0f per host after; heap %.1f MiB before, %.1f KiB per replica; RSS %.1f MiB before, %.1f MiB idle, %.1f MiB after the load",
				baseG, r.goroutinesHost, float64(baseHeap)/(1<<20), r.heapReplica/1024,
				float64(baseRSS)/(1<<20), float64(idleRSS)/(1<<20), float64(loadRSS)/(1<<20)))
	}
	if r.firstErr != nil {
		r.detail = append(r.detail, fmt.Sprintf("first error: %v", r.firstErr))
	}
	return r, nil
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

// heapAlloc is HeapAlloc after a full GC.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rss is the process's resident set in bytes after the freed heap went
// back to the OS (Linux: VmRSS of /proc/self/status; 0 elsewhere).
func rss() uint64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// openFiles counts the process's open file descriptors (Linux: entries of
// /proc/self/fd; -1 elsewhere).
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileName is the profile file of one configuration: name itself when
// the run has one configuration, otherwise name with -<logdb>-<groups>
// before its extension.
func profileName(cfg *runConfig, name, logdb string, n int) string {
	if len(cfg.groups)*len(cfg.logdbs) == 1 {
		return name
	}
	ext := filepath.Ext(name)
	return fmt.Sprintf("%s-%s-%d%s", strings.TrimSuffix(name, ext), logdb, n, ext)
}

func startCPUProfile(name string) (func() error, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
