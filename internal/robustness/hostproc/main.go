// Command hostproc runs one understudy.Host with a replica of each of N
// groups (kv stores), for the robustness suite's tests of real processes
// that host many groups. Every host runs every group; host i is replica i
// of each.
//
// HTTP, on -http:
//
//	PUT /g/{group}/{key}   body: the value; proposed through this host's
//	                       replica (a follower forwards): 200 once applied
//	GET /g/{group}/{key}   a linearizable read: 200 and the value
//
// Errors answer 503 with the error's text. It prints "ready" once every
// group is started, and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/understudy-raft/understudy/storage"
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
		store  = flag.String("storage-backend", "", "storage backend: bbolt or pebble (empty: the data dir's, bbolt for a new one)")
	)
	flag.Parse()
	addrs := strings.Split(*peers, ",")
	if *index == 0 || int(*index) > len(addrs) || *dir == "" || *listen == "" || *httpA == "" || *groups < 1 {
		return errors.New("-index, -dir, -listen, -http, -peers and -groups are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := understudy.NewHost(understudy.HostConfig{DataDir: *dir, ListenPeer: *listen, AdvertisePeer: *listen, Logger: log,
		Storage: storage.EngineOptions{Backend: storage.Backend(*store)}})
	if err != nil {
		return err
	}
	var initial []raft.Member
	for i, a := range addrs {
		initial = append(initial, raft.Member{ID: uint64(i + 1), PeerAddr: a})
	}
	ctx := context.Background()
	reps := map[uint64]*understudy.Group{}
	for g := uint64(1); g <= uint64(*groups); g++ {
		rep, err := h.StartGroup(ctx, understudy.GroupConfig{
			GroupID: g, ID: *index, InitialMembers: initial,
			Raft: raft.Config{TickInterval: *tick, ElectionTicks: 10, RequestTimeout: 3 * time.Second},
		}, kv.New())
		if err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		reps[g] = rep
	}
	srv := &http.Server{Addr: *httpA, Handler: handler(reps), ReadHeaderTimeout: 5 * time.Second}
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
		switch r.Method {
		case http.MethodPut:
			v, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			if err == nil {
				_, err = rep.Propose(ctx, kv.Put(parts[1], string(v)))
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
		case http.MethodGet:
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
