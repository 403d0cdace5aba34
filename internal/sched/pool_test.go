package sched

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A task never runs on two workers at once, and every signal is followed
// by a run that starts after it.
func TestTaskRunsAloneAndAfterEverySignal(t *testing.T) {
	p := NewPool(4)
	defer func() { p.Close(); p.Wait() }()
	const tasks = 50
	var (
		inside [tasks]atomic.Int32
		seen   [tasks]atomic.Int64 // the last signal number a run observed
		sent   [tasks]atomic.Int64
		ts     [tasks]*Task
	)
	for i := range ts {
		i := i
		ts[i] = p.NewTask(func() {
			if inside[i].Add(1) != 1 {
				t.Errorf("task %d runs twice at once", i)
			}
			seen[i].Store(sent[i].Load())
			time.Sleep(time.Microsecond)
			inside[i].Add(-1)
		})
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 2000; k++ {
				i := (g*7 + k) % tasks
				sent[i].Add(1)
				ts[i].Signal()
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for i := range ts {
		for seen[i].Load() != sent[i].Load() {
			if time.Now().After(deadline) {
				t.Fatalf("task %d: last run saw signal %d of %d", i, seen[i].Load(), sent[i].Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	if s := p.Started(); s > 4 {
		t.Fatalf("%d workers started, bound 4", s)
	}
}

// A task that signals itself goes to the back of the queue: the others run.
func TestBusyTaskDoesNotStarveOthers(t *testing.T) {
	p := NewPool(1)
	defer func() { p.Close(); p.Wait() }()
	var stop atomic.Bool
	var busy *Task
	busy = p.NewTask(func() {
		if !stop.Load() {
			busy.Signal()
		}
	})
	done := make(chan struct{})
	other := p.NewTask(func() { stop.Store(true); close(done) })
	busy.Signal()
	other.Signal()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a self-signaling task starved another")
	}
}

func TestClockTicksEverySubscriberOnOneGoroutine(t *testing.T) {
	c := NewClock()
	var a, b atomic.Int32
	ca := c.Every(time.Millisecond, func() { a.Add(1) })
	cb := c.Every(time.Millisecond, func() { b.Add(1) })
	for a.Load() < 3 || b.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	ca()
	ca() // idempotent
	n := a.Load()
	time.Sleep(20 * time.Millisecond)
	if a.Load() > n+1 {
		t.Fatalf("canceled subscriber still ticks: %d after %d", a.Load(), n)
	}
	cb()
	c.Wait() // the interval's goroutine exits with its last subscriber
}

// RunHere runs its function on the caller's goroutine only when the task
// is idle, never while a worker runs the task; a Signal during it queues
// one run on a worker after it; it allocates nothing.
func TestTaskRunHere(t *testing.T) {
	p := NewPool(1)
	defer func() { p.Close(); p.Wait() }()
	var worker, inline atomic.Int32
	running, unblock := make(chan struct{}, 1), make(chan struct{})
	task := p.NewTask(func() {
		worker.Add(1)
		running <- struct{}{}
		<-unblock
	})
	if !task.RunHere(func() { inline.Add(1) }) || inline.Load() != 1 || worker.Load() != 0 {
		t.Fatalf("RunHere on an idle task: ran inline %d, on a worker %d", inline.Load(), worker.Load())
	}
	task.Signal()
	<-running // a worker runs the task now
	if task.RunHere(func() { inline.Add(1) }) {
		t.Fatal("RunHere ran while a worker ran the task")
	}
	unblock <- struct{}{}
	for task.state.Load() != idle {
		time.Sleep(time.Millisecond)
	}
	// A Signal during RunHere: one worker run after it.
	close(unblock)
	if !task.RunHere(func() { task.Signal() }) {
		t.Fatal("RunHere on an idle task did not run")
	}
	<-running
	for task.state.Load() != idle {
		time.Sleep(time.Millisecond)
	}
	if w, r, in := worker.Load(), p.Runs(), p.InlineRuns(); w != 2 || r != 2 || in != 2 {
		t.Fatalf("worker runs %d, pool runs %d, inline runs %d; want 2, 2, 2", w, r, in)
	}
	f := func() {}
	if a := testing.AllocsPerRun(100, func() { task.RunHere(f) }); a != 0 {
		t.Fatalf("RunHere allocates %.1f times", a)
	}
}
