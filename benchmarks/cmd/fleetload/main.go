// Command fleetload measures what a fleet of standbys costs the leader
// (issue 36, "Performance"): 3 voters with fsync on, N standbys in
// processes of their own (without fsync: they stand in for members on
// machines of their own), W closed-loop writers of 512-byte commands on the
// leader; for understudy (a Host with one group, TCP on 127.0.0.1, Relay on
// or off) and hashicorp/raft (its non-voters, configured as benchmarks'
// Tuned profile: raft-boltdb behind LogCache(512), TCP transport).
//
// Per configuration it prints the leader's writes/s, p50 and p99 per write,
// its bytes and messages sent and CPU per committed write (the leader
// process's own counters over the measured window), their ratios to the
// same system with no standby, and each standby's lag behind the commit:
// for every sampled index, the time the standby applied it minus the time
// the leader applied it (right after committing it), p50 and p99 over
// every standby and sample.
//
// The same binary is every member: the driver starts itself again with
// -role member (one process per member) and drives the members through a
// small HTTP control endpoint each. With -kill-relays D it kills (SIGKILL)
// a relay every D during the load and starts it again after -kill-down:
// understudy's relays are read from the leader's Status (PeerProgress.
// RelayedBy); hashicorp has none, so a non-voter is killed instead.
//
// Closed loop, the standby processes take cores the voters would use, so a
// configuration with standbys runs at a lower writes/s, and the leader's
// CPU per write then also counts the smaller batches. With -rate R the
// writers together write at most R a second: at an R both configurations
// sustain, CPU and bytes per write compare the same load. With -pin
// VOTERS:STANDBYS (Linux) the driver and the voter processes run on the
// first CPUs and the standby processes on the second, the same for every
// system and standby count: the voters keep their cores whatever the
// standby count, and the standbys stand in for machines of their own.
//
// With -standby-procs K the standbys run in K processes, several members
// to a process (each its own Host or raft, listener and data dir). Many
// standby processes on one core pay one Go runtime each: its sysmon thread
// wakes every 20 µs while the process works, and 24 of them took a quarter
// of the standby core's samples with the fleet idle. Members on machines
// of their own do not pay that to each other; one process does not pay it
// 24 times, but marks the 24 members' states in one collection
// (-standby-gogc sets the standby processes' GOGC, to see how much).
//
//	go run ./cmd/fleetload -standbys 0,6,12,24,48 -system understudy,hashicorp -duration 10s -rounds 2
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// memberEnv marks a member process (for the test binary, whose TestMain
// runs the member role when it is set).
const memberEnv = "FLEETLOAD_MEMBER"

func main() {
	args := os.Args[1:]
	if len(args) >= 2 && args[0] == "-role" && args[1] == "member" {
		if err := runMember(args); err != nil {
			fmt.Fprintln(os.Stderr, "fleetload member:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetload:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleetload:", err)
		os.Exit(1)
	}
}

type config struct {
	// leaderProfile: a CPU profile of the leader process over the measured
	// window is written to leaderProfile-SYSTEM-N.pprof ("" none).
	leaderProfile string
	// standbyProfile: the same of the first standby process, written to
	// standbyProfile-SYSTEM-N.pprof ("" none).
	standbyProfile string
	// latencyLog: every measured write's start and latency are written to
	// latencyLog-SYSTEM-N.txt ("" none).
	latencyLog    string
	systems       []string
	standbys      []int
	writers       int
	rate          float64 // writes per second in all (0: as fast as the writers go)
	size          int
	duration      time.Duration
	warmup        time.Duration
	rounds        int
	relay         bool
	relayAnswers  bool
	engine        string
	snapshotCount uint64
	// learnerBatchDelay: transport.Config.LearnerBatchDelay of every
	// member (0: the default).
	learnerBatchDelay time.Duration
	// inlineApply: raft.Config.InlineApply of every member.
	inlineApply bool
	// snapshotLogRatio: raft.Config.SnapshotLogRatio of every member.
	snapshotLogRatio float64
	killEvery        time.Duration
	// standbyProcs: the standbys run in this many processes (0: one
	// process each).
	standbyProcs int
	// standbyGOGC: the standby processes' GOGC (0: the environment's).
	standbyGOGC   int
	killDown      time.Duration
	tick          time.Duration
	electionTicks int
	standbyFsync  bool
	sampleEvery   uint64
	timeout       time.Duration
	dir           string
	keep          bool
	verbose       bool
	pin           *pinning // nil: no pinning
	out           io.Writer
	// beforeLoad, if set, runs once the configuration's members are ready,
	// before the load (tests inject faults with it).
	beforeLoad func(c *cluster)
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("fleetload", flag.ContinueOnError)
	c := &config{out: os.Stdout}
	var systems, standbys, role, pin string
	fs.StringVar(&role, "role", "driver", "driver, or member (how the driver starts the member processes)")
	fs.StringVar(&systems, "system", "understudy,hashicorp", "systems, comma-separated: understudy, hashicorp")
	fs.StringVar(&standbys, "standbys", "0,6,12,24,48", "standby counts, comma-separated (ratios are against 0, so list it first)")
	fs.IntVar(&c.writers, "writers", 32, "closed-loop writers on the leader")
	fs.Float64Var(&c.rate, "rate", 0, "cap the writers at this many writes per second in all (0: closed loop, as fast as they go): the leader's CPU and bytes per write are then compared at the same throughput with and without standbys, rather than at throughputs the standby processes' share of the cores sets")
	fs.IntVar(&c.size, "size", 512, "bytes per write (a kv put)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured load per configuration")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured load before the measured window")
	fs.IntVar(&c.rounds, "rounds", 1, "rounds; each runs every standby count for every system in turn (A B A B)")
	fs.BoolVar(&c.relay, "relay", true, "understudy: standbys fed through relays (raft.Config.Relay; -relay=false: GroupConfig.DisableRelay)")
	fs.StringVar(&c.engine, "engine", "pebble", "understudy: the storage engine of every member, pebble (the library's default for a new data dir) or bolt")
	fs.Uint64Var(&c.snapshotCount, "snapshot-count", 0, "understudy: raft.Config.SnapshotCount of every member (0: the default)")
	fs.Float64Var(&c.snapshotLogRatio, "snapshot-log-ratio", 0, "understudy: raft.Config.SnapshotLogRatio of every member (0: the default, 1)")
	fs.BoolVar(&c.inlineApply, "inline-apply", false, "understudy: raft.Config.InlineApply of every member (small applied batches on the loop's worker: kv's Apply is quick)")
	fs.DurationVar(&c.learnerBatchDelay, "learner-batch-delay", 0, "understudy: transport.Config.LearnerBatchDelay of every member, how long messages to a standby are gathered (0: the default, 10ms)")
	fs.BoolVar(&c.relayAnswers, "relay-answers", true, "understudy: standbys answer through their relay, gathered (raft.Config.RelayAnswers; -relay-answers=false: GroupConfig.DisableRelayAnswers)")
	fs.DurationVar(&c.killEvery, "kill-relays", 0, "kill -9 a relay (hashicorp: a non-voter) this often during the load, and start it again (0: never)")
	fs.IntVar(&c.standbyProcs, "standby-procs", 0, "run the standbys in this many processes, several members (each its own Host or raft, TCP listener and data dir) to a process (0: one process per standby). With many standbys on few cores, one Go runtime per standby costs a core's share of its own (each process's sysmon thread and context switches) that members on machines of their own do not pay")
	fs.IntVar(&c.standbyGOGC, "standby-gogc", 0, "the standby processes' GOGC (0: the environment's). A diagnostic for -standby-procs: one process holding many standbys' states marks them all in one collection, on the one core that serves them all, where a member on a machine of its own marks its own state alone")
	fs.DurationVar(&c.killDown, "kill-down", 500*time.Millisecond, "how long a killed member stays down")
	fs.StringVar(&c.latencyLog, "latency-log", "", "write every measured write's start (µs from the window's start) and latency (µs), one a line, to PREFIX-SYSTEM-STANDBYS.txt (an absolute PREFIX: the leader process writes it)")
	fs.StringVar(&c.leaderProfile, "leader-profile", "", "write a CPU profile of the leader process over each measured window to PREFIX-SYSTEM-STANDBYS.pprof")
	fs.StringVar(&c.standbyProfile, "standby-profile", "", "write a CPU profile of the first standby process over each measured window to PREFIX-SYSTEM-STANDBYS.pprof")
	fs.DurationVar(&c.tick, "tick", 20*time.Millisecond, "understudy's raft tick (heartbeat every tick, election after -election-ticks): 20ms makes its election timeout hashicorp's 200ms")
	fs.IntVar(&c.electionTicks, "election-ticks", 10, "understudy's election timeout in ticks")
	fs.BoolVar(&c.standbyFsync, "standby-fsync", false, "fsync on the standbys too")
	fs.Uint64Var(&c.sampleEvery, "sample-every", 8, "lag: sample every index divisible by this")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "bound on one configuration, start to end")
	fs.StringVar(&c.dir, "dir", "", "where the members' data dirs go (default: the system's temp dir)")
	fs.BoolVar(&c.keep, "keep", false, "keep the data dirs and member logs")
	fs.BoolVar(&c.verbose, "v", false, "print each configuration's steps")
	fs.StringVar(&pin, "pin", "", "VOTERS:STANDBYS CPU lists (e.g. 0:1): the driver and the 3 voter processes run on the first CPUs, the standby processes on the second (Linux; each process binds its threads and sets GOMAXPROCS to its CPU count); the same for every system and standby count. Default: no pinning")
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	for s := range strings.SplitSeq(systems, ",") {
		if s != "understudy" && s != "hashicorp" {
			return nil, fmt.Errorf("-system: unknown %q", s)
		}
		c.systems = append(c.systems, s)
	}
	for s := range strings.SplitSeq(standbys, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-standbys: bad count %q", s)
		}
		c.standbys = append(c.standbys, n)
	}
	if c.engine != "bolt" && c.engine != "pebble" {
		return nil, fmt.Errorf("-engine: %q is neither bolt nor pebble", c.engine)
	}
	if c.pin, err = parsePin(pin); err != nil {
		return nil, fmt.Errorf("-pin: %w", err)
	}
	if c.standbyProcs < 0 || c.standbyGOGC < 0 {
		return nil, errors.New("-standby-procs and -standby-gogc must not be negative")
	}
	if c.writers < 1 || c.size < 64 || c.duration <= 0 || c.rounds < 1 || c.sampleEvery == 0 || c.rate < 0 {
		return nil, errors.New("-writers and -rounds must be positive, -size at least 64, -duration positive, -rate not negative")
	}
	return c, nil
}

// result is one configuration's figures.
type result struct {
	system      string
	standbys    int
	load        loadResult
	relayed     int // standbys fed through a relay at the load's start
	kills       int
	lagP50      time.Duration
	lagP99      time.Duration
	lagSamples  int
	lagMissing  int // sampled indexes a standby had not applied by the end
	lagStandbys int // standbys whose lag is counted: those never killed
}

func (r result) perSec() float64 { return float64(r.load.Writes) / r.load.Elapsed.Seconds() }
func (r result) bytesPer() float64 {
	return float64(r.load.Bytes) / float64(max(r.load.Writes, 1))
}
func (r result) msgsPer() float64 { return float64(r.load.Msgs) / float64(max(r.load.Writes, 1)) }
func (r result) cpuPer() float64 {
	return float64(r.load.CPU) / float64(time.Millisecond) / float64(max(r.load.Writes, 1))
}

func run(ctx context.Context, cfg *config) error {
	if cfg.pin != nil {
		if err := pinSelf(cfg.pin.voters); err != nil {
			return fmt.Errorf("-pin: the driver: %w", err)
		}
	}
	fmt.Fprintf(cfg.out, "pinning: %s\n", cfg.pin)
	tw := tabwriter.NewWriter(cfg.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tstandbys\trelayed\tkills\twrites/s\tp50 ms\tp99 ms\tB/write\tmsgs/write\tCPU ms/write\tB x0\tCPU x0\twrites/s x0\tlag p50 ms\tlag p99 ms\t")
	tw.Flush()
	// A configuration that fails prints its row with the error and the
	// next one runs; the run fails at the end.
	var failed []error
	total := 0
	for round := range cfg.rounds {
		base := map[string]result{}
		for _, n := range cfg.standbys {
			for _, sys := range cfg.systems {
				total++
				r, err := runOne(ctx, cfg, sys, n)
				if err != nil {
					err = fmt.Errorf("round %d, %s with %d standbys: %w", round+1, sys, n, err)
					failed = append(failed, err)
					fmt.Fprintf(tw, "%s\t%d\t  FAILED: %v\n", sys, n, err)
					tw.Flush()
					if ctx.Err() != nil {
						return errors.Join(failed...)
					}
					continue
				}
				if n == 0 {
					base[sys] = r
				}
				printRow(tw, r, base[sys])
				tw.Flush()
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d configurations failed: %w", len(failed), total, errors.Join(failed...))
	}
	return nil
}

func printRow(w io.Writer, r, base result) {
	ratio := func(a, b float64) string {
		if base.load.Writes == 0 || b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	relayed := "-"
	if r.system == "understudy" {
		relayed = fmt.Sprint(r.relayed)
	}
	lag50, lag99 := "-", "-"
	if r.lagSamples > 0 {
		lag50, lag99 = ms(r.lagP50), ms(r.lagP99)
		if r.lagMissing > 0 {
			lag99 += fmt.Sprintf(" (%d missing)", r.lagMissing)
		}
	}
	fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%.0f\t%s\t%s\t%.0f\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t%s\t\n",
		r.system, r.standbys, relayed, r.kills, r.perSec(), ms(r.load.P50), ms(r.load.P99),
		r.bytesPer(), r.msgsPer(), r.cpuPer(),
		ratio(r.bytesPer(), base.bytesPer()), ratio(r.cpuPer(), base.cpuPer()), ratio(r.perSec(), base.perSec()),
		lag50, lag99)
}

// cluster is one configuration's member processes.
type cluster struct {
	cfg      *config
	system   string
	voters   []*proc
	standbys []*proc
	leader   *proc
}

func (c *cluster) all() []*proc { return append(slices.Clone(c.voters), c.standbys...) }

func (c *cluster) logf(format string, args ...any) {
	if c.cfg.verbose {
		fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format("15:04:05.000"), c.system, fmt.Sprintf(format, args...))
	}
}

// runOne starts 3 voters and n standbys of system, runs the load on the
// leader and collects the standbys' apply times.
func runOne(ctx context.Context, cfg *config, system string, n int) (res result, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout+cfg.warmup+cfg.duration)
	defer cancel()
	dir, err := os.MkdirTemp(cfg.dir, fmt.Sprintf("fleetload-%s-%d-", system, n))
	if err != nil {
		return res, err
	}
	if !cfg.keep {
		defer os.RemoveAll(dir)
	}
	addrs, err := freeAddrs(2 * (3 + n))
	if err != nil {
		return res, err
	}
	c := &cluster{cfg: cfg, system: system}
	defer func() {
		var wg sync.WaitGroup
		for _, pr := range processes(c.all()) {
			wg.Go(func() { pr.stop(5 * time.Second) })
		}
		wg.Wait()
	}()
	defer func() {
		// A step that failed because a member died says so.
		if d := c.died(); err != nil && d != nil && !strings.Contains(err.Error(), d.Error()) {
			err = errors.Join(err, d)
		}
	}()
	voters := []string{addrs[0], addrs[2], addrs[4]} // member i: peer addrs[2(i-1)], control addrs[2(i-1)+1]
	for i := range 3 + n {
		p := &proc{flags: memberFlags{system: system, id: uint64(i + 1), dir: fmt.Sprintf("%s/m%d", dir, i+1),
			listen: addrs[2*i], ctl: addrs[2*i+1], voters: voters, standby: i >= 3, fsync: i < 3 || cfg.standbyFsync,
			tick: cfg.tick, electionTicks: cfg.electionTicks, relay: cfg.relay, relayAnswers: cfg.relayAnswers, engine: cfg.engine, snapshotCount: cfg.snapshotCount, learnerBatchDelay: cfg.learnerBatchDelay, inlineApply: cfg.inlineApply, snapshotLogRatio: cfg.snapshotLogRatio, maxLearners: max(n, 2), sampleEvery: cfg.sampleEvery}}
		if cfg.pin != nil {
			p.flags.cpus = cfg.pin.voters
			if i >= 3 {
				p.flags.cpus = cfg.pin.standbys
			}
		}
		if i < 3 {
			c.voters = append(c.voters, p)
			newProcess(p)
		} else {
			p.flags.gogc = cfg.standbyGOGC
			c.standbys = append(c.standbys, p)
		}
	}
	// The standbys' processes: one each, or -standby-procs of them, each
	// running a contiguous run of standbys.
	procs := n
	if cfg.standbyProcs > 0 {
		procs = min(cfg.standbyProcs, n)
	}
	for k := range procs {
		newProcess(c.standbys[k*n/procs : (k+1)*n/procs]...)
	}
	c.logf("%d standbys, data under %s", n, dir)
	if err := startAll(ctx, c.voters); err != nil {
		return res, err
	}
	if err := c.findLeader(ctx); err != nil {
		return res, err
	}
	c.logf("leader %d", c.leader.flags.id)
	if err := c.addStandbys(ctx); err != nil {
		return res, err
	}
	if err := c.waitCaughtUp(ctx, 0); err != nil {
		return res, err
	}
	if err := c.checkPinned(ctx); err != nil {
		return res, err
	}
	res.relayed = c.waitRelayed(ctx)
	c.logf("%d standbys caught up, %d relayed", n, res.relayed)

	if cfg.beforeLoad != nil {
		cfg.beforeLoad(c)
	}
	kctx, kcancel := context.WithCancel(ctx)
	killer := &killer{c: c, killed: map[uint64]bool{}}
	var kwg sync.WaitGroup
	if cfg.killEvery > 0 && n > 0 {
		kwg.Go(func() { killer.loop(kctx) })
	}
	if cfg.leaderProfile != "" {
		kwg.Go(func() { c.profile(kctx, cfg, c.leader, cfg.leaderProfile, n) })
	}
	if cfg.standbyProfile != "" && n > 0 {
		kwg.Go(func() { c.profile(kctx, cfg, c.standbys[0], cfg.standbyProfile, n) })
	}
	// How busy the standbys' CPUs were over the window (-pin, -v): a
	// saturated standby core is a lag the fan-out does not make.
	var busy0, total0 atomic.Uint64
	if cfg.pin != nil && cfg.verbose && n > 0 {
		kwg.Go(func() {
			if sleep(kctx, cfg.warmup) == nil {
				b, t, err := cpuTimes(cfg.pin.standbys)
				if err == nil {
					busy0.Store(b)
					total0.Store(t)
				}
			}
		})
	}
	var load loadResult
	err = c.leader.call(ctx, "POST", "/load", loadRequest{Writers: cfg.writers, Rate: cfg.rate, Size: cfg.size, Warmup: cfg.warmup, Duration: cfg.duration, LatencyLog: cfg.latencyLogFile(system, n)}, &load)
	if t0 := total0.Load(); t0 != 0 {
		if b, t, err := cpuTimes(cfg.pin.standbys); err == nil && t > t0 {
			c.logf("standby CPUs %v: %.0f%% busy over the window (/proc/stat)", cfg.pin.standbys, 100*float64(b-busy0.Load())/float64(t-t0))
		}
	}
	kcancel()
	kwg.Wait()
	if derr := c.died(); derr != nil {
		return res, errors.Join(derr, err)
	}
	if err != nil {
		return res, err
	}
	if load.Writes == 0 {
		return res, fmt.Errorf("no write committed in the window (%d errors, first: %s)", load.Errors, load.FirstErr)
	}
	res.system, res.standbys, res.load, res.kills = system, n, load, killer.kills
	c.logf("load: %d writes, %d errors %s, indexes %d..%d, leader sent %d messages, %d bytes; its storage: %d commits, %d saves; it read %.2f messages a write from voters, %.2f from learners", load.Writes, load.Errors, load.FirstErr, load.FirstIndex, load.LastIndex, load.Msgs, load.Bytes, load.StoreCommits, load.StoreSaves,
		float64(load.MsgsInVoters)/float64(load.Writes), float64(load.MsgsInLearners)/float64(load.Writes))
	if cfg.verbose {
		for _, p := range c.voters {
			st, err := p.status(ctx)
			c.logf("voter %d: applied %d commit %d %v", p.flags.id, st.Applied, st.Commit, err)
		}
	}
	if n > 0 {
		if err := c.lag(ctx, &res, killer.killed); err != nil {
			return res, err
		}
	}
	return res, c.died()
}

// died returns an error for each member process that exited without the
// driver killing or stopping it.
func (c *cluster) died() error {
	var errs []error
	for _, pr := range processes(c.all()) {
		if err := pr.died(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startAll starts the processes of ps at once and waits until each is
// ready.
func startAll(ctx context.Context, ps []*proc) error {
	prs := processes(ps)
	errs := make([]error, len(prs))
	var wg sync.WaitGroup
	for i, pr := range prs {
		wg.Go(func() { errs[i] = pr.start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *cluster) findLeader(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return waitFor(wctx, "no leader", func() (bool, error) {
		for _, p := range c.voters {
			if st, err := p.status(wctx); err == nil && st.Leader {
				c.leader = p
				return true, nil
			}
		}
		return false, nil
	})
}

// addStandbys adds the standbys as an operator would. understudy: add each
// on the leader (AddLearner), then start its process, which joins through
// the voters (with -standby-procs: add the process's standbys, then start
// it); hashicorp: start the processes, then add each on the leader
// (AddNonvoter).
func (c *cluster) addStandbys(ctx context.Context) error {
	if len(c.standbys) == 0 {
		return nil
	}
	if c.system == "hashicorp" {
		if err := startAll(ctx, c.standbys); err != nil {
			return err
		}
		for _, p := range c.standbys {
			if err := c.leader.add(ctx, p.flags.id, p.flags.listen); err != nil {
				return err
			}
		}
		return nil
	}
	prs := processes(c.standbys)
	errs := make([]error, len(prs))
	var wg sync.WaitGroup
	for i, pr := range prs {
		for _, p := range pr.members {
			if err := c.leader.add(ctx, p.flags.id, p.flags.listen); err != nil {
				wg.Wait()
				return err
			}
		}
		wg.Go(func() { errs[i] = pr.start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitCaughtUp waits until every standby applied the leader's commit index
// (at least index).
func (c *cluster) waitCaughtUp(ctx context.Context, index uint64) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.leader.status(wctx)
	if err != nil {
		return err
	}
	want := max(st.Commit, index)
	for _, p := range c.standbys {
		err := waitFor(wctx, fmt.Sprintf("standby %d did not apply %d", p.flags.id, want), func() (bool, error) {
			st, err := p.status(wctx)
			return err == nil && st.Applied >= want, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// checkPinned checks that every member runs on the CPUs -pin gave it, with
// GOMAXPROCS their count.
func (c *cluster) checkPinned(ctx context.Context) error {
	if c.cfg.pin == nil {
		return nil
	}
	for _, p := range c.all() {
		st, err := p.status(ctx)
		if err != nil {
			return err
		}
		if !slices.Equal(st.CPUs, p.flags.cpus) || st.GOMAXPROCS != len(p.flags.cpus) {
			return fmt.Errorf("member %d runs on CPUs %v with GOMAXPROCS %d, not on %v", p.flags.id, st.CPUs, st.GOMAXPROCS, p.flags.cpus)
		}
	}
	return nil
}

// waitRelayed waits up to 10 s for understudy's leader to feed every
// standby through a relay (with -relay), and returns how many it does.
func (c *cluster) waitRelayed(ctx context.Context) int {
	if c.system != "understudy" || !c.cfg.relay || len(c.standbys) == 0 {
		return 0
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	relayed := 0
	_ = waitFor(wctx, "relayed", func() (bool, error) {
		st, err := c.leader.status(wctx)
		relayed = len(st.Relayed)
		return err == nil && relayed == len(c.standbys), err
	})
	return relayed
}

// lag waits for the standbys to apply the window's last index, then
// compares each one's apply time of every sampled index of the window with
// the leader's. Standbys killed during the run are left out (a restarted
// process knows nothing of what it applied before).
func (c *cluster) lag(ctx context.Context, res *result, killed map[uint64]bool) error {
	from, to := res.load.FirstIndex, res.load.LastIndex
	leader, err := c.leader.samples(ctx, from, to)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lags []int64
	// For -v: each standby's own p50/p99, and when in the window the late
	// samples came, split by relay and by standby process: all standbys
	// late at once points at the leader, one relay's standbys at that
	// relay, one process's standbys (with -standby-procs) at that process.
	const lateLag, lateBucket = int64(40 * time.Millisecond), 250 * time.Millisecond
	// late counts the late samples by bucket, by the relay that fed the
	// standby (0: none or unknown) and by its process (named by its first
	// member).
	late := map[int64]map[string]int{}
	var perStandby []string
	var relayOf map[uint64]uint64
	if c.cfg.verbose && c.system == "understudy" {
		if st, err := c.leader.status(ctx); err == nil {
			relayOf = st.Relayed
		}
	}
	for _, p := range c.standbys {
		if killed[p.flags.id] {
			continue
		}
		_ = waitFor(wctx, "", func() (bool, error) {
			st, err := p.status(wctx)
			return err == nil && st.Applied >= to, err
		})
		s, err := p.samples(ctx, from, to)
		if err != nil {
			return err
		}
		at := make(map[int64]int64, len(s))
		for _, x := range s {
			at[x[0]] = x[1]
		}
		res.lagStandbys++
		var own []int64
		for _, x := range leader {
			t, ok := at[x[0]]
			if !ok {
				res.lagMissing++
				continue
			}
			l := max(t-x[1], 0)
			lags = append(lags, l)
			own = append(own, l)
			if l > lateLag {
				k := (x[1] - leader[0][1]) / int64(lateBucket)
				if late[k] == nil {
					late[k] = map[string]int{}
				}
				late[k][fmt.Sprintf("via %d in %d", relayOf[p.flags.id], p.proc.members[0].flags.id)]++
			}
		}
		slices.Sort(own)
		perStandby = append(perStandby, fmt.Sprintf("%d(via %d):%s/%s", p.flags.id, relayOf[p.flags.id], ms(time.Duration(percentile(own, 0.5))), ms(time.Duration(percentile(own, 0.99)))))
	}
	if len(leader) > 0 {
		c.logf("lag p50/p99 ms per standby: %s", strings.Join(perStandby, " "))
		var b []string
		for k, by := range late {
			n, via := 0, []string{}
			for r, m := range by {
				n += m
				via = append(via, fmt.Sprintf("%s:%d", r, m))
			}
			slices.Sort(via)
			b = append(b, fmt.Sprintf("%05.2fs:%d(%s)", (time.Duration(k)*lateBucket).Seconds(), n, strings.Join(via, ",")))
		}
		slices.Sort(b)
		c.logf("samples over %v late, by %v from the first sample (%s), by the relay that fed the standby and by its process: %s", time.Duration(lateLag), lateBucket, time.Unix(0, leader[0][1]).Format("15:04:05.000"), strings.Join(b, " "))
	}
	slices.Sort(lags)
	res.lagSamples = len(lags)
	res.lagP50, res.lagP99 = time.Duration(percentile(lags, 0.50)), time.Duration(percentile(lags, 0.99))
	return nil
}

// killer kills a relay (understudy: a member some standby's
// PeerProgress.RelayedBy names; hashicorp, or no relay: a standby) every
// cfg.killEvery and starts it again after cfg.killDown.
type killer struct {
	c      *cluster
	mu     sync.Mutex
	killed map[uint64]bool
	kills  int
}

func (k *killer) loop(ctx context.Context) {
	c := k.c
	byID := map[uint64]*proc{}
	for _, p := range c.all() {
		byID[p.flags.id] = p
	}
	// One member down at a time: the next kill comes killEvery after the
	// last, and not before the last one's restart is ready (two voters
	// down at once would be a lost quorum, not a relay's loss).
	next := time.Now().Add(c.cfg.killEvery)
	for i := 0; sleep(ctx, time.Until(next)) == nil; i++ {
		var victims []uint64
		if c.system == "understudy" {
			if st, err := c.leader.status(ctx); err == nil {
				for _, r := range st.Relayed {
					if r != c.leader.flags.id && !slices.Contains(victims, r) {
						victims = append(victims, r)
					}
				}
			}
		}
		what := "relay"
		if len(victims) == 0 {
			what = "standby (no relay)"
			for _, p := range c.standbys {
				victims = append(victims, p.flags.id)
			}
		}
		slices.SortFunc(victims, cmp.Compare)
		v := byID[victims[i%len(victims)]]
		c.logf("kill -9 %s %d", what, v.flags.id)
		next = time.Now().Add(c.cfg.killEvery)
		v.kill()
		k.mu.Lock()
		for _, m := range v.proc.members { // the process's other members die with it
			k.killed[m.flags.id] = true
		}
		k.kills++
		k.mu.Unlock()
		_ = sleep(ctx, c.cfg.killDown)
		// Started again even when the load is over: the lag waits for it.
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := v.start(sctx); err != nil {
			c.logf("restart %d: %v", v.flags.id, err)
		}
		cancel()
	}
}

// profile writes a CPU profile of process p over the measured window (after
// the warm-up) to PREFIX-SYSTEM-N.pprof, for -leader-profile and
// -standby-profile.
func (c *cluster) profile(ctx context.Context, cfg *config, p *proc, prefix string, n int) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(cfg.warmup):
	}
	secs := max(1, int(cfg.duration.Seconds()))
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.flags.ctl, secs)
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	name := fmt.Sprintf("%s-%s-%d.pprof", prefix, c.system, n)
	f, err := os.Create(name)
	if err != nil {
		c.logf("profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		c.logf("profile: %v", err)
	}
}

// latencyLogFile is the file -latency-log names for one configuration ("" none).
func (cfg *config) latencyLogFile(system string, standbys int) string {
	if cfg.latencyLog == "" {
		return ""
	}
	return fmt.Sprintf("%s-%s-%d.txt", cfg.latencyLog, system, standbys)
}

// ms formats d in milliseconds, one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
