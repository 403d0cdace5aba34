package transport

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/time/rate"

	"github.com/understudy-raft/understudy/internal/wire"
)

// Transport carries raft messages, snapshots and member-to-member requests
// between the members of one cluster. Its methods are safe for concurrent
// use.
type Transport struct {
	cfg     transportConfig // with defaults
	log     *slog.Logger
	handler Handler
	mux     *Mux // the listener, shared by a host's groups or private
	ownMux  bool // the mux is this transport's own: Close closes it
	// closed (under mu) is set by Close; hclosed (under hmu) stops the
	// BatchHandler calls of host links' readers. Here, beside ownMux and
	// closing, they take no room of their own.
	closed  bool
	hclosed bool
	closing atomic.Bool // set by Close
	cluster atomic.Uint64
	advert  atomic.Pointer[string] // Config.AdvertiseAddr, or SetAdvertiseAddr's
	inc     atomic.Uint64          // Config.Incarnation, or SetIncarnation's

	wg sync.WaitGroup // every goroutine the transport starts

	// peers is replaced, never modified, under mu: Send reads it without
	// locking.
	peers atomic.Pointer[peerList]

	// closeMu is held by Close throughout: a Close that finds another in
	// progress (a group that stops on its own closes its transport while
	// its host closes the group) returns once that one is done, so that
	// the group has left the mux when any Close returns.
	closeMu sync.Mutex

	// mu guards the fields below. It is never held while doing I/O or
	// calling the Handler.
	mu    sync.Mutex
	calls opSet                  // Call and CallAddr in flight, canceled by Close
	conns map[io.Closer]struct{} // every open connection, closed by Close (nil: none)

	events events // reports to the Handler, on a goroutine of their own
	inbox  *inbox // received messages for a Handler that is no BatchHandler (nil for one)

	// hmu makes Close wait for a BatchHandler call of a host link's reader
	// in progress; hclosed (above) stops new ones.
	hmu sync.RWMutex

	// Counters not tied to a peer (refusals and connection errors are
	// common as a host's groups start: those of rare events are in rare).
	refused    reasonCounter
	connErrors reasonCounter

	// rare holds the counters of rare drops, the memory of what was
	// logged and the members removed: made with the first, so that the
	// transports of a host's many groups hold none.
	rare atomic.Pointer[transportRare]
}

// transportConfig is a transport's Config. Its settings, the same for a
// host's many groups, are one Config the transports on a Mux configured
// alike share (only read; a transport with a private Mux has its own);
// what is the group's own is apart: its member ID, group ID and snapshot
// store. The shared Config holds none of these, nor what New only reads
// (ClusterID, AdvertiseAddr, Incarnation, Handler, Logger, Peers, Removed,
// PeerIncarnations: the Transport keeps them where it uses them).
// t.cfg.X reads the group's own field where there is one.
type transportConfig struct {
	*Config
	ID        uint64
	GroupID   uint64
	Snapshots SnapshotStore
}

// transportRare is what a Transport counts and remembers of what rarely
// happens (see Transport.rare).
type transportRare struct {
	droppedUnknown atomic.Uint64
	droppedRelay   atomic.Uint64 // relay envelopes for a Handler that takes none

	// logged holds the (peer, reason) pairs already logged at warning
	// level; peer is 0 or a member the node told this transport of (a peer
	// or a removed member), never an ID only claimed by a hello (see
	// logRefusal): its size is bounded by the membership's history.
	logged     sync.Map
	refusalLog rateLog // refusals of senders that are not known members

	// removed are the members removed (RemovePeer) and not added again,
	// under Transport.mu.
	removed map[uint64]bool
}

// more returns the transport's rare counters and logs, made with the
// first.
func (t *Transport) more() *transportRare {
	if r := t.rare.Load(); r != nil {
		return r
	}
	t.rare.CompareAndSwap(nil, new(transportRare))
	return t.rare.Load()
}

// droppedUnknownCount returns the messages dropped for unknown peers.
func (t *Transport) droppedUnknownCount() uint64 {
	if r := t.rare.Load(); r != nil {
		return r.droppedUnknown.Load()
	}
	return 0
}

// New validates cfg, starts listening (on cfg.ListenAddr if cfg.Listener is
// nil) and serves peers until Close.
//
// Errors: ErrInvalidConfig, joined for every problem of cfg; the listen
// error (address in use, bad address). Nothing is left open on error.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	t := &Transport{
		cfg:     transportConfig{ID: cfg.ID, GroupID: cfg.GroupID, Snapshots: cfg.Snapshots},
		log:     cfg.Logger.With("member", fmt.Sprintf("%x", cfg.ID)),
		handler: cfg.Handler,
		mux:     cfg.Mux,
	}
	settings := cfg
	settings.ID, settings.ClusterID, settings.GroupID, settings.Snapshots = 0, 0, 0, nil
	settings.AdvertiseAddr, settings.Incarnation, settings.Handler, settings.Logger = "", 0, nil, nil
	settings.Peers, settings.Removed, settings.PeerIncarnations = nil, nil, nil
	t.cfg.Config = &settings
	if t.mux != nil {
		t.cfg.Config = t.mux.configs.Share(t.cfg.Config)
	}
	if _, ok := cfg.Handler.(BatchHandler); !ok {
		t.inbox = new(inbox)
	}
	t.cluster.Store(cfg.ClusterID)
	t.advert.Store(&cfg.AdvertiseAddr)
	t.inc.Store(cfg.Incarnation)
	t.peers.Store(&peerList{})
	if t.mux == nil {
		// A private mux has the transport's snapshot budget (a host's
		// groups share their Mux's).
		mux, err := newMux(MuxConfig{
			Listener: cfg.Listener, ListenAddr: cfg.ListenAddr, TLS: cfg.TLS, Logger: cfg.Logger,
			HandshakeTimeout: cfg.HandshakeTimeout, DialTimeout: cfg.DialTimeout,
			ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, PingInterval: cfg.PingInterval,
			MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, MaxFrameSize: cfg.MaxFrameSize,
			LivenessTimeout: cfg.LivenessTimeout,
		}, t)
		if err != nil {
			t.closing.Store(true)
			return nil, err
		}
		t.mux, t.ownMux = mux, true
	}
	for _, id := range cfg.Removed {
		t.RemovePeer(id)
	}
	for id, addr := range cfg.Peers {
		if !slices.Contains(cfg.Removed, id) {
			t.AddPeer(id, addr)
			t.SetPeerIncarnation(id, cfg.PeerIncarnations[id])
		}
	}
	if err := t.mux.register(t); err != nil {
		_ = t.Close()
		return nil, err
	}
	t.log.Info("transport serving", "addr", t.mux.Addr().String(), "group", cfg.GroupID, "tls", cfg.TLS != nil)
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *Transport) Addr() net.Addr { return t.mux.Addr() }

// SetClusterID sets the cluster ID once a joiner has learned it. Inbound
// raft and snapshot connections are refused until it is set.
func (t *Transport) SetClusterID(id uint64) { t.cluster.Store(id) }

// SetAdvertiseAddr sets the address sent in this transport's attachments
// (Config.AdvertiseAddr), for a member that learns it after New (a
// joiner's recorded address). Attachments made before keep the old one.
func (t *Transport) SetAdvertiseAddr(addr string) { t.advert.Store(&addr) }

// SetIncarnation sets the incarnation this member presents
// (Config.Incarnation), for a member that learns it after New: its
// attachments on host links are sent again with it (a peer that recorded
// it would refuse one made before). Connections made before keep the old
// one.
func (t *Transport) SetIncarnation(inc uint64) {
	if t.inc.Swap(inc) == inc {
		return
	}
	for _, p := range *t.peers.Load() {
		p.mu.Lock()
		f := p.flow
		p.mu.Unlock()
		if f != nil {
			f.l.requestAttach(f)
		}
	}
}

// SetPeerIncarnation records member id's incarnation, as the node applied
// it from the log: from then on a hello or attachment of id that presents
// another one (0 included) is refused with reason "wiped" (the sender
// learns it as ErrWiped), and the messages of a connection or attachment
// admitted before with another one are dropped and it is refused then.
// inc 0 records nothing (not known yet: any is accepted); a recorded
// incarnation is kept until the member is removed. Unknown members are
// ignored: call it after AddPeer.
func (t *Transport) SetPeerIncarnation(id, inc uint64) {
	if p := t.peer(id); p != nil && inc != 0 {
		p.inc.CompareAndSwap(0, inc)
	}
}

// ClusterID returns the cluster ID, 0 if not known yet.
func (t *Transport) ClusterID() uint64 { return t.cluster.Load() }

// Close stops the transport: it closes the listener and every connection,
// drops the queued messages and waits for every goroutine it started,
// including Handler calls in progress. The Handler is not called after
// Close returns. Close is idempotent; later
// calls return nil, once the first is done.
//
// Errors: the listener's Close error (the transport is closed anyway).
func (t *Transport) Close() error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := *t.peers.Load()
	t.peers.Store(&peerList{})
	conns := slices.Collect(maps.Keys(t.conns))
	t.mu.Unlock()

	t.closing.Store(true)
	t.calls.stop(&t.mu)
	t.events.close()
	if t.inbox != nil {
		t.inbox.close()
	}
	t.mux.unregister(t)
	// On a shared mux, the host goes on without the group: the peers hosts'
	// attachments for it are revoked, as a new attempt would be refused. A
	// private mux closes with the transport, and its links with it.
	code, why := wire.CodeGroupMismatch, fmt.Sprintf("group %d is not run by this host", t.cfg.GroupID)
	if t.ownMux {
		code = wire.CodeAccepted
	}
	for _, p := range peers {
		p.stop(code, why)
	}
	var err error
	if t.ownMux {
		err = t.mux.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
	t.hmu.Lock()
	t.hclosed = true
	t.hmu.Unlock()
	t.wg.Wait()
	t.log.Info("transport closed")
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// goTracked runs f on a new goroutine that Close waits for. It reports
// false, without running f, once the transport is closed.
func (t *Transport) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// track registers an open connection for Close; it reports false (and
// closes c) if the transport is closed. untrack removes it.
func (t *Transport) track(c io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return false
	}
	if t.conns == nil {
		t.conns = make(map[io.Closer]struct{})
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Transport) untrack(c io.Closer) {
	t.mu.Lock()
	delete(t.conns, c)
	if len(t.conns) == 0 {
		t.conns = nil // most groups' transports have no connection of their own most of the time
	}
	t.mu.Unlock()
}

// AddPeer adds member id at address addr (host:port): messages can be sent
// to it and its connections are accepted. Adding a known peer updates its
// address. Adding a removed member undoes the removal (the node decides
// membership). Adding this member itself is ignored.
func (t *Transport) AddPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.ID {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if r := t.rare.Load(); r != nil {
		delete(r.removed, id)
	}
	if p := t.peer(id); p != nil {
		t.mu.Unlock()
		p.setRecorded(addr)
		return
	}
	p := newPeer(t, id, addr)
	next := t.peers.Load().with(p)
	t.peers.Store(&next)
	t.mu.Unlock()
	p.start()
	t.log.Info("peer added", "peer", fmt.Sprintf("%x", id), "addr", addr)
}

// UpdatePeer changes the address of member id: its messages go to the
// host link of the new address at once. Unknown members are ignored.
func (t *Transport) UpdatePeer(id uint64, addr string) {
	if p := t.peer(id); p != nil {
		p.setRecorded(addr)
	}
}

// SetLearner marks member id as a learner (its queue gets
// MaxLearnerQueueBytes, and its messages are gathered for
// LearnerBatchDelay) or as a voter (MaxQueueBytes, sent at once: the
// default for a new peer). Unknown members are ignored: call it after AddPeer.
func (t *Transport) SetLearner(id uint64, learner bool) {
	if p := t.peer(id); p != nil {
		p.learner.Store(learner)
		p.mu.Lock()
		f := p.flow
		p.mu.Unlock()
		if f != nil {
			f.l.poke() // a promoted learner's gathered messages leave at once
		}
	}
}

// RemovePeer forgets member id: its queue is dropped, its connections in
// both directions are closed, and from then on its connections are refused
// with reason "removed" (it learns so through Handler.ReportRefused), until
// it is added again.
func (t *Transport) RemovePeer(id uint64) {
	if id == 0 || id == t.cfg.ID {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	r := t.more()
	if r.removed == nil {
		r.removed = make(map[uint64]bool)
	}
	r.removed[id] = true
	p := t.peer(id)
	if p != nil {
		next := t.peers.Load().without(id)
		t.peers.Store(&next)
	}
	t.mu.Unlock()
	if p != nil {
		p.stop(wire.CodeRemoved, fmt.Sprintf("member %x was removed from the cluster", id))
		t.log.Info("peer removed", "peer", fmt.Sprintf("%x", id))
	}
}

// snapshotLimiter is the limiter of Config.SnapshotBytesPerSec: a burst of
// one chunk, so that a stream starts at once and then keeps the rate.
func snapshotLimiter(cfg Config) *rate.Limiter {
	if cfg.SnapshotBytesPerSec <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(cfg.SnapshotBytesPerSec), max(cfg.SnapshotChunkSize, int(min(cfg.SnapshotBytesPerSec, 1<<30))))
}

// SnapshotProgress reports the snapshot being sent to member id, if any
// (Index 0 otherwise): the node shows it as a learner's catch-up progress.
func (t *Transport) SnapshotProgress(id uint64) SnapshotProgress {
	if p := t.peer(id); p != nil {
		return p.snapshotProgress()
	}
	return SnapshotProgress{}
}

func (t *Transport) peer(id uint64) *peer { return t.peers.Load().get(id) }

// removed reports whether member id was removed (RemovePeer) and not
// added again.
func (t *Transport) removed(id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rare.Load()
	return r != nil && r.removed[id]
}

// peerList is a transport's peers. A group has a few members: a list,
// searched, costs each of a host's many groups less than a map would.
// It is replaced, never modified.
type peerList []*peer

// get returns member id's peer, nil if none.
func (l peerList) get(id uint64) *peer {
	for _, p := range l {
		if p.id == id {
			return p
		}
	}
	return nil
}

// with returns a copy of l with p added.
func (l peerList) with(p *peer) peerList {
	next := make(peerList, len(l), len(l)+1)
	copy(next, l)
	return append(next, p)
}

// without returns a copy of l without member id's peer.
func (l peerList) without(id uint64) peerList {
	next := make(peerList, 0, len(l))
	for _, p := range l {
		if p.id != id {
			next = append(next, p)
		}
	}
	return next
}

// Send queues messages for their recipients (m.To) and returns at once: it
// never blocks and never calls the Handler. Messages are only read, never
// modified, and may be shared with the caller.
//
// A message for an unknown member is dropped (a MsgSnap for one is reported
// to Handler.ReportSnapshot as failed, so that raft does not wait for it for
// ever). A message that does not fit
// in its peer's queue (MaxQueueMessages, the byte budget), or whose peer's
// stream is down, is dropped and the member is reported to
// Handler.ReportUnreachable shortly after. A MsgSnap goes on its own
// connection with the file from the SnapshotStore; its outcome is reported
// to Handler.ReportSnapshot.
func (t *Transport) Send(msgs []*raftpb.Message) {
	peers := *t.peers.Load()
	for _, m := range msgs {
		p := peers.get(m.GetTo())
		if p == nil {
			t.more().droppedUnknown.Add(1)
			if m.GetType() == raftpb.MsgSnap {
				to := m.GetTo()
				t.goTracked(func() { t.handler.ReportSnapshot(to, raft.SnapshotFailure) })
			}
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			p.sendSnapshot(m)
			continue
		}
		p.enqueue(m)
	}
}

// Stats returns a copy of the transport's counters.
func (t *Transport) Stats() Stats {
	peers := *t.peers.Load()
	s := Stats{
		DroppedUnknownPeer:      t.droppedUnknownCount(),
		DroppedReceiveQueueFull: t.inbox.droppedCount(),
		Refused:                 t.refused.snapshot(),
		ConnErrors:              t.connErrors.snapshot(),
		Peers:                   make([]PeerStats, 0, len(peers)),
	}
	for _, p := range peers {
		s.Peers = append(s.Peers, p.stats())
	}
	slices.SortFunc(s.Peers, func(a, b PeerStats) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return s
}

// logOnce logs msg at warning level the first time for (peer, reason) and
// at debug level after that, so a peer retrying a refused connection every
// few seconds does not flood the log.
func (t *Transport) logOnce(peer uint64, reason, msg string, args ...any) {
	args = append(args, "peer", fmt.Sprintf("%x", peer), "reason", reason)
	if _, seen := t.more().logged.LoadOrStore(logKey{peer, reason}, true); seen {
		t.log.Debug(msg, args...)
		return
	}
	t.log.Warn(msg, args...)
}

type logKey struct {
	peer   uint64
	reason string
}

// Refusal returns the reason member id gave for refusing this member's
// last connection attempt (ReasonClusterMismatch, ReasonRemoved, …) while
// the raft stream to it is down; "" when the stream is up, when it never
// refused, or for an unknown member. It is how a leader shows an operator
// why a member it added cannot be reached.
func (t *Transport) Refusal(id uint64) string {
	p := t.peer(id)
	if p == nil || p.c.connected.Load() {
		return ""
	}
	if r := p.c.read().lastRefusal.Load(); r != nil {
		return *r
	}
	return ""
}
