package raft_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/internal/faultstore"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
	"go.etcd.io/raft/v3/raftpb"
)

// Learner catch-up (issue 16): a member added after the last snapshot
// always gets a snapshot it can install, once; roles and the transport
// follow the configuration however it arrives; failed sends back off;
// snapshots are amortized against the log written.

// writeN writes n distinct keys through node with w concurrent writers.
func writeN(ctx context.Context, t *testing.T, node *raft.Node, prefix string, n, w int, value string) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += w {
				propose(ctx, t, node, kv.Put(fmt.Sprintf("%s%d", prefix, i), value))
			}
		}()
	}
	wg.Wait()
}

// tcpSeeds are the records of the members ms (IDs 1..len), for a joiner's
// transport.
func tcpSeeds(ms []*tcpMember) []raft.Member {
	var seeds []raft.Member
	for i, m := range ms {
		seeds = append(seeds, raft.Member{ID: uint64(i + 1), PeerAddr: m.tr.Addr().String()})
	}
	return seeds
}

func tcpLeader(ctx context.Context, t *testing.T, ms []*tcpMember) *tcpMember {
	t.Helper()
	for {
		for _, m := range ms {
			if st, err := m.node.Status(ctx); err == nil && st.Role == raft.RoleLeader {
				return m
			}
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("no leader")
		}
	}
}

// The simplest case, on the TCP transport: 2,500 writes with SnapshotCount
// 1,000, then idle, then a learner is added. It must catch up without any
// further write, with exactly one snapshot sent to it, and know itself as a
// learner — as must the leader and the leader's transport.
func TestIdleClusterLearnerCatchesUpOverTCP(t *testing.T) {
	cfg := raft.Config{SnapshotCount: 1000, SnapshotCatchUpEntries: 100, ManualMembership: true}
	ms := startTCPCluster(t, 3, cfg)
	ctx := ctxT(t, 60*time.Second)
	lead := tcpLeader(ctx, t, ms)
	writeN(ctx, t, lead.node, "k", 2500, 16, "v")
	// Idle from here on: no more writes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := raft.Member{ID: 4, PeerAddr: ln.Addr().String()}
	if err := lead.node.AddLearner(ctx, rec); err != nil {
		t.Fatal(err)
	}
	st, err := lead.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seeds := tcpSeeds(ms)
	joiner := startTCPMember(t, filepath.Join(t.TempDir(), "4"), 4, cfg, nil, ln, seeds)
	for joiner.node.AppliedIndex() < st.Commit {
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("the learner applied %d of %d on an idle cluster: it never caught up", joiner.node.AppliedIndex(), st.Commit)
		}
	}
	if got := joiner.sm.Len(); got != 2500 {
		t.Fatalf("the learner has %d keys, want 2500", got)
	}
	var sent, failed uint64
	// The sender counts a snapshot once it reads the receiver's ack, which
	// the receiver writes after handing the snapshot to its node: the
	// learner may have applied it before the count.
	for {
		sent, failed = 0, 0
		for _, m := range ms {
			for _, p := range m.tr.Stats().Peers {
				if p.ID == 4 {
					sent += p.SnapshotsSent
					failed += p.SnapshotsFailed
				}
			}
		}
		if sent+failed > 0 {
			break
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatal("the learner caught up, and no snapshot sent to it is counted")
		}
	}
	for _, p := range lead.tr.Stats().Peers {
		if p.ID == 4 && !p.Learner {
			t.Errorf("the leader's transport does not know member 4 as a learner")
		}
	}
	if sent != 1 || failed != 0 {
		t.Fatalf("%d snapshots sent to the learner (%d failed), want exactly 1", sent, failed)
	}
	jst, err := joiner.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if jst.Role != raft.RoleLearner {
		t.Fatalf("the joined learner's own role is %v", jst.Role)
	}
	lst, err := lead.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := lst.Progress[4]; !ok || !p.Learner {
		t.Fatalf("the leader's progress for member 4: %+v", lst.Progress[4])
	}
	// At restart the learner still knows itself as one.
	joiner.stop()
	ln2, err := net.Listen("tcp", rec.PeerAddr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", rec.PeerAddr, err)
	}
	again := startTCPMember(t, joiner.store.Dir(), 4, cfg, nil, ln2, nil)
	if st, err := again.node.Status(ctx); err != nil || st.Role != raft.RoleLearner {
		t.Fatalf("the restarted learner's role: %v, %v", st.Role, err)
	}
}

// A learner stopped in the middle of its snapshot stream (the leader's
// snapshot rate is limited, so the stream takes seconds) and restarted
// from its data dir still catches up: the broken stream is retried.
func TestLearnerRestartedMidSnapshotStream(t *testing.T) {
	cfg := raft.Config{SnapshotCount: 200, SnapshotCatchUpEntries: 20, ManualMembership: true}
	slow := func(c *transport.Config) { c.SnapshotChunkSize, c.SnapshotBytesPerSec = 32<<10, 256<<10 }
	ms := startTCPCluster(t, 3, cfg, slow)
	ctx := ctxT(t, 60*time.Second)
	lead := tcpLeader(ctx, t, ms)
	writeN(ctx, t, lead.node, "k", 600, 16, strings.Repeat("v", 1024))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := lead.node.AddLearner(ctx, raft.Member{ID: 4, PeerAddr: addr}); err != nil {
		t.Fatal(err)
	}
	st, err := lead.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seeds := tcpSeeds(ms)
	dir := filepath.Join(t.TempDir(), "4")
	joiner := startTCPMember(t, dir, 4, cfg, nil, ln, seeds, slow)
	for {
		p := lead.tr.SnapshotProgress(4)
		if p.Index > 0 && p.Sent > 0 && p.Sent < p.Total {
			break
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatal("no snapshot stream to the learner")
		}
	}
	joiner.stop() // mid-stream
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	joiner = startTCPMember(t, dir, 4, cfg, nil, ln2, seeds, slow)
	for joiner.node.AppliedIndex() < st.Commit {
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("the restarted learner applied %d of %d", joiner.node.AppliedIndex(), st.Commit)
		}
	}
	if got := joiner.sm.Len(); got != 600 {
		t.Fatalf("the learner has %d keys, want 600", got)
	}
}

// A learner added while writes run catches up and converges, and each
// member's view of roles is right: on itself, on the leader, in the
// leader's transport.
func TestLearnerJoinsWhileWritesRun(t *testing.T) {
	c := cluster.New(t, cluster.Options{SnapshotCount: 100, SnapshotCatchUpEntries: 20, ManualMembership: true, Membership: fastMembership})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	writeN(ctx, t, lead.Node, "before", 300, 8, "v")
	events, cancel := lead.Node.Subscribe(1024)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		writeN(ctx, t, lead.Node, "during", 600, 8, "v")
	}()
	learner := addLearner(ctx, t, c, lead.Node, 4)
	wg.Wait()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := learner.SM.Len(); got != 900 {
		t.Fatalf("the learner has %d keys, want 900", got)
	}
	// The leader reported the catch-up as it happened.
	var progress *raft.CatchUp
	for progress == nil {
		select {
		case e := <-events:
			if e.Type == raft.EventCatchUp && e.Member == 4 {
				progress = e.CatchUp
			}
		default:
			t.Fatal("no catch-up event for the joining learner")
		}
	}
	if progress.EntriesBehind == 0 {
		t.Fatalf("catch-up event without a lag: %+v", progress)
	}
	m, err := lead.Node.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := memberStatus(m, 4); !ok || s.CatchUp == nil {
		t.Fatalf("Membership shows no catch-up for member 4: %+v", s)
	}
	if st, err := learner.Node.Status(ctx); err != nil || st.Role != raft.RoleLearner {
		t.Fatalf("the learner's own role: %v, %v", st.Role, err)
	}
	if l, told := c.Net.PeerIsLearner(lead.ID, 4); !l || !told {
		t.Fatalf("the leader's transport: learner=%v told=%v", l, told)
	}
	// Promotion flips the flag back.
	waitMembership(ctx, t, lead.Node, "learner 4 ready", ready(4))
	if err := lead.Node.Promote(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Net.PeerIsLearner(lead.ID, 4); l {
		t.Fatal("the leader's transport still treats promoted member 4 as a learner")
	}
}

// A learner restarted while its snapshot is streamed or queued — and one
// whose disk refuses snapshots for a while — still catches up; failed
// sends back off instead of streaming again and again.
func TestLearnerSnapshotFailuresBackOff(t *testing.T) {
	disks := &slowDisks{}
	c := cluster.New(t, cluster.Options{SnapshotCount: 100, SnapshotCatchUpEntries: 20, ManualMembership: true, WrapStorage: disks.wrap})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	writeN(ctx, t, lead.Node, "k", 400, 8, "v")
	if err := lead.Node.AddLearner(ctx, c.Record(4)); err != nil {
		t.Fatal(err)
	}
	learner := c.Join(4)
	disk := learner.Storage.(*faultstore.Store)
	disk.FailReceives(1 << 30)
	for c.Net.SnapshotsTo(4) == 0 {
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatal("no snapshot sent to the learner")
		}
	}
	// Then a second: an election timeout is 100 ms, so the backoff starts
	// at 50 ms and doubles; without it the leader would stream on every
	// heartbeat response (dozens a second).
	first := c.Net.SnapshotsTo(4)
	time.Sleep(time.Second) // the window attempts are counted in, not a wait for a condition
	if attempts := c.Net.SnapshotsTo(4) - first; attempts > 6 {
		t.Fatalf("%d more snapshot sends within a second to a learner whose disk refuses them, want at most 6 (a backoff)", attempts)
	}
	disk.FailReceives(0)
	c.Crash(4)
	c.Restart(4)
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.Member(4).SM.Len(); got != 400 {
		t.Fatalf("the learner has %d keys, want 400", got)
	}
}

// Node.Snapshot takes a snapshot on demand and compacts the log.
func TestSnapshotOnDemand(t *testing.T) {
	c := cluster.New(t, cluster.Options{Members: 1, SnapshotCatchUpEntries: 10})
	ctx := ctxT(t, 30*time.Second)
	lead := c.WaitLeader()
	writeN(ctx, t, lead.Node, "k", 100, 4, "v")
	applied := lead.Node.AppliedIndex()
	index, err := lead.Node.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if index < applied {
		t.Fatalf("snapshot at %d, want at least the applied index %d at the call", index, applied)
	}
	first, err := lead.Store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= index-10 {
		t.Fatalf("first log index %d after a snapshot at %d keeping 10 entries", first, index)
	}
	snap, err := lead.Store.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != index {
		t.Fatalf("stored snapshot at %d (%v), want %d", snap.GetMetadata().GetIndex(), err, index)
	}
}

// Snapshots are amortized: with a large state and many writes, the number
// of snapshots per written megabyte stays bounded by the state's size — not
// one per SnapshotCount entries whatever the state weighs.
func TestSnapshotsAmortizedAgainstStateSize(t *testing.T) {
	n1 := snapshotsOfAStateWrittenOver(t, 0)
	if n1 == 0 || n1 > 30 {
		t.Fatalf("%d snapshots for 5,000 writes of 1 KiB over a ~1 MB state (a fixed count would take 100)", n1)
	}
	// SnapshotLogRatio 4: a snapshot once 4 states' worth of entries were
	// applied since the last one (the first ones still come every
	// SnapshotCount entries, while the state is small).
	n4 := snapshotsOfAStateWrittenOver(t, 4)
	if n4 == 0 || n4 >= n1 {
		t.Fatalf("%d snapshots with SnapshotLogRatio 4, against %d with the default 1: want fewer", n4, n1)
	}
	t.Logf("%d snapshots at ratio 1, %d at ratio 4 (a fixed count would take 100)", n1, n4)
}

// snapshotsOfAStateWrittenOver writes a ~1 MB state 5 times over (5,000
// writes of 1 KiB) on one member with SnapshotCount 50 and the given
// SnapshotLogRatio, and returns how many snapshots it took.
func snapshotsOfAStateWrittenOver(t *testing.T, ratio float64) int {
	t.Helper()
	c := cluster.New(t, cluster.Options{Members: 1, SnapshotCount: 50, SnapshotCatchUpEntries: 10, SnapshotLogRatio: ratio})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	events, cancel := lead.Node.Subscribe(1024)
	defer cancel()
	value := strings.Repeat("x", 1024)
	const stateKeys, rounds = 1000, 4 // ~1 MB of state, then written 4 times over
	for r := range rounds + 1 {
		writeN(ctx, t, lead.Node, "k", stateKeys, 16, value)
		_ = r
	}
	snapshots := 0
	for {
		select {
		case e := <-events:
			if e.Type == raft.EventSnapshotCreated {
				snapshots++
			}
			continue
		default:
		}
		break
	}
	// 5,000 entries of ~1 KiB: a fixed count of 50 entries would snapshot
	// 100 times. Amortized, the first snapshots come every 50 entries while
	// the state is small, then about once per state's size written: a
	// handful per megabyte at first, then about one.
	return snapshots
}

// gatedSnapshots wraps the leader's storage: the first snapshot written
// after arm waits, at its first write, until the test lets it go on, then
// writes slowly; its outcome is recorded.
type gatedSnapshots struct {
	raft.Storage
	armed   atomic.Bool
	started chan struct{} // closed when the gated snapshot starts writing
	proceed chan struct{} // closed by the test
	result  chan error    // the gated CreateSnapshot's error
}

func (g *gatedSnapshots) CreateSnapshot(index uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error) {
	if !g.armed.CompareAndSwap(true, false) {
		return g.Storage.CreateSnapshot(index, cs, write)
	}
	snap, err := g.Storage.CreateSnapshot(index, cs, func(w io.Writer) error {
		first := true
		return write(writerFunc(func(p []byte) (int, error) {
			if first {
				first = false
				close(g.started)
				<-g.proceed
			}
			// ~10 s for this state: a window the learner's request falls in
			// even on a loaded machine; abandoned, it ends at the next write.
			time.Sleep(40 * time.Millisecond)
			return w.Write(p)
		}))
	})
	g.result <- err
	return snap, err
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A learner added while the leader writes a snapshot that predates it does
// not wait for that snapshot: it is abandoned, and the fresh one the
// learner needs is taken at once. A Node.Snapshot caller waiting on the
// abandoned one gets the fresh one.
func TestJoinAbandonsASnapshotThatPredatesIt(t *testing.T) {
	gates := map[uint64]*gatedSnapshots{}
	var mu sync.Mutex
	// A short log: the learner needs a snapshot.
	c := cluster.New(t, cluster.Options{ManualMembership: true, SnapshotCount: 100, SnapshotCatchUpEntries: 10, WrapStorage: func(id uint64, s *storage.Store) raft.Storage {
		g := &gatedSnapshots{Storage: s, started: make(chan struct{}), proceed: make(chan struct{}), result: make(chan error, 1)}
		mu.Lock()
		gates[id] = g
		mu.Unlock()
		return g
	}})
	ctx := ctxT(t, 60*time.Second)
	lead := c.WaitLeader()
	writeN(ctx, t, lead.Node, "k", 1000, 8, strings.Repeat("v", 1024)) // ~1 MB: ~250 writes of 4 KiB
	mu.Lock()
	g := gates[lead.ID]
	mu.Unlock()
	g.armed.Store(true)
	asked := make(chan error, 1)
	var askedIndex atomic.Uint64
	go func() {
		index, err := lead.Node.Snapshot(ctx)
		askedIndex.Store(index)
		asked <- err
	}()
	<-g.started
	if err := lead.Node.AddLearner(ctx, c.Record(4)); err != nil {
		t.Fatal(err)
	}
	added := lead.Node.AppliedIndex()
	start := time.Now()
	c.Join(4)
	close(g.proceed)
	if err := <-g.result; !errors.Is(err, raft.ErrSnapshotSuperseded) {
		t.Fatalf("the snapshot that predates the learner ended with %v, want it abandoned", err)
	}
	if err := <-asked; err != nil {
		t.Fatalf("Node.Snapshot: %v", err)
	}
	if askedIndex.Load() < added {
		t.Fatalf("Node.Snapshot answered with index %d, before the learner's addition at %d", askedIndex.Load(), added)
	}
	learner := c.Member(4)
	for learner.Node.AppliedIndex() < added {
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("learner 4 applied %d, want %d: %v", learner.Node.AppliedIndex(), added, err)
		}
	}
	t.Logf("learner 4 caught up %v after it started (the abandoned snapshot alone would have taken ~10 s more)", time.Since(start))
}
