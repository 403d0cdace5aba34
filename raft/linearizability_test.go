package raft_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/testkv"
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

// TestLinearizableUnderFaults runs concurrent clients doing put, get and
// compare-and-swap through random members — voters and a learner, which
// forward their writes — while a
// nemesis partitions the network, drops, delays and duplicates messages and
// crashes and restarts members; the history must be linearizable.
func TestLinearizableUnderFaults(t *testing.T) {
	duration := 6 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	c := cluster.New(t, cluster.Options{Members: 3, SnapshotCount: 200, SnapshotCatchUpEntries: 50})
	// Three voters and a learner (a standby: the voter target is met), all
	// serving the clients.
	lead := c.WaitLeader()
	if err := lead.Node.AddLearner(ctxT(t, 10*time.Second), c.Record(4)); err != nil {
		t.Fatal(err)
	}
	c.Join(4)
	rng := rand.New(rand.NewSource(c.Seed))

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		start   = time.Now()
		stop    atomic.Bool
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
	keys := []string{"a", "b", "c"}
	for client := range 6 {
		crng := rand.New(rand.NewSource(c.Seed + int64(client) + 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				running := c.Running()
				if len(running) == 0 {
					continue
				}
				m := running[crng.Intn(len(running))]
				in := kvInput{key: keys[crng.Intn(len(keys))], value: fmt.Sprintf("%d-%d", client, i)}
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				call := time.Now()
				var out kvOutput
				var err error
				switch crng.Intn(3) {
				case 0:
					in.op = "put"
					_, err = m.Node.Propose(ctx, testkv.Put(in.key, in.value))
				case 1:
					in.op = "get"
					var v []byte
					v, err = m.Node.Read(ctx, []byte(in.key))
					out.value = string(v)
				case 2:
					in.op = "cas"
					mu.Lock()
					in.prev = fmt.Sprintf("%d-%d", crng.Intn(6), crng.Intn(i+1))
					mu.Unlock()
					_, err = m.Node.Propose(ctx, testkv.CAS(in.key, in.prev, in.value))
					out.ok = err == nil
					if errors.Is(err, testkv.ErrCompareFailed) {
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

	// The nemesis.
	deadline := time.Now().Add(duration)
	var crashed uint64
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(150+rng.Intn(250)) * time.Millisecond) // the fault schedule, not a wait for a condition
		ids := c.Members()
		switch rng.Intn(7) {
		case 0:
			a := ids[rng.Intn(len(ids))]
			c.Net.Isolate(a)
		case 1:
			c.Net.SetDropRate(0, 0, 0.1)
		case 2:
			c.Net.SetDelay(20 * time.Millisecond)
		case 3:
			c.Net.SetDuplicateRate(0.1)
		case 4:
			if crashed == 0 {
				crashed = ids[rng.Intn(len(ids))]
				c.Crash(crashed)
			}
		case 5:
			if crashed != 0 {
				c.Restart(crashed)
				crashed = 0
			}
		case 6:
			c.Net.Heal()
		}
	}
	c.Net.Heal()
	if crashed != 0 {
		c.Restart(crashed)
	}
	stop.Store(true)
	wg.Wait()

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
	t.Logf("operations: %d ok, %d unknown outcome, %d failed without effect; network %+v",
		counts[0].Load(), counts[1].Load(), counts[2].Load(), c.Net.Stats())
	if counts[0].Load() == 0 {
		t.Fatal("no operation succeeded")
	}
	switch res := porcupine.CheckOperationsTimeout(kvModel, history, 60*time.Second); res {
	case porcupine.Illegal:
		t.Fatalf("history of %d operations is not linearizable (seed %d)", len(history), c.Seed)
	case porcupine.Unknown:
		t.Logf("linearizability check timed out on %d operations", len(history))
	}
}
