package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// options are the validated flags.
type options struct {
	id             uint64
	dataDir        string
	listenClient   string
	listenPeer     string
	advClient      string // what the member records as its client address
	advPeer        string // --advertise-peer as given ("": the cluster's record)
	initialCluster []raft.Member
	clusterSet     bool // --initial-cluster was given
	clusterToken   string
	join           bool
	peers          []string
	joinTimeout    time.Duration
	targetVoters   int
	autoPromote    bool
	maxLearners    int
	removeDead     time.Duration
	requestTimeout time.Duration
	failoverAfter  time.Duration
	stabilization  time.Duration
	snapshotCount  uint64
	forceNew       bool
	peerTLS        *tls.Config
	clientTLS      *tls.Config
	maxBody        int64
	snapshotRate   int64
	quiesce        bool
	relay          bool
	noFsync        bool
	storageEngine  storage.Backend
	logger         *slog.Logger
	logLevel       slog.Level

	// Test hooks (not in the contract): a shorter raft tick, a CPU profile.
	tick       time.Duration
	cpuProfile string
}

var errHelp = errors.New("help requested")

// parseFlags parses and validates args: every problem is one line.
func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("kvserver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		id             = fs.Uint64("id", 1, "this member's ID (non-zero, never reused)")
		dataDir        = fs.String("data-dir", "", "data directory (default kvserver-data/<id>)")
		listenClient   = fs.String("listen-client", "", "HTTP host:port (default 127.0.0.1:(8000+id))")
		listenPeer     = fs.String("listen-peer", "", "peer host:port (default 127.0.0.1:(7000+id))")
		advClient      = fs.String("advertise-client", "", "the client host:port other members and clients are told (default --listen-client; never 0.0.0.0 or ::)")
		advPeer        = fs.String("advertise-peer", "", "the peer host:port the others dial (default: this member's entry in --initial-cluster, the address it was added with, or its recorded one; never 0.0.0.0 or ::)")
		initialCluster = fs.String("initial-cluster", "", `a new cluster: "1=host:port,2=host:port,…" (peer addresses; all voters; ignored once the data dir holds a member)`)
		clusterToken   = fs.String("initial-cluster-token", "", "distinguishes clusters started with the same --initial-cluster")
		join           = fs.Bool("join", false, "join an existing cluster (the member must have been added first: POST /members); on a restart only checks that --peers is the data dir's cluster")
		peers          = fs.String("peers", "", `where to find the cluster when joining: "host:port,…"`)
		joinTimeout    = fs.Duration("join-timeout", 60*time.Second, "give up joining when no member answers that long (0s: wait for ever, also for a member not added yet)")
		targetVoters   = fs.Int("target-voters", 3, "voters the policy fills seats up to (odd, 1-9)")
		autoPromote    = fs.Bool("auto-promote", true, "promote ready learners and fail over on its own")
		maxLearners    = fs.Int("max-learners", 2, "most learners that may be added (1-64)")
		removeDead     = fs.Duration("remove-dead-after", 0, "remove a learner unreachable that long (0s: off)")
		requestTimeout = fs.Duration("request-timeout", 5*time.Second, "how long an HTTP request may wait before 503")
		failoverAfter  = fs.Duration("failover-after", 30*time.Second, "swap a voter unreachable that long for a ready standby")
		stabilization  = fs.Duration("stabilization", 10*time.Second, "how long a learner must stay ready before promotion")
		snapshotCount  = fs.Uint64("snapshot-count", 10000, "applied entries between snapshots")
		forceNew       = fs.Bool("force-new-cluster", false, "LAST RESORT: make this data dir a one-member cluster after losing a quorum for good")
		peerCert       = fs.String("peer-cert", "", "peer TLS certificate (PEM)")
		peerKey        = fs.String("peer-key", "", "peer TLS key (PEM)")
		peerCA         = fs.String("peer-ca", "", "the only CA trusted on the peer port (mutual TLS 1.3)")
		clientCert     = fs.String("client-cert", "", "HTTPS certificate of the client API (PEM)")
		clientKey      = fs.String("client-key", "", "HTTPS key of the client API (PEM)")
		clientCA       = fs.String("client-ca", "", "require client certificates from this CA on the client API")
		maxBody        = fs.Int64("max-body", 1<<20, "largest request body in bytes (larger: 413)")
		snapshotRate   = fs.Int64("snapshot-bytes-per-sec", 0, "bound on the rate of the snapshots this member streams to others (0: none)")
		quiesce        = fs.Bool("quiesce", true, "let the group stop ticking and sending while idle (raft.Config.Quiesce; host liveness then vouches for quiet members); --quiesce=false keeps it ticking")
		relay          = fs.Bool("relay", true, "as the leader, feed standbys through relays: each entry leaves the leader once per relay, not once per standby (the library's default for a host's groups; --relay=false sets Config.DisableRelay); a member hands on what a leader sends it either way")
		storageEngine  = fs.String("storage-engine", string(storage.BackendPebble), "the key-value store of a NEW data dir: pebble (one fsync a commit) or bbolt; a data dir that holds one keeps it, whatever this says")
		noFsync        = fs.Bool("unsafe-no-fsync", false, "UNSAFE, tests and demos only: skip every fsync (a crash can lose what this member acknowledged; never on a member that may vote)")
		logFormat      = fs.String("log-format", "text", "text or json")
		logLevel       = fs.String("log-level", "info", "debug, info, warn or error")
		tick           = fs.Duration("tick", 0, "raft tick (testing; default 100ms)")
		cpuProfile     = fs.String("cpuprofile", "", "write a CPU profile to this file until shutdown (profiling)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	o := &options{
		id: *id, clusterToken: *clusterToken, join: *join,
		targetVoters: *targetVoters, autoPromote: *autoPromote, maxLearners: *maxLearners,
		removeDead: *removeDead, requestTimeout: *requestTimeout, failoverAfter: *failoverAfter,
		stabilization: *stabilization, snapshotCount: *snapshotCount, forceNew: *forceNew,
		maxBody: *maxBody, snapshotRate: *snapshotRate, quiesce: *quiesce, relay: *relay, noFsync: *noFsync, storageEngine: storage.Backend(*storageEngine), tick: *tick, cpuProfile: *cpuProfile,
		joinTimeout: *joinTimeout,
	}
	if o.id == 0 {
		return nil, errors.New("--id must be a positive integer")
	}
	o.dataDir = *dataDir
	if o.dataDir == "" {
		o.dataDir = filepath.Join("kvserver-data", fmt.Sprint(o.id))
	}
	o.listenClient = *listenClient
	if o.listenClient == "" {
		o.listenClient = fmt.Sprintf("127.0.0.1:%d", 8000+o.id)
	}
	o.listenPeer = *listenPeer
	if o.listenPeer == "" {
		o.listenPeer = fmt.Sprintf("127.0.0.1:%d", 7000+o.id)
	}
	for name, addr := range map[string]string{"--listen-client": o.listenClient, "--listen-peer": o.listenPeer} {
		if err := checkHostPort(addr); err != nil {
			return nil, fmt.Errorf("%s %q: %v", name, addr, err)
		}
	}
	// What the member advertises is never a listen-everywhere address: the
	// others would dial it as themselves.
	o.advPeer = *advPeer
	if o.advPeer != "" {
		if err := confchange.CheckPeerAddr(o.advPeer); err != nil {
			return nil, fmt.Errorf("--advertise-peer %q: %v", o.advPeer, addrProblem(err))
		}
	}
	o.advClient = *advClient
	if o.advClient == "" {
		o.advClient = o.listenClient
		if err := confchange.CheckPeerAddr(o.advClient); err != nil {
			return nil, fmt.Errorf("--listen-client %s is not an address clients can be told (%v): set --advertise-client to the address they reach this member at",
				o.listenClient, addrProblem(err))
		}
	} else if err := confchange.CheckPeerAddr(o.advClient); err != nil {
		return nil, fmt.Errorf("--advertise-client %q: %v", o.advClient, addrProblem(err))
	}
	if *initialCluster != "" {
		if o.join {
			return nil, errors.New("--initial-cluster (a new cluster) and --join (an existing one) exclude each other")
		}
		ms, err := understudy.ParseMembers(*initialCluster)
		if err != nil {
			return nil, fmt.Errorf("--initial-cluster: %v", strings.TrimPrefix(err.Error(), raft.ErrInvalidConfig.Error()+": "))
		}
		found := false
		for _, m := range ms {
			found = found || m.ID == o.id
		}
		if !found {
			// Only a new cluster needs this member in the list: a data dir
			// that holds a member ignores --initial-cluster.
			if has, _ := understudy.HasMember(o.dataDir); !has {
				return nil, fmt.Errorf("--initial-cluster does not list this member (--id %d)", o.id)
			}
		}
		o.initialCluster, o.clusterSet = ms, true
	} else if !o.join {
		// A one-member cluster, recorded with what it advertises.
		addr := o.advPeer
		if addr == "" {
			addr = o.listenPeer
			if err := confchange.CheckPeerAddr(addr); err != nil {
				return nil, fmt.Errorf("--listen-peer %s is not an address the other members can dial (%v): set --advertise-peer (or --initial-cluster)", addr, addrProblem(err))
			}
		}
		o.initialCluster = []raft.Member{{ID: o.id, PeerAddr: addr}}
	}
	if *peers != "" {
		for p := range strings.SplitSeq(*peers, ",") {
			p = strings.TrimSpace(p)
			if err := checkHostPort(p); err != nil {
				return nil, fmt.Errorf("--peers: %q: %v", p, err)
			}
			o.peers = append(o.peers, p)
		}
	}
	if o.join && len(o.peers) == 0 {
		return nil, errors.New("--join needs --peers (the address of any member of the cluster)")
	}
	switch {
	case o.targetVoters < 1 || o.targetVoters > 9 || o.targetVoters%2 == 0:
		return nil, fmt.Errorf("--target-voters %d: must be odd, 1 to 9", o.targetVoters)
	case o.maxLearners < 1 || o.maxLearners > 64:
		return nil, fmt.Errorf("--max-learners %d: must be 1 to 64 (the replicated setting's range)", o.maxLearners)
	case o.removeDead < 0:
		return nil, fmt.Errorf("--remove-dead-after %s: must not be negative", o.removeDead)
	case o.removeDead > 0 && o.removeDead < o.failoverAfter:
		return nil, fmt.Errorf("--remove-dead-after %s: must be 0 (off) or at least --failover-after (%s): a lost voter is failed over before it is removed", o.removeDead, o.failoverAfter)
	case o.requestTimeout <= 0:
		return nil, fmt.Errorf("--request-timeout %s: must be positive", o.requestTimeout)
	case o.failoverAfter <= 0:
		return nil, fmt.Errorf("--failover-after %s: must be positive", o.failoverAfter)
	case o.stabilization < 0:
		return nil, fmt.Errorf("--stabilization %s: must not be negative", o.stabilization)
	case o.snapshotCount == 0:
		return nil, errors.New("--snapshot-count must be positive")
	case o.maxBody <= 0:
		return nil, fmt.Errorf("--max-body %d: must be positive", o.maxBody)
	case o.snapshotRate < 0:
		return nil, fmt.Errorf("--snapshot-bytes-per-sec %d: must not be negative", o.snapshotRate)
	case o.joinTimeout < 0:
		return nil, fmt.Errorf("--join-timeout %s: must not be negative (0s: wait for ever)", o.joinTimeout)
	case o.tick < 0:
		return nil, fmt.Errorf("--tick %s: must not be negative", o.tick)
	case o.storageEngine != storage.BackendPebble && o.storageEngine != storage.BackendBolt:
		return nil, fmt.Errorf("--storage-engine %q: must be %s or %s", o.storageEngine, storage.BackendPebble, storage.BackendBolt)
	}
	var err error
	if o.peerTLS, err = peerTLS(*peerCert, *peerKey, *peerCA); err != nil {
		return nil, err
	}
	if o.clientTLS, err = clientTLS(*clientCert, *clientKey, *clientCA); err != nil {
		return nil, err
	}
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	switch *logFormat {
	case "text":
		o.logger = slog.New(slog.NewTextHandler(os.Stderr, hopts))
	case "json":
		o.logger = slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	return o, nil
}

// addrProblem is an address refusal's detail, without the sentinel's words.
func addrProblem(err error) string {
	var r *confchange.Refusal
	if errors.As(err, &r) {
		return strings.TrimPrefix(r.Detail, "peer address ")
	}
	return err.Error()
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("not host:port")
	}
	if port == "" || strings.ContainsAny(host, "/ ") {
		return errors.New("not host:port")
	}
	// A port out of range is a flag error (exit 2), not a listen failure.
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	return nil
}

// peerTLS builds the peer port's mutual TLS 1.3, or nil when no flag is set.
func peerTLS(cert, key, ca string) (*tls.Config, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if cert == "" || key == "" || ca == "" {
		return nil, errors.New("--peer-cert, --peer-key and --peer-ca go together (mutual TLS)")
	}
	cfg, err := transport.NewMutualTLS(cert, key, ca, nil)
	if err != nil {
		return nil, fmt.Errorf("peer TLS: %v", err)
	}
	return cfg, nil
}

// clientTLS builds the client API's HTTPS config, or nil for plain HTTP.
func clientTLS(cert, key, ca string) (*tls.Config, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, errors.New("--client-cert and --client-key go together (--client-ca needs them)")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--client-cert/--client-key: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--client-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s: no PEM certificate in it", ca)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
