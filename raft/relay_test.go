package raft_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
	return c, lead, ids
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
