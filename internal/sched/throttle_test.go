package sched

import (
	"slices"
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

// TestThrottleLanesAndStale: functions queued behind a blocked one run
// lane by lane, push order within a lane, whatever the push order across
// lanes; a function whose stale check says so is dropped when its turn
// comes and takes nothing of the rate (counted as skipped, not deferred).
func TestThrottleLanesAndStale(t *testing.T) {
	th := NewThrottle(1000, 100)
	var mu sync.Mutex
	var got []string
	run := func(s string) func() { return func() { mu.Lock(); got = append(got, s); mu.Unlock() } }
	block, running := make(chan struct{}), make(chan struct{})
	th.Push("first", func() { close(running); <-block })
	<-running
	th.PushLane("later1", LaneLater, nil, run("later1"))
	th.PushLane("soon1", LaneSoon, nil, run("soon1"))
	th.PushLane("stale", LaneUrgent, func() bool { return true }, run("stale"))
	th.PushLane("urgent1", LaneUrgent, func() bool { return false }, run("urgent1"))
	th.PushLane("later2", LaneLater, nil, run("later2"))
	th.PushLane("urgent2", LaneUrgent, nil, run("urgent2"))
	th.PushLane("soon2", 7, nil, run("soon2")) // clamped: the last lane
	if q := th.Queued(); q != 7 {
		t.Fatalf("Queued %d; want 7", q)
	}
	close(block)
	th.Wait()
	want := []string{"urgent1", "urgent2", "soon1", "later1", "later2", "soon2"}
	if !slices.Equal(got, want) {
		t.Fatalf("ran %v; want %v", got, want)
	}
	if th.Skipped() != 1 || th.Deferred() != 0 {
		t.Fatalf("skipped %d deferred %d; want 1 and 0", th.Skipped(), th.Deferred())
	}
}
