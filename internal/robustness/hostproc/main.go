// Command hostproc runs one understudy.Host with a replica of each of N
// groups (kv stores), for the robustness suite's tests of real processes
// that host many groups. By default every host runs every group; with
// -replicas R, group g runs on the R hosts from (g-1) mod len(peers) on,
// wrapping. Host i is replica i of each group it runs. Groups quiesce
// while idle, the host's default (-quiesce=false: DisableQuiescence).
//
// HTTP, on -http:
//
//	PUT /g/{group}/{key}   body: the value; proposed through this host's
//	                       replica (a follower forwards): 200 once applied
//	GET /g/{group}/{key}   a linearizable read: 200 and the value
//	POST /g/{group}/lead   hands the group's leadership to this host's
//	                       replica (TransferLeadership): 200 once it leads
//	GET /status            JSON: the scheduler's quiesced count and wakes
//	                       by cause, and each group's leader, quiesced and
//	                       quiesced_since (Status: wakes nothing)
//
// Errors answer 503 with the error's text. It prints "ready" once every
// group is started, and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostproc:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		index  = flag.Uint64("index", 0, "this host's index, 1..len(peers): its replica ID in every group")
		dir    = flag.String("dir", "", "data dir")
		listen = flag.String("listen", "", "peer listen address (advertised as is)")
		httpA  = flag.String("http", "", "HTTP listen address")
		peers  = flag.String("peers", "", "every host's peer address, comma-separated, in index order")
		groups = flag.Int("groups", 8, "groups")
		tick   = flag.Duration("tick", 20*time.Millisecond, "raft tick")
		store  = flag.String("storage-backend", "", "storage backend: bbolt or pebble (empty: the data dir's, NewHost's default — Pebble — for a new one)")
		nrep   = flag.Int("replicas", 0, "replicas per group, on consecutive hosts from (group-1) mod hosts (0: every host)")
		quiet  = flag.Bool("quiesce", true, "let idle groups quiesce (the host's default; false: GroupConfig.DisableQuiescence)")
		bal    = flag.Bool("balance", true, "balance the groups' leadership over the hosts (HostConfig.LeaderBalance, the host's default; false: Disabled)")
	)
	flag.Parse()
	addrs := strings.Split(*peers, ",")
	if *index == 0 || int(*index) > len(addrs) || *dir == "" || *listen == "" || *httpA == "" || *groups < 1 {
		return errors.New("-index, -dir, -listen, -http, -peers and -groups are required")
	}
	if *nrep <= 0 || *nrep > len(addrs) {
		*nrep = len(addrs)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := understudy.NewHost(understudy.HostConfig{DataDir: *dir, ListenPeer: *listen, AdvertisePeer: *listen, Logger: log,
		Storage: storage.EngineOptions{Backend: storage.Backend(*store)}, LeaderBalance: understudy.LeaderBalance{Disabled: !*bal}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	reps := map[uint64]*understudy.Group{}
	for g := uint64(1); g <= uint64(*groups); g++ {
		var initial []raft.Member
		mine := false
		for k := range *nrep {
			i := (int(g-1) + k) % len(addrs)
			initial = append(initial, raft.Member{ID: uint64(i + 1), PeerAddr: addrs[i]})
			mine = mine || uint64(i+1) == *index
		}
		if !mine {
			continue
		}
		rep, err := h.StartGroup(ctx, understudy.GroupConfig{
			GroupID: g, ID: *index, InitialMembers: initial, DisableQuiescence: !*quiet,
			Raft: raft.Config{TickInterval: *tick, ElectionTicks: 10, RequestTimeout: 3 * time.Second},
		}, kv.New())
		if err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		reps[g] = rep
	}
	mux := http.NewServeMux()
	mux.Handle("/g/", handler(reps))
	mux.Handle("GET /status", statusHandler(h, reps))
	srv := &http.Server{Addr: *httpA, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(cctx)
	return h.Close(cctx)
}

func handler(reps map[uint64]*understudy.Group) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/g/"), "/", 2)
		g, err := strconv.ParseUint(parts[0], 10, 64)
		rep, ok := reps[g]
		if err != nil || !ok || len(parts) != 2 || parts[1] == "" {
			http.Error(w, "want /g/{group}/{key} of a group this host runs", http.StatusNotFound)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		switch {
		case r.Method == http.MethodPost && parts[1] == "lead":
			if err := rep.TransferLeadership(ctx, rep.ID()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
		case r.Method == http.MethodPut:
			v, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			if err == nil {
				_, err = rep.Propose(ctx, kv.Put(parts[1], string(v)))
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
		case r.Method == http.MethodGet:
			v, err := rep.Read(ctx, []byte(parts[1]))
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(v)
		default:
			http.Error(w, "PUT or GET", http.StatusMethodNotAllowed)
		}
	})
}

// hostStatus is GET /status: what the tests read to know that a host's
// groups are quiesced, and which woke.
type hostStatus struct {
	Quiesced int                       `json:"quiesced"`
	Wakes    map[string]uint64         `json:"wakes"`
	Groups   map[uint64]groupStatusOut `json:"groups"`
}

type groupStatusOut struct {
	ID            uint64    `json:"id"`
	Leader        uint64    `json:"leader"`
	Quiesced      bool      `json:"quiesced"`
	QuiescedSince time.Time `json:"quiesced_since"`
	Stopped       string    `json:"stopped,omitempty"`
}

func statusHandler(h *understudy.Host, reps map[uint64]*understudy.Group) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		st := h.Scheduler().Stats()
		out := hostStatus{Quiesced: st.Quiesced, Wakes: st.Wakes, Groups: map[uint64]groupStatusOut{}}
		for g, rep := range reps {
			gs, err := rep.Status(ctx)
			if err != nil {
				out.Groups[g] = groupStatusOut{ID: rep.ID(), Stopped: err.Error()}
				continue
			}
			out.Groups[g] = groupStatusOut{ID: gs.ID, Leader: gs.Leader, Quiesced: gs.Quiesced, QuiescedSince: gs.QuiescedSince}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
