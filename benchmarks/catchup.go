package benchmarks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/kv"
)

// CatchUpKey is the key of write number i in a state of keys keys (write i
// overwrites write i-keys).
func CatchUpKey(i, keys int) string { return fmt.Sprintf("c%08d", i%keys) }

// CatchUpCommand puts CatchUpKey(i, keys) to a value of valueSize bytes
// that starts with i in decimal (so that a stale value shows in a state
// comparison). Both systems apply these same bytes (kv's encoding).
func CatchUpCommand(i, keys, valueSize int) []byte {
	v := make([]byte, valueSize)
	n := copy(v, strconv.Itoa(i))
	for j := n; j < len(v); j++ {
		v[j] = '.'
	}
	return kv.Put(CatchUpKey(i, keys), string(v))
}

// CatchUpConfig is the learner catch-up scenario's shape.
type CatchUpConfig struct {
	Keys      int // keys loaded before the learner is added (and overwritten in turn after)
	ValueSize int // bytes per value (at least 20)
	Writers   int // concurrent writers on the leader, while loading and after
	// LeadIn is how long the writers run before each measured window starts.
	LeadIn time.Duration
	// MinWindow is the shortest measured window: the writes that start
	// from the learner's addition until the later of its catch-up and
	// MinWindow are "during" (and the baseline window is as long). A window
	// of a few hundred milliseconds holds too few slow writes for its p99
	// to mean anything, and the catch-up's cost (restoring, the first
	// appends after the snapshot) may land just after the applied index
	// reached the target.
	MinWindow time.Duration
	// Timeout bounds the wait for the learner to catch up.
	Timeout time.Duration
	// TakeSnapshot makes the leader snapshot after the load (hashicorp:
	// Raft.Snapshot; understudy: Node.Snapshot).
	TakeSnapshot bool
	// LearnerDir is the learner's data directory.
	LearnerDir string
	// Logf, if set, reports progress.
	Logf func(format string, args ...any)
	// Window, if set, is called when the catch-up window starts (right
	// before the learner is added) and returns what to call when it ends:
	// for a trace or profile of the window alone.
	Window func() (end func())
}

// CatchUpResult is what RunCatchUp measured.
type CatchUpResult struct {
	StateBytes  int64  // bytes of keys and values in the state
	Load        Result // the load: Keys writes
	SnapshotErr error  // TakeSnapshot's error, when asked

	// Target is the leader's commit index right after the learner was added.
	Target uint64
	// CaughtUp: the learner's applied index reached Target within Timeout.
	CaughtUp bool
	// CatchUp is from the call to AddLearner (which starts the new member
	// too: understudy's after the addition, as a joiner must; hashicorp's
	// before, as its leader replicates at once) until the learner's applied
	// index reached Target; Timeout if it did not.
	CatchUp time.Duration
	// LearnerApplied is the learner's applied index when the wait ended.
	LearnerApplied uint64
	// Snapshots is what was sent to the learner by the time the wait ended.
	Snapshots SnapshotStats
	// LeaderSnapshots is the snapshots the leader took from its start until
	// the wait ended.
	LeaderSnapshots uint64
	// During is the writes that started during the catch-up window.
	During Result
	// Timeline is During in slices of TimelineStep, from the learner's
	// addition: where in the window the cost lands.
	Timeline []Result
	// WithLearner is the writes that started in the window of the same
	// length right after During, the learner caught up and replicating:
	// During against WithLearner is the catch-up's own cost; WithLearner
	// against Baseline is the cost of one more member (in this benchmark,
	// on the same CPUs and disk as the others).
	WithLearner Result
	// Baseline is the writes that started during a window of the same
	// length after the learner was removed (measured only if it caught up).
	Baseline Result
	// Busiest is the one-second slice of During (slices from the learner's
	// addition, whole seconds only) with the highest p99: what the writers
	// feel at the worst moment of the join, which a whole-window p99 dilutes.
	// BusiestAt is when it starts, from the addition.
	Busiest   Result
	BusiestAt time.Duration
	// BaselineSecond is the median one-second slice of Baseline by p99:
	// a steady second, to hold Busiest against.
	BaselineSecond Result
	// BaselineBusiest is the baseline's one-second slice with the highest
	// p99: how bad a second gets without a join (the members' own periodic
	// snapshots land in some).
	BaselineBusiest Result
	// Check is CheckLearner's outcome (nil: the learner's state equals the
	// leader's); only run if it caught up.
	Check error
}

// RunCatchUp runs the learner catch-up scenario on c, a fresh cluster:
//
//  1. load: Keys writes of ValueSize-byte values from Writers writers;
//  2. writers keep overwriting those keys in turn; after LeadIn, add a
//     learner and wait until its applied index reaches the leader's commit
//     index at the time it was added (the catch-up window);
//  3. keep writing for a window as long with the learner caught up; stop the
//     writers, check that the learner's state equals the leader's;
//  4. remove the learner; start the writers again and, after LeadIn, measure
//     a window as long as the "during" window (the catch-up, at least
//     MinWindow), without a learner (baseline).
//
// It returns an error when the scenario could not run (a failed load, a
// failed membership change); a learner that does not catch up is reported in
// the result.
func RunCatchUp(ctx context.Context, c Cluster, cfg CatchUpConfig) (CatchUpResult, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var res CatchUpResult
	if cfg.ValueSize < 20 || cfg.Keys < 1 || cfg.Writers < 1 {
		return res, fmt.Errorf("catch-up: bad config %+v", cfg)
	}
	res.StateBytes = int64(cfg.Keys) * int64(len(CatchUpKey(0, cfg.Keys))+cfg.ValueSize)

	// 1. Load.
	var next atomic.Int64 // the last write number taken
	epoch := time.Now()
	load := startWriters(ctx, c, cfg.Writers, epoch, func() ([]byte, bool) {
		i := int(next.Add(1)) - 1
		if i >= cfg.Keys {
			return nil, false
		}
		return CatchUpCommand(i, cfg.Keys, cfg.ValueSize), true
	})
	load.wg.Wait()
	res.Load = load.window(0, time.Since(epoch))
	if res.Load.Errors > 0 {
		return res, fmt.Errorf("catch-up: %d of %d load writes failed; first: %w", res.Load.Errors, cfg.Keys, res.Load.FirstErr)
	}
	logf("loaded %d keys (%.1f MB) in %s (%.0f writes/s)", cfg.Keys, float64(res.StateBytes)/1e6,
		res.Load.Elapsed.Round(time.Millisecond), res.Load.WritesPerSec())
	if cfg.TakeSnapshot {
		res.SnapshotErr = c.TakeSnapshot(ctx)
		switch {
		case res.SnapshotErr == nil:
			logf("the leader took a snapshot")
		case errors.Is(res.SnapshotErr, errors.ErrUnsupported):
			logf("no snapshot taken after the load: %v", res.SnapshotErr)
		default:
			return res, fmt.Errorf("catch-up: snapshot: %w", res.SnapshotErr)
		}
	}

	steady := func() ([]byte, bool) {
		i := int(next.Add(1)) - 1
		return CatchUpCommand(i, cfg.Keys, cfg.ValueSize), true
	}

	// 2. Catch-up window.
	epoch = time.Now()
	w := startWriters(ctx, c, cfg.Writers, epoch, steady)
	sleep(ctx, cfg.LeadIn)
	endWindow := func() {}
	if cfg.Window != nil {
		endWindow = cfg.Window()
	}
	addAt := time.Since(epoch)
	target, err := c.AddLearner(ctx, cfg.LearnerDir)
	if err != nil {
		endWindow()
		w.halt()
		return res, err
	}
	res.Target = target
	deadline := time.Now().Add(cfg.Timeout - (time.Since(epoch) - addAt))
	tick := time.NewTicker(2 * time.Millisecond)
	for {
		if res.LearnerApplied = c.LearnerApplied(); res.LearnerApplied >= target {
			res.CaughtUp = true
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		<-tick.C
	}
	tick.Stop()
	caughtAt := time.Since(epoch)
	res.CatchUp = caughtAt - addAt
	res.Snapshots = c.SnapshotsToLearner()
	res.LeaderSnapshots = c.SnapshotsTaken()
	endAt := max(caughtAt, addAt+cfg.MinWindow)
	steadyAt := endAt + (endAt - addAt)
	if res.CaughtUp {
		sleep(ctx, endAt-caughtAt)
		endWindow()
		sleep(ctx, steadyAt-endAt)
	} else {
		endWindow()
	}
	w.halt()
	res.During = w.window(addAt, endAt)
	if res.CaughtUp {
		res.WithLearner = w.window(endAt, steadyAt)
	}
	for from := addAt; from < endAt; from += TimelineStep {
		res.Timeline = append(res.Timeline, w.window(from, min(from+TimelineStep, endAt)))
	}
	for i, r := range w.seconds(addAt, endAt) {
		if i == 0 || r.Percentile(99) > res.Busiest.Percentile(99) {
			res.Busiest, res.BusiestAt = r, time.Duration(i)*time.Second
		}
	}
	if !res.CaughtUp {
		logf("the learner did not catch up within %s: applied %d of %d", cfg.Timeout, res.LearnerApplied, target)
	} else {
		logf("the learner caught up to %d in %s (%d snapshots sent, %.1f MB)", target,
			res.CatchUp.Round(time.Millisecond), res.Snapshots.Sent, float64(res.Snapshots.Bytes)/1e6)
	}

	// 3. Compare the states.
	if res.CaughtUp {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		res.Check = c.CheckLearner(cctx)
		cancel()
	}

	// 4. Baseline.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = c.RemoveLearner(rctx)
	cancel()
	if err != nil {
		return res, err
	}
	if !res.CaughtUp {
		return res, nil
	}
	epoch = time.Now()
	w = startWriters(ctx, c, cfg.Writers, epoch, steady)
	sleep(ctx, cfg.LeadIn)
	from := time.Since(epoch)
	sleep(ctx, res.During.Elapsed)
	to := time.Since(epoch)
	w.halt()
	res.Baseline = w.window(from, to)
	if s := w.seconds(from, to); len(s) > 0 {
		slices.SortStableFunc(s, func(a, b Result) int { return cmp.Compare(a.Percentile(99), b.Percentile(99)) })
		res.BaselineSecond, res.BaselineBusiest = s[len(s)/2], s[len(s)-1]
	}
	return res, nil
}

// P99Ratio is the p99 of the writes during the catch-up against the
// baseline's (0 without a baseline).
func (r CatchUpResult) P99Ratio() float64 {
	return ratio(r.During.Percentile(99), r.Baseline.Percentile(99))
}

// BusiestP99Ratio is the p99 of the busiest second of the catch-up against
// that of the baseline's median second (0 without a baseline).
func (r CatchUpResult) BusiestP99Ratio() float64 {
	return ratio(r.Busiest.Percentile(99), r.BaselineSecond.Percentile(99))
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// seconds returns the writes that started in [from, to) in slices of one
// second from from; a last slice shorter than a second is left out, unless
// it is the only one.
func (w *writers) seconds(from, to time.Duration) []Result {
	var s []Result
	for at := from; at+time.Second <= to; at += time.Second {
		s = append(s, w.window(at, at+time.Second))
	}
	if len(s) == 0 && to > from {
		s = append(s, w.window(from, to))
	}
	return s
}

// TimelineStep is the length of a CatchUpResult.Timeline slice.
const TimelineStep = 250 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sample is one write: when it started (since the writers' epoch), how long
// it took, and its error.
type sample struct {
	start, lat time.Duration
	err        error
}

// writers are concurrent writers on one cluster, each recording its writes.
type writers struct {
	epoch   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []sample
}

// startWriters starts n writers on c that write the commands next returns
// until it returns false or halt is called.
func startWriters(ctx context.Context, c Cluster, n int, epoch time.Time, next func() ([]byte, bool)) *writers {
	w := &writers{epoch: epoch, stop: make(chan struct{})}
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			var local []sample
			for ctx.Err() == nil && !w.stopped() {
				cmd, ok := next()
				if !ok {
					break
				}
				t0 := time.Now()
				err := c.Write(ctx, cmd)
				s := sample{start: t0.Sub(w.epoch), lat: time.Since(t0)}
				if err != nil {
					s.err = fmt.Errorf("write after %s: %w", s.lat, err)
				}
				local = append(local, s)
			}
			w.mu.Lock()
			w.samples = append(w.samples, local...)
			w.mu.Unlock()
		}()
	}
	return w
}

func (w *writers) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// halt stops the writers and waits for their writes in flight.
func (w *writers) halt() {
	close(w.stop)
	w.wg.Wait()
}

// window returns the writes that started in [from, to) (since the epoch),
// after the writers are done; its Elapsed is to-from.
func (w *writers) window(from, to time.Duration) Result {
	r := Result{Elapsed: to - from}
	for _, s := range w.samples {
		if s.start < from || s.start >= to {
			continue
		}
		r.Writes++
		if s.err != nil {
			if r.Errors == 0 {
				r.FirstErr = s.err
			}
			r.Errors++
			continue
		}
		r.Latencies = append(r.Latencies, s.lat)
	}
	slices.Sort(r.Latencies)
	return r
}

// waitSameState waits until applied() reaches want, then until same()
// reports no difference (an applied index may be a moment ahead of the
// state machine), within ctx.
func waitSameState(ctx context.Context, want uint64, applied func() uint64, same func() error) error {
	var last error
	for {
		if got := applied(); got < want {
			last = fmt.Errorf("the learner applied %d, the leader %d", got, want)
		} else if last = same(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the learner's state does not match the leader's: %w (%w)", last, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// diffStates describes the first difference between the leader's and the
// learner's states, or returns nil.
func diffStates[V string | []byte](leader, learner map[string]V) error {
	if len(leader) != len(learner) {
		return fmt.Errorf("the leader has %d keys, the learner %d", len(leader), len(learner))
	}
	for k, v := range leader {
		lv, ok := learner[k]
		if !ok {
			return fmt.Errorf("key %q is missing on the learner", k)
		}
		if string(v) != string(lv) {
			return fmt.Errorf("key %q: the learner has %.20q…, the leader %.20q…", k, lv, v)
		}
	}
	return nil
}
