package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/internal/diskfault"
	"github.com/understudy-raft/understudy/internal/netproxy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// hostsRig is 3 hosts on loopback, each reached through a proxy (its
// advertised address), running a replica of every group.
type hostsRig struct {
	t       *testing.T
	dir     string
	groups  int
	mu      sync.Mutex
	hosts   []*understudy.Host                    // nil while down
	reps    []map[uint64]*understudy.Group        // host → group → replica
	runs    map[*understudy.Group]*memberEndpoint // one endpoint per run of a replica
	proxies []*netproxy.Proxy
	lns     []string                   // listen addresses
	sess    map[uint64]*clientSessions // per group
	// spare is a fourth host, behind spareProxy, that runs no group but
	// the learners the nemesis adds and removes (membership churn).
	spare      *understudy.Host
	spareProxy *netproxy.Proxy
	churnIDs   uint64 // the last replica ID the nemesis added (never reused)
	// ids holds the replica IDs that replaced a wiped replica, by host and
	// group (a replica absent has ID host+1); wipedIDs is the last given.
	ids      map[[2]uint64]uint64
	wipedIDs uint64
	// bulk is a group beside the others, on every host, whose writer
	// proposes 128 KiB values: its large appends (and catch-ups after a
	// restart) share every host link with the small groups' heartbeats.
	bulk uint64
	// awake turns quiescence off in every group (GroupConfig.
	// DisableQuiescence); a host's groups quiesce by default.
	awake bool
}

// bulkValue is the value of the bulk group's n-th write: 128 KiB, its
// number at the front, so a read back tells one write from another.
func bulkValue(n int) string {
	b := make([]byte, 128<<10)
	for i := range b {
		b[i] = byte('a' + (n+i)%26)
	}
	copy(b, fmt.Sprintf("%08d", n))
	return string(b)
}

// bulkWrites runs the bulk group's writer until ctx ends: each write a new
// key, proposed through any running replica. It returns the writes
// acknowledged.
func (r *hostsRig) bulkWrites(ctx context.Context, seed int64) []int {
	rng := rand.New(rand.NewSource(seed))
	var acked []int
	for n := 0; ctx.Err() == nil; n++ {
		e, ok := r.pick(r.bulk, rng).(*memberEndpoint)
		if !ok || e == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := e.node.Propose(wctx, kv.Put(fmt.Sprintf("big-%d", n), bulkValue(n)))
		cancel()
		if err == nil {
			acked = append(acked, n)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return acked
}

// dataDir is host i's data dir.
func (r *hostsRig) dataDir(i int) string { return filepath.Join(r.dir, strconv.Itoa(i)) }

// churn adds a read-only learner of group g on the spare host, lets it
// catch up for a while, then removes it and deletes its data there (so
// that a later churn may add the group again). It reports what happened.
func (r *hostsRig) churn(ctx context.Context, g uint64, hold time.Duration) string {
	leader := r.leaderOf(g)
	if leader == nil {
		return fmt.Sprintf("group %d: no leader, no churn", g)
	}
	r.churnIDs++
	id := r.churnIDs
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := leader.AddLearner(cctx, raft.Member{ID: id, PeerAddr: r.spareProxy.Addr(), ReadOnly: true}); err != nil {
		return fmt.Sprintf("group %d: adding learner %d: %v", g, id, err)
	}
	var join []string
	for _, p := range r.proxies {
		join = append(join, p.Addr())
	}
	rep, err := r.spare.StartGroup(cctx, understudy.GroupConfig{GroupID: g, ID: id, Join: join, Raft: r.raftConfig(g), DisableQuiescence: r.awake}, kv.New())
	if err != nil {
		r.t.Logf("group %d: learner %d did not start: %v", g, id, err)
	}
	time.Sleep(hold)
	removed := false
	for end := time.Now().Add(10 * time.Second); !removed && time.Now().Before(end); {
		if l := r.leaderOf(g); l != nil {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			err := l.RemoveMember(rctx, id)
			rcancel()
			removed = err == nil || errors.Is(err, raft.ErrNotMember) || errors.Is(err, confchange.ErrUnknownMember)
		}
		if !removed {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !removed {
		r.t.Fatalf("group %d: learner %d not removed within 10s", g, id)
	}
	if rep != nil {
		select { // the removed learner learns it and stops
		case <-rep.Done():
		case <-time.After(10 * time.Second):
		}
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		_ = rep.Close(sctx)
		scancel()
	}
	// Forced: the removal committed, but the learner may not have
	// learned it (then its data dir records nothing).
	if err := r.spare.ForceDeleteGroup(g); err != nil && !errors.Is(err, storage.ErrNoGroup) {
		r.t.Fatalf("group %d: deleting learner %d's data on the spare host: %v", g, id, err)
	}
	return fmt.Sprintf("group %d: learner %d added on the spare host for %v, removed, its data deleted", g, id, hold)
}

// raftConfig is group g's: even groups apply small batches on the loops'
// workers (InlineApply), odd ones on the apply workers.
func (r *hostsRig) raftConfig(g uint64) raft.Config {
	return raft.Config{TickInterval: 10 * time.Millisecond, ElectionTicks: 10, SnapshotCount: 2000,
		InlineApply: g%2 == 0,
		// A replica that replaced a wiped one is promoted soon after it
		// caught up.
		Membership: confchange.Settings{Stabilization: 300 * time.Millisecond}}
}

// id is host i's replica ID in group g. r.mu is held.
func (r *hostsRig) id(i int, g uint64) uint64 {
	if id, ok := r.ids[[2]uint64{uint64(i), g}]; ok {
		return id
	}
	return uint64(i + 1)
}

// groupConfig is the configuration host i starts group g's replica with,
// every time: its initial members, or for a replica that replaced a wiped
// one, the addresses to join through. r.mu is held.
func (r *hostsRig) groupConfig(i int, g uint64) understudy.GroupConfig {
	cfg := understudy.GroupConfig{GroupID: g, ID: r.id(i, g), Raft: r.raftConfig(g), DisableQuiescence: r.awake,
		Storage: storage.GroupOptions{TailCacheBytes: 1 << 20}}
	if cfg.ID != uint64(i+1) {
		for _, p := range r.proxies {
			cfg.Join = append(cfg.Join, p.Addr())
		}
		return cfg
	}
	for j, p := range r.proxies {
		cfg.InitialMembers = append(cfg.InitialMembers, raft.Member{ID: uint64(j + 1), PeerAddr: p.Addr()})
	}
	return cfg
}

// wipe loses host i's data of group g — the replica closed, its data
// deleted — and starts it again with its usual configuration, as a
// restart after a disk replacement would. The start must be refused
// (raft.ErrAlreadyBootstrapped) or the replica stopped by its peers
// (raft.ErrReplicaWiped): nothing it acknowledged may be lost, which the
// histories check. Then it does what operations.md says: removes the
// member and adds a new one under a new ID on the same host.
func (r *hostsRig) wipe(ctx context.Context, i int, g uint64) string {
	r.t.Helper()
	r.mu.Lock()
	h, rep, old := r.hosts[i], r.reps[i][g], r.id(i, g)
	usual := r.groupConfig(i, g)
	r.mu.Unlock()
	// Only a replica the group has recorded the incarnation of: one wiped
	// before its first record committed is the gap the docs name (its
	// peers cannot tell it from a replica that never ran).
	if !r.incarnationRecorded(ctx, g, old) {
		return fmt.Sprintf("group %d: replica %d's incarnation not recorded yet, not wiped", g, old)
	}
	r.mu.Lock()
	delete(r.reps[i], g)
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rep.Close(cctx)
	if err := h.ForceDeleteGroup(g); err != nil {
		r.t.Fatalf("group %d: deleting replica %d's data on host %d: %v", g, old, i, err)
	}
	outcome := ""
	again, err := h.StartGroup(cctx, usual, kv.New())
	switch {
	case errors.Is(err, raft.ErrAlreadyBootstrapped):
		outcome = "its bootstrap refused"
	case err != nil:
		r.t.Fatalf("group %d: the wiped replica %d's start failed otherwise: %v", g, old, err)
	default:
		select {
		case <-again.Done():
		case <-cctx.Done():
		}
		if !errors.Is(again.Err(), raft.ErrReplicaWiped) {
			r.t.Fatalf("group %d: the wiped replica %d started with its usual configuration and ran (err %v)", g, old, again.Err())
		}
		_ = again.Close(cctx)
		outcome = "stopped by its peers as wiped"
	}
	if err := h.ForceDeleteGroup(g); err != nil && !errors.Is(err, storage.ErrNoGroup) {
		r.t.Fatalf("group %d: deleting the refused replica's data on host %d: %v", g, i, err)
	}
	// The operator's way back: remove the member, add one under a new ID.
	r.retryOnLeader(ctx, g, fmt.Sprintf("removing wiped replica %d", old), func(l *understudy.Group, c context.Context) error {
		// Gone already (an earlier try that reported an error, a timeout
		// or a leader change, took effect): what this step wants.
		if err := l.RemoveMember(c, old); errors.Is(err, raft.ErrNotMember) || errors.Is(err, confchange.ErrUnknownMember) {
			return nil
		} else {
			return err
		}
	})
	r.mu.Lock()
	r.wipedIDs++
	id := r.wipedIDs
	r.mu.Unlock()
	r.retryOnLeader(ctx, g, fmt.Sprintf("adding replica %d", id), func(l *understudy.Group, c context.Context) error {
		if err := l.AddLearner(c, raft.Member{ID: id, PeerAddr: r.proxies[i].Addr()}); errors.Is(err, confchange.ErrMemberExists) {
			return nil
		} else {
			return err
		}
	})
	r.mu.Lock()
	r.ids[[2]uint64{uint64(i), g}] = id
	cfg := r.groupConfig(i, g)
	r.mu.Unlock()
	fresh, err := h.StartGroup(cctx, cfg, kv.New())
	if err != nil {
		r.t.Fatalf("group %d: replica %d joining on host %d: %v", g, id, i, err)
	}
	r.mu.Lock()
	r.reps[i][g] = fresh
	r.mu.Unlock()
	return fmt.Sprintf("group %d: replica %d on host %d wiped and restarted as before: %s; removed, replaced by replica %d", g, old, i, outcome, id)
}

// incarnationRecorded reports whether group g's leader lists member id
// with an incarnation.
func (r *hostsRig) incarnationRecorded(ctx context.Context, g, id uint64) bool {
	l := r.leaderOf(g)
	if l == nil {
		return false
	}
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ms, err := l.Membership(c)
	if err != nil {
		return false
	}
	for _, m := range ms.Members {
		if m.ID == id {
			return m.Incarnation != 0
		}
	}
	return false
}

// retryOnLeader runs f on group g's leader until it succeeds, for up to 20 s.
func (r *hostsRig) retryOnLeader(ctx context.Context, g uint64, what string, f func(*understudy.Group, context.Context) error) {
	r.t.Helper()
	var err error
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		l := r.leaderOf(g)
		if l == nil {
			continue
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = f(l, c)
		cancel()
		if err == nil {
			return
		}
	}
	r.t.Fatalf("group %d: %s: %v", g, what, err)
}

// up starts host i and every group's replica on it (bootstrap the first
// time, restart after).
func (r *hostsRig) up(ctx context.Context, i int) {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.lns[i])
	if err != nil {
		r.t.Fatal(err)
	}
	h, err := understudy.NewHost(understudy.HostConfig{
		DataDir: r.dataDir(i), Listener: ln, AdvertisePeer: r.proxies[i].Addr(),
		Storage: storage.EngineOptions{NoSync: true, Backend: storageBackend},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	reps := map[uint64]*understudy.Group{}
	for g := uint64(1); g <= uint64(r.groups)+1; g++ {
		r.mu.Lock()
		cfg := r.groupConfig(i, g)
		r.mu.Unlock()
		rep, err := h.StartGroup(ctx, cfg, kv.New())
		if err != nil {
			r.t.Fatalf("host %d, group %d: %v", i, g, err)
		}
		reps[g] = rep
	}
	r.mu.Lock()
	r.hosts[i], r.reps[i] = h, reps
	r.mu.Unlock()
}

// down closes host i (every group on it).
func (r *hostsRig) down(i int) {
	r.mu.Lock()
	h := r.hosts[i]
	r.hosts[i], r.reps[i] = nil, nil
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.Close(ctx)
}

// pick returns a running replica of group g, as one endpoint per run.
func (r *hostsRig) pick(g uint64, rng *rand.Rand) Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var up []int
	for i, reps := range r.reps {
		if reps != nil && reps[g] != nil {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		return nil
	}
	i := up[rng.Intn(len(up))]
	rep := r.reps[i][g]
	e, ok := r.runs[rep]
	if !ok {
		e = &memberEndpoint{id: r.id(i, g), node: rep.Node, sessions: r.sess[g]}
		r.runs[rep] = e
	}
	return e
}

// TestHostsUnderFaults runs 3 hosts × N groups (20; ROBUSTNESS_GROUPS sets
// it) on loopback, each host reached only through a proxy, while clients
// put, get, compare-and-swap and delete in every group and a nemesis, one
// fault at a time: cuts a host's proxy (every group's replicas there cut
// off at once); restarts whole hosts (every group stopped and started from
// the shared storage engine); slows a host's disk (every commit, so every
// group's appends there); fails a host's fsync (the engine refuses every
// later write: every group on the host stops, and the host is restarted);
// and churns a group's membership (a learner added on a fourth host,
// removed, its data deleted). Every group's history must be linearizable
// (porcupine, per group), stale reads must not go backwards within a run
// of a replica, and afterwards every group must serve a write and every
// replica catch up. Every group runs with the host's default, quiescence
// on: groups idle
// between the clients' operations quiesce and wake under the faults.
func TestHostsUnderFaults(t *testing.T) { runHostsUnderFaults(t, false, 8*time.Second) }

// TestHostsUnderFaultsAwake is TestHostsUnderFaults, shorter, with
// quiescence off in every group (GroupConfig.DisableQuiescence): every
// group ticks and heartbeats throughout, as before quiescence was the
// default, and every history must still be linearizable.
func TestHostsUnderFaultsAwake(t *testing.T) { runHostsUnderFaults(t, true, 3*time.Second) }

func runHostsUnderFaults(t *testing.T, awake bool, nemesis time.Duration) {
	if testing.Short() {
		t.Skip("long")
	}
	groups := 20
	if s := os.Getenv("ROBUSTNESS_GROUPS"); s != "" {
		groups, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("ROBUSTNESS_SEED"); s != "" {
		_, _ = fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d, %d groups and one of 128 KiB writes", seed, groups)
	rng := rand.New(rand.NewSource(seed))
	r := &hostsRig{t: t, dir: t.TempDir(), groups: groups, bulk: uint64(groups) + 1, hosts: make([]*understudy.Host, 3),
		reps: make([]map[uint64]*understudy.Group, 3), runs: map[*understudy.Group]*memberEndpoint{}, sess: map[uint64]*clientSessions{},
		ids: map[[2]uint64]uint64{}, wipedIDs: 1000, awake: awake}
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.lns = append(r.lns, ln.Addr().String())
		_ = ln.Close()
		p, err := netproxy.New(r.lns[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		r.proxies = append(r.proxies, p)
	}
	for g := uint64(1); g <= uint64(groups); g++ {
		r.sess[g] = &clientSessions{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 3 {
		r.up(ctx, i)
		t.Cleanup(func() { diskfault.Clear(r.dataDir(i)) })
	}
	defer func() {
		for i := range 3 {
			if r.hosts[i] != nil {
				r.down(i)
			}
		}
	}()
	{
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if r.spareProxy, err = netproxy.New(ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.spareProxy.Close)
		if r.spare, err = understudy.NewHost(understudy.HostConfig{
			DataDir: filepath.Join(r.dir, "spare"), Listener: ln, AdvertisePeer: r.spareProxy.Addr(),
			Storage: storage.EngineOptions{NoSync: true, Backend: storageBackend},
		}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			_ = r.spare.Close(cctx)
		}()
	}
	r.churnIDs = 100

	hist := map[uint64]*History{}
	var (
		wg          sync.WaitGroup
		tctx, tstop = context.WithCancel(ctx)
		mu          sync.Mutex
		problems    []string
		total       TrafficStats
	)
	for g := uint64(1); g <= uint64(groups); g++ {
		h := NewHistory()
		hist[g] = h
		tr := Traffic{Clients: 2, Keys: []string{"a", "b"}, CounterKey: "n", Pick: func(rng *rand.Rand) Endpoint { return r.pick(g, rng) }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, ps := tr.Run(tctx, seed+int64(g)*1000, h)
			mu.Lock()
			defer mu.Unlock()
			total.OK += st.OK
			total.Unknown += st.Unknown
			total.NoEffect += st.NoEffect
			total.Stale += st.Stale
			for _, p := range ps {
				problems = append(problems, fmt.Sprintf("group %d: %s", g, p))
			}
		}()
	}
	var bulkAcked []int
	wg.Add(1)
	go func() {
		defer wg.Done()
		bulkAcked = r.bulkWrites(tctx, seed)
	}()
	fault := func(kind, what string) {
		t.Logf("nemesis %s: %s", kind, what)
		for _, h := range hist {
			h.Fault(kind, what)
		}
	}
	// The nemesis: one fault at a time, a host back before the next.
	faults := 0
	for end := time.Now().Add(nemesis); time.Now().Before(end); faults++ {
		i := rng.Intn(3)
		switch k := rng.Intn(7); {
		case k == 6:
			g := uint64(1 + rng.Intn(groups))
			r.mu.Lock()
			replaced := r.id(i, g) != uint64(i+1)
			r.mu.Unlock()
			if replaced {
				continue // wiped once already: its replica joined, a bootstrap no more
			}
			fault("wipe", fmt.Sprintf("group %d: host %d's replica loses its data and starts with its usual configuration", g, i))
			fault("wiped", r.wipe(ctx, i, g))
		case k == 4:
			d := time.Duration(5+rng.Intn(40)) * time.Millisecond
			fault("slow", fmt.Sprintf("host %d's commits take %v more", i, d))
			diskfault.SetDelay(r.dataDir(i), d)
			time.Sleep(time.Duration(300+rng.Intn(700)) * time.Millisecond)
			diskfault.Clear(r.dataDir(i))
			fault("fast", fmt.Sprintf("host %d's disk back to speed", i))
		case k == 5 && rng.Intn(2) == 0:
			fault("fsync", fmt.Sprintf("host %d's next commit fails: every group there stops", i))
			diskfault.FailNext(r.dataDir(i), 1)
			time.Sleep(time.Duration(100+rng.Intn(300)) * time.Millisecond)
			if !r.anyFailed(i, 5*time.Second) {
				t.Fatalf("seed %d: host %d's failed commit stopped none of its groups", seed, i)
			}
			r.down(i)
			diskfault.Clear(r.dataDir(i))
			r.up(ctx, i)
			fault("restarted", fmt.Sprintf("host %d started again after its failed fsync", i))
		case k == 5:
			g := uint64(1 + rng.Intn(groups))
			fault("churn", fmt.Sprintf("group %d: learner added on the spare host", g))
			fault("churned", r.churn(ctx, g, time.Duration(200+rng.Intn(600))*time.Millisecond))
		case k < 2:
			fault("cut", fmt.Sprintf("host %d's proxy cut", i))
			r.proxies[i].Cut()
			time.Sleep(time.Duration(200+rng.Intn(600)) * time.Millisecond)
			if err := r.proxies[i].Restore(); err != nil {
				t.Fatal(err)
			}
			fault("heal", fmt.Sprintf("host %d's proxy restored", i))
		default:
			fault("restart", fmt.Sprintf("host %d stopped, every group", i))
			r.down(i)
			time.Sleep(time.Duration(100+rng.Intn(400)) * time.Millisecond)
			r.up(ctx, i)
			fault("restarted", fmt.Sprintf("host %d started again", i))
		}
		time.Sleep(time.Duration(200+rng.Intn(400)) * time.Millisecond)
	}
	tstop()
	wg.Wait()

	timeline := func() string { return FormatTimeline(hist[1].Timeline()) }
	for _, p := range problems {
		t.Errorf("seed %d: %s", seed, p)
	}
	ops := 0
	for g := uint64(1); g <= uint64(groups); g++ {
		if _, err := hist[g].Check(fmt.Sprintf("understudy-hosts-group%d-seed%d", g, seed), os.TempDir(), 30*time.Second); err != nil {
			t.Fatalf("seed %d, group %d: %v\nfault timeline:\n%s", seed, g, err, timeline())
		}
		ops += hist[g].Len()
	}
	// Afterwards every group serves a write, which every replica applies.
	for g := uint64(1); g <= uint64(groups); g++ {
		var idx uint64
		deadline := time.Now().Add(30 * time.Second)
		for {
			l := r.leaderOf(g)
			if l != nil {
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := l.Propose(wctx, kv.Put("final", "1"))
				wcancel()
				if err == nil {
					idx = l.AppliedIndex()
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("seed %d: group %d serves no write after the faults\nfault timeline:\n%s", seed, g, timeline())
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range 3 {
			rep := r.reps[i][g]
			for rep.AppliedIndex() < idx {
				if time.Now().After(deadline) {
					t.Fatalf("seed %d: group %d's replica on host %d applied %d < %d", seed, g, i, rep.AppliedIndex(), idx)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	// Every acknowledged large write of the bulk group reads back.
	r.checkBulk(ctx, seed, bulkAcked)
	t.Logf("seed %d: %d groups, %d ops checked (%d ok, %d unknown, %d without effect, %d stale reads), %d faults, %d large writes acknowledged",
		seed, groups, ops, total.OK, total.Unknown, total.NoEffect, total.Stale, faults, len(bulkAcked))
	if !awake {
		r.mu.Lock()
		for i, h := range r.hosts {
			if h != nil {
				st := h.Scheduler().Stats()
				t.Logf("host %d: %d groups quiesced now, wake-ups %v", i, st.Quiesced, st.Wakes)
			}
		}
		r.mu.Unlock()
	}
}

// checkBulk reads back, linearizably through the bulk group's leader,
// every write of it that was acknowledged.
func (r *hostsRig) checkBulk(ctx context.Context, seed int64, acked []int) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range acked {
		for {
			var v []byte
			err := errors.New("no leader")
			if l := r.leaderOf(r.bulk); l != nil {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				v, err = l.Read(rctx, []byte(fmt.Sprintf("big-%d", n)))
				cancel()
			}
			if err == nil {
				if string(v) != bulkValue(n) {
					r.t.Fatalf("seed %d: the bulk group's acknowledged write %d reads back %d bytes, not its 128 KiB value", seed, n, len(v))
				}
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("seed %d: the bulk group's write %d cannot be read back: %v", seed, n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// anyFailed waits up to d for a group on host i to stop on a failed
// storage commit (storage.ErrFailed), and reports whether one did.
func (r *hostsRig) anyFailed(i int, d time.Duration) bool {
	r.mu.Lock()
	reps := r.reps[i]
	r.mu.Unlock()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		for _, rep := range reps {
			if errors.Is(rep.Err(), storage.ErrFailed) {
				return true
			}
		}
	}
	return false
}

func (r *hostsRig) leaderOf(g uint64) *understudy.Group {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reps := range r.reps {
		if reps != nil && reps[g] != nil && reps[g].IsLeader() {
			return reps[g]
		}
	}
	return nil
}

// storageBackend is the hosts' storage backend: UNDERSTUDY_STORAGE_BACKEND
// (.ci/run runs TestHostsUnderFaults on Pebble as well), or the default.
var storageBackend = storage.Backend(os.Getenv("UNDERSTUDY_STORAGE_BACKEND"))
