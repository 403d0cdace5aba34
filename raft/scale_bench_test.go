package raft_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
)

// BenchmarkScaleSteps measures a 3 → 5 and a 5 → 3 change of the
// replicated target voter count on the in-process cluster (fsync on, two
// ready standbys), with 16 writers running throughout: how long each step
// takes from UpdateSettings to the new configuration applied on the leader
// (joint consensus entered and left), and the writes' p99 during each step
// against the steady state of the same run.
//
//	go test -run '^$' -bench ScaleSteps -benchtime 3x ./raft/
func BenchmarkScaleSteps(b *testing.B) {
	var up, down, p99Steady, p99Up, p99Down []time.Duration
	for range b.N {
		u, d, s, pu, pd := scaleStepsOnce(b)
		up, down, p99Steady, p99Up, p99Down = append(up, u), append(down, d), append(p99Steady, s), append(p99Up, pu), append(p99Down, pd)
	}
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(up), "up-ms")
	b.ReportMetric(med(down), "down-ms")
	b.ReportMetric(med(p99Steady), "p99-steady-ms")
	b.ReportMetric(med(p99Up), "p99-up-ms")
	b.ReportMetric(med(p99Down), "p99-down-ms")
}

func scaleStepsOnce(b *testing.B) (up, down, p99Steady, p99Up, p99Down time.Duration) {
	c := cluster.New(b, cluster.Options{Members: 3, Sync: true, TickInterval: 10 * time.Millisecond,
		Membership: confchange.Settings{Stabilization: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lead := c.WaitLeader()
	for _, id := range []uint64{4, 5} {
		if err := lead.Node.AddLearner(ctx, c.Record(id)); err != nil {
			b.Fatal(err)
		}
		c.Join(id)
	}
	// Both standbys ready.
	for {
		m, err := lead.Node.Membership(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, ms := range m.Members {
			if ms.Role == confchange.RoleLearner && ms.Readiness.Ready() {
				ready++
			}
		}
		if ready == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	var (
		mu     sync.Mutex
		phase  = "steady"
		lat    = map[string][]time.Duration{}
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		writer = lead.Node
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				_, err := writer.Propose(ctx, kv.Put(fmt.Sprintf("w%d", w), fmt.Sprint(i)))
				d := time.Since(t0)
				if err == nil {
					mu.Lock()
					lat[phase] = append(lat[phase], d)
					mu.Unlock()
				}
			}
		}()
	}
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }
	step := func(target int) time.Duration {
		cs := lead.Node.Settings()
		cs.TargetVoters = target
		t0 := time.Now()
		if err := lead.Node.UpdateSettings(ctx, cs); err != nil {
			b.Fatal(err)
		}
		for {
			m, err := lead.Node.Membership(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(m.Config.Voters) == target && !m.Joint() {
				return time.Since(t0)
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
	setPhase("up")
	up = step(5)
	setPhase("steady")
	time.Sleep(time.Second)
	setPhase("down")
	down = step(3)
	setPhase("steady")
	close(stop)
	wg.Wait()
	p99 := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	b.Logf("3→5 in %v (p99 %v, %d writes), 5→3 in %v (p99 %v, %d writes), steady p99 %v (%d writes)",
		up, p99(lat["up"]), len(lat["up"]), down, p99(lat["down"]), len(lat["down"]), p99(lat["steady"]), len(lat["steady"]))
	return up, down, p99(lat["steady"]), p99(lat["up"]), p99(lat["down"])
}
