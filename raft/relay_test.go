package raft_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// relayOptions: three voters, manual membership (the standbys stay
// learners), room for the standbys, Relay as asked. Ticks of 20ms: a
// standby falls back after 5 ticks of silence.
func relayOptions(relay bool, standbys int) cluster.Options {
	return cluster.Options{
		Relay:            relay,
		TickInterval:     20 * time.Millisecond,
		ManualMembership: true,
		Membership:       confchange.Settings{MaxLearners: max(standbys, 1) + 2, Stabilization: 100 * time.Millisecond},
	}
}

// withStandbys starts a cluster with opts and adds standbys 4, 5, … as
// learners, waiting until the leader replicates to each.
func withStandbys(ctx context.Context, t *testing.T, opts cluster.Options, standbys int) (*cluster.Cluster, *cluster.Member, []uint64) {
	t.Helper()
	c := cluster.New(t, opts)
	lead, ids := addStandbys(ctx, t, c, standbys)
	return c, lead, ids
}

// addStandbys adds standbys 4, 5, … to c as learners, waiting until the
// leader replicates to each.
func addStandbys(ctx context.Context, t *testing.T, c *cluster.Cluster, standbys int) (*cluster.Member, []uint64) {
	t.Helper()
	lead := c.WaitLeader()
	var ids []uint64
	for i := range standbys {
		id := uint64(4 + i)
		addLearner(ctx, t, c, lead.Node, id)
		ids = append(ids, id)
	}
	waitStatus(ctx, t, lead.Node, "every standby replicating", func(st raft.Status) bool {
		for _, id := range ids {
			if pr, ok := st.Progress[id]; !ok || !strings.Contains(strings.ToLower(pr.State), "replicate") || pr.Match == 0 {
				return false
			}
		}
		return true
	})
	return lead, ids
}

// waitStatus polls node's Status until ok holds.
func waitStatus(ctx context.Context, t *testing.T, node *raft.Node, what string, ok func(raft.Status) bool) raft.Status {
	t.Helper()
	var last raft.Status
	for {
		st, err := node.Status(ctx)
		if err == nil && ok(st) {
			return st
		}
		if err == nil {
			last = st
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("waiting for %s on %d: %v (last status: leader %d, progress %+v)", what, node.ID(), err, last.Leader, last.Progress)
		}
	}
}

// relayedAll reports whether the leader relays every one of ids.
func relayedAll(ids []uint64) func(raft.Status) bool {
	return func(st raft.Status) bool {
		for _, id := range ids {
			if st.Progress[id].RelayedBy == 0 {
				return false
			}
		}
		return true
	}
}

// relaysOf returns the relays the leader uses, with their standbys.
func relaysOf(st raft.Status) map[uint64][]uint64 {
	out := make(map[uint64][]uint64)
	for id, pr := range st.Progress {
		if pr.RelayedBy != 0 {
			out[pr.RelayedBy] = append(out[pr.RelayedBy], id)
		}
	}
	return out
}

// writeAll proposes n writes of size bytes through node from workers
// goroutines and returns how many succeeded; errors are tolerated when
// tolerate is set (a fault is under way).
func writeAll(ctx context.Context, t *testing.T, node *raft.Node, prefix string, n, workers, size int, tolerate bool) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	val := strings.Repeat("v", size)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := node.Propose(wctx, kv.Put(fmt.Sprintf("%s-%d", prefix, i), val))
				cancel()
				if err != nil {
					if !tolerate {
						t.Errorf("write %s-%d: %v", prefix, i, err)
					}
					continue
				}
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

// sameLogs waits until every running member has applied the leader's
// commit index, then checks that each one's log up to what it applied is
// the leader's, entry for entry (index, term, data): nothing was applied
// that the leader did not send and commit.
func sameLogs(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	lead := c.WaitLeader()
	lfirst, err := lead.Storage.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Running() {
		if m.ID == lead.ID {
			continue
		}
		first, err := m.Storage.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := max(first, lfirst), m.Node.AppliedIndex()
		if lo > hi {
			continue
		}
		got, err := m.Storage.Entries(lo, hi+1, 1<<40)
		if err != nil {
			t.Fatalf("member %d: entries %d-%d: %v", m.ID, lo, hi, err)
		}
		want, err := lead.Storage.Entries(lo, hi+1, 1<<40)
		if err != nil {
			t.Fatalf("leader %d: entries %d-%d: %v", lead.ID, lo, hi, err)
		}
		if len(got) != len(want) {
			t.Fatalf("member %d holds %d entries in %d-%d, the leader %d", m.ID, len(got), lo, hi, len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.GetIndex() != w.GetIndex() || g.GetTerm() != w.GetTerm() || !bytes.Equal(g.GetData(), w.GetData()) {
				t.Fatalf("member %d applied entry %d (term %d) that differs from the leader's (index %d term %d)",
					m.ID, g.GetIndex(), g.GetTerm(), w.GetIndex(), w.GetTerm())
			}
		}
	}
}

// TestRelayLeaderTrafficPerWrite measures what the leader sends per write
// with 0 and 12 standbys, fed directly and through relays, and checks the
// structural fact: with relays, the leader sends each entry to its two
// follower voters (the relays) and not to the standbys — its entries sent
// per write stay near two, where direct sends make them fourteen. The
// figures are printed, not asserted.
func TestRelayLeaderTrafficPerWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("measures four clusters")
	}
	const writes, workers, size = 300, 8, 512
	type figure struct {
		msgs, bytes, entries float64
	}
	measure := func(relay bool, standbys int) figure {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, lead, ids := withStandbys(ctx, t, relayOptions(relay, standbys), standbys)
		if relay && standbys > 0 {
			waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
		}
		writeAll(ctx, t, lead.Node, "warm", 50, workers, size, false)
		c.Net.ResetTraffic()
		writeAll(ctx, t, lead.Node, "w", writes, workers, size, false)
		tr := c.Net.SentBy(lead.ID)
		st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
		if relay && standbys > 0 {
			t.Logf("relays: %v", relaysOf(st))
		}
		sameLogs(ctx, t, c)
		c.Close()
		return figure{float64(tr.Messages) / writes, float64(tr.Bytes) / writes, float64(tr.Entries) / writes}
	}
	none := measure(false, 0)
	direct := measure(false, 12)
	relayed := measure(true, 12)
	for _, f := range []struct {
		name string
		f    figure
	}{{"0 standbys", none}, {"12 standbys, direct", direct}, {"12 standbys, relayed", relayed}} {
		t.Logf("%-22s leader per write: %6.2f messages, %7.0f bytes (%.2fx of none), %5.2f entries",
			f.name, f.f.msgs, f.f.bytes, f.f.bytes/none.bytes, f.f.entries)
	}
	// Each write's entry goes to 14 members directly; through relays, to
	// the two follower voters only (a retransmission or a fallback may
	// add a few).
	if direct.entries < 12 {
		t.Fatalf("direct: the leader sent %.2f entries per write, want at least 12 (one per standby)", direct.entries)
	}
	if relayed.entries > 4 {
		t.Fatalf("relayed: the leader sent %.2f entries per write, want at most 4 (its two relays, and a little)", relayed.entries)
	}
}

// relayWithStandbys returns a relay the leader uses (a follower voter)
// and the standbys it feeds.
func relayWithStandbys(ctx context.Context, t *testing.T, lead *cluster.Member, ids []uint64) (uint64, []uint64) {
	t.Helper()
	st := waitStatus(ctx, t, lead.Node, "every standby relayed", relayedAll(ids))
	for relay, fed := range relaysOf(st) {
		if !slices.Contains(ids, relay) {
			slices.Sort(fed)
			return relay, fed
		}
	}
	t.Fatalf("no follower voter relays: %v", relaysOf(st))
	return 0, nil
}

// TestRelayKilledMidStream: a relay crashed, or cut off from everyone, or
// only from its standbys (the leader hears it, its standbys fall silent),
// while the leader writes: its standbys are fed directly or by the other
// relay, catch up, and every member's applied log is the leader's.
func TestRelayKilledMidStream(t *testing.T) {
	for _, fault := range []string{"crash", "partition", "cut-from-standbys"} {
		t.Run(fault, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, lead, ids := withStandbys(ctx, t, relayOptions(true, 6), 6)
			relay, fed := relayWithStandbys(ctx, t, lead, ids)
			done := make(chan int)
			go func() { done <- writeAll(ctx, t, lead.Node, "during", 400, 4, 256, true) }()
			waitStatus(ctx, t, lead.Node, "writes under way", func(st raft.Status) bool { return st.Commit > 60 })
			switch fault {
			case "crash":
				c.Crash(relay)
			case "partition":
				c.Net.Isolate(relay)
			case "cut-from-standbys":
				for _, s := range fed {
					c.Net.Block(relay, s)
				}
			}
			// Its standbys are fed some other way, and catch up.
			var before uint64
			waitStatus(ctx, t, lead.Node, "the relay's standbys fed without it", func(st raft.Status) bool {
				before = st.Commit
				for _, s := range fed {
					if st.Progress[s].RelayedBy == relay {
						return false
					}
				}
				return true
			})
			<-done
			writeAll(ctx, t, lead.Node, "after", 50, 4, 256, false)
			for _, s := range fed {
				waitStatus(ctx, t, c.Member(s).Node, "the standby past the fault", func(st raft.Status) bool { return st.Applied > before })
			}
			c.Net.Heal()
			sameLogs(ctx, t, c)
		})
	}
}

// TestRelayBehindLeader: a relay whose own log is behind (its disk holds
// its writes) still hands the leader's appends on: its standbys apply
// entries the relay has not even written — so they cannot have come from
// its log — and every member's applied log is the leader's.
func TestRelayBehindLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	disks := &slowDisks{}
	opts := relayOptions(true, 4)
	opts.WrapStorage = disks.wrap
	c, lead, ids := withStandbys(ctx, t, opts, 4)
	relay, fed := relayWithStandbys(ctx, t, lead, ids)
	disks.mu.Lock()
	release := sync.OnceFunc(disks.disks[relay].HoldSaves())
	disks.mu.Unlock()
	t.Cleanup(release) // before the cluster's: a node whose saves are held cannot stop
	writeAll(ctx, t, lead.Node, "k", 100, 4, 256, false)
	st := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	for _, s := range fed {
		waitStatus(ctx, t, c.Member(s).Node, "the standby applied the writes", func(sst raft.Status) bool { return sst.Applied >= st.Commit })
	}
	held := c.Member(relay).Node.AppliedIndex()
	if held >= st.Commit {
		t.Fatalf("the relay applied %d with its saves held, its standbys %d: the test did not hold it back", held, st.Commit)
	}
	rst := waitStatus(ctx, t, c.Member(relay).Node, "status", func(raft.Status) bool { return true })
	if rst.RelayedOn == 0 {
		t.Fatal("the relay handed nothing on")
	}
	t.Logf("relay %d at applied %d handed on %d messages; its standbys %v applied %d", relay, held, rst.RelayedOn, fed, st.Commit)
	release()
	sameLogs(ctx, t, c)
}

// TestRelayLeaderChange: the leader's appends reach standbys through a
// relay that does not keep them (its own appends are lost) and the leader
// can commit nothing (its voters' answers are lost); a new leader is
// elected without those entries and overwrites them: no standby applies
// an entry that was never committed, and every applied log is the new
// leader's.
func TestRelayLeaderChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, lead, ids := withStandbys(ctx, t, relayOptions(true, 4), 4)
	relay, fed := relayWithStandbys(ctx, t, lead, ids)
	other := uint64(0)
	for _, m := range c.Running() {
		if m.ID != lead.ID && m.ID != relay && !slices.Contains(ids, m.ID) {
			other = m.ID
		}
	}
	writeAll(ctx, t, lead.Node, "before", 20, 4, 64, false)
	st0 := waitStatus(ctx, t, lead.Node, "status", func(raft.Status) bool { return true })
	old := lead.ID
	// The relay's own appends with entries are lost; its answers, and
	// everything between the old leader and the other voter, too.
	c.Net.SetFilter(func(from uint64, m *raftpb.Message) bool {
		return from == old && m.GetTo() == relay && m.GetType() == raftpb.MsgApp && len(m.Entries) > 0
	})
	c.Net.Block(relay, old)
	c.Net.Block(old, other)
	c.Net.Block(other, old)
	go writeAll(ctx, t, lead.Node, "uncommitted", 8, 8, 64, true)
	waitStatus(ctx, t, c.Member(fed[0]).Node, "the old leader's uncommitted entries on a relayed standby", func(st raft.Status) bool {
		return st.LastIndex > st0.Commit+1 && st.Term == st0.Term
	})
	waitStatus(ctx, t, c.Member(other).Node, "a new leader", func(st raft.Status) bool {
		return st.Leader != 0 && st.Leader != old && st.Term > st0.Term
	})
	c.Net.Heal()
	nl := c.WaitLeader()
	writeAll(ctx, t, nl.Node, "after", 40, 4, 64, false)
	sameLogs(ctx, t, c)
	for _, m := range c.Running() {
		for k := range m.SM.Clone() {
			if strings.HasPrefix(k, "uncommitted") {
				t.Fatalf("member %d applied %q, which the old leader %d never committed", m.ID, k, old)
			}
		}
	}
}

// TestRelayStandbyRelaysAndPromotion: with room for two standbys per
// relay, the two follower voters feed four and caught-up standbys relay
// for the others (never a relayed one); a relayed standby promoted to
// voter is fed directly from then on; every applied log is the leader's.
func TestRelayStandbyRelaysAndPromotion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := relayOptions(true, 6)
	opts.RelayFanout = 2
	c, lead, ids := withStandbys(ctx, t, opts, 6)
	st := waitStatus(ctx, t, lead.Node, "every standby fed by a relay but the standby relays", func(st raft.Status) bool {
		relays := relaysOf(st)
		for _, id := range ids {
			if st.Progress[id].RelayedBy == 0 && len(relays[id]) == 0 {
				return false
			}
		}
		return true
	})
	relays := relaysOf(st)
	standbyRelays := 0
	for relay, fed := range relays {
		if len(fed) > 2 {
			t.Fatalf("relay %d feeds %v, more than RelayFanout 2", relay, fed)
		}
		if slices.Contains(ids, relay) {
			standbyRelays++
			if st.Progress[relay].RelayedBy != 0 {
				t.Fatalf("standby relay %d is itself relayed by %d", relay, st.Progress[relay].RelayedBy)
			}
		}
	}
	if standbyRelays == 0 {
		t.Fatalf("no standby relays: %v", relays)
	}
	t.Logf("relays: %v", relays)
	writeAll(ctx, t, lead.Node, "k", 100, 4, 128, false)
	var promoted uint64
	for relay, fed := range relays {
		if !slices.Contains(ids, relay) {
			promoted = fed[0]
			break
		}
	}
	// Readiness reads a relayed standby's progress as any member's.
	waitMembership(ctx, t, lead.Node, "the relayed standby ready", ready(promoted))
	if _, err := lead.Node.ChangeMembership(ctx, confchange.Promote(promoted)); err != nil {
		t.Fatalf("promoting relayed standby %d: %v", promoted, err)
	}
	waitStatus(ctx, t, lead.Node, "the promoted standby fed directly", func(st raft.Status) bool {
		pr, ok := st.Progress[promoted]
		return ok && !pr.Learner && pr.RelayedBy == 0
	})
	writeAll(ctx, t, lead.Node, "after", 50, 4, 128, false)
	sameLogs(ctx, t, c)
}
