package understudy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/confchange"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
	"github.com/understudy-raft/understudy/transport"
)

// HostConfig is what NewHost needs: what a process has once, whatever the
// number of raft groups it runs.
type HostConfig struct {
	// DataDir holds every group's log, snapshots and identity (one storage
	// engine, storage.OpenEngine), the host's ID (file host-id, made once:
	// Host.ID) and the peer hosts' moves it learned (peer-addresses.json).
	DataDir string
	// ListenPeer is the host:port the host listens on for its peers, for
	// every group (raft messages, snapshots, member-to-member requests).
	ListenPeer string
	// Listener, if set, is used instead of listening on ListenPeer.
	Listener net.Listener
	// AdvertisePeer is the address the other hosts dial to reach this one:
	// every group's record of its replica here. Default: for each group,
	// the address that group already knows its replica by (see
	// GroupConfig), and only for a replica with none the listen address —
	// never an unspecified one (0.0.0.0, [::]). A host of many groups
	// should set it.
	AdvertisePeer string
	// TLS secures every peer connection (transport.NewMutualTLS); nil: plain TCP.
	TLS *tls.Config
	// Logger receives the host's logs and its groups' (with a "group"
	// attribute); nil discards them.
	Logger *slog.Logger
	// Storage tunes the storage engine (Logger defaults to Logger). Its
	// Backend picks the key-value store. A new data dir gets Pebble unless
	// Backend or NewBackend says otherwise: a commit costs its bytes and
	// one fsync however many groups it carries, and idle groups do not
	// make it dearer, where bbolt's copies 2.6 to 4.2 pages per group in
	// it, the more the more idle groups sit between the busy ones
	// (docs/architecture.md "Idle groups and the engine"). Start uses
	// Pebble too: for one group it measured 1.6-1.8x bbolt's writes/s up
	// to 16 writers, about equal at 256 (bbolt: storage.BackendBolt). A
	// data dir keeps the backend it was created with,
	// whatever these say (but an explicit Backend that differs is
	// refused with storage.ErrBackend).
	Storage storage.EngineOptions
	// MaxConcurrentSnapshots bounds the snapshots the host's groups send at
	// once, together, and those they receive at once (default 2);
	// SnapshotBytesPerSec bounds the rate of all they send (0: none).
	MaxConcurrentSnapshots int
	SnapshotBytesPerSec    int64
	// Links tunes the host links (one connection per peer host, carrying
	// every group's raft messages): as transport.MuxConfig's fields of the
	// same names; zero fields take the transport's defaults.
	Links LinkSettings

	// LeaderBalance spreads the groups' leadership over the hosts they
	// span: on by default (see LeaderBalance for why).
	LeaderBalance LeaderBalance

	// Scheduler bounds the goroutines that run every group's raft work
	// (raft.Scheduler: the run loops, the appends, the applies). Zero
	// fields take the defaults: GOMAXPROCS loop workers, 32 I/O workers,
	// 16 apply workers; negative ones are refused (raft.ErrInvalidConfig).
	Scheduler raft.SchedulerConfig
}

// LinkSettings tune a host's links to its peer hosts (see
// transport.MuxConfig): how long a dial and a link's reads and writes may
// take, how often a link is pinged, the backoff between dials, the largest
// frame a link accepts, and how late a peer host's answer to a ping may be
// before it is no longer live (LivenessTimeout: default 3 × PingInterval,
// at least twice it; see "Host liveness" in docs/architecture.md). Zero
// fields take the transport's defaults.
type LinkSettings struct {
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	PingInterval                           time.Duration
	MinBackoff, MaxBackoff                 time.Duration
	MaxFrameSize                           int
	LivenessTimeout                        time.Duration
}

// Host runs raft groups in one process: it owns the storage engine (one
// file, one committer: the appends of every group queued while a commit
// runs go in the next one, with one sync) and the peer listener (a
// transport.Mux: one port for every group). Groups are started with
// StartGroup, and only so: a message for a group the host does not run is
// refused and never creates one.
//
// A Host is safe for concurrent use.
type Host struct {
	cfg    HostConfig
	log    *slog.Logger
	engine *storage.Engine
	mux    *transport.Mux
	sched  *raft.Scheduler
	// listenAddr is ListenPeer, or the address the listener got.
	listenAddr string
	id         uint64 // the host ID, kept in the data dir

	mu     sync.Mutex
	closed bool
	groups map[uint64]*Group
	// starting are the StartGroup calls under way (their groups are
	// reserved in groups): Close cancels them and waits for them (starts).
	starting map[uint64]context.CancelCauseFunc
	starts   sync.WaitGroup
	// balance is the leader balancing (nil: disabled).
	balance *balancer
}

// NewHost opens the data dir and starts listening for peers. On error
// nothing stays open.
//
// Errors: raft.ErrInvalidConfig; the storage's (storage.ErrLocked: another
// process runs from DataDir; storage.ErrCorrupt; storage.ErrVersion); the
// listen error.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: DataDir is required", raft.ErrInvalidConfig)
	}
	if cfg.Listener == nil && cfg.ListenPeer == "" {
		return nil, fmt.Errorf("%w: ListenPeer (or Listener) is required", raft.ErrInvalidConfig)
	}
	if cfg.AdvertisePeer != "" {
		if err := confchange.CheckPeerAddr(cfg.AdvertisePeer); err != nil {
			return nil, fmt.Errorf("%w: AdvertisePeer: %v", raft.ErrInvalidConfig, refusalDetail(err))
		}
	}
	if err := cfg.Scheduler.Validate(); err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	eopts := cfg.Storage
	if eopts.Logger == nil {
		eopts.Logger = cfg.Logger
	}
	if eopts.NewBackend == "" {
		eopts.NewBackend = storage.BackendPebble // a host of many groups
	}
	engine, err := storage.OpenEngine(cfg.DataDir, eopts)
	if err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, err
	}
	hostID, err := loadHostID(cfg.DataDir)
	if err != nil {
		_ = engine.Close()
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.ListenPeer); err != nil {
			_ = engine.Close()
			return nil, fmt.Errorf("understudy: listening for peers: %w", err)
		}
	}
	// The mux reports a change from a link's goroutine: each save writes
	// the book as it is then, one at a time (so the last write is newest).
	var (
		bookMu  sync.Mutex
		bookMux atomic.Pointer[transport.Mux]
	)
	mux, err := transport.NewMux(transport.MuxConfig{
		Listener: ln, TLS: cfg.TLS, Logger: cfg.Logger, HostID: hostID,
		MaxConcurrentSnapshots: cfg.MaxConcurrentSnapshots, SnapshotBytesPerSec: cfg.SnapshotBytesPerSec,
		DialTimeout: cfg.Links.DialTimeout, ReadTimeout: cfg.Links.ReadTimeout, WriteTimeout: cfg.Links.WriteTimeout,
		PingInterval: cfg.Links.PingInterval, MinBackoff: cfg.Links.MinBackoff, MaxBackoff: cfg.Links.MaxBackoff,
		MaxFrameSize: cfg.Links.MaxFrameSize, LivenessTimeout: cfg.Links.LivenessTimeout,
		Addresses: loadAddressBook(cfg.DataDir, cfg.Logger),
		OnAddressesChanged: func(book map[uint64]transport.HostAddress) {
			bookMu.Lock()
			defer bookMu.Unlock()
			if m := bookMux.Load(); m != nil {
				book = m.Addresses()
			}
			saveAddressBook(cfg.DataDir, book, cfg.Logger)
		},
	})
	if err != nil {
		_ = ln.Close()
		_ = engine.Close()
		return nil, err
	}
	bookMux.Store(mux)
	// The address a replica with no record is recorded with: the listen
	// address as given, or the port the system picked.
	listenAddr := cfg.ListenPeer
	if _, port, _ := net.SplitHostPort(listenAddr); listenAddr == "" || cfg.Listener != nil || port == "0" {
		listenAddr = ln.Addr().String()
	}
	cfg.Listener = ln
	h := &Host{
		cfg: cfg, log: cfg.Logger, engine: engine, mux: mux, listenAddr: listenAddr, id: hostID,
		sched:    raft.NewScheduler(cfg.Scheduler),
		groups:   map[uint64]*Group{},
		starting: map[uint64]context.CancelCauseFunc{},
	}
	h.startBalancer()
	return h, nil
}

// ID returns the host's ID: made at random the first time a host opened
// its data dir, kept there (file host-id) and never changed. Its peer hosts
// know it by it: they learn its moves from its links only (see
// transport.MuxConfig.HostID).
func (h *Host) ID() uint64 { return h.id }

// Addr is the address the host listens on.
func (h *Host) Addr() net.Addr { return h.mux.Addr() }

// Groups returns the IDs of the groups running on the host, in order.
func (h *Host) Groups() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.groups))
}

// Group returns the running group id.
func (h *Host) Group(id uint64) (*Group, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[id]
	return g, ok && g != nil
}

// StoredGroups returns the groups the data dir holds, running or not, in
// order, each with its state: a restart of the host restarts the groups
// in GroupMember (StartGroup with the group's ID and member ID: the
// bootstrap settings are then ignored), deletes those in GroupRemoved
// (DeleteGroup) and starts those in GroupNotStarted with their bootstrap
// settings again, or deletes them. A StartGroup refused before its group
// recorded anything leaves nothing here.
//
// Errors: ErrHostClosed; the storage's (storage.ErrCorrupt).
func (h *Host) StoredGroups() ([]StoredGroup, error) {
	infos, err := h.engine.GroupInfos()
	if err != nil {
		if errors.Is(err, storage.ErrClosed) {
			return nil, fmt.Errorf("%w: %w", ErrHostClosed, err)
		}
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]StoredGroup, 0, len(infos))
	for _, info := range infos {
		sg := StoredGroup{ID: info.ID, MemberID: info.Identity.MemberID, ClusterID: info.Identity.ClusterID, State: GroupNotStarted}
		switch {
		case info.Removed:
			sg.State = GroupRemoved
		case info.HasState:
			sg.State = GroupMember
		}
		sg.Running = h.groups[info.ID] != nil
		out = append(out, sg)
	}
	return out, nil
}

// StoredGroup is a group a host's data dir holds (Host.StoredGroups).
type StoredGroup struct {
	// ID is the group's ID (GroupConfig.GroupID).
	ID uint64
	// MemberID and ClusterID are the identity recorded for the group's
	// replica here: the GroupConfig.ID to restart it with. Zero when none
	// was recorded (a start that stopped before it could).
	MemberID, ClusterID uint64
	// State says how the group can start.
	State GroupState
	// Running reports whether the host runs the group now.
	Running bool
}

// GroupState is what a host's data dir holds of a group.
type GroupState int

// The states of a stored group.
const (
	// GroupNotStarted: the group's replica never started — a bootstrap or
	// a join that stopped before its first write (its identity may be
	// recorded). StartGroup needs InitialMembers or Join again (else
	// ErrNoBootstrap); DeleteGroup removes it.
	GroupNotStarted GroupState = iota + 1
	// GroupMember: the data dir holds a replica of the group (its log,
	// vote or snapshot). StartGroup restarts it as that member.
	GroupMember
	// GroupRemoved: the replica here was removed from its group.
	// StartGroup refuses it (ErrRemoved); DeleteGroup makes room for a new
	// replica under a new member ID.
	GroupRemoved
)

// String returns the state's name.
func (s GroupState) String() string {
	switch s {
	case GroupNotStarted:
		return "not-started"
	case GroupMember:
		return "member"
	case GroupRemoved:
		return "removed"
	}
	return fmt.Sprintf("GroupState(%d)", int(s))
}

// Engine returns the host's storage engine (for metrics).
func (h *Host) Engine() *storage.Engine { return h.engine }

// Mux returns the host's peer listener (for metrics).
func (h *Host) Mux() *transport.Mux { return h.mux }

// Scheduler returns the goroutines that run the host's groups (for
// metrics: Scheduler.Stats).
func (h *Host) Scheduler() *raft.Scheduler { return h.sched }

// DeleteGroup deletes everything the host's data dir holds of group id
// (storage.Engine.DeleteGroup), so that the host can run a new replica of
// the group later under a new replica ID, once its replica here was
// removed from the group and learned it (Group.Done then reports
// raft.ErrRemoved, and the data dir records it). To move a replica to
// another host, add the new one there first, then remove this one, then
// delete its data.
//
// A group that never started (GroupNotStarted: no vote, log or snapshot
// recorded) is deleted too. The data of any other replica without the
// removal record is refused
// (ErrGroupNotRemoved): the group may still list it, and a replica whose
// data is lost must never start again under its ID (it would vote without
// what it acknowledged; see docs/operations.md, "Replacing a disk").
// ForceDeleteGroup deletes it anyway.
//
// Errors: ErrGroupNotRemoved; ErrGroupRunning (close the group first);
// ErrHostClosed; storage.ErrNoGroup; the storage's.
func (h *Host) DeleteGroup(id uint64) error { return h.deleteGroup(id, false) }

// ForceDeleteGroup is DeleteGroup without the check that the replica was
// removed: for a replica whose removal committed but that never learned
// it (it was down), or a data dir the operator knows to be abandoned.
// Never start the group again here under the same replica ID: a replica
// the group still lists must be removed from it first, and the new one
// added under a new ID.
//
// Errors: ErrGroupRunning; ErrHostClosed; storage.ErrNoGroup; the
// storage's.
func (h *Host) ForceDeleteGroup(id uint64) error { return h.deleteGroup(id, true) }

func (h *Host) deleteGroup(id uint64, force bool) error {
	if err := h.reserve(id); err != nil {
		return err
	}
	defer h.release(id, nil)
	if !force {
		removed, err := h.engine.GroupRemoved(id)
		if err != nil {
			return err
		}
		if !removed {
			// A replica that never started (GroupNotStarted: at most an
			// identity, no vote, log or snapshot) acknowledged nothing:
			// its records go as a refused start's do.
			info, err := h.engine.GroupInfo(id)
			if err == nil && !info.HasState {
				return h.engine.DeleteGroup(id)
			}
			return fmt.Errorf("%w: group %d in %s: remove the replica from the group first (RemoveMember), then delete its data; "+
				"ForceDeleteGroup if its removal committed while it was down", ErrGroupNotRemoved, id, h.cfg.DataDir)
		}
	}
	return h.engine.DeleteGroup(id)
}

// reserve claims group id for a deletion; release gives it up.
func (h *Host) reserve(id uint64) error { return h.reserveStart(id, nil) }

// reserveStart claims group id for a StartGroup call, whose context
// Close cancels (with ErrHostClosed as the cause); endStart ends the call.
// With a nil cancel it only claims the group (reserve).
func (h *Host) reserveStart(id uint64, cancel context.CancelCauseFunc) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrHostClosed
	}
	if _, ok := h.groups[id]; ok {
		return fmt.Errorf("%w: group %d", ErrGroupRunning, id)
	}
	h.groups[id] = nil
	if cancel == nil {
		return nil
	}
	h.starting[id] = cancel
	h.starts.Add(1)
	return nil
}

func (h *Host) endStart(id uint64) {
	h.mu.Lock()
	delete(h.starting, id)
	h.mu.Unlock()
	h.starts.Done()
}

func (h *Host) release(id uint64, g *Group) {
	h.mu.Lock()
	if g == nil || h.groups[id] == g {
		delete(h.groups, id)
	}
	h.mu.Unlock()
}

// started records a started group; false if the host closed meanwhile
// (the caller stops the group).
func (h *Host) started(id uint64, g *Group) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.groups[id] = g
	return true
}

// Close stops every group (each Group.Close: a leader hands leadership over
// first, bounded by ctx) and makes the StartGroup calls under way give up
// (they return ErrHostClosed), then closes the listener and the storage
// engine. A group whose state machine does not return within ctx finishes
// stopping in the background (Close's error then matches
// raft.ErrStopTimeout); the others are not held up by it. Close is
// idempotent.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.stopBalancer()
	h.mu.Lock()
	var gs []*Group
	for _, g := range h.groups {
		if g != nil {
			gs = append(gs, g)
		}
	}
	for _, cancel := range h.starting {
		cancel(ErrHostClosed)
	}
	h.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.close(ctx, false); err != nil && !errors.Is(err, raft.ErrRemoved) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("group %d: %w", g.gid, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The StartGroup calls under way return (their contexts are canceled)
	// once they have stopped what they started: wait for them within ctx.
	starts := make(chan struct{})
	go func() { h.starts.Wait(); close(starts) }()
	select {
	case <-starts:
	default:
		select {
		case <-starts:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%w: a StartGroup under way did not return: %w", raft.ErrStopTimeout, ctx.Err()))
		}
	}
	// The scheduler's goroutines exit once every node on it is done: a
	// node that did not stop within ctx (a state machine that does not
	// return) is waited for in the background only.
	if err := h.sched.CloseContext(ctx); err != nil && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, raft.ErrStopTimeout) }) {
		errs = append(errs, err)
	}
	errs = append(errs, h.mux.Close())
	// A group whose node did not stop in time closes its store once it
	// has; the engine waits for the stores' running calls.
	errs = append(errs, h.engine.Close())
	return errors.Join(errs...)
}

// Errors of a Host.
var (
	// ErrHostClosed: the host was closed.
	ErrHostClosed = errors.New("understudy: host closed")
	// ErrGroupRunning: StartGroup of a group the host runs already.
	ErrGroupRunning = errors.New("understudy: group already running on this host")
	// ErrGroupNotRemoved: DeleteGroup of a replica whose data dir does not
	// record its removal from the group (Host.ForceDeleteGroup deletes it
	// anyway).
	ErrGroupNotRemoved = errors.New("understudy: the replica's removal from the group is not recorded")
)
