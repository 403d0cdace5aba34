package raft_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/understudy-raft/understudy/internal/cluster"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// Client sessions (issue 27, item 3): a request retried with its RequestID
// is answered with its first answer and applied once, however many other
// commands were applied in between, through any member, across leader
// changes, snapshot installs and restarts.

// retryable reports whether err leaves a request's outcome unknown or
// unapplied, so that its client retries it with the same RequestID.
func retryable(err error) bool {
	return errors.Is(err, raft.ErrLeaderChanged) || errors.Is(err, raft.ErrTimeout) ||
		errors.Is(err, raft.ErrProposalDropped) || errors.Is(err, raft.ErrNotProposed) ||
		errors.Is(err, context.DeadlineExceeded)
}

// retries counts the attempts proposeOnce retried.
var retries atomic.Int64

// proposeOnce is a client's request: attempts of at most a few seconds,
// retried with the same id until one has an outcome.
func proposeOnce(ctx context.Context, t *testing.T, node func() *raft.Node, id raft.RequestID, cmd []byte) ([]byte, error) {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := node().ProposeWithID(actx, id, cmd)
		cancel()
		if !retryable(err) || ctx.Err() != nil {
			return v, err
		}
		retries.Add(1)
	}
}

// register opens a session through node, retrying an unknown outcome.
func register(ctx context.Context, t *testing.T, node *raft.Node) uint64 {
	t.Helper()
	for {
		id, err := node.RegisterClient(ctx)
		if err == nil {
			return id
		}
		if !retryable(err) || ctx.Err() != nil {
			t.Fatalf("registering a client: %v", err)
		}
	}
}

// answer is a request's answer, comparable.
type answer struct {
	value string
	err   string
}

func answerOf(v []byte, err error) answer {
	a := answer{value: string(v)}
	if err != nil {
		a.err = err.Error()
	}
	return a
}

// watched is a client with requests whose first answers are known: seq 1
// took key c (CAS "" → first), seq 2 failed to (CAS nope → x: the value
// "first" and kv.ErrCompareFailed), seq 3 put "nope" there. Applied
// again, seq 1 would fail and seq 2 succeed.
type watched struct {
	client uint64
	key    string
	first  [3]answer
}

var watchedCmds = func(key string) [3][]byte {
	return [3][]byte{kv.CAS(key, "", "first"), kv.CAS(key, "nope", "x"), kv.Put(key, "nope")}
}

func newWatched(ctx context.Context, t *testing.T, node *raft.Node, i int) *watched {
	t.Helper()
	w := &watched{client: register(ctx, t, node), key: fmt.Sprintf("c%d", i)}
	for s, cmd := range watchedCmds(w.key) {
		v, err := proposeOnce(ctx, t, func() *raft.Node { return node }, raft.RequestID{Client: w.client, Seq: uint64(s + 1)}, cmd)
		w.first[s] = answerOf(v, err)
	}
	want := [3]answer{{}, {value: "first", err: kv.ErrCompareFailed.Error()}, {}}
	if w.first != want {
		t.Fatalf("client %d's first answers: %+v, want %+v", w.client, w.first, want)
	}
	return w
}

// check retries every request of every watched client through node: each
// must get its first answer, and the state must show none applied again.
func checkRetries(ctx context.Context, t *testing.T, m *cluster.Member, ws []*watched) {
	t.Helper()
	for _, w := range ws {
		for s, cmd := range watchedCmds(w.key) {
			v, err := proposeOnce(ctx, t, func() *raft.Node { return m.Node }, raft.RequestID{Client: w.client, Seq: uint64(s + 1)}, cmd)
			if got := answerOf(v, err); got != w.first[s] {
				t.Fatalf("member %d: retry of client %d's request %d answered %+v, want its first answer %+v", m.ID, w.client, s+1, got, w.first[s])
			}
			if s == 1 && !errors.Is(err, kv.ErrCompareFailed) {
				t.Fatalf("member %d: the retried error %v does not match kv.ErrCompareFailed", m.ID, err)
			}
		}
		if v, err := m.Node.Read(ctx, []byte(w.key)); err != nil || string(v) != "nope" {
			t.Fatalf("member %d: %s = %q, %v, want \"nope\"", m.ID, w.key, v, err)
		}
	}
}

// chains runs n requests split among g clients of their own, registered
// through node(): client k takes key f<k> from 0 to its count with CAS
// requests, each retried with its RequestID until it has an outcome. A
// retry applied again would fail its compare. halfway, if set, is called
// (while the others go on) once half of them were answered.
func chains(ctx context.Context, t *testing.T, node func() *raft.Node, g, n int, halfway func()) {
	t.Helper()
	var wg sync.WaitGroup
	var answered atomic.Int64
	errc := make(chan error, g)
	per := n / g
	for k := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := register(ctx, t, node())
			key := fmt.Sprintf("f%d", k)
			for j := 1; j <= per; j++ {
				id := raft.RequestID{Client: client, Seq: uint64(j), Acked: uint64(j - 1)}
				if _, err := proposeOnce(ctx, t, node, id, kv.CAS(key, prev(j-1), strconv.Itoa(j))); err != nil {
					errc <- fmt.Errorf("client %d, request %d: %w", client, j, err)
					return
				}
				if answered.Add(1) == int64(n/2) && halfway != nil {
					halfway()
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func prev(j int) string {
	if j == 0 {
		return ""
	}
	return strconv.Itoa(j)
}

// snapshotSessions takes a snapshot on m and returns the client sessions
// in it (canonical bytes) and its index.
func snapshotSessions(ctx context.Context, t *testing.T, m *cluster.Member) ([]byte, uint64) {
	t.Helper()
	index, err := m.Node.Snapshot(ctx)
	if err != nil {
		t.Fatalf("member %d: snapshot: %v", m.ID, err)
	}
	snap, err := m.Store.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetMetadata().GetIndex() != index {
		t.Fatalf("member %d: latest snapshot at %d, took one at %d", m.ID, snap.GetMetadata().GetIndex(), index)
	}
	rc, _, err := m.Store.OpenSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := raft.SnapshotSessions(rc)
	if err != nil {
		t.Fatalf("member %d: %v", m.ID, err)
	}
	return b, index
}

// sameSessions checks that every running member holds the same client
// sessions at the same applied index (the cluster is idle).
func sameSessions(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	var want []byte
	var wantIndex uint64
	for i, m := range c.Running() {
		got, index := snapshotSessions(ctx, t, m)
		if i == 0 {
			want, wantIndex = got, index
			if len(want) < 2 {
				t.Fatalf("member %d holds no sessions", m.ID)
			}
			continue
		}
		if index != wantIndex || !bytes.Equal(got, want) {
			t.Fatalf("member %d holds other sessions (%d bytes at %d) than member %d (%d bytes at %d)",
				m.ID, len(got), index, c.Running()[0].ID, len(want), wantIndex)
		}
	}
}

// Fifty clients' requests, then 20,000 requests of other clients (more
// than twice what the old window of 8,192 IDs held) with a leader change
// halfway and a member cut off that needs a snapshot to catch up: every
// retry, through every member, is answered as first and applied once —
// also after every member restarted. Members that installed the snapshot
// and members that applied the log hold the same sessions.
func TestSessionRetriesAppliedOnceAfterManyCommands(t *testing.T) {
	const watchedClients, fill, fillClients = 50, 20000, 40
	retries.Store(0)
	c := cluster.New(t, cluster.Options{SnapshotCount: 2000, SnapshotCatchUpEntries: 500})
	ctx := ctxT(t, 3*time.Minute)
	lead := c.WaitLeader()
	ms := c.Running()
	var ws []*watched
	for i := range watchedClients {
		ws = append(ws, newWatched(ctx, t, ms[i%len(ms)].Node, i))
	}
	behind := follower(t, c, lead)
	c.Net.Isolate(behind.ID)
	var mu sync.Mutex
	leader := lead
	node := func() *raft.Node { mu.Lock(); defer mu.Unlock(); return leader.Node }
	chains(ctx, t, node, fillClients, fill, func() {
		// Halfway: the leader hands over to the other connected voter.
		for _, m := range c.Running() {
			if m.ID != lead.ID && m.ID != behind.ID {
				if err := lead.Node.TransferLeadership(ctx, m.ID); err != nil {
					t.Errorf("transfer to %d: %v", m.ID, err)
				}
				mu.Lock()
				leader = m
				mu.Unlock()
				return
			}
		}
	})
	t.Logf("%d requests of %d clients, %d attempts retried", fill, fillClients, retries.Load())
	for k := range fillClients {
		if v, ok := leader.SM.Get(fmt.Sprintf("f%d", k)); !ok || v != strconv.Itoa(fill/fillClients) {
			t.Fatalf("f%d = %q, want %d", k, v, fill/fillClients)
		}
	}
	c.Net.Heal()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Net.SnapshotsTo(behind.ID) == 0 {
		t.Fatalf("member %d caught up without a snapshot: the test does not test a snapshot install", behind.ID)
	}
	for _, m := range c.Running() {
		checkRetries(ctx, t, m, ws)
	}
	sameSessions(ctx, t, c)

	// Every member restarts (restores its snapshot, replays its log).
	for _, m := range c.Running() {
		c.Crash(m.ID)
	}
	for _, id := range c.Members() {
		c.Restart(id)
	}
	c.WaitLeader()
	for _, m := range c.Running() {
		checkRetries(ctx, t, m, ws)
	}
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	sameSessions(ctx, t, c)
}

// The documented answers beyond the bounds: a client whose session expired
// (more recently used sessions were registered), a request below the part
// of its session that was forgotten, a retry whose result was too large to
// keep. None is applied. A member cut off meanwhile catches up from a
// snapshot and holds the same sessions as the others, expired ones
// included; so do all after a restart.
func TestSessionBounds(t *testing.T) {
	c := cluster.New(t, cluster.Options{MaxClientSessions: 4, SnapshotCount: 20, SnapshotCatchUpEntries: 5})
	ctx := ctxT(t, time.Minute)
	lead := c.WaitLeader()
	f := follower(t, c, lead)
	var cut *cluster.Member
	for _, m := range c.Running() {
		if m.ID != lead.ID && m.ID != f.ID {
			cut = m
		}
	}
	c.Net.Isolate(cut.ID)
	on := func(n *raft.Node) func() *raft.Node { return func() *raft.Node { return n } }
	var clients []uint64
	for range 4 {
		clients = append(clients, register(ctx, t, f.Node))
	}
	a, b := clients[0], clients[1]
	if _, err := proposeOnce(ctx, t, on(lead.Node), raft.RequestID{Client: a, Seq: 1}, kv.CAS("a", "", "1")); err != nil {
		t.Fatal(err)
	}
	// A fifth registration expires the least recently used session: b's
	// (registered before c's and d's, unused since), not a's.
	register(ctx, t, lead.Node)
	for _, m := range []*cluster.Member{lead, f} {
		_, err := proposeOnce(ctx, t, on(m.Node), raft.RequestID{Client: b, Seq: 1}, kv.Put("b", "1"))
		if !errors.Is(err, raft.ErrSessionExpired) {
			t.Fatalf("member %d: expired session's request: %v, want ErrSessionExpired", m.ID, err)
		}
		if _, err := proposeOnce(ctx, t, on(m.Node), raft.RequestID{Client: a, Seq: 1}, kv.CAS("a", "", "1")); err != nil {
			t.Fatalf("member %d: a's retry: %v, want its first answer (nil)", m.ID, err)
		}
	}
	if _, err := proposeOnce(ctx, t, on(lead.Node), raft.RequestID{Client: 1 << 40, Seq: 1}, kv.Put("b", "1")); !errors.Is(err, raft.ErrSessionExpired) {
		t.Fatalf("a client never registered: %v, want ErrSessionExpired", err)
	}
	// a's next 16 requests push request 1 out of its session: its retry is
	// refused, not applied (a CAS "" → 1 applied again would fail its
	// compare and answer ErrCompareFailed).
	for seq := uint64(2); seq <= 17; seq++ {
		if _, err := proposeOnce(ctx, t, on(lead.Node), raft.RequestID{Client: a, Seq: seq}, kv.Put("a2", strconv.FormatUint(seq, 10))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := proposeOnce(ctx, t, on(f.Node), raft.RequestID{Client: a, Seq: 1}, kv.CAS("a", "", "1")); !errors.Is(err, raft.ErrSessionExpired) {
		t.Fatalf("a forgotten request's retry: %v, want ErrSessionExpired", err)
	}
	// Request 2 is the oldest kept: answered, not applied ("a2" stays 17).
	if _, err := proposeOnce(ctx, t, on(f.Node), raft.RequestID{Client: a, Seq: 2}, kv.Put("a2", "again")); err != nil {
		t.Fatalf("the oldest kept request's retry: %v, want its first answer (nil)", err)
	}
	// A result larger than MaxSessionResultSize (1 KiB): applied once, and
	// its retry answered ErrDuplicateRequest.
	big := strings.Repeat("x", 2<<10)
	propose(ctx, t, lead.Node, kv.Put("big", big))
	cmd := kv.CAS("big", "", "small") // fails, answering the 2 KiB value
	if v, err := proposeOnce(ctx, t, on(lead.Node), raft.RequestID{Client: a, Seq: 18}, cmd); !errors.Is(err, kv.ErrCompareFailed) || string(v) != big {
		t.Fatalf("CAS on big: %d bytes, %v", len(v), err)
	}
	propose(ctx, t, lead.Node, kv.Delete("big"))
	if _, err := proposeOnce(ctx, t, on(f.Node), raft.RequestID{Client: a, Seq: 18}, cmd); !errors.Is(err, raft.ErrDuplicateRequest) {
		t.Fatalf("retry of a request with a large result: %v, want ErrDuplicateRequest", err)
	}
	for i := range 40 {
		propose(ctx, t, lead.Node, kv.Put(fmt.Sprintf("fill%d", i), "v"))
	}
	c.Net.Heal()
	if err := c.Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Net.SnapshotsTo(cut.ID) == 0 {
		t.Fatalf("member %d caught up without a snapshot", cut.ID)
	}
	// The member that installed the snapshot answers alike.
	if _, err := proposeOnce(ctx, t, on(cut.Node), raft.RequestID{Client: b, Seq: 1}, kv.Put("b", "1")); !errors.Is(err, raft.ErrSessionExpired) {
		t.Fatalf("member %d: expired session's request: %v, want ErrSessionExpired", cut.ID, err)
	}
	if _, err := proposeOnce(ctx, t, on(cut.Node), raft.RequestID{Client: a, Seq: 1}, kv.CAS("a", "", "1")); !errors.Is(err, raft.ErrSessionExpired) {
		t.Fatalf("member %d: a forgotten request's retry: %v, want ErrSessionExpired", cut.ID, err)
	}
	// Request 18 pushed request 2 out; 3 is the oldest kept.
	if _, err := proposeOnce(ctx, t, on(cut.Node), raft.RequestID{Client: a, Seq: 2}, kv.Put("a2", "again")); !errors.Is(err, raft.ErrSessionExpired) {
		t.Fatalf("member %d: a forgotten request's retry: %v, want ErrSessionExpired", cut.ID, err)
	}
	if _, err := proposeOnce(ctx, t, on(cut.Node), raft.RequestID{Client: a, Seq: 3}, kv.Put("a2", "again")); err != nil {
		t.Fatalf("member %d: the oldest kept request's retry: %v, want its first answer (nil)", cut.ID, err)
	}
	sameSessions(ctx, t, c)
	for _, m := range c.Running() {
		c.Crash(m.ID)
	}
	for _, id := range c.Members() {
		c.Restart(id)
	}
	c.WaitLeader()
	sameSessions(ctx, t, c)
	for _, m := range c.Running() {
		for key, want := range map[string]string{"a": "1", "a2": "17", "b": "", "big": ""} {
			if v, _ := m.SM.Get(key); v != want {
				t.Fatalf("member %d: %s = %q, want %q", m.ID, key, v, want)
			}
		}
	}
	if _, err := lead.Node.ProposeWithID(ctx, raft.RequestID{Client: a, Seq: 19, Acked: 19}, kv.Put("x", "y")); !errors.Is(err, raft.ErrInvalidRequest) {
		t.Fatalf("Acked not below Seq: %v, want ErrInvalidRequest", err)
	}
	if _, err := lead.Node.ProposeWithID(ctx, raft.RequestID{Client: a}, kv.Put("x", "y")); !errors.Is(err, raft.ErrInvalidRequest) {
		t.Fatalf("Seq 0: %v, want ErrInvalidRequest", err)
	}
}
