package robustness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/raft"
)

// Scenario is one shape of cluster and the faults its nemesis draws from.
type Scenario struct {
	Name string
	// Voters is the number of initial voters; Standbys learners join
	// before the clients start.
	Voters, Standbys int
	// TwoVoters demotes the third of three voters before the clients
	// start, with the policy off: a cluster of two voters and a learner.
	TwoVoters bool
	// Faults are the kinds the nemesis draws from (repeat one to draw it
	// more often).
	Faults []string
	// Every is the mean pause between two faults (default 250ms); in a
	// script, between two steps.
	Every time.Duration
	// Duration of the faults (default 4s).
	Duration time.Duration
	// Policy turns the membership policy on (standbys become ready within
	// the run and are promoted; failover; scaling to the target). Without
	// it only explicit requests change the membership.
	Policy bool
	// MaxLearners for the cluster settings (default 2).
	MaxLearners int
	// Script, if set, replaces the random nemesis: it makes the scenario's
	// changes in order and asserts that each took effect (see script.go);
	// Faults are then the faults it draws between two steps (ones that
	// leave every member running), and Duration is unused.
	Script func(*script)
	// OddVoters: the changes keep the voter count odd outside joint
	// configurations (a script that changes voters in pairs), so the
	// odd-count watch runs with the policy off too.
	OddVoters bool
	// SlowRestarts: every restart is onto a slow disk.
	SlowRestarts bool
	// Relay and RelayFanout as in raft.Config: the leader feeds the
	// standbys through relays (see fleet.go).
	Relay       bool
	RelayFanout int
	// Fleet: the clients send a third of their operations to the leader
	// and the rest to the standbys (the members added as learners), which
	// forward writes and serve linearizable reads; the run fails unless
	// standbys served reads and forwarded writes, and members relayed.
	Fleet bool
	// Clients is the number of concurrent clients (default 6).
	Clients int
	// Seeds run by the fixed suite.
	Seeds []int64
}

// Stats is what a run checked.
type Stats struct {
	Ops      int            // operations in the checked history
	Traffic  TrafficStats   // what the clients did
	Faults   map[string]int // faults injected, by kind
	Changes  int            // membership changes that took effect
	Recovery time.Duration  // from the end of the faults to a write and a membership change done
}

// Run runs scenario sc with seed: the clients and the nemesis for the
// scenario's duration, then the faults stop and it checks, failing t on a
// violation: the history is linearizable (porcupine; on a violation the
// visualization with the fault timeline is written to the temporary
// directory), every member holds every acknowledged write, stale reads
// never went backwards on a member nor returned a value never written,
// the configuration outside a joint state always had an odd number of
// voters when the policy acted alone (or the scenario says its changes keep
// it odd), and the cluster recovers: a write and a membership change go
// through within 30 s of the faults' end. A scripted scenario also fails
// on a step that does not take effect (see script.go).
func Run(t testing.TB, sc Scenario, seed int64) Stats {
	t.Helper()
	if sc.Duration == 0 {
		sc.Duration = 4 * time.Second
	}
	if sc.Every == 0 {
		sc.Every = 250 * time.Millisecond
	}
	d := &disks{}
	settings := confchange.Settings{TargetVoters: max(sc.Voters|1, 1), MaxLearners: max(sc.MaxLearners, 2),
		Stabilization: 200 * time.Millisecond, FailoverAfter: time.Second}
	if sc.Voters%2 == 0 {
		settings.TargetVoters = sc.Voters - 1
	}
	c := cluster.New(t, cluster.Options{Members: sc.Voters, Seed: seed, SnapshotCount: 200, SnapshotCatchUpEntries: 50,
		WrapStorage: d.wrap, Membership: settings, ManualMembership: !sc.Policy, Relay: sc.Relay, RelayFanout: sc.RelayFanout})
	h := NewHistory()
	nm := &nemesis{sc: sc, c: c, rng: rand.New(rand.NewSource(c.Seed)), h: h, disks: d,
		removed: map[uint64]bool{}, nextID: uint64(sc.Voters + sc.Standbys + 1), kinds: map[string]int{}}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s seed %d: %s\nfault timeline:\n%s", sc.Name, c.Seed, fmt.Sprintf(format, args...), FormatTimeline(h.Timeline()))
	}

	setupCtx, cancelSetup := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelSetup()
	lead := c.WaitLeader()
	// Right after the start the leader may not have heard from every member
	// (a demote is then refused: quorum at risk), or a change may be in
	// flight: setup requests are retried until the setup deadline.
	retry := func(what string, f func() error) {
		for {
			err := f()
			if err == nil {
				return
			}
			if setupCtx.Err() != nil {
				fail("%s: %v", what, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for id := uint64(sc.Voters + 1); id <= uint64(sc.Voters+sc.Standbys); id++ {
		retry(fmt.Sprintf("adding standby %d", id), func() error {
			if err := lead.Node.AddLearner(setupCtx, c.Record(id)); !errors.Is(err, confchange.ErrMemberExists) {
				return err // (exists: an earlier attempt of unknown outcome went through)
			}
			return nil
		})
		c.Join(id)
	}
	if sc.TwoVoters {
		retry("demoting to two voters", func() error {
			_, err := lead.Node.ChangeMembership(setupCtx, confchange.Demote(otherThan(lead.ID, 3)))
			return err
		})
	}

	// The odd-count watch: with the policy alone changing voters (or a
	// script that keeps the count odd), every configuration a member applies
	// outside a joint state is odd.
	var odd *oddWatch
	if sc.OddVoters || sc.Policy && !slices.ContainsFunc(sc.Faults, manualVoterChange) {
		odd = startOddWatch(c, h)
	}

	es := &endpoints{c: c, runs: map[*raft.Node]*memberEndpoint{}}
	traffic := Traffic{Clients: cmp.Or(sc.Clients, 6), Keys: []string{"a", "b", "c", "d", "e"}, CounterKey: "n",
		Pick: es.pick, RetryUnknown: true, Paused: nm.quiet.Load, AlsoWritten: []string{recovered}}
	if sc.Fleet {
		traffic.Pick = es.pickFleet(uint64(sc.Voters))
	}
	trafficCtx, stopTraffic := context.WithCancel(context.Background())
	var (
		tstats   TrafficStats
		problems []string
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		tstats, problems = traffic.Run(trafficCtx, c.Seed, h)
	}()
	defer func() { stopTraffic(); <-done }() // (a failure ends the run early)

	// The nemesis, or the script.
	if sc.Script != nil {
		sc.Script(&script{c: c, h: h, rng: nm.rng, nm: nm, fail: fail})
	} else {
		deadline := time.Now().Add(sc.Duration)
		for time.Now().Before(deadline) {
			time.Sleep(sc.Every/2 + time.Duration(nm.rng.Int63n(int64(sc.Every)))) // the fault schedule, not a wait for a condition
			nm.inject()
		}
	}
	// The faults stop: heal, release, restart.
	nm.healing = true
	nm.timers.Wait()
	c.Net.Heal()
	d.setDelay(0)
	if w := nm.restart(); w != "" {
		h.Fault(Restart, w)
	}
	h.Fault(Heal, "faults end: heal, restart")
	faultsEnd := time.Now()

	// Recovery: a write and a membership change within 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		fail("no leader after the faults: %v", err)
	}
	e := es.of(l)
	for {
		call := time.Now()
		out, res := e.Do(ctx, [2]uint64{1000, 1}, Input{Op: "put", Key: "a", Value: recovered})
		if res == Done {
			h.Op(1000, Input{Op: "put", Key: "a", Value: recovered}, out, call, time.Now())
			break
		}
		if res == Unknown {
			h.Op(1000, Input{Op: "put", Key: "a", Value: recovered}, Output{Unknown: true}, call, time.Now())
		}
		if ctx.Err() != nil {
			fail("no write succeeded within 30s of the faults' end")
		}
		if l, err = c.Leader(ctx); err == nil {
			e = es.of(l)
		}
	}
	for {
		l, err = c.Leader(ctx)
		if err == nil {
			if err = l.Node.UpdateMember(ctx, c.Record(l.ID)); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			fail("no membership change succeeded within 30s of the faults' end: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovery := time.Since(faultsEnd)
	stopTraffic()
	<-done
	var standbyReads, standbyWrites int64 // the clients' (the final reads below are not theirs)
	if sc.Fleet {
		standbyReads, standbyWrites = es.standbyOps(uint64(sc.Voters))
	}
	var evenSeen []string
	if odd != nil {
		evenSeen = odd.stop()
	}

	// Every member holds every acknowledged write: each reads every key
	// once more, into the history.
	for _, m := range c.Running() {
		me := es.of(m)
		for _, k := range append(slices.Clone(traffic.Keys), traffic.CounterKey) {
			call := time.Now()
			out, res := me.Do(ctx, [2]uint64{}, Input{Op: "get", Key: k})
			if res != Done {
				fail("final read of %q on member %d failed", k, m.ID)
			}
			h.Op(2000+int(m.ID), Input{Op: "get", Key: k}, out, call, time.Now())
		}
	}
	if err := c.Converge(ctx); err != nil {
		fail("members differ after the faults: %v", err)
	}
	if len(problems) > 0 {
		fail("stale reads:\n  %s", joinLines(problems))
	}
	if len(evenSeen) > 0 {
		fail("an even voter count outside a joint configuration with the policy alone:\n  %s", joinLines(evenSeen))
	}
	if sc.Policy {
		// The policy ends with an odd voter count.
		for {
			l, err := c.Leader(ctx)
			if err == nil {
				if st, err := l.Node.Status(ctx); err == nil && !st.Joint() && len(st.Voters)%2 == 1 {
					break
				}
			}
			if ctx.Err() != nil {
				fail("no odd voter count within 30s of the faults' end")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if tstats.OK == 0 {
		fail("no operation succeeded")
	}
	var fleet string
	if sc.Fleet {
		fleet = es.checkFleet(ctx, fail, standbyReads, standbyWrites)
	}
	name := fmt.Sprintf("understudy-robustness-%s-seed%d", sc.Name, c.Seed)
	res, err := h.Check(name, os.TempDir(), 60*time.Second)
	if err != nil {
		fail("%v", err)
	}
	if res == porcupine.Unknown {
		t.Logf("linearizability check timed out on %d operations", h.Len())
	}
	t.Logf("%s seed %d: %d ops checked (%d ok, %d unknown outcome, %d without effect, %d stale reads)%s; %d faults, %d membership changes; recovered in %s\nfault timeline:\n%s",
		sc.Name, c.Seed, h.Len(), tstats.OK, tstats.Unknown, tstats.NoEffect, tstats.Stale, fleet, len(h.Timeline()), nm.changes,
		recovery.Round(time.Millisecond), FormatTimeline(h.Timeline()))
	return Stats{Ops: h.Len(), Traffic: tstats, Faults: nm.kinds, Changes: nm.changes, Recovery: recovery}
}

// recovered is the value of the write that proves recovery.
const recovered = "recovered"

// manualVoterChange reports whether a fault kind changes the voter count by
// an explicit request (then the count may be even for a while).
func manualVoterChange(kind string) bool {
	return kind == Promote || kind == Demote || kind == RemoveVoter
}

func otherThan(self, id uint64) uint64 {
	if id != self {
		return id
	}
	return 1 + id%3
}

func joinLines(ls []string) string { return strings.Join(ls, "\n  ") }
