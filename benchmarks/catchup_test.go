package benchmarks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// BenchmarkCatchUp's size and shape (pass them after -args).
var (
	catchUpKeys    = flag.Int("catchup.keys", 100_000, "BenchmarkCatchUp: keys loaded before the learner is added")
	catchUpValue   = flag.Int("catchup.value", 1024, "BenchmarkCatchUp: bytes per value")
	catchUpWriters = flag.Int("catchup.writers", 64, "BenchmarkCatchUp: concurrent writers on the leader")
	catchUpLeadIn  = flag.Duration("catchup.leadin", time.Second, "BenchmarkCatchUp: writers run this long before each measured window")
	catchUpTimeout = flag.Duration("catchup.timeout", 5*time.Minute, "BenchmarkCatchUp: give up on the catch-up after this long")
	catchUpWindow  = flag.Duration("catchup.window", 5*time.Second, "BenchmarkCatchUp: the shortest measured window (during and baseline)")
	catchUpTrace   = flag.String("catchup.trace", "", "BenchmarkCatchUp: write a runtime/trace of each catch-up window to this file, suffixed with the system's name")
	catchUpProfile = flag.String("catchup.cpuprofile", "", "BenchmarkCatchUp: write a CPU profile of each catch-up window to this file, suffixed with the system's name")
)

// windowProfiles returns a CatchUpConfig.Window that traces and profiles
// the catch-up window as -catchup.trace and -catchup.cpuprofile ask (nil if
// neither), writing to those files suffixed with "." + name. A CPU profile
// asked with -cpuprofile too cannot start (one at a time): it is reported.
func windowProfiles(tb testing.TB, name string) func() func() {
	if *catchUpTrace == "" && *catchUpProfile == "" {
		return nil
	}
	create := func(path string) *os.File {
		f, err := os.Create(path + "." + name)
		if err != nil {
			tb.Error(err)
			return nil
		}
		return f
	}
	return func() func() {
		var ends []func()
		if *catchUpTrace != "" {
			if f := create(*catchUpTrace); f != nil {
				if err := trace.Start(f); err != nil {
					tb.Error(err)
				}
				ends = append(ends, func() { trace.Stop(); _ = f.Close() })
			}
		}
		if *catchUpProfile != "" {
			if f := create(*catchUpProfile); f != nil {
				if err := pprof.StartCPUProfile(f); err != nil {
					tb.Error(err)
				}
				ends = append(ends, func() { pprof.StopCPUProfile(); _ = f.Close() })
			}
		}
		return func() {
			for _, end := range ends {
				end()
			}
		}
	}
}

// BenchmarkCatchUp runs the learner catch-up scenario (RunCatchUp) once per
// system, understudy then hashicorp, each on a fresh three-member cluster
// with the library's defaults, snapshots on (Profile Defaults): load
// -catchup.keys values of -catchup.value bytes (100,000 x 1 KiB: ~100 MB),
// then add a fourth member as a learner / non-voter while -catchup.writers
// writers keep writing on the leader. It ignores b.N: run it with
// -benchtime 1x.
//
// Metrics: catchup-s (until the learner's applied index reaches the
// leader's commit index at the time it was added; absent if it did not
// within -catchup.timeout, then caught-up is 0), snaps-sent / snaps-failed /
// snap-MB-sent (to the learner, until it caught up), snaps-restored (by the
// learner's state machine: fewer than sent when the learner's raft ignored
// a snapshot it received), leader-snaps (the snapshots the leader took until
// then), during-* (the leader's writes that started from the learner's
// addition until it caught up, or for -catchup.window if that is longer),
// with-* (those that started in the window as long right after, the
// learner caught up and replicating) and base-* (those that started during
// a window as long, after the learner was removed), load-writes/s and
// state-MB. During against with is what the catch-up itself costs; with
// against base what one more member costs on the same CPUs and disk.
// busiest-* are the catch-up window's one-second slice with the highest
// p99, base-second-* the baseline's median second (base-busiest-p99-µs its
// worst), p99-ratio is during-p99 / base-p99 and busiest-p99-ratio
// busiest-p99 / base-second-p99; snap-MB/s is the stream's rate (understudy).
// -understudy.learnerproc runs understudy's learner in a process of its
// own; -catchup.trace and -catchup.cpuprofile cover the catch-up window.
func BenchmarkCatchUp(b *testing.B) {
	for _, sys := range Systems {
		b.Run("system="+sys.Name, func(b *testing.B) {
			cfg := CatchUpConfig{
				Keys: *catchUpKeys, ValueSize: *catchUpValue, Writers: *catchUpWriters,
				LeadIn: *catchUpLeadIn, Timeout: *catchUpTimeout, MinWindow: *catchUpWindow,
				Window: windowProfiles(b, sys.Name),
			}
			res := runCatchUp(b, sys, cfg)
			if res.CaughtUp && res.Check != nil {
				b.Errorf("%s: %v", sys.Name, res.Check)
			}
			if n := res.During.Errors + res.Baseline.Errors; n > 0 {
				b.Errorf("%s: %d writes failed; first: %v", sys.Name, n, errors.Join(res.During.FirstErr, res.Baseline.FirstErr))
			}
			b.ReportMetric(float64(res.StateBytes)/1e6, "state-MB")
			b.ReportMetric(res.Load.WritesPerSec(), "load-writes/s")
			caught := 0.0
			if res.CaughtUp {
				caught = 1
				b.ReportMetric(res.CatchUp.Seconds(), "catchup-s")
			}
			b.ReportMetric(caught, "caught-up")
			b.ReportMetric(float64(res.Snapshots.Sent), "snaps-sent")
			b.ReportMetric(float64(res.Snapshots.Failed), "snaps-failed")
			b.ReportMetric(float64(res.Snapshots.Bytes)/1e6, "snap-MB-sent")
			b.ReportMetric(float64(res.Snapshots.Restored), "snaps-restored")
			if res.Snapshots.SendTime > 0 {
				b.ReportMetric(float64(res.Snapshots.Bytes)/1e6/res.Snapshots.SendTime.Seconds(), "snap-MB/s")
			}
			b.ReportMetric(float64(res.LeaderSnapshots), "leader-snaps")
			reportWindow(b, "during", res.During)
			b.ReportMetric(float64(res.Busiest.Percentile(99).Microseconds()), "busiest-p99-µs")
			b.ReportMetric(res.Busiest.WritesPerSec(), "busiest-writes/s")
			if res.CaughtUp {
				reportWindow(b, "with", res.WithLearner)
				reportWindow(b, "base", res.Baseline)
				b.ReportMetric(float64(res.BaselineSecond.Percentile(99).Microseconds()), "base-second-p99-µs")
				b.ReportMetric(res.BaselineSecond.WritesPerSec(), "base-second-writes/s")
				b.ReportMetric(float64(res.BaselineBusiest.Percentile(99).Microseconds()), "base-busiest-p99-µs")
				b.ReportMetric(res.P99Ratio(), "p99-ratio")
				b.ReportMetric(res.BusiestP99Ratio(), "busiest-p99-ratio")
			}
		})
	}
}

func reportWindow(b *testing.B, name string, r Result) {
	b.ReportMetric(r.WritesPerSec(), name+"-writes/s")
	b.ReportMetric(float64(r.Percentile(50).Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(r.Percentile(99).Microseconds()), name+"-p99-µs")
}

// runCatchUp starts a fresh cluster of sys with the Defaults profile, runs
// the scenario, logs a summary, and closes the cluster.
func runCatchUp(tb testing.TB, sys System, cfg CatchUpConfig) CatchUpResult {
	dir := tb.TempDir()
	c, err := sys.Start(filepath.Join(dir, "cluster"), Defaults)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.Timeout+10*time.Minute)
	defer cancel()
	cfg.LearnerDir = filepath.Join(dir, "learner")
	cfg.Logf = func(format string, args ...any) { tb.Logf("%s: "+format, append([]any{sys.Name}, args...)...) }
	res, err := RunCatchUp(ctx, c, cfg)
	if err != nil {
		tb.Fatalf("%s: %v", sys.Name, err)
	}
	logCatchUp(tb, sys.Name, cfg, res)
	return res
}

func logCatchUp(tb testing.TB, name string, cfg CatchUpConfig, res CatchUpResult) {
	tb.Helper()
	win := func(r Result) string {
		return fmt.Sprintf("%d writes (%d failed), %.0f writes/s, p50 %s, p99 %s", r.Writes, r.Errors, r.WritesPerSec(),
			r.Percentile(50).Round(time.Microsecond), r.Percentile(99).Round(time.Microsecond))
	}
	if res.CaughtUp {
		tb.Logf("%s: caught up to index %d in %s", name, res.Target, res.CatchUp.Round(time.Millisecond))
	} else {
		tb.Logf("%s: NOT caught up within %s: applied %d of %d (catch-up time not measured, no baseline)", name, cfg.Timeout, res.LearnerApplied, res.Target)
	}
	tb.Logf("%s: the leader took %d snapshots until then", name, res.LeaderSnapshots)
	tb.Logf("%s: snapshots to the learner: %d sent, %d failed, %.1f MB (%s); the learner restored %d", name,
		res.Snapshots.Sent, res.Snapshots.Failed, float64(res.Snapshots.Bytes)/1e6, res.Snapshots.How, res.Snapshots.Restored)
	tb.Logf("%s: during catch-up (%s): %s", name, res.During.Elapsed.Round(time.Millisecond), win(res.During))
	var tl strings.Builder
	for i, r := range res.Timeline {
		fmt.Fprintf(&tl, " [%s %.0f/s p99 %s]", (time.Duration(i) * TimelineStep).Round(time.Millisecond), r.WritesPerSec(), r.Percentile(99).Round(100*time.Microsecond))
	}
	tb.Logf("%s: timeline from the addition:%s", name, tl.String())
	if res.CaughtUp {
		tb.Logf("%s: with learner     (%s): %s", name, res.WithLearner.Elapsed.Round(time.Millisecond), win(res.WithLearner))
		tb.Logf("%s: without learner  (%s): %s", name, res.Baseline.Elapsed.Round(time.Millisecond), win(res.Baseline))
		tb.Logf("%s: busiest second of the catch-up (from %s after the addition): %s; the baseline's median second: %s; p99 during/without %.2fx, busiest/median second %.2fx",
			name, res.BusiestAt, win(res.Busiest), win(res.BaselineSecond), res.P99Ratio(), res.BusiestP99Ratio())
		if res.Check == nil {
			tb.Logf("%s: the learner's state equals the leader's", name)
		}
	}
}

// TestCatchUpSmoke runs the catch-up scenario at a small size (16,384 keys
// of 128 bytes: 2 MB, more entries than understudy's SnapshotCount, so that
// its log is compacted and the learner needs a snapshot; hashicorp is made
// to snapshot after the load, Raft.Snapshot, for the same reason) on each
// system, and checks that the learner caught up, restoring a snapshot, and that
// its state then equals the leader's, so that the benchmark cannot measure
// nothing.
func TestCatchUpSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, sys := range Systems {
		t.Run(sys.Name, func(t *testing.T) {
			cfg := CatchUpConfig{
				Keys: 16384, ValueSize: 128, Writers: 64,
				LeadIn: 200 * time.Millisecond, Timeout: time.Minute, TakeSnapshot: true,
			}
			res := runCatchUp(t, sys, cfg)
			if !res.CaughtUp {
				t.Fatalf("%s: the learner did not catch up within %s: applied index %d, target %d; snapshots sent %d, failed %d, restored %d",
					sys.Name, cfg.Timeout, res.LearnerApplied, res.Target, res.Snapshots.Sent, res.Snapshots.Failed, res.Snapshots.Restored)
			}
			if res.Check != nil {
				t.Fatalf("%s: %v", sys.Name, res.Check)
			}
			if res.Snapshots.Restored == 0 {
				t.Errorf("%s: the learner restored no snapshot (%d sent): the smoke test means to exercise snapshot install", sys.Name, res.Snapshots.Sent)
			}
			for _, w := range []struct {
				name string
				r    Result
			}{{"load", res.Load}, {"during catch-up", res.During}, {"baseline", res.Baseline}} {
				if w.r.Errors > 0 || len(w.r.Latencies) == 0 {
					t.Errorf("%s: %s: %d writes, %d failed; first: %v", sys.Name, w.name, w.r.Writes, w.r.Errors, w.r.FirstErr)
				}
			}
		})
	}
}
