package robustness

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Result is how an operation ended.
type Result int

const (
	// Done: the operation took effect (a failed compare-and-swap is done:
	// it read the register) and Output is what it returned.
	Done Result = iota
	// NoEffect: the operation certainly did not take effect (refused before
	// it was proposed, or a read that failed). It is left out of the
	// history.
	NoEffect
	// Unknown: a write that may or may not have taken effect.
	Unknown
)

// Endpoint is one member (one run of it) as a client sees it.
type Endpoint interface {
	// Do performs a put, delete, cas or linearizable get. Writes carry id
	// (client, sequence); an endpoint that deduplicates on it makes a retry
	// with the same id safe.
	Do(ctx context.Context, id [2]uint64, in Input) (Output, Result)
	// StaleGet reads key from this member's own state, without a round to
	// the leader. ok is false if it could not read at all.
	StaleGet(key string) (value string, ok bool)
	// Name names the member in failure messages.
	Name() string
}

// Traffic is the clients' workload.
type Traffic struct {
	// Clients is the number of concurrent clients.
	Clients int
	// Keys are the registers written and read; CounterKey is incremented
	// by compare-and-swap and read stale, to check that stale reads on one
	// member never go backwards.
	Keys       []string
	CounterKey string
	// Pick returns the endpoint a client sends its next operation to (nil:
	// none is up; the client waits a moment).
	Pick func(rng *rand.Rand) Endpoint
	// RetryUnknown: a write of unknown outcome is retried once, with the
	// same id, through another endpoint (only for endpoints that
	// deduplicate).
	RetryUnknown bool
	// Paused, if set, makes clients wait while it returns true.
	Paused func() bool
	// AlsoWritten are values written by others than these clients (a stale
	// read may return them).
	AlsoWritten []string
}

// TrafficStats counts what the clients did.
type TrafficStats struct {
	OK, Unknown, NoEffect, Stale int64
}

// staleCheck holds what stale reads saw, to find one that went backwards
// on the same endpoint or returned a value never written.
type staleCheck struct {
	mu       sync.Mutex
	counter  map[Endpoint]*counterReads
	written  map[string]bool
	problems []string
}

// staleRead is one stale read of the counter: when it was answered, and
// what it returned.
type staleRead struct {
	ret time.Duration
	n   int
}

func (s *staleCheck) wrote(v string) {
	s.mu.Lock()
	s.written[v] = true
	s.mu.Unlock()
}

// sawCounter checks a stale read of the counter sent at call and answered
// at ret: it must not return less than any read of the same endpoint that
// was answered before it was sent (reads that overlap in time may be
// answered in either order).
func (s *staleCheck) sawCounter(e Endpoint, v string, call, ret time.Duration) {
	n := 0
	if v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			s.fail(fmt.Sprintf("%.3fs: stale read of the counter on %s returned %q", ret.Seconds(), e.Name(), v))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counter[e]
	if c == nil {
		c = &counterReads{}
		s.counter[e] = c
	}
	prev := c.floor
	for _, r := range c.recent {
		if r.ret < call && r.n > prev.n {
			prev = r
		}
	}
	if prev.ret < call && n < prev.n {
		s.problems = append(s.problems, fmt.Sprintf("%.3fs: stale read on %s went backwards: counter %d, after a read answered at %.3fs returned %d",
			call.Seconds(), e.Name(), n, prev.ret.Seconds(), prev.n))
	}
	c.recent = append(c.recent, staleRead{ret: ret, n: n})
	// Reads answered more than 5 s before this one fold into the floor: no
	// read still in flight was sent before them (clients give up sooner).
	kept := c.recent[:0]
	for _, r := range c.recent {
		if r.ret < ret-5*time.Second {
			c.floor.ret = max(c.floor.ret, r.ret)
			c.floor.n = max(c.floor.n, r.n)
		} else {
			kept = append(kept, r)
		}
	}
	c.recent = kept
}

// counterReads are the stale reads of the counter on one endpoint.
type counterReads struct {
	floor  staleRead // every read answered long ago: the latest answer time and the greatest value
	recent []staleRead
}

func (s *staleCheck) sawValue(e Endpoint, key, v string, at time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v != "" && !s.written[v] {
		s.problems = append(s.problems, fmt.Sprintf("%.3fs: stale read of %q on %s returned %q, never written", at.Seconds(), key, e.Name(), v))
	}
}

func (s *staleCheck) fail(p string) {
	s.mu.Lock()
	s.problems = append(s.problems, p)
	s.mu.Unlock()
}

// Run runs the clients until ctx ends, recording into h, and returns what
// they did and every stale-read violation seen.
func (tr Traffic) Run(ctx context.Context, seed int64, h *History) (TrafficStats, []string) {
	var (
		stats [4]atomic.Int64
		wg    sync.WaitGroup
		sc    = &staleCheck{counter: map[Endpoint]*counterReads{}, written: map[string]bool{}}
	)
	for _, v := range tr.AlsoWritten {
		sc.wrote(v)
	}
	for client := range tr.Clients {
		rng := rand.New(rand.NewSource(seed + int64(client) + 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); ctx.Err() == nil; seq++ {
				if tr.Paused != nil && tr.Paused() {
					time.Sleep(time.Millisecond)
					continue
				}
				e := tr.Pick(rng)
				if e == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				tr.one(ctx, rng, client, seq, e, h, sc, &stats)
			}
		}()
	}
	wg.Wait()
	return TrafficStats{OK: stats[0].Load(), Unknown: stats[1].Load(), NoEffect: stats[2].Load(), Stale: stats[3].Load()}, sc.problems
}

// one runs one operation of client against e.
func (tr Traffic) one(ctx context.Context, rng *rand.Rand, client int, seq uint64, e Endpoint, h *History, sc *staleCheck, stats *[4]atomic.Int64) {
	id := [2]uint64{uint64(client + 1), seq}
	in := Input{Key: tr.Keys[rng.Intn(len(tr.Keys))], Value: fmt.Sprintf("%d-%d", client, seq)}
	switch p := rng.Intn(100); {
	case p < 30:
		in.Op = "put"
	case p < 55:
		in.Op = "get"
	case p < 67:
		in.Op = "cas"
		in.Prev = fmt.Sprintf("%d-%d", rng.Intn(tr.Clients), rng.Int63n(int64(seq)+1))
	case p < 75:
		in.Op = "delete"
	case p < 88:
		// A stale read: from this member's state, not in the history.
		key := tr.Keys[rng.Intn(len(tr.Keys))]
		if rng.Intn(2) == 0 {
			key = tr.CounterKey
		}
		call := h.Since()
		v, ok := e.StaleGet(key)
		if !ok {
			return
		}
		stats[3].Add(1)
		if key == tr.CounterKey {
			sc.sawCounter(e, v, call, h.Since())
		} else {
			sc.sawValue(e, key, v, h.Since())
		}
		return
	default:
		// Increment the counter from what this member shows.
		cur, ok := e.StaleGet(tr.CounterKey)
		if !ok {
			return
		}
		n, _ := strconv.Atoi(cur)
		in = Input{Op: "cas", Key: tr.CounterKey, Prev: cur, Value: strconv.Itoa(n + 1)}
	}
	if in.Op == "put" || in.Op == "cas" {
		sc.wrote(in.Value)
	}
	// Clients give up: most after half a second, some almost at once.
	timeout := 500 * time.Millisecond
	if rng.Intn(10) == 0 {
		timeout = time.Duration(rng.Intn(3000)) * time.Microsecond
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	call := time.Now()
	out, res := e.Do(octx, id, in)
	cancel()
	if res == Unknown && in.Op != "get" && tr.RetryUnknown && rng.Intn(2) == 0 && ctx.Err() == nil {
		if other := tr.Pick(rng); other != nil {
			rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if rout, rres := other.Do(rctx, id, in); rres == Done {
				out, res = rout, Done
			}
			rcancel()
		}
	}
	ret := time.Now()
	switch {
	case res == Done:
		stats[0].Add(1)
		h.Op(client, in, out, call, ret)
	case res == NoEffect || in.Op == "get":
		stats[2].Add(1)
	default:
		stats[1].Add(1)
		out.Unknown = true
		h.Op(client, in, out, call, ret)
	}
}
