package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/understudy-raft/understudy/raft"
)

// hostSchedulers returns the schedulers of host i's replicas: the host's
// one (host layout), or each replica's own (process layout: every Start is
// a host of one group). Nil entries (a killed host) are left out.
func (c *cluster) hostSchedulers(i int) []*raft.Scheduler {
	if c.layout == layoutHost {
		if c.hosts[i] == nil {
			return nil
		}
		return []*raft.Scheduler{c.hosts[i].Scheduler()}
	}
	var ss []*raft.Scheduler
	for _, row := range c.groups {
		if r := row[i]; r != nil {
			ss = append(ss, r.Host().Scheduler())
		}
	}
	return ss
}

// schedCounts are scheduler figures summed over some hosts.
type schedCounts struct {
	// quiesced is the replicas quiesced now.
	quiesced int
	// wakes counts the quiesced replicas woken, by cause.
	wakes map[string]uint64
	// wakesDeferred counts the liveness wake-ups that waited for the
	// scheduler's throttle (MaxWakesPerSec).
	wakesDeferred uint64
	// wakesSkipped counts those dropped because the replica was awake
	// already when their turn came.
	wakesSkipped uint64
	// loopRuns, appendRuns and applyRuns count the pools' task runs (each
	// a hand-off to a worker); inline counts the append and apply turns a
	// loop worker took itself.
	loopRuns, appendRuns, applyRuns, inline uint64
}

// sched sums the schedulers' stats of the given hosts.
func (c *cluster) sched(hosts []int) schedCounts {
	s := schedCounts{wakes: map[string]uint64{}}
	for _, i := range hosts {
		for _, sc := range c.hostSchedulers(i) {
			st := sc.Stats()
			s.quiesced += st.Quiesced
			s.wakesDeferred += st.WakesDeferred
			s.wakesSkipped += st.WakesSkipped
			s.loopRuns += st.LoopRuns
			s.appendRuns += st.AppendRuns
			s.applyRuns += st.ApplyRuns
			s.inline += st.AppendInline + st.ApplyInline
			for k, v := range st.Wakes {
				s.wakes[k] += v
			}
		}
	}
	return s
}

// wakesSince is the wake counts of s less those of before, by cause, in
// the order "cause=n cause=n" (causes with none left out; "none" if
// empty).
func (s schedCounts) wakesSince(before schedCounts) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.wakes)) {
		if d := s.wakes[k] - before.wakes[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, d))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// messagesSent returns, for each host, the raft messages its replicas
// sent so far: the sum over its groups of every peer's
// transport.PeerStats.MessagesSent (the host links' own pings and pongs
// are not in it). A killed host counts 0.
func (c *cluster) messagesSent() []uint64 {
	n := make([]uint64, numHosts)
	for _, row := range c.groups {
		for i, r := range row {
			if r == nil {
				continue
			}
			for _, p := range r.Transport().Stats().Peers {
				n[i] += p.MessagesSent
			}
		}
	}
	return n
}

// quiescedSampler samples the replicas quiesced on every host until
// stopped.
type quiescedSampler struct {
	stop     context.CancelFunc
	wg       sync.WaitGroup
	sum, num int
	lo, hi   int
}

// sampleQuiesced samples c's quiesced replicas (summed over the hosts)
// every period until the sampler is stopped.
func (c *cluster) sampleQuiesced(period time.Duration) *quiescedSampler {
	ctx, cancel := context.WithCancel(context.Background())
	q := &quiescedSampler{stop: cancel, lo: -1}
	take := func() {
		n := c.sched(allHosts()).quiesced
		q.sum += n
		q.num++
		if q.lo < 0 || n < q.lo {
			q.lo = n
		}
		q.hi = max(q.hi, n)
	}
	take()
	q.wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				take()
				return
			case <-t.C:
				take()
			}
		}
	})
	return q
}

// finish stops the sampler and returns the quiesced groups' mean, least
// and most over its samples: replicas quiesced over the hosts / numHosts.
func (q *quiescedSampler) finish() (mean, lo, hi float64) {
	q.stop()
	q.wg.Wait()
	return float64(q.sum) / float64(q.num) / numHosts, float64(q.lo) / numHosts, float64(q.hi) / numHosts
}
