package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/client"
)

// commandSize is the size in bytes of every command written (as groupload:
// a put of a 256-byte command).
const commandSize = 256

var padding = string(make([]byte, commandSize))

// command is a put of key whose encoding is exactly commandSize bytes.
func command(key string) []byte {
	n := commandSize - len(put(key, ""))
	for range 4 {
		c := put(key, padding[:n])
		if len(c) == commandSize {
			return c
		}
		n -= len(c) - commandSize // the value's length prefix grew or shrank
	}
	panic(fmt.Sprintf("dbload: no value makes a %d-byte put of %q", commandSize, key))
}

// writerShards returns the shards writer w of writers writes to, in turn,
// among the first active shards: with at least as many shards as writers,
// every shard has one writer and each writer cycles over its shards (w,
// w+writers, …); with fewer, shard w%active has every writer w' ≡ w. Either
// way the shards' shares differ by at most one writer (or one shard). This
// is groupload's writerGroups.
func writerShards(w, writers, active int) []int {
	if active <= writers {
		return []int{w % active}
	}
	var gs []int
	for g := w; g < active; g += writers {
		gs = append(gs, g)
	}
	return gs
}

// sample is one successful write: its shard, when it ended (since the
// load's start) and its latency as the writer saw it, retries included.
type sample struct {
	shard int32
	end   time.Duration
	lat   time.Duration
}

// load is a running load: writers writing until stopped.
type load struct {
	c       *cluster
	timeout time.Duration
	start   time.Time
	stop    atomic.Bool
	wg      sync.WaitGroup

	mu       sync.Mutex
	samples  []sample
	errs     int
	firstErr error
	retries  atomic.Int64
}

// startLoad starts writers writers on the first active shards of c
// (writerShards), each writing 256-byte puts through its shard's leader
// with SyncPropose, one at a time, until stop. timeout bounds each
// SyncPropose (dragonboat requires a deadline).
func startLoad(ctx context.Context, c *cluster, writers, active int, timeout time.Duration) *load {
	l := &load{c: c, timeout: timeout, start: time.Now()}
	for w := range writers {
		l.wg.Go(func() { l.write(ctx, w, writerShards(w, writers, active)) })
	}
	return l
}

// write is writer w's loop over its shards gs.
func (l *load) write(ctx context.Context, w int, gs []int) {
	var (
		local    []sample
		errs     int
		firstErr error
		leaders  = make([]int, len(gs))
		sessions = make([]*client.Session, len(gs))
	)
	for k, g := range gs {
		leaders[k] = -1
		// A no-op session: no exactly-once bookkeeping, as understudy's
		// Propose (the put is idempotent instead).
		sessions[k] = l.c.hosts[0].GetNoOPSession(shardID(g))
	}
	for i := 0; !l.stop.Load() && ctx.Err() == nil; i++ {
		k := i % len(gs)
		g := gs[k]
		cmd := command(fmt.Sprintf("w%d-%d", w, i%1024))
		t0 := time.Now()
		var err error
		for {
			if leaders[k] < 0 {
				if leaders[k], err = l.waitLeader(ctx, g); err != nil {
					break
				}
			}
			pctx, cancel := context.WithTimeout(ctx, l.timeout)
			_, err = l.c.hosts[leaders[k]].SyncPropose(pctx, sessions[k], cmd)
			cancel()
			if !errRetry(err) || ctx.Err() != nil {
				break
			}
			// Not appended, or an unknown outcome: written again through
			// the leader of now.
			l.retries.Add(1)
			leaders[k] = -1
		}
		if err != nil {
			if ctx.Err() == nil {
				errs++
				if firstErr == nil {
					firstErr = fmt.Errorf("writer %d, shard %d: %w", w, shardID(g), err)
				}
			}
			continue
		}
		end := time.Now()
		local = append(local, sample{shard: int32(g), end: end.Sub(l.start), lat: end.Sub(t0)})
	}
	l.mu.Lock()
	l.samples = append(l.samples, local...)
	l.errs += errs
	if l.firstErr == nil {
		l.firstErr = firstErr
	}
	l.mu.Unlock()
}

// waitLeader returns the host whose replica leads shard g, polling until
// one knows it leads.
func (l *load) waitLeader(ctx context.Context, g int) (int, error) {
	for {
		if i := l.c.leader(g); i >= 0 {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
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
	shardP99       time.Duration // the p99 of the shards' own p99s
	shardsWritten  int
	minShardWrites int
}

// window summarises the writes that ended in [from, to) (since the load's
// start) on the first active shards.
func window(samples []sample, active int, from, to time.Duration) loadResult {
	var all []time.Duration
	per := make([][]time.Duration, active)
	for _, s := range samples {
		if s.end >= from && s.end < to {
			all = append(all, s.lat)
			per[s.shard] = append(per[s.shard], s.lat)
		}
	}
	r := loadResult{writes: len(all), perSec: float64(len(all)) / (to - from).Seconds()}
	slices.Sort(all)
	r.p50, r.p99 = percentile(all, 50), percentile(all, 99)
	var p99s []time.Duration
	r.minShardWrites = -1
	for _, lats := range per {
		if r.minShardWrites < 0 || len(lats) < r.minShardWrites {
			r.minShardWrites = len(lats)
		}
		if len(lats) == 0 {
			continue
		}
		slices.Sort(lats)
		p99s = append(p99s, percentile(lats, 99))
	}
	r.shardsWritten = len(p99s)
	slices.Sort(p99s)
	r.shardP99 = percentile(p99s, 99)
	return r
}

// percentile returns the p-th percentile of sorted (0 if empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*p/100), len(sorted)-1)]
}
