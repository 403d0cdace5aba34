package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// driver sends one system's requests. Worker w of a run always calls with
// the same w, so a driver can pin a worker to a member or a connection.
type driver interface {
	// Put writes key and returns once the system has committed and applied
	// it (kvserver's 204, etcd's Put response).
	Put(ctx context.Context, w int, key, value string) error
	// Get reads key linearizably; a missing key, or a value of another
	// size than size, is an error.
	Get(ctx context.Context, w int, key string, size int) error
	Close()
}

// op is what a run measures.
type op string

const (
	opPut op = "put"
	opGet op = "get"
)

// keySpace names the keys: writes take the next key in turn (key i%n);
// reads pick at random among the keys already written.
type keySpace struct {
	n       int
	written atomic.Int64 // writes started so far, over all runs on a cluster
}

func (k *keySpace) name(i int64) string { return "k" + strconv.FormatInt(i%int64(k.n), 10) }

// runSpec bounds one run: a duration, or a total number of requests when
// requests > 0.
type runSpec struct {
	op       op
	workers  int
	duration time.Duration
	requests int64
}

// result is the outcome of one run.
type result struct {
	ops       int           // successful requests
	elapsed   time.Duration // first request sent to the last answer
	latencies []time.Duration
	errors    int
	firstErr  error
}

func (r *result) perSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// percentile returns the p-th percentile latency (nearest rank), 0 without
// answers.
func (r *result) percentile(p float64) time.Duration {
	n := len(r.latencies)
	if n == 0 {
		return 0
	}
	i := int(float64(n)*p/100+0.999999) - 1
	return r.latencies[min(max(i, 0), n-1)]
}

// runLoad runs spec against d: spec.workers goroutines each send one
// request at a time, until spec.duration has passed or spec.requests were
// sent. Every latency is kept (one per successful request) and sorted.
func runLoad(ctx context.Context, d driver, ks *keySpace, value string, spec runSpec) *result {
	var (
		mu   sync.Mutex
		res  = &result{}
		wg   sync.WaitGroup
		left atomic.Int64
	)
	left.Store(spec.requests)
	start := time.Now()
	deadline := start.Add(spec.duration)
	readable := max(min(ks.written.Load(), int64(ks.n)), 1)
	for w := range spec.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			lats := make([]time.Duration, 0, 1024)
			var errs int
			var first error
			for ctx.Err() == nil {
				if spec.requests > 0 {
					if left.Add(-1) < 0 {
						break
					}
				} else if time.Now().After(deadline) {
					break
				}
				var err error
				t0 := time.Now()
				switch spec.op {
				case opPut:
					err = d.Put(ctx, w, ks.name(ks.written.Add(1)-1), value)
				case opGet:
					err = d.Get(ctx, w, ks.name(rng.Int64N(readable)), len(value))
				}
				if err != nil {
					errs++
					if first == nil {
						first = fmt.Errorf("%s by worker %d after %s: %w", spec.op, w, time.Since(t0).Round(time.Millisecond), err)
					}
					if ctx.Err() != nil {
						break
					}
					continue
				}
				lats = append(lats, time.Since(t0))
			}
			mu.Lock()
			res.latencies = append(res.latencies, lats...)
			res.errors += errs
			if res.firstErr == nil {
				res.firstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ops = len(res.latencies)
	slices.Sort(res.latencies)
	return res
}
