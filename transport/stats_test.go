package transport

import (
	"strings"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	h := newHistogram([]time.Duration{time.Millisecond, 10 * time.Millisecond})
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, time.Second} {
		h.observe(d)
	}
	s := h.snapshot()
	if s.Count != 4 || s.Sum != 1006500*time.Microsecond {
		t.Fatalf("count %d sum %v", s.Count, s.Sum)
	}
	want := []Bucket{{time.Millisecond, 2}, {10 * time.Millisecond, 3}} // cumulative; 1s only in Count
	for i, b := range want {
		if s.Buckets[i] != b {
			t.Fatalf("bucket %d: %+v, want %+v", i, s.Buckets[i], b)
		}
	}
	if !strings.Contains(s.String(), "n=4") {
		t.Fatalf("String: %s", s)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		d := b.next()
		if d < c/2 || d > c {
			t.Fatalf("attempt %d: %v, want within [%v, %v]", i, d, c/2, c)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}
