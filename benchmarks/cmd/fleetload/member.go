package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/time/rate"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/understudy-raft/understudy/kv"
)

// member is one member process's replica, of either system: what the
// control endpoints need.
type member interface {
	// status is the member's view: leader or not, applied and commit
	// index, and on the leader the standbys fed through a relay.
	status(ctx context.Context) (memberStatus, error)
	// add adds a standby (understudy: AddLearner; hashicorp: AddNonvoter)
	// on the leader.
	add(ctx context.Context, id uint64, addr string) error
	// write proposes cmd on the leader and waits until the leader applied it.
	write(ctx context.Context, cmd []byte) error
	// sent is what the member's transport sent so far: raft messages and
	// their bytes, to every peer.
	sent() (msgs, bytes uint64)
	close(ctx context.Context) error
}

// memberStatus is GET /status.
type memberStatus struct {
	ID      uint64 `json:"id"`
	Leader  bool   `json:"leader"`
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	// Relayed maps each relayed standby to its relay (understudy's leader,
	// raft.PeerProgress.RelayedBy).
	Relayed map[uint64]uint64 `json:"relayed,omitempty"`
	// StoreCommits and StoreSaves are the member's storage commits and
	// saves so far (understudy: storage.Metrics).
	StoreCommits uint64 `json:"store_commits,omitempty"`
	StoreSaves   uint64 `json:"store_saves,omitempty"`
	// CPUs the process runs on when pinned (-cpus), and its GOMAXPROCS.
	CPUs       []int `json:"cpus,omitempty"`
	GOMAXPROCS int   `json:"gomaxprocs"`
}

// memberFlags is what a member process is started with.
type memberFlags struct {
	system            string
	id                uint64
	dir               string
	listen            string
	ctl               string
	voters            []string // the voters' peer addresses, IDs 1..3
	standby           bool
	fsync             bool
	tick              time.Duration
	electionTicks     int
	relay             bool
	relayAnswers      bool
	engine            string
	snapshotCount     uint64
	learnerBatchDelay time.Duration
	inlineApply       bool
	snapshotLogRatio  float64
	maxLearners       int
	sampleEvery       uint64
	cpus              []int // pin the process to these CPUs (none: not pinned)
	gogc              int   // the process's GOGC (0: the environment's)
}

func (f *memberFlags) args() []string {
	return []string{"-role", "member", "-system", f.system, "-id", fmt.Sprint(f.id), "-dir", f.dir,
		"-listen", f.listen, "-ctl", f.ctl, "-voters", strings.Join(f.voters, ","),
		fmt.Sprintf("-standby=%t", f.standby), fmt.Sprintf("-fsync=%t", f.fsync), "-tick", f.tick.String(),
		"-election-ticks", fmt.Sprint(f.electionTicks), fmt.Sprintf("-relay=%t", f.relay), fmt.Sprintf("-relay-answers=%t", f.relayAnswers), "-engine", f.engine, "-snapshot-count", fmt.Sprint(f.snapshotCount), "-learner-batch-delay", f.learnerBatchDelay.String(), fmt.Sprintf("-inline-apply=%t", f.inlineApply), "-snapshot-log-ratio", fmt.Sprint(f.snapshotLogRatio),
		"-max-learners", fmt.Sprint(f.maxLearners), "-sample-every", fmt.Sprint(f.sampleEvery), "-cpus", formatCPUs(f.cpus), "-gogc", fmt.Sprint(f.gogc)}
}

func parseMemberFlags(args []string) (*memberFlags, error) {
	fs := flag.NewFlagSet("fleetload member", flag.ContinueOnError)
	f := &memberFlags{}
	var role, voters, cpus string
	fs.StringVar(&role, "role", "member", "")
	fs.StringVar(&f.system, "system", "understudy", "understudy or hashicorp")
	fs.Uint64Var(&f.id, "id", 0, "member ID (1..3: the voters)")
	fs.StringVar(&f.dir, "dir", "", "data dir")
	fs.StringVar(&f.listen, "listen", "", "peer address")
	fs.StringVar(&f.ctl, "ctl", "", "control (HTTP) address")
	fs.StringVar(&voters, "voters", "", "the voters' peer addresses, comma-separated, IDs 1..3")
	fs.BoolVar(&f.standby, "standby", false, "join as a standby (understudy: Join; hashicorp: no bootstrap)")
	fs.BoolVar(&f.fsync, "fsync", true, "fsync the log")
	fs.DurationVar(&f.tick, "tick", 10*time.Millisecond, "understudy's tick")
	fs.IntVar(&f.electionTicks, "election-ticks", 10, "understudy's election timeout in ticks")
	fs.BoolVar(&f.relay, "relay", true, "understudy: raft.Config.Relay")
	fs.BoolVar(&f.relayAnswers, "relay-answers", true, "understudy: raft.Config.RelayAnswers")
	fs.StringVar(&f.engine, "engine", "pebble", "understudy: the storage engine, pebble or bolt")
	fs.Uint64Var(&f.snapshotCount, "snapshot-count", 0, "understudy: raft.Config.SnapshotCount (0: the default)")
	fs.DurationVar(&f.learnerBatchDelay, "learner-batch-delay", 0, "understudy: transport.Config.LearnerBatchDelay (0: the default)")
	fs.BoolVar(&f.inlineApply, "inline-apply", false, "understudy: raft.Config.InlineApply")
	fs.Float64Var(&f.snapshotLogRatio, "snapshot-log-ratio", 0, "understudy: raft.Config.SnapshotLogRatio (0: the default)")
	fs.IntVar(&f.maxLearners, "max-learners", 2, "understudy: confchange.Settings.MaxLearners")
	fs.Uint64Var(&f.sampleEvery, "sample-every", 8, "record the apply time of every index divisible by this")
	fs.IntVar(&f.gogc, "gogc", 0, "the process's GOGC (debug.SetGCPercent; 0: the environment's)")
	fs.StringVar(&cpus, "cpus", "", "pin the process to these CPUs (a list: 0, 0,2, 0-3); empty: not pinned")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if cpus != "" {
		c, err := parseCPUs(cpus)
		if err != nil {
			return nil, fmt.Errorf("-cpus: %w", err)
		}
		f.cpus = c
	}
	f.voters = strings.Split(voters, ",")
	if f.id == 0 || f.dir == "" || f.listen == "" || f.ctl == "" || len(f.voters) != 3 || f.sampleEvery == 0 {
		return nil, errors.New("member: -id, -dir, -listen, -ctl and three -voters are required")
	}
	return f, nil
}

// applySamples records when this process applied the indexes divisible by
// every: the leader's are the commit times of the lag (the leader applies
// an entry right after it commits it), a standby's the times it applied
// them.
type applySamples struct {
	every uint64
	mu    sync.Mutex
	idx   []uint64
	at    []int64 // Unix nanoseconds: one clock for every process of the machine
}

func (s *applySamples) record(indexes func(yield func(uint64) bool)) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	for i := range indexes {
		if i%s.every == 0 {
			s.idx = append(s.idx, i)
			s.at = append(s.at, now)
		}
	}
	s.mu.Unlock()
}

// between returns the samples of indexes in [from, to], the first apply
// of each (a restarted member applies its log again).
func (s *applySamples) between(from, to uint64) [][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][2]int64
	seen := map[uint64]bool{}
	for k, i := range s.idx {
		if i >= from && i <= to && !seen[i] {
			seen[i] = true
			out = append(out, [2]int64{int64(i), s.at[k]})
		}
	}
	return out
}

// memberSep separates the members' flags in the arguments of a process
// that runs several (-standby-procs).
const memberSep = "+member"

// runMember is the member role: it starts the process's replicas (one, or
// several with their flags separated by memberSep), serves each one's
// control endpoints on its -ctl, prints "ready" and runs until SIGTERM or
// SIGINT.
func runMember(args []string) error {
	var fs []*memberFlags
	for set := range splitArgs(args, memberSep) {
		f, err := parseMemberFlags(set)
		if err != nil {
			return err
		}
		if len(fs) > 0 && (!slices.Equal(f.cpus, fs[0].cpus) || f.gogc != fs[0].gogc) {
			return fmt.Errorf("member %d: -cpus %v -gogc %d, not the process's %v and %d", f.id, f.cpus, f.gogc, fs[0].cpus, fs[0].gogc)
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return errors.New("member: no member's flags")
	}
	if len(fs[0].cpus) > 0 {
		if err := pinSelf(fs[0].cpus); err != nil {
			return fmt.Errorf("-cpus: %w", err)
		}
	}
	if fs[0].gogc > 0 {
		debug.SetGCPercent(fs[0].gogc)
	}
	ctx := context.Background()
	var (
		servers []*http.Server
		members []member
		errc    = make(chan error, len(fs))
	)
	closeAll := func(err error) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(cctx)
		}
		for _, m := range members {
			err = errors.Join(err, m.close(cctx))
		}
		return err
	}
	for _, f := range fs {
		srv, m, err := serveMember(ctx, f, errc)
		if err != nil {
			return closeAll(err)
		}
		servers, members = append(servers, srv), append(members, m)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var err error
	select {
	case <-sig:
	case err = <-errc:
	}
	return closeAll(err)
}

// splitArgs yields the runs of args between the separators sep.
func splitArgs(args []string, sep string) func(yield func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(args) > 0 {
			i := slices.Index(args, sep)
			if i < 0 {
				yield(args)
				return
			}
			if !yield(args[:i]) {
				return
			}
			args = args[i+1:]
		}
	}
}

// serveMember starts the replica f describes and serves its control
// endpoints on f.ctl (the server's error goes to errc).
func serveMember(ctx context.Context, f *memberFlags, errc chan<- error) (*http.Server, member, error) {
	samples := &applySamples{every: f.sampleEvery}
	var (
		m   member
		err error
	)
	switch f.system {
	case "understudy":
		m, err = startUnderstudy(ctx, f, samples)
	case "hashicorp":
		m, err = startHashicorp(f, samples)
	default:
		err = fmt.Errorf("unknown system %q", f.system)
	}
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile) // the driver's -leader-profile and -standby-profile
	mux.Handle("GET /debug/pprof/heap", pprof.Handler("heap"))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := m.status(r.Context())
		if len(f.cpus) > 0 {
			st.CPUs = pinnedCPUs()
		}
		st.GOMAXPROCS = runtime.GOMAXPROCS(0)
		reply(w, st, err)
	})
	mux.HandleFunc("POST /add", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.FormValue("id"), 10, 64)
		if err == nil {
			err = m.add(r.Context(), id, r.FormValue("addr"))
		}
		reply(w, struct{}{}, err)
	})
	mux.HandleFunc("POST /load", func(w http.ResponseWriter, r *http.Request) {
		var req loadRequest
		err := json.NewDecoder(r.Body).Decode(&req)
		var res loadResult
		if err == nil {
			res, err = runLoad(r.Context(), m, req)
		}
		reply(w, res, err)
	})
	mux.HandleFunc("GET /samples", func(w http.ResponseWriter, r *http.Request) {
		from, err1 := strconv.ParseUint(r.FormValue("from"), 10, 64)
		to, err2 := strconv.ParseUint(r.FormValue("to"), 10, 64)
		reply(w, samples.between(from, to), errors.Join(err1, err2))
	})
	ln, err := net.Listen("tcp", f.ctl)
	if err != nil {
		return nil, nil, errors.Join(err, m.close(ctx))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { errc <- srv.Serve(ln) }()
	return srv, m, nil
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// loadRequest is POST /load's body: the writers the leader runs.
type loadRequest struct {
	Writers  int           `json:"writers"`
	Rate     float64       `json:"rate,omitempty"` // writes/s in all; 0: closed loop
	Size     int           `json:"size"`
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
	// LatencyLog: when set, the leader writes every measured write's start
	// (from the window's start) and latency, in microseconds, one write a
	// line, to this file: whether the slow writes cluster in time (a stall)
	// or spread (queueing) is what a p99 alone cannot say.
	LatencyLog string `json:"latency_log,omitempty"`
}

// loadResult is what the leader measured over the window (after the
// warm-up): the committed writes, their latencies, its own CPU and what its
// transport sent, and the window's first and last applied index.
type loadResult struct {
	Writes     uint64        `json:"writes"`
	Errors     uint64        `json:"errors"`
	FirstErr   string        `json:"first_err,omitempty"`
	Elapsed    time.Duration `json:"elapsed"`
	CPU        time.Duration `json:"cpu"`
	Msgs       uint64        `json:"msgs"`
	Bytes      uint64        `json:"bytes"`
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	FirstIndex uint64        `json:"first_index"`
	LastIndex  uint64        `json:"last_index"`
	// StoreCommits and StoreSaves: the leader's storage commits and saves
	// over the window.
	StoreCommits uint64 `json:"store_commits,omitempty"`
	StoreSaves   uint64 `json:"store_saves,omitempty"`
	// MsgsInVoters and MsgsInLearners: the raft messages the leader read
	// over the window from its voters and from its learners (systems whose
	// member counts them: understudy).
	MsgsInVoters   uint64 `json:"msgs_in_voters,omitempty"`
	MsgsInLearners uint64 `json:"msgs_in_learners,omitempty"`
}

// receiver is a member that counts the messages it read, by sender kind.
type receiver interface {
	received() (fromVoters, fromLearners uint64)
}

// command is a kv put of exactly size bytes (kv's encoding, which both
// systems' state machines take).
func command(key string, size int) []byte {
	n := max(size-len(key)-5, 0) // the op, three uvarint lengths (the value's of 2 bytes)
	return kv.Put(key, strings.Repeat("v", n))
}

// runLoad runs req.Writers closed-loop writers on m (the leader) for
// req.Warmup, then measures req.Duration. With req.Rate, each write first
// waits for a token of one limiter shared by the writers (x/time/rate), so
// that together they write at most req.Rate a second.
func runLoad(ctx context.Context, m member, req loadRequest) (loadResult, error) {
	if req.Writers < 1 || req.Duration <= 0 {
		return loadResult{}, errors.New("load: writers and duration must be positive")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		measuring atomic.Bool
		writes    atomic.Uint64
		errs      atomic.Uint64
		firstErr  atomic.Value
		wg        sync.WaitGroup
		lats      = make([][]time.Duration, req.Writers)
		starts    = make([][]time.Time, req.Writers)
	)
	var limit *rate.Limiter
	if req.Rate > 0 {
		limit = rate.NewLimiter(rate.Limit(req.Rate), 1)
	}
	for w := range req.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if limit != nil && limit.Wait(ctx) != nil {
					return
				}
				cmd := command(fmt.Sprintf("w%d-%d", w, i%1000), req.Size)
				t0 := time.Now()
				err := m.write(ctx, cmd)
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				writes.Add(1)
				lats[w] = append(lats[w], time.Since(t0))
				if req.LatencyLog != "" {
					starts[w] = append(starts[w], t0)
				}
			}
		}()
	}
	stop := func() { cancel(); wg.Wait() }
	select {
	case <-time.After(req.Warmup):
	case <-ctx.Done():
		stop()
		return loadResult{}, ctx.Err()
	}
	st0, err := m.status(ctx)
	if err != nil {
		stop()
		return loadResult{}, err
	}
	msgs0, bytes0 := m.sent()
	var inV0, inL0 uint64
	rcv, counts := m.(receiver)
	if counts {
		inV0, inL0 = rcv.received()
	}
	cpu0, t0 := cpuTime(), time.Now()
	measuring.Store(true)
	select {
	case <-time.After(req.Duration):
	case <-ctx.Done():
	}
	measuring.Store(false)
	msgs1, bytes1 := m.sent()
	var inV1, inL1 uint64
	if counts {
		inV1, inL1 = rcv.received()
	}
	cpu1, t1 := cpuTime(), time.Now()
	st1, err := m.status(ctx)
	stop()
	if err != nil {
		return loadResult{}, err
	}
	res := loadResult{Writes: writes.Load(), Errors: errs.Load(), Elapsed: t1.Sub(t0), CPU: cpu1 - cpu0,
		Msgs: msgs1 - msgs0, Bytes: bytes1 - bytes0, FirstIndex: st0.Applied, LastIndex: st1.Applied,
		StoreCommits: st1.StoreCommits - st0.StoreCommits, StoreSaves: st1.StoreSaves - st0.StoreSaves,
		MsgsInVoters: inV1 - inV0, MsgsInLearners: inL1 - inL0}
	if s, ok := firstErr.Load().(string); ok {
		res.FirstErr = s
	}
	if req.LatencyLog != "" {
		if err := writeLatencyLog(req.LatencyLog, t0, starts, lats); err != nil {
			return res, err
		}
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.P50, res.P99 = percentile(all, 0.50), percentile(all, 0.99)
	return res, nil
}

// writeLatencyLog writes each write's start (from the window's start t0)
// and latency, in microseconds, one a line, ordered by start.
func writeLatencyLog(path string, t0 time.Time, starts [][]time.Time, lats [][]time.Duration) error {
	type rec struct{ start, lat time.Duration }
	var recs []rec
	for w := range starts {
		for i, s := range starts[w] {
			recs = append(recs, rec{s.Sub(t0), lats[w][i]})
		}
	}
	slices.SortFunc(recs, func(a, b rec) int { return cmp.Compare(a.start, b.start) })
	var b strings.Builder
	fmt.Fprintf(&b, "# t0 %d\n", t0.UnixMicro())
	for _, r := range recs {
		fmt.Fprintf(&b, "%d %d\n", r.start.Microseconds(), r.lat.Microseconds())
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// percentile is the p-quantile of sorted (0 when empty).
func percentile[T int64 | time.Duration](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
