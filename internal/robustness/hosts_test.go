package robustness

import (
	"context"
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
}

func (r *hostsRig) raftConfig() raft.Config {
	return raft.Config{TickInterval: 10 * time.Millisecond, ElectionTicks: 10, SnapshotCount: 2000}
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
		DataDir: filepath.Join(r.dir, strconv.Itoa(i)), Listener: ln, AdvertisePeer: r.proxies[i].Addr(),
		Storage: storage.EngineOptions{NoSync: true},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	reps := map[uint64]*understudy.Group{}
	for g := uint64(1); g <= uint64(r.groups); g++ {
		var initial []raft.Member
		for j, p := range r.proxies {
			initial = append(initial, raft.Member{ID: uint64(j + 1), PeerAddr: p.Addr()})
		}
		rep, err := h.StartGroup(ctx, understudy.GroupConfig{
			GroupID: g, ID: uint64(i + 1), InitialMembers: initial, Raft: r.raftConfig(),
			Storage: storage.GroupOptions{TailCacheBytes: 1 << 20},
		}, kv.New())
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
		if reps != nil {
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
		e = &memberEndpoint{id: uint64(i + 1), node: rep.Node, sessions: r.sess[g]}
		r.runs[rep] = e
	}
	return e
}

// TestHostsUnderFaults runs 3 hosts × N groups (20; ROBUSTNESS_GROUPS sets
// it) on loopback, each host reached only through a proxy, while clients
// put, get, compare-and-swap and delete in every group and a nemesis cuts a
// host's proxy (every group's replicas there cut off at once) and restarts
// whole hosts (every group stopped and started from the shared storage
// engine). Every group's history must be linearizable (porcupine, per
// group), stale reads must not go backwards within a run of a replica, and
// afterwards every group must serve a write and every replica catch up.
func TestHostsUnderFaults(t *testing.T) {
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
	t.Logf("seed %d, %d groups", seed, groups)
	rng := rand.New(rand.NewSource(seed))
	r := &hostsRig{t: t, dir: t.TempDir(), groups: groups, hosts: make([]*understudy.Host, 3),
		reps: make([]map[uint64]*understudy.Group, 3), runs: map[*understudy.Group]*memberEndpoint{}, sess: map[uint64]*clientSessions{}}
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
	}
	defer func() {
		for i := range 3 {
			if r.hosts[i] != nil {
				r.down(i)
			}
		}
	}()

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
	fault := func(kind, what string) {
		for _, h := range hist {
			h.Fault(kind, what)
		}
	}
	// The nemesis: one fault at a time, a host back before the next.
	faults := 0
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); faults++ {
		i := rng.Intn(3)
		if rng.Intn(2) == 0 {
			fault("cut", fmt.Sprintf("host %d's proxy cut", i))
			r.proxies[i].Cut()
			time.Sleep(time.Duration(200+rng.Intn(600)) * time.Millisecond)
			if err := r.proxies[i].Restore(); err != nil {
				t.Fatal(err)
			}
			fault("heal", fmt.Sprintf("host %d's proxy restored", i))
		} else {
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
	t.Logf("seed %d: %d groups, %d ops checked (%d ok, %d unknown, %d without effect, %d stale reads), %d faults",
		seed, groups, ops, total.OK, total.Unknown, total.NoEffect, total.Stale, faults)
}

func (r *hostsRig) leaderOf(g uint64) *understudy.Group {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reps := range r.reps {
		if reps != nil && reps[g].IsLeader() {
			return reps[g]
		}
	}
	return nil
}
