package benchmarks

import (
	"testing"
	"time"
)

// TestWindowSeconds: a window is cut into whole seconds from its start (a
// shorter last slice left out, unless it is the only one), each slice
// holding the writes that started in it.
func TestWindowSeconds(t *testing.T) {
	w := &writers{}
	for i := range 35 { // one write every 100 ms, from 0 to 3.4 s
		w.samples = append(w.samples, sample{start: time.Duration(i) * 100 * time.Millisecond, lat: time.Duration(i+1) * time.Millisecond})
	}
	s := w.seconds(0, 3500*time.Millisecond)
	if len(s) != 3 {
		t.Fatalf("%d slices, want 3 (the last half second left out)", len(s))
	}
	for i, r := range s {
		if r.Writes != 10 || r.Elapsed != time.Second {
			t.Errorf("slice %d: %d writes over %s, want 10 over 1s", i, r.Writes, r.Elapsed)
		}
		if got, want := r.Percentile(99), time.Duration(10*i+10)*time.Millisecond; got != want {
			t.Errorf("slice %d: p99 %s, want %s", i, got, want)
		}
	}
	if s := w.seconds(time.Second, 1500*time.Millisecond); len(s) != 1 || s[0].Writes != 5 {
		t.Errorf("a window shorter than a second: %+v, want one slice of 5 writes", s)
	}
	if s := w.seconds(time.Second, time.Second); len(s) != 0 {
		t.Errorf("an empty window: %d slices", len(s))
	}
}

// TestBusiestP99Ratio compares the busiest second with the baseline's
// median second, and is 0 without a baseline.
func TestBusiestP99Ratio(t *testing.T) {
	r := CatchUpResult{
		Busiest:        Result{Latencies: []time.Duration{30 * time.Millisecond}},
		BaselineSecond: Result{Latencies: []time.Duration{20 * time.Millisecond}},
		During:         Result{Latencies: []time.Duration{10 * time.Millisecond}},
		Baseline:       Result{Latencies: []time.Duration{8 * time.Millisecond}},
	}
	if got := r.BusiestP99Ratio(); got != 1.5 {
		t.Errorf("busiest ratio %v, want 1.5", got)
	}
	if got := r.P99Ratio(); got != 1.25 {
		t.Errorf("p99 ratio %v, want 1.25", got)
	}
	if got := (CatchUpResult{Busiest: r.Busiest}).BusiestP99Ratio(); got != 0 {
		t.Errorf("without a baseline: %v, want 0", got)
	}
}
