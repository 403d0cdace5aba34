package robustness

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
)

// The fleet scenario (Scenario.Fleet, issue 36): a few voters and dozens
// of standbys fed through relays (Scenario.Relay). A relay is a follower
// voter or a caught-up standby the leader chose; the relay faults aim at
// them: crashed, cut off, or held behind (its fsync stalled, so it hands
// on appends it has not written itself). The clients write through the
// standbys (forwarded proposals) and read linearizably from them, besides
// the leader's clients; porcupine checks every one of those operations.

// relayOf picks a member the leader relays through now (0: none, or no
// leader), and the standbys it feeds.
func (n *nemesis) relayOf() (uint64, []uint64) {
	l := n.leader()
	if l == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	st, err := l.Node.Status(ctx)
	if err != nil {
		return 0, nil
	}
	fed := map[uint64][]uint64{}
	for id, pr := range st.Progress {
		if pr.RelayedBy != 0 && pr.RelayedBy != n.down {
			fed[pr.RelayedBy] = append(fed[pr.RelayedBy], id)
		}
	}
	if len(fed) == 0 {
		return 0, nil
	}
	relays := slices.Sorted(func(yield func(uint64) bool) {
		for r := range fed {
			if !yield(r) {
				return
			}
		}
	})
	r := relays[n.rng.Intn(len(relays))]
	slices.Sort(fed[r])
	return r, fed[r]
}

// relayFault crashes, isolates or stalls a relay in use.
func (n *nemesis) relayFault(kind string) string {
	if kind == CrashRelay && n.down != 0 {
		return n.do(Restart)
	}
	r, fed := n.relayOf()
	if r == 0 {
		return ""
	}
	switch kind {
	case CrashRelay:
		n.markDown(r)
		n.c.Crash(r)
		return fmt.Sprintf("crash relay %d (feeding %v)", r, fed)
	case IsolateRelay:
		n.c.Net.Isolate(r)
		return fmt.Sprintf("isolate relay %d (feeding %v)", r, fed)
	case StallRelay:
		f := n.disks.of(r)
		if f == nil {
			return ""
		}
		d := time.Duration(100+n.rng.Intn(400)) * time.Millisecond
		release := f.HoldSaves()
		n.timers.Add(1)
		time.AfterFunc(d, func() { defer n.timers.Done(); release() })
		return fmt.Sprintf("stall fsync on relay %d (feeding %v) for %s", r, fed, d)
	}
	return ""
}

// pickFleet returns a Traffic.Pick that sends a third of the operations
// to the leader and the others to a running standby (a member above the
// initial voters' IDs).
func (es *endpoints) pickFleet(voters uint64) func(*rand.Rand) Endpoint {
	return func(rng *rand.Rand) Endpoint {
		running := es.c.Running()
		if len(running) == 0 {
			return nil
		}
		if rng.Intn(3) == 0 {
			for _, m := range running {
				if m.Node.IsLeader() {
					return es.of(m)
				}
			}
		}
		standbys := slices.DeleteFunc(running, func(m *cluster.Member) bool { return m.ID <= voters })
		if len(standbys) == 0 {
			return es.of(running[rng.Intn(len(running))])
		}
		return es.of(standbys[rng.Intn(len(standbys))])
	}
}

// standbyOps returns the linearizable reads and the writes the standbys
// (members above the initial voters' IDs) completed so far.
func (es *endpoints) standbyOps(voters uint64) (reads, writes int64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	for _, e := range es.runs {
		if e.id > voters {
			reads += e.reads.Load()
			writes += e.writes.Load()
		}
	}
	return reads, writes
}

// checkFleet fails the run unless the standbys served linearizable reads
// and forwarded writes to the clients (reads, writes: standbyOps when the
// clients stopped), and the leader relays to standbys once the faults are
// over (the relays are chosen again after them). It returns a summary for
// the log.
func (es *endpoints) checkFleet(ctx context.Context, fail func(string, ...any), reads, writes int64) string {
	if reads == 0 || writes == 0 {
		fail("the standbys served %d linearizable reads and forwarded %d writes: want some of each", reads, writes)
	}
	for {
		l, err := es.c.Leader(ctx)
		if err == nil {
			if st, err := l.Node.Status(ctx); err == nil {
				relayed, relays := 0, map[uint64]bool{}
				for _, pr := range st.Progress {
					if pr.RelayedBy != 0 {
						relayed++
						relays[pr.RelayedBy] = true
					}
				}
				if relayed > 0 {
					return fmt.Sprintf("; standbys served %d reads and forwarded %d writes; after the faults %d standbys relayed by %d members",
						reads, writes, relayed, len(relays))
				}
			}
		}
		if ctx.Err() != nil {
			fail("the leader relays to no standby within 30s of the faults' end")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
