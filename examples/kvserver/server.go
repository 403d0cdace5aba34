package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// server is one kvserver member: the host and its HTTP API.
type server struct {
	o *options
	h *understudy.Group
	// node is h, as the /kv/ path and every error answer use it.
	node kvNode
	sm   *kv.Store
	// deadlines bound /kv/ requests by --request-timeout.
	deadlines deadlines
	log       *slog.Logger
	m         *metrics
}

// run starts the member and serves until ctx ends (a clean shutdown) or the
// member stops on its own (removed, or a fatal error).
func run(ctx context.Context, o *options) error {
	log := o.logger
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	// Listen first: a port in use is a one-line error before anything else.
	cln, err := net.Listen("tcp", o.listenClient)
	if err != nil {
		return fmt.Errorf("--listen-client %s: %v", o.listenClient, unwrapOp(err))
	}
	defer cln.Close()
	pln, err := net.Listen("tcp", o.listenPeer)
	if err != nil {
		return fmt.Errorf("--listen-peer %s: %v", o.listenPeer, unwrapOp(err))
	}

	settings := confchange.Settings{
		TargetVoters: o.targetVoters, MaxLearners: o.maxLearners, FailoverAfter: o.failoverAfter,
		Stabilization: o.stabilization, RemoveDeadAfter: o.removeDead,
	}
	if o.stabilization == 0 {
		settings.Stabilization = time.Nanosecond // "0s": no wait (zero would mean the default)
	}
	sm := kv.New()
	cfg := understudy.Config{
		ID: o.id, DataDir: o.dataDir, Listener: pln, AdvertisePeer: o.advPeer,
		Metadata:        map[string]string{"client_addr": o.advClient},
		ClusterToken:    o.clusterToken,
		ForceNewCluster: o.forceNew,
		TLS:             o.peerTLS,
		Storage:         storage.Options{NoSync: o.noFsync, NewBackend: o.storageEngine},
		Logger:          log,
		Raft: raft.Config{
			SnapshotCount:    o.snapshotCount,
			Membership:       settings,
			ManualMembership: !o.autoPromote,
			TickInterval:     o.tick,
		},
		// On by default: the group runs on a Host (Start), whose host
		// link's liveness vouches for quiet members.
		DisableQuiescence: !o.quiesce,
		// On by default too: each entry leaves the leader once per relay.
		DisableRelay: !o.relay,
		Transport:    transport.Config{SnapshotBytesPerSec: o.snapshotRate},
	}
	if o.join {
		cfg.Join = o.peers
		cfg.JoinTimeout = o.joinTimeout
		if o.joinTimeout == 0 {
			cfg.NotListedGrace = -1 // wait for ever, also to be added
		}
	} else {
		cfg.InitialMembers = o.initialCluster
	}
	// Once the data dir holds a member, --initial-cluster, --join and
	// --peers are ignored (as etcd does): the member resumes as recorded,
	// whatever the bootstrap flags say now. Only a new cluster's ID comes
	// from --initial-cluster and its token. Start still refuses a data dir
	// of another member ID, and on a restart with --join one whose cluster
	// is not the one at --peers.
	has, err := understudy.HasMember(o.dataDir)
	if errors.Is(err, understudy.ErrRemoved) {
		_ = pln.Close()
		return startError(err, o)
	}
	if err == nil && !has && o.clusterSet {
		cfg.ClusterID = understudy.ClusterIDFor(o.initialCluster, o.clusterToken)
	}
	startCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	h, err := understudy.Start(startCtx, cfg, sm)
	if err != nil {
		_ = pln.Close()
		return startError(err, o)
	}
	if !has && !o.join {
		// Loud on purpose: a member started without --join by mistake has
		// just made a cluster of its own, which a later --join refuses.
		what := "a brand-new one-member cluster"
		if o.clusterSet {
			what = fmt.Sprintf("a brand-new cluster of %d members", len(o.initialCluster))
		}
		log.Info("bootstrapped "+what+"; to join an existing cluster instead, stop, delete the data dir and start with --join --peers",
			slog.String("cluster", fmt.Sprintf("%x", h.ClusterID())), slog.String("data_dir", o.dataDir))
	}
	s := &server{o: o, h: h, node: h, sm: sm, log: log}
	s.m = newMetrics(s)

	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug), // malformed requests never reach the log at Info
	}
	if o.clientTLS != nil {
		srv.TLSConfig = o.clientTLS
	}
	serveErr := make(chan error, 1)
	go func() {
		if o.clientTLS != nil {
			serveErr <- srv.ServeTLS(cln, "", "")
		} else {
			serveErr <- srv.Serve(cln)
		}
	}()
	log.Info("kvserver serving", slog.Uint64("id", o.id), slog.String("client", o.listenClient),
		slog.String("peer", o.listenPeer), slog.String("advertise_client", o.advClient),
		slog.String("advertise_peer", h.PeerAddr()), slog.String("data_dir", o.dataDir))

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-h.Done():
		runErr = h.Err()
		if errors.Is(runErr, raft.ErrRemoved) {
			runErr = fmt.Errorf("member %d was removed from the cluster; its data dir %s cannot be used again (add a new member with a new ID)", o.id, o.dataDir)
		}
		if errors.Is(runErr, raft.ErrReplicaWiped) {
			runErr = wipedError(o, runErr)
		}
	case err := <-serveErr:
		runErr = fmt.Errorf("client API: %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	if err := h.Close(sctx); err != nil && runErr == nil && !errors.Is(err, raft.ErrRemoved) {
		runErr = err
	}
	return runErr
}

// startError says in one line why the member could not start.
func startError(err error, o *options) error {
	switch {
	case errors.Is(err, understudy.ErrRemoved):
		return fmt.Errorf("member %d was removed from the cluster; its data dir %s cannot be used again (add a new member with a new ID)", o.id, o.dataDir)
	case errors.Is(err, raft.ErrAlreadyBootstrapped), errors.Is(err, raft.ErrReplicaWiped):
		return wipedError(o, err)
	case errors.Is(err, understudy.ErrIdentityMismatch) && o.join && errors.Is(err, raft.ErrClusterMismatch):
		return fmt.Errorf("data dir %s holds a member of another cluster than the one at --peers (%v) — one it bootstrapped on its own when started without --join? To join the cluster at --peers, stop, delete %s (it holds only that other cluster's data) and start again with --join", o.dataDir, err, o.dataDir)
	case errors.Is(err, understudy.ErrIdentityMismatch):
		return fmt.Errorf("data dir %s belongs to another member or cluster: %v", o.dataDir, err)
	case errors.Is(err, raft.ErrNotMember):
		return fmt.Errorf("cannot join: %v: add it first (POST /members or kvctl member add, on any member), then start it again", err)
	case errors.Is(err, raft.ErrClusterMismatch):
		return fmt.Errorf("cannot join: %v", err)
	case o.join && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot join: %v (gave up after --join-timeout %s: check --peers, or wait longer with --join-timeout, 0s for ever)", err, o.joinTimeout)
	}
	return err
}

// wipedError says what to do with a member whose data was lost: it must
// not vote again under its ID (docs/operations.md, "Replacing a disk").
func wipedError(o *options, err error) error {
	return fmt.Errorf("member %d's data was lost (data dir %s is not the one the cluster knows), so it must not start again as member %d: "+
		"remove it (kvctl member remove %d), add a new member under a new ID (kvctl member add NEW_ID PEER_ADDR), "+
		"and start that one with an empty data dir and --join --peers (cause: %v)", o.id, o.dataDir, o.id, o.id, err)
}

// unwrapOp drops net.OpError's prefix ("listen tcp …:") from an error.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
