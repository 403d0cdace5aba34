package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/understudy-raft/understudy/internal/shared"
	"github.com/understudy-raft/understudy/internal/wire"
)

// Mux is the peer side of a host that runs many raft groups: one port for
// all of them, and one connection per peer host for all their raft
// messages.
//
// It accepts every connection, runs the TLS handshake and reads the hello.
// A host link (one per peer host, see link.go) it serves itself: each
// group's sender and receiver are admitted on it by the group's Transport,
// which checks them exactly as a raft stream's hello. Any other connection
// (snapshots, requests, and the per-group raft streams of members of the
// previous release) goes to the Transport of the hello's group
// (Config.Mux), which checks the rest of the hello and serves it. A group
// the host does not run is refused as ErrGroupMismatch: a message never
// creates a group, only the host does (as dragonboat's).
//
// Outbound, the groups' peers at one address share one host link, dialed
// by the mux: its writer drains their queues by deficit round robin.
//
// A Transport created without a Mux makes a private one for itself, so one
// code path serves a single group and many.
type Mux struct {
	ln      net.Listener
	tls     *tls.Config
	log     *slog.Logger
	timeout time.Duration // HandshakeTimeout
	private *Transport    // the owner of a private mux, else nil

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ls         linkSettings
	dialer     *dialer
	start      time.Time     // ping tokens are durations since it
	quantum    int           // bytes per flow per round of a link's writer
	legacyHold time.Duration // time on fallback streams before trying a host link again
	gens       atomic.Uint64 // link connection generations

	mu      sync.Mutex
	closed  bool
	groups  map[uint64]*Transport
	conns   map[io.Closer]struct{} // connections before their hand-off, and inbound links
	links   map[string]*link       // outbound host links by peer address
	inLinks map[*inLink]struct{}

	droppedUnadmitted atomic.Uint64
	droppedTooLarge   atomic.Uint64

	// hostID is this host's (MuxConfig.HostID), sent in its link hellos
	// and attachments.
	hostID uint64

	// The address book (addresses.go), and the certificate identity each
	// host ID that owns a member here was first seen with (identity.go).
	bookMu       sync.Mutex
	book         map[uint64]*HostAddress
	bookSeq      uint64
	certs        map[uint64]string
	onAddress    func(map[uint64]HostAddress)
	addrsLearned atomic.Uint64

	refused    reasonCounter
	connErrors reasonCounter
	refusalLog rateLog
	hostLog    hostLog  // the groups' events, per peer host (hostlog.go)
	logged     sync.Map // linkLogKey of link problems logged at warning level

	// Shared by the groups' transports: the host's snapshot streams are
	// bounded together, whatever the number of groups.
	snapSend *slots
	snapRecv chan struct{}
	snapRate *rate.Limiter

	// configs are the Configs its groups' transports share
	// (transportConfig): a host's groups are configured alike.
	configs shared.Set[Config]
}

// MuxConfig configures a Mux.
type MuxConfig struct {
	// Listener is the listener to serve; it is closed by Close. Exactly one
	// of Listener and ListenAddr must be set.
	Listener net.Listener
	// ListenAddr is a TCP host:port to listen on, if Listener is nil.
	ListenAddr string
	// TLS, when set, wraps every inbound connection in TLS (the groups'
	// transports dial with their own Config.TLS: give both the same).
	TLS *tls.Config
	// Logger receives the mux's logs; nil discards them.
	Logger *slog.Logger
	// HandshakeTimeout bounds the TLS handshake and reading the hello.
	// Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxConcurrentSnapshots bounds the snapshots the host's groups send at
	// once, together (further ones wait, and a freed slot goes to a
	// learner's snapshot first: a learner's catch-up is what a membership
	// change waits for), and separately those they receive at once (further
	// ones are refused as busy and retried by raft). Default
	// DefaultMaxConcurrentSnapshots. The groups' own Config values do not
	// apply on a shared Mux.
	MaxConcurrentSnapshots int
	// SnapshotBytesPerSec bounds the rate of all the snapshot streams the
	// host's groups send together (0: no limit).
	SnapshotBytesPerSec int64

	// The host links' settings, as Config's of the same names (zero: the
	// same defaults). TLS above is also used to dial them.
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PingInterval time.Duration
	MinBackoff   time.Duration
	MaxBackoff   time.Duration
	// LivenessTimeout is how late a peer host's last pong may be before it
	// is no longer live (Transport.HostContact, MuxStats.Hosts,
	// LivenessHandler; see Config.LivenessTimeout). Default 3 ×
	// PingInterval; at least twice PingInterval.
	LivenessTimeout time.Duration
	// MaxFrameSize is the largest frame a host link accepts (a group's
	// Config.MaxFrameSize bounds what it sends). The link's hello reply
	// says it, and a sender drops a message over it; one that arrives
	// anyway is skipped and counted (MuxStats.DroppedTooLarge). Default
	// DefaultMaxFrameSize.
	MaxFrameSize int

	// HostID identifies this host to its peers: made once and kept with
	// its data (a Host keeps it in its data dir), never 0 for a host whose
	// moves its peers should learn. It is sent in the hello of every host
	// link and in every attachment; a peer learns this host's moves only
	// from the links that carry it. 0: none (a single group's transport).
	HostID uint64
	// Addresses is the address book to start with (as Mux.Addresses
	// returned it before): where each peer host that moved is now.
	Addresses map[uint64]HostAddress
	// OnAddressesChanged, if set, is called with the whole book each time
	// the mux learns that a peer host moved (to keep it across restarts).
	// It must not call the mux.
	OnAddressesChanged func(map[uint64]HostAddress)
}

// linkSettings are the host links' settings, with defaults.
type linkSettings struct {
	dialTimeout, readTimeout, writeTimeout, pingInterval time.Duration
	minBackoff, maxBackoff                               time.Duration
	maxFrame                                             int
	livenessTimeout                                      time.Duration
}

// NewMux starts listening and serving the groups registered later.
//
// Errors: ErrInvalidConfig; the listen error.
func NewMux(cfg MuxConfig) (*Mux, error) {
	if (cfg.Listener == nil) == (cfg.ListenAddr == "") {
		return nil, fmt.Errorf("%w: exactly one of Listener and ListenAddr is required", ErrInvalidConfig)
	}
	if cfg.HandshakeTimeout < 0 || cfg.MaxConcurrentSnapshots < 0 || cfg.SnapshotBytesPerSec < 0 {
		return nil, fmt.Errorf("%w: HandshakeTimeout (%s), MaxConcurrentSnapshots (%d) and SnapshotBytesPerSec (%d) must not be negative",
			ErrInvalidConfig, cfg.HandshakeTimeout, cfg.MaxConcurrentSnapshots, cfg.SnapshotBytesPerSec)
	}
	if cfg.DialTimeout < 0 || cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0 || cfg.PingInterval < 0 ||
		cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 || cfg.MaxFrameSize < 0 || cfg.LivenessTimeout < 0 {
		return nil, fmt.Errorf("%w: the link settings (DialTimeout %s, ReadTimeout %s, WriteTimeout %s, PingInterval %s, MinBackoff %s, MaxBackoff %s, MaxFrameSize %d, LivenessTimeout %s) must not be negative",
			ErrInvalidConfig, cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.PingInterval, cfg.MinBackoff, cfg.MaxBackoff, cfg.MaxFrameSize, cfg.LivenessTimeout)
	}
	// The link settings are checked as a Config's.
	check := Config{
		ID: 1, Handler: nopHandler{}, ListenAddr: "x",
		DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		PingInterval: cfg.PingInterval, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, MaxFrameSize: cfg.MaxFrameSize,
		LivenessTimeout: cfg.LivenessTimeout,
	}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	return newMux(cfg, nil)
}

func newMux(cfg MuxConfig, private *Transport) (*Mux, error) {
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("transport: listening on %s: %w", cfg.ListenAddr, err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxConcurrentSnapshots == 0 {
		cfg.MaxConcurrentSnapshots = DefaultMaxConcurrentSnapshots
	}
	d := Config{
		DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		PingInterval: cfg.PingInterval, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, MaxFrameSize: cfg.MaxFrameSize,
		LivenessTimeout: cfg.LivenessTimeout,
	}.WithDefaults()
	m := &Mux{
		ln: ln, tls: cfg.TLS, log: cfg.Logger, timeout: cfg.HandshakeTimeout, private: private,
		groups: map[uint64]*Transport{}, conns: map[io.Closer]struct{}{},
		links: map[string]*link{}, inLinks: map[*inLink]struct{}{},
		ls: linkSettings{
			dialTimeout: d.DialTimeout, readTimeout: d.ReadTimeout, writeTimeout: d.WriteTimeout,
			pingInterval: d.PingInterval, minBackoff: d.MinBackoff, maxBackoff: d.MaxBackoff, maxFrame: d.MaxFrameSize,
			livenessTimeout: d.LivenessTimeout,
		},
		start: time.Now(), quantum: defaultQuantum, legacyHold: defaultLegacyHold,
		snapSend:  newSlots(cfg.MaxConcurrentSnapshots),
		snapRecv:  make(chan struct{}, cfg.MaxConcurrentSnapshots),
		snapRate:  snapshotLimiter(Config{SnapshotBytesPerSec: cfg.SnapshotBytesPerSec, SnapshotChunkSize: DefaultSnapshotChunkSize}),
		hostID:    cfg.HostID,
		book:      map[uint64]*HostAddress{},
		certs:     map[uint64]string{},
		onAddress: cfg.OnAddressesChanged,
	}
	for id, e := range cfg.Addresses {
		rec := slices.DeleteFunc(slices.Clone(e.Recorded), func(a string) bool { return a == e.Addr || a == "" })
		if id == 0 || !dialable(e.Addr) || len(rec) == 0 || len(m.book) >= maxBookHosts {
			continue
		}
		m.book[id] = &HostAddress{Addr: e.Addr, Recorded: rec, Learned: e.Learned}
		m.bookSeq = max(m.bookSeq, e.Learned)
	}
	if private != nil {
		// The snapshot budget of a transport's own mux is its Config's.
		pc := private.cfg.Config
		m.snapSend, m.snapRate = newSlots(pc.MaxConcurrentSnapshots), snapshotLimiter(*pc)
		m.snapRecv = make(chan struct{}, pc.MaxConcurrentSnapshots)
	}
	lo, hi := m.versions()
	m.dialer = &dialer{
		tls: cfg.TLS, dialTimeout: d.DialTimeout, handshakeTimeout: cfg.HandshakeTimeout,
		maxFrame: d.MaxFrameSize, lo: lo, hi: hi, connErrors: m.errorCounter(),
		readBuffer: 4 << 10, // pongs and attach replies
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// versions returns the protocol versions the mux speaks: its private
// transport's, or this build's.
func (m *Mux) versions() (lo, hi uint16) {
	if m.private != nil {
		return m.private.cfg.versions()
	}
	return wire.MinVersion, wire.MaxVersion
}

// group returns the transport of group id, nil if the host does not run it.
func (m *Mux) group(id uint64) *Transport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.groups[id]
}

// Addr returns the address the mux listens on.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Groups returns the groups whose transports are registered, in order.
func (m *Mux) Groups() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.groups))
}

// MuxStats are the mux's counters and its links.
type MuxStats struct {
	// Refused counts what the mux refused itself, by reason: hellos and
	// attachments for a group the host does not run (ReasonGroupMismatch),
	// link hellos of another protocol version. What a group's transport
	// refuses is in its own Stats.
	Refused map[string]uint64
	// ConnErrors counts connections the mux closed on an error (failed
	// handshakes, broken host links), by reason.
	ConnErrors map[string]uint64
	// Links is the number of outbound host links connected now: one per
	// peer host, whatever the number of groups.
	Links int
	// LegacyLinks is the number of peer hosts reached by a raft stream per
	// group instead, because they speak no host links (an earlier release).
	LegacyLinks int
	// InboundLinks is the number of host links peer hosts keep to this one.
	InboundLinks int
	// DroppedUnadmitted counts messages received on a host link for a
	// (group, sender, receiver) not admitted: never attached, refused or
	// revoked.
	DroppedUnadmitted uint64
	// DroppedTooLarge counts messages received on a host link larger than
	// the mux's MaxFrameSize: skipped, the link going on. A sender that
	// learned the limit in the link's hello reply drops them itself (its
	// group's PeerStats.DroppedTooLarge).
	DroppedTooLarge uint64
	// AddressesLearned counts the peer hosts' moves the address book
	// learned (Mux.Addresses).
	AddressesLearned uint64
	// Hosts is the liveness of each peer host this host keeps a host link
	// to, by address (see Config.LivenessTimeout).
	Hosts []HostLiveness
}

// Stats returns the mux's counters.
func (m *Mux) Stats() MuxStats {
	s := MuxStats{Refused: m.refused.snapshot(), ConnErrors: m.connErrors.snapshot(), DroppedUnadmitted: m.droppedUnadmitted.Load(),
		DroppedTooLarge: m.droppedTooLarge.Load(), AddressesLearned: m.addrsLearned.Load()}
	m.mu.Lock()
	links := make([]*link, 0, len(m.links))
	for _, l := range m.links {
		links = append(links, l)
	}
	s.InboundLinks = len(m.inLinks)
	m.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		legacy := l.legacy
		switch {
		case legacy:
			s.LegacyLinks++
		case l.gen != 0:
			s.Links++
		}
		l.mu.Unlock()
		if !legacy {
			s.Hosts = append(s.Hosts, l.hostLiveness())
		}
	}
	slices.SortFunc(s.Hosts, func(a, b HostLiveness) int { return strings.Compare(a.Addr, b.Addr) })
	return s
}

// register adds t as the transport of its group.
func (m *Mux) register(t *Transport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("%w: the mux is closed", ErrInvalidConfig)
	}
	if _, dup := m.groups[t.cfg.GroupID]; dup {
		return fmt.Errorf("%w: group %d already has a transport on this mux", ErrInvalidConfig, t.cfg.GroupID)
	}
	m.groups[t.cfg.GroupID] = t
	return nil
}

// unregister removes t: its group's hellos are refused from now on.
func (m *Mux) unregister(t *Transport) {
	m.mu.Lock()
	if m.groups[t.cfg.GroupID] == t {
		delete(m.groups, t.cfg.GroupID)
	}
	m.mu.Unlock()
}

// Close stops listening and closes the connections not yet handed to a
// group; the groups' transports keep theirs until they are closed. It waits
// for the mux's goroutines. Close is idempotent.
//
// Errors: the listener's Close error.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	conns := slices.Collect(maps.Keys(m.conns))
	links := slices.Collect(maps.Values(m.links))
	m.links = map[string]*link{}
	m.mu.Unlock()
	m.cancel()
	err := m.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	for _, l := range links {
		l.close()
	}
	m.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// track registers a connection before its hand-off; it reports false (and
// closes c) once the mux is closed.
func (m *Mux) track(c io.Closer) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		_ = c.Close()
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *Mux) untrack(c io.Closer) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
}

// acceptLoop accepts connections until the listener is closed.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		nc, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("accept failed", "err", err, "retry_in", delay)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if !m.track(nc) {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.serveConn(nc)
		}()
	}
}

// handshake is an inbound connection whose hello was read.
type handshake struct {
	raw   net.Conn
	nc    net.Conn // the TLS connection when TLS is on
	dr    *deadlineReader
	br    *bufio.Reader
	hello wire.Hello
}

// serveConn runs the TLS handshake and reads the hello, then hands the
// connection to its group's transport (or refuses it).
func (m *Mux) serveConn(raw net.Conn) {
	hs, err := m.handshake(raw)
	if err != nil {
		m.untrack(raw)
		_ = raw.Close()
		if m.ctx.Err() == nil {
			reason := reasonOf(err)
			m.errorCounter().add(reason)
			m.logError("handshake_"+reason, "inbound connection failed before the handshake completed", "remote", raw.RemoteAddr().String(), "err", err)
		}
		return
	}
	if hs == nil { // refused and answered
		m.untrack(raw)
		_ = raw.Close()
		return
	}
	if hs.hello.Kind == wire.KindLink {
		m.serveLink(hs) // the mux's own: it keeps the connection tracked
		return
	}
	m.mu.Lock()
	t := m.groups[hs.hello.Group]
	m.mu.Unlock()
	if t == nil {
		reason := codeErrors[wire.CodeGroupMismatch].reason
		m.refusedCounter().add(reason)
		why := fmt.Sprintf("group %d is not run by this host", hs.hello.Group)
		if m.refusalLog.allow(reason, time.Now()) {
			m.log.Warn("refused inbound connection", "kind", hs.hello.Kind.String(), "remote", raw.RemoteAddr().String(), "detail", why)
		}
		r := wire.HelloReply{Code: wire.CodeGroupMismatch, Reason: why}
		if m.private != nil { // a single group's member says who it is, as before
			r.Cluster, r.Member = m.private.cluster.Load(), m.private.cfg.ID
			r.Reason = fmt.Sprintf("group %d, this member serves group %d", hs.hello.Group, m.private.cfg.GroupID)
		}
		writeReply(hs.nc, hs.hello.Group, r)
		m.untrack(raw)
		_ = raw.Close()
		return
	}
	// Hand off: from here the group's transport owns the connection (its
	// Close closes it and waits for the goroutine serving it).
	if !t.track(raw) {
		m.untrack(raw)
		return
	}
	m.untrack(raw)
	if !t.goTracked(func() { t.serveHandshake(hs) }) {
		t.untrack(raw)
		_ = raw.Close()
	}
}

// handshake runs the TLS handshake and reads the hello within the
// handshake timeout. It returns nil, nil when it answered a malformed hello.
func (m *Mux) handshake(raw net.Conn) (*handshake, error) {
	_ = raw.SetDeadline(time.Now().Add(m.timeout))
	nc := raw
	if m.tls != nil {
		tc := tls.Server(raw, m.tls)
		if err := tc.HandshakeContext(m.ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", errTLS, err)
		}
		nc = tc
	}
	dr := &deadlineReader{c: nc}
	br := bufio.NewReaderSize(dr, 16<<10) // per inbound connection: a host of many groups has many
	f, err := wire.NewReader(br, helloLimit).Next()
	if err != nil {
		return nil, fmt.Errorf("reading hello: %w", err)
	}
	if f.Type != wire.TypeHello {
		return nil, fmt.Errorf("%w: %s frame instead of a hello", ErrProtocol, f.Type)
	}
	h, err := wire.ParseHello(f.Payload)
	if err != nil {
		writeReply(nc, f.Group, wire.HelloReply{Code: wire.CodeBadHello, Reason: err.Error()})
		return nil, err
	}
	return &handshake{raw: raw, nc: nc, dr: dr, br: br, hello: h}, nil
}

// errorCounter and refusedCounter are where the mux counts: its owner's
// counters for a private mux (a single group's Stats show everything, as
// before the mux existed), else its own.
func (m *Mux) errorCounter() *reasonCounter {
	if m.private != nil {
		return &m.private.connErrors
	}
	return &m.connErrors
}

func (m *Mux) refusedCounter() *reasonCounter {
	if m.private != nil {
		return &m.private.refused
	}
	return &m.refused
}

func (m *Mux) logError(reason, msg string, args ...any) {
	if m.private != nil {
		m.private.logOnce(0, reason, msg, args...)
		return
	}
	if m.refusalLog.allow(reason, time.Now()) {
		m.log.Warn(msg, args...)
		return
	}
	m.log.Debug(msg, args...)
}

// linkLog logs a link event at info level, or, for reason (a problem), at
// warning level once per address and reason and at debug level after
// that, until the link connects again.
func (m *Mux) linkLog(addr, reason, msg string, args ...any) {
	if reason == "" {
		m.logged.Range(func(k, _ any) bool {
			if k.(linkLogKey).addr == addr {
				m.logged.Delete(k)
			}
			return true
		})
		m.log.Info(msg, args...)
		return
	}
	if _, seen := m.logged.LoadOrStore(linkLogKey{addr, reason}, true); seen {
		m.log.Debug(msg, args...)
		return
	}
	m.log.Warn(msg, args...)
}

type linkLogKey struct{ addr, reason string }

// writeReply sends a hello reply.
func writeReply(nc net.Conn, group uint64, r wire.HelloReply) {
	_, _ = nc.Write(wire.AppendFrame(nil, wire.TypeHelloReply, group, wire.AppendHelloReply(nil, r)))
}
