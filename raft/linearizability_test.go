package raft_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// kvInput and kvOutput are one operation of the history porcupine checks.
type kvInput struct {
	op    string // "put", "get", "cas"
	key   string
	value string
	prev  string
}

type kvOutput struct {
	value   string // get: the value read
	ok      bool   // cas: whether it swapped
	unknown bool   // a write whose outcome is unknown (leader changed, timeout)
}

// kvModel is a register per key; a write with an unknown outcome may take
// effect (here) or not at all (porcupine places it after everything else,
// since it never returned).
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.op {
		case "put":
			return true, in.value
		case "get":
			return out.value == s, s
		case "cas":
			if out.unknown {
				if s == in.prev {
					return true, in.value
				}
				return true, s
			}
			if out.ok {
				return s == in.prev, in.value
			}
			return s != in.prev, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		return fmt.Sprintf("%s(%s,%s,%s) -> %+v", in.op, in.key, in.value, in.prev, out)
	},
}

// linScenario is one shape of TestLinearizableUnderFaults.
type linScenario struct {
	name    string
	voters  int
	learner bool // a learner (a standby) serves clients too
	// restarts: the nemesis only stops, crashes and restarts members —
	// often, onto slow disks, with reads in flight.
	restarts bool
	// churn: half the faults are membership changes (learners added and
	// removed, voters swapped, demoted, promoted, the leader crashed in the
	// middle of a joint change).
	churn bool
	// scale: the nemesis changes the replicated target voter count
	// 1 → 3 → 5 → 3 → 1 (four standbys join first), crashing the leader in
	// the middle of some steps, and checks every configuration it sees.
	scale bool
	seeds []int64
}

// TestLinearizableUnderFaults runs concurrent clients doing put, get and
// compare-and-swap through random members — voters and a learner, which
// forward their writes — while a nemesis partitions the network, drops,
// delays and duplicates messages, crashes and cleanly stops members of every
// role and restarts them (with reads in flight, sometimes onto a slow disk),
// slows and stalls fsync, isolates the leader with an uncommitted conf
// change before it leads again, and changes the membership (learners added
// and removed, voters demoted, promoted and swapped for standbys, the leader
// crashed in the middle of a joint change: "-churn"); clients give up on requests after random
// deadlines (some at once) and retry writes of unknown outcome with the same
// RequestID. The history must be linearizable. Each scenario runs with fixed
// seeds (the nemesis's choices; timing still varies), plus CLUSTER_SEED if
// set.
// soak runs random seeds of every scenario until it has passed, then prints
// what was checked: go test ./raft -run TestLinearizableUnderFaults -soak 30m -timeout 40m
var soak = flag.Duration("soak", 0, "run random seeds of every linearizability scenario for this long and print a summary")

// linStats is what one scenario run checked.
type linStats struct {
	ops    int64
	faults []string
}

func TestLinearizableUnderFaults(t *testing.T) {
	scenarios := []linScenario{
		{name: "3voters+learner", voters: 3, learner: true, seeds: []int64{1, 2}},
		{name: "1voter+learner", voters: 1, learner: true, seeds: []int64{3}},
		{name: "1voter", voters: 1, seeds: []int64{4}},
		{name: "3voters+learner-restarts", voters: 3, learner: true, restarts: true, seeds: []int64{5}},
		{name: "1voter+learner-restarts", voters: 1, learner: true, restarts: true, seeds: []int64{6, 7}},
		{name: "3voters+learner-churn", voters: 3, learner: true, churn: true, seeds: []int64{10, 11, 12}},
		{name: "1voter-scale", voters: 1, scale: true, seeds: []int64{13, 14}},
	}
	if *soak > 0 {
		runSoak(t, scenarios, *soak)
		return
	}
	for _, sc := range scenarios {
		seeds := sc.seeds
		if s := os.Getenv("CLUSTER_SEED"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("CLUSTER_SEED: %v", err)
			}
			seeds = []int64{v}
		}
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", sc.name, seed), func(t *testing.T) {
				runLinearizable(t, sc, seed)
			})
		}
	}
}

// runSoak runs scenarios with random seeds, in turn, until d has passed,
// and prints what it checked: scenarios, operations in checked histories,
// faults by kind, membership changes, failures (each with its seed).
func runSoak(t *testing.T, scenarios []linScenario, d time.Duration) {
	deadline := time.Now().Add(d)
	var (
		runs, failures int
		ops            int64
		kinds          = map[string]int{}
		changes        int
		failed         []string
	)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; time.Now().Before(deadline); i++ {
		sc := scenarios[i%len(scenarios)]
		seed := rng.Int63()
		name := fmt.Sprintf("%s/seed=%d", sc.name, seed)
		var st linStats
		ok := t.Run(name, func(t *testing.T) { st = runLinearizable(t, sc, seed) })
		runs++
		ops += st.ops
		for _, f := range st.faults {
			k := faultKind(f)
			kinds[k]++
			switch k {
			case "add learner", "remove learner", "swap", "demote", "promote", "target", "isolate leader":
				changes++
			}
		}
		if !ok {
			failures++
			failed = append(failed, name)
		}
	}
	keys := slices.Sorted(maps.Keys(kinds))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, kinds[k])
	}
	t.Logf("soak of %s: %d scenarios, %d operations checked, faults:%s; membership changes %d; failures %d %v",
		d, runs, ops, b.String(), changes, failures, failed)
}

// faultKind is a fault's kind: its words before the first member ID or
// number ("crash leader 3" → "crash leader", "slow fsync 9ms" → "slow fsync").
func faultKind(f string) string {
	var words []string
	for _, w := range strings.Fields(f) {
		if w == "" || (w[0] >= '0' && w[0] <= '9') || w[0] == '(' {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

func runLinearizable(t *testing.T, sc linScenario, seed int64) (stats linStats) {
	duration := 4 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	disks := &slowDisks{}
	settings := confchange.Settings{TargetVoters: sc.voters}
	if sc.churn || sc.scale {
		// Learners become ready within the run, so the policy promotes
		// standbys into the seats the churn empties.
		settings.Stabilization = 200 * time.Millisecond
	}
	if sc.scale {
		settings.MaxLearners = 4
	}
	c := cluster.New(t, cluster.Options{Members: sc.voters, Seed: seed, SnapshotCount: 200, SnapshotCatchUpEntries: 50,
		WrapStorage: disks.wrap, Membership: settings})
	lead := c.WaitLeader()
	if sc.learner {
		learner := uint64(sc.voters + 1)
		if err := lead.Node.AddLearner(ctxT(t, 10*time.Second), c.Record(learner)); err != nil {
			t.Fatal(err)
		}
		c.Join(learner)
	}
	if sc.scale {
		for id := uint64(sc.voters + 1); id <= uint64(sc.voters+4); id++ {
			if err := lead.Node.AddLearner(ctxT(t, 10*time.Second), c.Record(id)); err != nil {
				t.Fatal(err)
			}
			c.Join(id)
		}
		duration = 12 * time.Second // four steps, each waits for its configuration
	}
	rng := rand.New(rand.NewSource(c.Seed))
	targets := []int{3, 5, 3, 1}

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		start   = time.Now()
		stop    atomic.Bool
		quiet   atomic.Bool // clients pause (the nemesis makes the cluster idle before a restart)
		wg      sync.WaitGroup
		counts  [3]atomic.Int64 // ok, unknown, failed
	)
	record := func(client int, in kvInput, out kvOutput, call, ret time.Time) {
		mu.Lock()
		defer mu.Unlock()
		r := ret.Sub(start).Nanoseconds()
		if out.unknown {
			r = int64(1) << 62
		}
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call.Sub(start).Nanoseconds(), Output: out, Return: r})
	}
	keys := []string{"a", "b", "c", "d", "e", "f"} // one porcupine partition each
	for client := range 6 {
		crng := rand.New(rand.NewSource(c.Seed + int64(client) + 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				for quiet.Load() && !stop.Load() {
					time.Sleep(time.Millisecond) // the nemesis's idle period
				}
				running := c.Running()
				if len(running) == 0 {
					continue
				}
				m := running[crng.Intn(len(running))]
				in := kvInput{key: keys[crng.Intn(len(keys))], value: fmt.Sprintf("%d-%d", client, i)}
				// Clients give up: most after half a second, some at once.
				timeout := 500 * time.Millisecond
				if crng.Intn(10) == 0 {
					timeout = time.Duration(crng.Intn(3000)) * time.Microsecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				call := time.Now()
				var out kvOutput
				var err error
				op := crng.Intn(3)
				// Writes carry a RequestID; one of unknown outcome is retried
				// once with it (through another member) and counts as done if
				// the retry succeeds or finds it applied.
				rid := raft.RequestID{Client: uint64(client + 1), Seq: uint64(i + 1)}
				write := func(cmd []byte) error {
					_, err := m.Node.ProposeWithID(ctx, rid, cmd)
					if err == nil || errors.Is(err, kv.ErrCompareFailed) || errors.Is(err, raft.ErrProposalDropped) || errors.Is(err, raft.ErrStopped) || crng.Intn(2) == 0 {
						return err
					}
					running := c.Running()
					if len(running) == 0 {
						return err
					}
					rctx, rcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
					defer rcancel()
					_, rerr := running[crng.Intn(len(running))].Node.ProposeWithID(rctx, rid, cmd)
					if errors.Is(rerr, raft.ErrDuplicateRequest) && in.op == "put" {
						return nil // applied once, by the first attempt
					}
					if rerr == nil {
						return nil
					}
					return err
				}
				switch op {
				case 0:
					in.op = "put"
					err = write(kv.Put(in.key, in.value))
				case 1:
					in.op = "get"
					var v []byte
					v, err = m.Node.Read(ctx, []byte(in.key))
					out.value = string(v)
				case 2:
					in.op = "cas"
					in.prev = fmt.Sprintf("%d-%d", crng.Intn(6), crng.Intn(i+1))
					_, err = m.Node.ProposeWithID(ctx, rid, kv.CAS(in.key, in.prev, in.value))
					out.ok = err == nil
					if errors.Is(err, kv.ErrCompareFailed) {
						err = nil
					}
				}
				ret := time.Now()
				cancel()
				switch {
				case err == nil:
					counts[0].Add(1)
					record(client, in, out, call, ret)
				case in.op == "get" || errors.Is(err, raft.ErrProposalDropped):
					counts[2].Add(1) // no effect: not part of the history
				default:
					counts[1].Add(1)
					out.unknown = true
					record(client, in, out, call, ret)
				}
			}
		}()
	}

	// The nemesis: one fault at a time, chosen by the seed.
	deadline := time.Now().Add(duration)
	var down uint64 // a member crashed or stopped, not yet restarted
	var faults []string
	removed := map[uint64]bool{}
	nextID := uint64(sc.voters + 2)
	restart := func() {
		if down == 0 {
			return
		}
		if rng.Intn(3) == 0 || (sc.restarts && rng.Intn(3) != 0) {
			disks.setDelay(time.Duration(5+rng.Intn(30)) * time.Millisecond) // restarts onto a slow disk
			faults = append(faults, fmt.Sprintf("restart %d (slow disk)", down))
		} else {
			faults = append(faults, fmt.Sprintf("restart %d", down))
		}
		c.Restart(down)
		down = 0
		quiet.Store(false)
	}
	for time.Now().Before(deadline) {
		pick := rng.Intn(13)
		if sc.restarts {
			time.Sleep(time.Duration(50+rng.Intn(150)) * time.Millisecond) // the fault schedule
			pick = 4
		} else {
			time.Sleep(time.Duration(150+rng.Intn(250)) * time.Millisecond) // the fault schedule, not a wait for a condition
		}
		if sc.churn && rng.Intn(2) == 0 {
			pick = 10 + rng.Intn(3)
		}
		if sc.scale {
			if len(targets) == 0 {
				break // every step done: heal and check
			}
			restart()
			target := targets[0]
			running := c.Running()
			via := running[rng.Intn(len(running))]
			cs := via.Node.Settings()
			cs.TargetVoters = target
			uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := via.Node.UpdateSettings(uctx, cs)
			cancel()
			if err != nil {
				faults = append(faults, fmt.Sprintf("target %d refused (%v)", target, err))
				continue
			}
			targets = targets[1:]
			faults = append(faults, fmt.Sprintf("target %d", target))
			if seed%2 == 1 || rng.Intn(3) == 0 {
				// Crash the leader in the middle of the step (every step
				// with an odd seed).
				time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
				if l, err := c.Leader(ctxT(t, time.Second)); err == nil {
					faults = append(faults, fmt.Sprintf("crash leader %d", l.ID))
					down = l.ID
					c.Crash(l.ID)
				}
			}
			// Wait for the step's configuration; every one seen outside a
			// joint state has an odd voter count.
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			waitStart := time.Now()
			for wctx.Err() == nil {
				if down != 0 && time.Since(waitStart) > time.Second {
					// A crashed leader may hold the only vote of the
					// incoming configuration (scaling down to one voter):
					// it comes back, as an operator would bring it back.
					restart()
				}
				lctx, lcancel := context.WithTimeout(wctx, 500*time.Millisecond)
				l, err := c.Leader(lctx)
				lcancel()
				if err != nil {
					continue
				}
				st, err := l.Node.Status(wctx)
				if err != nil {
					continue
				}
				if !st.Joint() && len(st.Voters)%2 == 0 {
					cancel()
					t.Fatalf("an even voter count outside a joint configuration: %v (faults %v)", st.Voters, faults)
				}
				if !st.Joint() && len(st.Voters) == target && !slices.Contains(st.Voters, down) {
					break
				}
				if down != 0 && len(st.Voters) == target && !st.Joint() {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if wctx.Err() != nil {
				faults = append(faults, fmt.Sprintf("target %d not reached in 10s", target))
			}
			cancel()
			continue
		}
		var ids []uint64
		for _, id := range c.Members() {
			if !removed[id] {
				ids = append(ids, id)
			}
		}
		switch pick {
		case 0:
			a := ids[rng.Intn(len(ids))]
			faults = append(faults, fmt.Sprintf("isolate %d", a))
			c.Net.Isolate(a)
		case 1:
			faults = append(faults, "drop 10%")
			c.Net.SetDropRate(0, 0, 0.1)
		case 2:
			faults = append(faults, "delay 20ms")
			c.Net.SetDelay(20 * time.Millisecond)
		case 3:
			faults = append(faults, "duplicate 10%")
			c.Net.SetDuplicateRate(0.1)
		case 4, 5:
			if down == 0 {
				down = ids[rng.Intn(len(ids))]
				if sc.restarts && rng.Intn(2) == 0 {
					// Idle first: the last writes are acknowledged and only
					// the commit index moves — the state a restart must not
					// lose track of. Clients resume as soon as it restarts.
					quiet.Store(true)
					time.Sleep(30 * time.Millisecond)
					faults = append(faults, "idle")
				}
				if rng.Intn(2) == 0 {
					faults = append(faults, fmt.Sprintf("crash %d", down))
					c.Crash(down)
				} else {
					faults = append(faults, fmt.Sprintf("stop %d", down))
					c.Stop(down)
				}
			} else {
				restart()
			}
			if sc.restarts && down != 0 && quiet.Load() {
				restart() // at once, with the clients' reads waiting
			}
		case 6:
			faults = append(faults, "heal")
			c.Net.Heal()
			disks.setDelay(0)
		case 7:
			d := time.Duration(5+rng.Intn(40)) * time.Millisecond
			faults = append(faults, fmt.Sprintf("slow fsync %s", d))
			disks.setDelay(d)
		case 8:
			// A stalled fsync on one member for a while.
			a := ids[rng.Intn(len(ids))]
			if m := c.Member(a); m.IsRunning() {
				if f, ok := m.Storage.(*faultstore.Store); ok {
					faults = append(faults, fmt.Sprintf("stall fsync on %d", a))
					release := f.HoldSaves()
					time.AfterFunc(time.Duration(50+rng.Intn(200))*time.Millisecond, release)
				}
			}
		case 9:
			// The leader, cut off, appends a conf change it cannot commit,
			// then leads again once the others overwrote it.
			if l, err := c.Leader(ctxT(t, 2*time.Second)); err == nil && len(c.Running()) > 2 {
				faults = append(faults, fmt.Sprintf("isolate leader %d with a conf change", l.ID))
				c.Net.Isolate(l.ID)
				cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_ = l.Node.UpdateMember(cctx, c.Record(l.ID))
				cancel()
				time.Sleep(300 * time.Millisecond) // an election among the others
				c.Net.Heal()
				tctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if nl, err := c.Leader(tctx); err == nil && nl.ID != l.ID && l.IsRunning() {
					_ = nl.Node.TransferLeadership(tctx, l.ID)
				}
				cancel()
			}
		case 10:
			// Membership churn: a new learner joins (and catches up through
			// a snapshot: the snapshot count is small), or a learner that is
			// not down is removed.
			var learners []uint64
			if l, err := c.Leader(ctxT(t, time.Second)); err == nil {
				if st, err := l.Node.Status(ctxT(t, time.Second)); err == nil {
					learners = st.Learners
				}
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if len(learners) < 2 {
					id := nextID
					if err := l.Node.AddLearner(cctx, c.Record(id)); err == nil {
						nextID++
						c.Join(id)
						faults = append(faults, fmt.Sprintf("add learner %d", id))
					}
				} else if victim := learners[rng.Intn(len(learners))]; victim != down {
					if err := l.Node.RemoveMember(cctx, victim); err == nil {
						removed[victim] = true
						c.Crash(victim) // it stops itself on applying its removal; make sure
						faults = append(faults, fmt.Sprintf("remove learner %d", victim))
					}
				}
				cancel()
			}
		case 11, 12:
			// Voter churn while the clients run: swap a voter for a
			// standby (one joint change), demote or promote — and now and
			// then crash the leader right after it entered the joint
			// configuration, so that the next leader must leave it.
			var l *cluster.Member
			for _, m := range c.Running() {
				if m.Node.IsLeader() {
					l = m // possibly a cut-off leader: the change then fails
				}
			}
			if l == nil || down != 0 {
				break
			}
			st, err := l.Node.Status(ctxT(t, time.Second))
			if err != nil {
				break
			}
			var req confchange.Request
			switch {
			case len(st.Learners) > 0 && len(st.Voters) >= 3 && rng.Intn(2) == 0:
				var voter uint64
				for _, v := range st.Voters {
					if v != l.ID {
						voter = v
					}
				}
				req = confchange.Swap(voter, st.Learners[rng.Intn(len(st.Learners))])
			case len(st.Voters) >= 3:
				voter := st.Voters[rng.Intn(len(st.Voters))]
				if voter == l.ID {
					break
				}
				req = confchange.Demote(voter)
			case len(st.Learners) > 0:
				req = confchange.Promote(st.Learners[rng.Intn(len(st.Learners))])
			}
			if req.Op == 0 {
				break
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if req.Op == confchange.OpSwap && rng.Intn(2) == 0 {
				// Crash the leader once the joint configuration is entered.
				go func() { _, _ = l.Node.ChangeMembership(cctx, req) }()
				for range 100 {
					if st, err := l.Node.Status(cctx); err != nil || st.Joint() {
						break
					}
					time.Sleep(2 * time.Millisecond)
				}
				faults = append(faults, fmt.Sprintf("%s, crash leader %d mid-change", req, l.ID))
				down = l.ID
				c.Crash(l.ID)
			} else if _, err := l.Node.ChangeMembership(cctx, req); err == nil {
				faults = append(faults, req.String())
			} else {
				faults = append(faults, fmt.Sprintf("%s refused (%s)", req, confchange.Code(err)))
			}
			cancel()
		}
	}
	c.Net.Heal()
	disks.setDelay(0)
	restart()
	disks.setDelay(0)
	stop.Store(true)
	wg.Wait()
	t.Logf("faults: %v", faults)
	stats.faults = faults
	defer func() { stats.ops = counts[0].Load() + counts[1].Load() }()

	ctx := ctxT(t, 30*time.Second)
	// Every key read once more on every member after healing: nothing
	// acknowledged may be missing.
	for _, m := range c.Running() {
		for _, k := range keys {
			call := time.Now()
			v, err := m.Node.Read(ctx, []byte(k))
			if err != nil {
				t.Fatalf("final read of %q on member %d: %v", k, m.ID, err)
			}
			record(100+int(m.ID), kvInput{op: "get", key: k}, kvOutput{value: string(v)}, call, time.Now())
		}
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	// A membership change still goes through after the faults.
	if l, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	} else if err := l.Node.UpdateMember(ctx, c.Record(l.ID)); err != nil {
		t.Fatalf("a membership change after the faults: %v", err)
	}
	t.Logf("operations: %d ok, %d unknown outcome, %d failed without effect; network %+v",
		counts[0].Load(), counts[1].Load(), counts[2].Load(), c.Net.Stats())
	if counts[0].Load() == 0 {
		t.Fatal("no operation succeeded")
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, history, 60*time.Second)
	switch res {
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("understudy-lin-%s-%d.html", sc.name, c.Seed))
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(kvModel, info, f)
			_ = f.Close()
		}
		t.Fatalf("history of %d operations is not linearizable (seed %d; faults %v); visualization: %s", len(history), c.Seed, faults, path)
	case porcupine.Unknown:
		t.Logf("linearizability check timed out on %d operations", len(history))
	}
	return stats
}
