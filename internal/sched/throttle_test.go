package sched

import (
	"sync"
	"testing"
)

// TestThrottleRunsEachKeyOnceInOrder: functions run in push order, a key
// pushed again while queued runs once, and beyond the burst the rest wait
// for the rate.
func TestThrottleRunsEachKeyOnceInOrder(t *testing.T) {
	th := NewThrottle(1000, 2)
	var mu sync.Mutex
	var got []int
	block := make(chan struct{})
	th.Push("first", func() { <-block })
	for i := range 5 {
		th.Push(i, func() { mu.Lock(); got = append(got, i); mu.Unlock() })
		th.Push(i, func() { t.Errorf("key %d queued twice ran twice", i) })
	}
	close(block)
	th.Wait()
	if len(got) != 5 {
		t.Fatalf("ran %v; want 0..4 once each", got)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("ran %v; want in push order", got)
		}
	}
	if th.Deferred() == 0 {
		t.Fatal("6 functions at burst 2 ran without waiting for the rate")
	}
	if th.Queued() != 0 {
		t.Fatal("queue not empty after Wait")
	}
}
