package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/raft"
)

// failoverResult is what -kill and -restart measure.
type failoverResult struct {
	// host is the host killed: the one that led the most groups.
	host int
	// led is the number of groups it led at the kill, quiesced the groups
	// quiesced then (replicas quiesced on the 3 hosts / 3).
	led      int
	quiesced float64
	// teardown is from the kill until the killed host's Close returned:
	// its Mux closed, then the host closed on a context already done (no
	// hand-off, no wait), while the survivors elect.
	teardown time.Duration
	// p50, p99 and max are, over the groups it led, the time from the kill
	// until a replica on a surviving host led the group; all is the time
	// until the last did (or the timeout), leaderless the groups that had
	// no leader then.
	p50, p99, max, all time.Duration
	leaderless         int
	// cpu is the process's CPU time over all (the killed host's teardown,
	// as far as it overlaps, included); cpuSurvivor the same / 2 / all: a fraction of a core per
	// surviving host.
	cpu         time.Duration
	cpuSurvivor float64
	// wakes are the surviving hosts' wake-ups of quiesced replicas over
	// all, by cause; wakesDeferred those that waited for the scheduler's
	// throttle (raft.SchedulerConfig.MaxWakesPerSec).
	wakes         string
	wakesDeferred uint64
	wakesSkipped  uint64

	// restarted: -restart ran. restartRunning is from the host's NewHost
	// until every StartGroup on it returned; restartLed until, besides,
	// every group had a leader and its replica on the host knew it.
	restarted                  bool
	restartRunning, restartLed time.Duration
}

// failover kills the host that leads the most groups (c must be the host
// layout) and waits, within timeout, until each group it led has a leader
// on the surviving hosts; then, if restart, starts the host again on its
// data dir and waits until it runs every group and every group has a
// leader its replica there knows.
//
// The kill is the in-process equivalent of kill -9: the host's Mux is
// closed first (its listener and host links: the peers see its
// connections drop), then the host is closed on a context that is already
// done, which stops its groups with no leadership hand-off and waits for
// nothing (as the robustness tests crash every host at once).
//
// profile, if not empty, is the file a CPU profile of the kill window (from
// the kill until each group it led has a leader, or the timeout) goes to.
func (c *cluster) failover(ctx context.Context, timeout time.Duration, restart bool, profile string) (*failoverResult, error) {
	if c.layout != layoutHost {
		return nil, errors.New("-kill needs the host layout")
	}
	lph := c.leadersPerHost()
	k := 0
	for i, n := range lph {
		if n > lph[k] {
			k = i
		}
	}
	var led []int
	for g, row := range c.groups {
		if row[k] != nil && row[k].IsLeader() {
			led = append(led, g)
		}
	}
	var survivors []int
	for i := range numHosts {
		if i != k {
			survivors = append(survivors, i)
		}
	}
	f := &failoverResult{host: k, led: len(led), quiesced: float64(c.sched(allHosts()).quiesced) / numHosts}

	w := c.watchLeaders(led, survivors, replicaID(k))
	defer w.stop()
	s0 := c.sched(survivors)
	var stopProfile func() error
	if profile != "" {
		var err error
		if stopProfile, err = startCPUProfile(profile); err != nil {
			return nil, err
		}
		defer func() {
			if stopProfile != nil {
				_ = stopProfile()
			}
		}()
	}
	cpu0, t0 := cpuTime(), time.Now()
	h := c.hosts[k]
	c.hosts[k] = nil
	for _, row := range c.groups {
		row[k] = nil
	}
	_ = h.Mux().Close()
	// The rest of the teardown runs while the survivors elect, as the
	// process of a killed host is gone at once.
	tornDown := make(chan time.Duration, 1)
	go func() {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = h.Close(done) // raft.ErrStopTimeout: its nodes finish stopping in the background
		tornDown <- time.Since(t0)
	}()
	defer func() {
		if f.teardown == 0 {
			f.teardown = <-tornDown
		}
	}()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for !w.all() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	times := w.since(t0)
	f.leaderless = len(led) - len(times)
	f.all = time.Since(t0)
	f.cpu = cpuTime() - cpu0
	if stopProfile != nil {
		err := stopProfile()
		stopProfile = nil
		if err != nil {
			return nil, err
		}
	}
	s1 := c.sched(survivors)
	f.cpuSurvivor = float64(f.cpu) / float64(len(survivors)) / float64(f.all)
	f.wakes, f.wakesDeferred, f.wakesSkipped = s1.wakesSince(s0), s1.wakesDeferred-s0.wakesDeferred, s1.wakesSkipped-s0.wakesSkipped
	f.p50, f.p99 = percentile(times, 50), percentile(times, 99)
	if len(times) > 0 {
		f.max = times[len(times)-1]
	}
	if f.leaderless > 0 || !restart {
		return f, nil
	}
	f.teardown = <-tornDown // its data dir is free once it is closed

	f.restarted = true
	rctx, rcancel := context.WithTimeout(ctx, timeout)
	defer rcancel()
	t1 := time.Now()
	ln, err := listenAgain(rctx, c.members[k].PeerAddr)
	if err != nil {
		return f, fmt.Errorf("restarting host %d: %w", k, err)
	}
	if c.hosts[k], err = c.openHost(k, ln); err != nil {
		return f, fmt.Errorf("restarting host %d: %w", k, err)
	}
	if _, err := c.startAll(rctx, len(c.groups), c.opts.startParallel, []int{k}, c.startGroup(rctx)); err != nil {
		return f, fmt.Errorf("restarting host %d: %w", k, err)
	}
	f.restartRunning = time.Since(t1)
	var pending []int
	for g := range c.groups {
		pending = append(pending, g)
	}
	for {
		rest := pending[:0]
		for _, g := range pending {
			if c.leader(g) == nil || c.groups[g][k].Leader() == 0 {
				rest = append(rest, g)
			}
		}
		pending = rest
		if len(pending) == 0 {
			f.restartLed = time.Since(t1)
			return f, nil
		}
		select {
		case <-rctx.Done():
			return f, fmt.Errorf("host %d restarted: %d of %d groups without a leader its replica there knows after %s: %w",
				k, len(pending), len(c.groups), time.Since(t1).Round(time.Millisecond), rctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// leaderWatch records, for each group of a set, when a replica on one of
// some hosts first knew of a leader other than a given replica: its own
// leadership, or a leader's first message (raft.EventLeaderChanged, read
// by a goroutine per group from the time it is sent; as a fallback for an
// event missed, all polls IsLeader and takes the poll's time).
type leaderWatch struct {
	c       *cluster
	groups  []int
	hosts   []int
	at      []atomic.Int64 // UnixNano; 0: not yet
	ends    []func()
	wg      sync.WaitGroup
	stopped chan struct{}
}

// watchLeaders starts watching the replicas on hosts of groups for a
// leader other than old.
func (c *cluster) watchLeaders(groups, hosts []int, old uint64) *leaderWatch {
	w := &leaderWatch{c: c, groups: groups, hosts: hosts, at: make([]atomic.Int64, len(groups)), stopped: make(chan struct{})}
	for j, g := range groups {
		var chs []<-chan raft.Event
		for _, i := range hosts {
			ch, end := c.groups[g][i].Subscribe(64)
			chs = append(chs, ch)
			w.ends = append(w.ends, end)
		}
		w.wg.Go(func() {
			for len(chs) > 0 {
				var e raft.Event
				var ok bool
				select {
				case <-w.stopped:
					return
				case e, ok = <-chs[0]:
					if !ok {
						chs = chs[1:]
					}
				case e, ok = <-chs[len(chs)-1]:
					if !ok {
						chs = chs[:len(chs)-1]
					}
				}
				if ok && e.Type == raft.EventLeaderChanged && e.Leader != 0 && e.Leader != old {
					w.at[j].CompareAndSwap(0, time.Now().UnixNano())
					return
				}
			}
		})
	}
	return w
}

// all reports whether every group has a leader, polling those whose event
// did not come.
func (w *leaderWatch) all() bool {
	done := true
	for j, g := range w.groups {
		if w.at[j].Load() != 0 {
			continue
		}
		if w.c.leader(g) != nil {
			w.at[j].CompareAndSwap(0, time.Now().UnixNano())
			continue
		}
		done = false
	}
	return done
}

// since returns, sorted, the time from t0 until each group that has one
// had a leader.
func (w *leaderWatch) since(t0 time.Time) []time.Duration {
	var ds []time.Duration
	for j := range w.at {
		if at := w.at[j].Load(); at != 0 {
			ds = append(ds, max(time.Duration(at-t0.UnixNano()), 0))
		}
	}
	slices.Sort(ds)
	return ds
}

// stop ends the watch.
func (w *leaderWatch) stop() {
	close(w.stopped)
	for _, end := range w.ends {
		end()
	}
	w.wg.Wait()
}

// listenAgain listens on addr, the address a killed host listened on,
// retrying while the port is still taken.
func listenAgain(ctx context.Context, addr string) (net.Listener, error) {
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listening on %s again: %w (%w)", addr, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// line is the -kill figures as printed under the configuration's line.
func (f *failoverResult) line() string {
	var perGroup time.Duration
	if f.led > 0 {
		perGroup = f.cpu / time.Duration(f.led)
	}
	s := fmt.Sprintf("kill host %d (led %d groups, %.0f groups quiesced): a leader on the survivors after p50 %s p99 %s max %s (teardown %s); survivors' CPU %.1f%% of a core each (%s over %s, %s per group it led); wakes %s, %d throttled, %d skipped (awake already)",
		f.host, f.led, f.quiesced, ms3(f.p50), ms3(f.p99), ms3(f.max), ms3(f.teardown),
		100*f.cpuSurvivor, f.cpu.Round(time.Millisecond), f.all.Round(time.Millisecond), perGroup.Round(time.Microsecond), f.wakes, f.wakesDeferred, f.wakesSkipped)
	if f.leaderless > 0 {
		s += fmt.Sprintf("; %d groups still without a leader", f.leaderless)
	}
	if f.restarted {
		s += fmt.Sprintf("; restart: its groups running after %s, every group led and known there after %s",
			ms3(f.restartRunning), ms3(f.restartLed))
	}
	return s
}

// ms3 is d rounded to 0.1 ms.
func ms3(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
