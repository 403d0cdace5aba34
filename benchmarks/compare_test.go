package benchmarks

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// writerCounts are the numbers of concurrent writers benchmarked.
var writerCounts = []int{1, 16, 64, 256}

// BenchmarkCompare runs b.N writes of 256-byte commands from W concurrent
// writers on the leader of a fresh three-member cluster of each system
// (fsync on, TCP on 127.0.0.1), and reports writes/s and the p50, p99 and
// maximum write latency. allocs/op and B/op count the whole process: all three
// members of the system under test and its transport. Profile Tuned: short
// timers, snapshots off (the published tables); every writer count of one
// system, then the other's.
func BenchmarkCompare(b *testing.B) {
	for _, sys := range Systems {
		for _, w := range writerCounts {
			b.Run(fmt.Sprintf("system=%s/writers=%d", sys.Name, w), func(b *testing.B) {
				benchWrites(b, sys, Tuned, w)
			})
		}
	}
}

// BenchmarkDefaults is BenchmarkCompare with each library's defaults,
// snapshots on (Profile Defaults), run as interleaved pairs: for each
// writer count, understudy then hashicorp, each on a fresh cluster. The
// extra metric snapshots counts the snapshots the leader took during the
// run: understudy takes one every 10,000 entries; hashicorp checks every
// 120–240s whether 8192 entries were written since its last one, so a run
// shorter than that takes none.
func BenchmarkDefaults(b *testing.B) {
	for _, w := range writerCounts {
		for _, sys := range Systems {
			b.Run(fmt.Sprintf("writers=%d/system=%s", w, sys.Name), func(b *testing.B) {
				benchWrites(b, sys, Defaults, w)
			})
		}
	}
}

func benchWrites(b *testing.B, sys System, p Profile, writers int) {
	c, err := sys.Start(b.TempDir(), p)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			b.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	r := Load(ctx, c, writers, b.N)
	b.StopTimer()
	if r.Errors > 0 {
		b.Fatalf("%s: %d of %d writes failed; first: %v", sys.Name, r.Errors, r.Writes, r.FirstErr)
	}
	b.ReportMetric(r.WritesPerSec(), "writes/s")
	b.ReportMetric(float64(r.Percentile(50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(r.Percentile(99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(r.Latencies[len(r.Latencies)-1].Microseconds()), "max-µs")
	if p == Defaults {
		b.ReportMetric(float64(c.SnapshotsTaken()), "snapshots")
	}
}

// TestCompareSmoke runs 200 writes at 16 writers on each system, in each
// profile, and checks that every write succeeded and that every written value
// reads back from the leader, so that the benchmark cannot measure nothing.
func TestCompareSmoke(t *testing.T) {
	const writes, writers = 200, 16
	if n := len(Command(Key(writes))); n != CommandSize {
		t.Fatalf("command is %d bytes, want %d", n, CommandSize)
	}
	for _, p := range []Profile{Tuned, Defaults} {
		for _, sys := range Systems {
			t.Run(p.String()+"/"+sys.Name, func(t *testing.T) { smokeWrites(t, sys, p, writes, writers) })
		}
	}
}

func smokeWrites(t *testing.T, sys System, p Profile, writes, writers int) {
	c, err := sys.Start(t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := Load(ctx, c, writers, writes)
	if r.Errors > 0 || len(r.Latencies) != writes {
		t.Fatalf("%d of %d writes failed (%d succeeded); first: %v", r.Errors, writes, len(r.Latencies), r.FirstErr)
	}
	// Every write number has its own key (writes < 1024).
	for i := 1; i <= writes; i++ {
		key := Key(i)
		v, ok, err := c.Read(ctx, key)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if !ok || v != ValueFor(key) {
			t.Fatalf("read %s: got %d bytes (found %v), want %d", key, len(v), ok, len(ValueFor(key)))
		}
	}
	t.Logf("%s, %s: %d writes in %s (%.0f writes/s, p50 %s, p99 %s), all read back",
		sys.Name, p, writes, r.Elapsed.Round(time.Millisecond), r.WritesPerSec(), r.Percentile(50), r.Percentile(99))
}
