package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// commandSize is the size in bytes of every command written (as in the
// benchmarks package: a kv.Put of a 256-byte command).
const commandSize = 256

var padding = string(make([]byte, commandSize))

// command is a kv.Put of key whose encoding is exactly commandSize bytes.
func command(key string) []byte {
	n := commandSize - len(kv.Put(key, ""))
	for range 4 {
		c := kv.Put(key, padding[:n])
		if len(c) == commandSize {
			return c
		}
		n -= len(c) - commandSize // the value's length prefix grew or shrank
	}
	panic(fmt.Sprintf("groupload: no value makes a %d-byte put of %q", commandSize, key))
}

// writerGroups returns the groups writer w of writers writes to, in turn:
// with at least as many groups as writers, every group has one writer and
// each writer cycles over its groups (w, w+writers, …); with fewer, group
// w%groups has every writer w' ≡ w. Either way the groups' shares differ
// by at most one writer (or one group).
func writerGroups(w, writers, groups int) []int {
	if groups <= writers {
		return []int{w % groups}
	}
	var gs []int
	for g := w; g < groups; g += writers {
		gs = append(gs, g)
	}
	return gs
}

// sample is one successful write: its group, when it ended (since the
// load's start) and its latency as the writer saw it, retries included.
type sample struct {
	group int32
	end   time.Duration
	lat   time.Duration
}

// load is a running load: writers writing until stopped.
type load struct {
	c       *cluster
	writers int
	// stride maps the i-th written group to the cluster's group i*stride
	// (1: the first ones; -spread: evenly over all of them).
	stride int
	start  time.Time
	stop   atomic.Bool
	wg     sync.WaitGroup

	mu       sync.Mutex
	samples  []sample
	errs     int
	firstErr error
	retries  atomic.Int64
}

// startLoad starts writers writers on c, spread over active groups
// (writerGroups) — its first ones, or one in every stride — each writing
// 256-byte kv puts through its group's leader, one at a time, until stop.
// Samples name the written groups 0 to active-1.
func startLoad(ctx context.Context, c *cluster, writers, active, stride int) *load {
	l := &load{c: c, writers: writers, stride: max(stride, 1), start: time.Now()}
	for w := range writers {
		l.wg.Go(func() { l.write(ctx, w, writerGroups(w, writers, active)) })
	}
	return l
}

// write is writer w's loop over its groups gs.
func (l *load) write(ctx context.Context, w int, gs []int) {
	var (
		local    []sample
		errs     int
		firstErr error
		leaders  = make([]*understudy.Group, len(gs))
	)
	for i := 0; !l.stop.Load() && ctx.Err() == nil; i++ {
		k := i % len(gs)
		g := gs[k]
		cmd := command(fmt.Sprintf("w%d-%d", w, i%1024))
		t0 := time.Now()
		var err error
		for {
			ld := leaders[k]
			if ld == nil || !ld.IsLeader() {
				if ld, err = l.waitLeader(ctx, g*l.stride); err != nil {
					break
				}
				leaders[k] = ld
			}
			_, err = ld.Propose(ctx, cmd)
			if !errors.Is(err, raft.ErrLeaderChanged) && !errors.Is(err, raft.ErrProposalDropped) {
				break
			}
			// Unknown outcome or not appended: a put of the same value is
			// idempotent, so it is written again through the new leader.
			l.retries.Add(1)
			leaders[k] = nil
		}
		if err != nil {
			if ctx.Err() == nil {
				errs++
				if firstErr == nil {
					firstErr = fmt.Errorf("writer %d, group %d: %w", w, groupID(g*l.stride), err)
				}
			}
			continue
		}
		end := time.Now()
		local = append(local, sample{group: int32(g), end: end.Sub(l.start), lat: end.Sub(t0)})
	}
	l.mu.Lock()
	l.samples = append(l.samples, local...)
	l.errs += errs
	if l.firstErr == nil {
		l.firstErr = firstErr
	}
	l.mu.Unlock()
}

// waitLeader returns group g's leader, polling until one knows it leads.
func (l *load) waitLeader(ctx context.Context, g int) (*understudy.Group, error) {
	for {
		if ld := l.c.leader(g); ld != nil {
			return ld, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// finish stops the writers, waits for their writes in flight and returns
// every successful write.
func (l *load) finish() (samples []sample, errs int, firstErr error) {
	l.stop.Store(true)
	l.wg.Wait()
	return l.samples, l.errs, l.firstErr
}

// loadResult is what the writes of a measured window show.
type loadResult struct {
	writes         int
	perSec         float64
	p50, p99       time.Duration
	groupP99       time.Duration   // the p99 of the groups' own p99s
	groupP99s      []time.Duration // the groups' own p99s, ascending
	groupsWritten  int
	minGroupWrites int
}

// window summarises the writes that ended in [from, to) (since the load's
// start).
func window(samples []sample, groups int, from, to time.Duration) loadResult {
	var all []time.Duration
	per := make([][]time.Duration, groups)
	for _, s := range samples {
		if s.end >= from && s.end < to {
			all = append(all, s.lat)
			per[s.group] = append(per[s.group], s.lat)
		}
	}
	r := loadResult{writes: len(all), perSec: float64(len(all)) / (to - from).Seconds()}
	slices.Sort(all)
	r.p50, r.p99 = percentile(all, 50), percentile(all, 99)
	var p99s []time.Duration
	r.minGroupWrites = -1
	for _, lats := range per {
		if r.minGroupWrites < 0 || len(lats) < r.minGroupWrites {
			r.minGroupWrites = len(lats)
		}
		if len(lats) == 0 {
			continue
		}
		slices.Sort(lats)
		p99s = append(p99s, percentile(lats, 99))
	}
	r.groupsWritten = len(p99s)
	slices.Sort(p99s)
	r.groupP99, r.groupP99s = percentile(p99s, 99), p99s
	return r
}

// tail describes where a window's slow writes were: the groups' own p99s
// (lowest, median, highest: window's) and, by 250 ms of the window, how
// many writes took longer than twice the window's p50 — bursts that every
// group shares (a stall of the process) or a spread (some groups slower
// than others).
func tail(samples []sample, r loadResult, from, to time.Duration) string {
	const slot = 250 * time.Millisecond
	late := make([]int, (to-from+slot-1)/slot)
	for _, s := range samples {
		if s.end >= from && s.end < to && s.lat > 2*r.p50 {
			late[(s.end-from)/slot]++
		}
	}
	var b strings.Builder
	if p := r.groupP99s; len(p) > 0 {
		fmt.Fprintf(&b, "groups' p99 ms: lowest %.1f, median %.1f, highest %.1f; ", ms(p[0]), ms(p[len(p)/2]), ms(p[len(p)-1]))
	}
	fmt.Fprintf(&b, "writes over %.1f ms (2x p50) by 250 ms of the window:", ms(2*r.p50))
	for _, n := range late {
		fmt.Fprintf(&b, " %d", n)
	}
	return b.String()
}

// percentile returns the p-th percentile of sorted (0 if empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*p/100), len(sorted)-1)]
}
