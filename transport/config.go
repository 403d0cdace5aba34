package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// Handler receives what the transport delivers. Its methods are called
// from the transport's goroutines, possibly concurrently, and never from
// within Send; they must not block for long (hand work to the raft loop
// through a channel).
//
// A host link carries every group's messages from a peer host: it never
// waits for one group. A Handler that is not a BatchHandler gets its
// messages through a bounded inbox of its own, drained by a goroutine that
// calls Process (and runs only while the inbox holds messages): a Process
// that blocks only delays its own group, and what does not fit in the
// inbox (MaxQueueMessages, MaxQueueBytes) is dropped and counted
// (Stats.DroppedReceiveQueueFull), as a lossy network would.
type Handler interface {
	// Process delivers a raft message received from a peer. Ownership
	// passes to the handler: the transport keeps no reference. A MsgSnap is
	// delivered only after SnapshotStore.ReceiveSnapshot stored its file.
	// It should not block: see BatchHandler.
	Process(m *raftpb.Message)
	// ReportUnreachable tells raft a message to the member was dropped (its
	// queue was full or its connection down), so raft probes it again.
	ReportUnreachable(id uint64)
	// ReportSnapshot reports the outcome of a MsgSnap sent to the member:
	// raft.SnapshotFinish once the peer stored the file and accepted the
	// message, raft.SnapshotFailure otherwise.
	ReportSnapshot(id uint64, status raft.SnapshotStatus)
	// ServeRequest answers a Call from member from. ctx ends with the
	// caller's deadline (capped by MaxRequestDuration), when the member is
	// removed, or when the transport closes. An error is sent back as text (the caller gets a *RemoteError).
	ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error)
	// ReportRefused reports that the member refused one of our
	// connections; err is a *RefusedError matching ErrRemoved,
	// ErrClusterMismatch, ErrUnknownSender, ErrWrongReceiver, ErrVersion,
	// ErrGroupMismatch or ErrBadHello. It is called on every refused
	// attempt of the raft stream and of snapshots (not for Call, whose
	// caller gets the error), so the node can react, e.g. stop when removed.
	// Only ErrRemoved and ErrWiped are final: ErrUnknownSender is normal
	// for a moment while members add each other, and the transport keeps
	// retrying.
	ReportRefused(id uint64, err error)
}

// BatchHandler is a Handler that takes the messages a host link read for
// its group in one pass at once: each group is handed what arrived for it
// once per read, directly from the link's reader goroutine, with no inbox
// and no goroutine of its own.
//
// ProcessBatch must not block: the link's reader waits for it, and so do
// the messages of every other group from that peer host. A handler that
// cannot take the messages now drops them (raft resends), as a lossy
// network would. Ownership of ms's messages passes to the handler, not of
// ms itself: the link reuses the slice once ProcessBatch returns (copy what
// is kept).
// Messages of a member's own raft stream (a member of the previous
// release) and MsgSnap still arrive through Process.
type BatchHandler interface {
	Handler
	ProcessBatch(ms []*raftpb.Message)
}

// LivenessHandler is a Handler told when the host a peer member runs on
// turns live or not live (see Config.LivenessTimeout): the liveness of a
// host link, which every group's members on that host share.
//
// HostLiveness is called once for each of the group's members on that
// host when its attachment joins a link to a live host, then at each
// change, from the link's goroutines, and must not block:
// a host's change reaches every group there in turn. since is the pong
// that made the host live, or, for a host no longer live, its last pong
// (the last moment it was known live). Transport.HostContact says the
// same at any time. A member on a fallback stream (a host of an earlier
// release) is never reported.
type LivenessHandler interface {
	Handler
	HostLiveness(member uint64, live bool, since time.Time)
}

// SnapshotStore reads and writes the snapshot files that travel beside
// MsgSnap. The raft snapshot's Data is a small descriptor of the file
// (name, size, checksum: the store's business); the transport streams the
// file itself in checksummed chunks and never holds it whole in memory.
type SnapshotStore interface {
	// OpenSnapshot opens, on the sender, the file snap describes and returns
	// its size in bytes (0 and an empty reader for an empty snapshot). The
	// transport reads exactly size bytes and closes the reader.
	OpenSnapshot(snap *raftpb.Snapshot) (io.ReadCloser, int64, error)
	// ReceiveSnapshot stores, on the receiver, the file streamed for snap:
	// it should write r to a temporary file, verify it against snap's
	// descriptor, sync and rename it, and return nil only once the file is
	// durable. r returns io.EOF after the last byte once the transport has
	// verified the stream's size and CRC-32C, and an error (never io.EOF) if
	// the stream breaks or is corrupt; the store should read r to io.EOF.
	ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error
}

// Config configures a Transport. The zero value of every tuning field
// means its default; WithDefaults shows them.
type Config struct {
	// ID is this member's ID. Required, not 0.
	ID uint64
	// ClusterID is the cluster this member belongs to. 0 for a joiner that
	// has not learned it yet: then only CallAddr works and inbound raft and
	// snapshot connections are refused, until SetClusterID.
	ClusterID uint64
	// GroupID is the raft group, carried in the handshake and every frame
	// header. Default 1; reserved for many groups per process.
	GroupID uint64

	// Mux, when set, is the host's peer listener, shared with the
	// transports of its other groups (NewMux): the transport registers its
	// GroupID there and serves the connections whose hello names it.
	// Listener and ListenAddr are then unset, and TLS is used to dial (the
	// mux serves with its own: give both the same). Close leaves the Mux
	// open. The transports of a Mux configured alike share one copy of
	// their Config's settings.
	Mux *Mux
	// Listener is the listener the transport serves peers on; it is closed
	// by Close. Without a Mux, exactly one of Listener and ListenAddr must be
	// set.
	Listener net.Listener
	// ListenAddr is a TCP host:port to listen on, if Listener is nil.
	ListenAddr string
	// AdvertiseAddr is the address the other members dial to reach this
	// one (its host's advertised peer address). It travels in the
	// attachments of the host links, so that a host that moved is dialed at
	// its new address by every group of every peer host at once (see
	// Mux.Addresses; learned only from a host that sends its host ID,
	// MuxConfig.HostID). Empty: not sent (Transport.SetAdvertiseAddr sets
	// it later).
	AdvertiseAddr string
	// TLS, when set, wraps every connection in TLS with this configuration,
	// used both to serve and to dial (see NewMutualTLS). nil is plain TCP.
	TLS *tls.Config
	// Incarnation is this member's incarnation (storage.Identity's: which
	// copy of its data it runs from), presented in every hello and
	// attachment so that its peers can refuse it once they recorded
	// another one for its ID (SetPeerIncarnation). 0: none
	// (SetIncarnation sets it later). A host wiring storage, transport and
	// node by hand sets it from the store's Identity before the transport
	// dials anyone: a peer that recorded the member's incarnation refuses
	// an attachment presenting none (0) as wiped, and the node stops on
	// that refusal (raft.ErrReplicaWiped). understudy.Host does so.
	Incarnation uint64

	// Handler receives messages, reports and requests. Required.
	Handler Handler
	// Snapshots streams snapshot files. nil means snapshots have no file:
	// a MsgSnap is sent with an empty stream, and one that arrives with a
	// non-empty stream is refused.
	Snapshots SnapshotStore
	// Logger receives the transport's logs. nil discards them.
	Logger *slog.Logger

	// Peers (member ID → host:port) and Removed are known before the first
	// connection is accepted, as if given to AddPeer and RemovePeer right
	// after New: a restarted member accepts its peers, and refuses removed
	// members as removed, from the first moment.
	Peers   map[uint64]string
	Removed []uint64
	// PeerIncarnations are the peers' recorded incarnations, known before
	// the first connection is accepted, as if given to SetPeerIncarnation
	// right after New.
	PeerIncarnations map[uint64]uint64

	// MaxQueueMessages is the capacity, in messages, of each peer's outgoing
	// queue; a message that does not fit is dropped. Default 4096.
	MaxQueueMessages int
	// MaxQueueBytes is the byte budget of a voter's outgoing queue,
	// counting entry data, context and snapshot descriptors plus a small
	// allowance per message (wire.MessageSize). A message is always
	// accepted into an empty queue. Default 64 MiB.
	MaxQueueBytes int64
	// MaxLearnerQueueBytes is MaxQueueBytes for learners (see SetLearner),
	// so that a learner catching up cannot take the leader's memory and
	// bandwidth from the voters. Default 8 MiB.
	MaxLearnerQueueBytes int64
	// LearnerBatchDelay is how long messages to a learner are gathered
	// before they are written, counted from the previous write to it; the
	// appends gathered are merged into one (contiguous MsgApps of one
	// term). A learner is not in the quorum, so its acknowledgements cost
	// no write any latency: it then syncs its log, and the leader encodes
	// and sends, once per delay rather than once per leader batch, and a
	// learner on the same machine or disk as voters takes far less of
	// their time. The cost is the learner's replication lag, by up to the
	// delay. A read answer (MsgReadIndexResp) is written at once, and so is
	// a queue holding more than 1 MiB (or a quarter of
	// MaxLearnerQueueBytes). Default 10ms; negative: no gathering.
	LearnerBatchDelay time.Duration
	// MaxFrameSize is the largest frame payload, in bytes, this member
	// sends or accepts; a message larger than this is dropped. It must
	// exceed raft's MaxSizePerMsg plus the largest command, and be the
	// same on every member: a message over the limit a peer's host says
	// in its hello reply is dropped as well (counted in
	// PeerStats.DroppedTooLarge, and logged), never sent to break the
	// link. Default 64 MiB; at least 64 KiB.
	MaxFrameSize int
	// SnapshotChunkSize is the size, in bytes, of the chunks a snapshot
	// file is streamed in. Default 256 KiB, or MaxFrameSize if smaller;
	// at most MaxFrameSize.
	SnapshotChunkSize int
	// MaxConcurrentSnapshots bounds the snapshots sent at once (further
	// MsgSnaps wait their turn) and, separately, those received at once
	// (further ones are refused as busy and retried by raft). Default 2.
	// On a shared Mux the host's budget applies instead (MuxConfig).
	MaxConcurrentSnapshots int
	// SnapshotBytesPerSec bounds the rate, in bytes per second, of all the
	// snapshot streams this member sends together (0: no limit). A leader
	// that streams a large snapshot to a catching-up learner uses disk
	// reads, CPU and bandwidth its voters' appends need: the limit keeps
	// that cost bounded, at the price of a longer catch-up. On a shared Mux
	// the host's budget applies instead (MuxConfig).
	SnapshotBytesPerSec int64
	// LearnerSnapshotBytesPerSec, when positive, paces each snapshot
	// stream to a learner (see SetLearner) to at most this many bytes per
	// second, spread evenly: a chunk (SnapshotChunkSize) at a time, never
	// a burst. A learner is not in the quorum, so a slower stream to it
	// delays no write, and the leader reads, checksums and sends the file
	// over a longer time. Off by default (0 or negative): measured on one
	// machine with the learner in its own process, a 100 MB join paced at
	// 64 MiB/s took 2.3 s instead of 0.7-0.9 s and the leader's writers
	// did worse, not better (p99 over the join 1.3-1.65x of steady
	// against 1.0-1.1x): the stream is not what they wait for, and a
	// longer join is longer trouble (docs/architecture.md "Pacing a
	// join"). Set it where the link is narrow and shared with the voters'
	// appends; keep it well above the rate at which the group writes its
	// log (in bytes): the entries written while a snapshot streams are
	// what the learner replays after it, and a stream outrun by the
	// leader's next snapshot and compaction would have to start again. It
	// applies with SnapshotBytesPerSec (or a shared Mux's budget),
	// whichever is slower.
	LearnerSnapshotBytesPerSec int64

	// DialTimeout bounds establishing a TCP connection. Default 5s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds the TLS handshake and the hello exchange on
	// both sides: a peer that connects and stays silent is cut off after
	// it. Default 5s.
	HandshakeTimeout time.Duration
	// ReadTimeout is the longest an established connection may stay
	// silent while the transport waits to read; pings (every PingInterval)
	// keep healthy idle streams well within it. Default 15s; at least twice
	// PingInterval.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write to a peer, so a peer that stops
	// reading cannot stall its sender. Default 10s.
	WriteTimeout time.Duration
	// PingInterval is how often the link to each peer host is pinged, for
	// liveness and round-trip time. Default 1s. This and the other
	// settings of connections (DialTimeout, ReadTimeout, WriteTimeout,
	// MinBackoff, MaxBackoff) apply to the host links of a private Mux; on
	// a shared one, the MuxConfig's do (and these to snapshots, requests,
	// and a group's re-attachments after a refusal).
	PingInterval time.Duration
	// LivenessTimeout is how late the last pong on the link to a peer host
	// may be before that host is no longer live (see Transport.HostContact
	// and LivenessHandler): a host is live while its link is connected and
	// answered a ping within LivenessTimeout, and not live once no pong came
	// for that long, or the link broke and the next dial failed (a link that
	// breaks and redials at once stays live). Default 3 × PingInterval; at
	// least twice PingInterval. It applies to the host links of a private
	// Mux; on a shared one, the MuxConfig's does.
	LivenessTimeout time.Duration
	// SnapshotAckTimeout is how long the sender of a snapshot waits, after
	// the last byte, for the receiver to store it. Default 1 minute.
	SnapshotAckTimeout time.Duration
	// MaxRequestDuration bounds ServeRequest's context on the serving side
	// when the caller set no shorter deadline. Default 30s.
	MaxRequestDuration time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection attempts
	// to a peer; the wait doubles from MinBackoff up to MaxBackoff, with
	// jitter. Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration

	// protocol overrides the protocol versions spoken (zero: wire.MinVersion
	// to wire.MaxVersion), for tests that play a member of another version.
	protocol [2]uint16
}

// versions returns the lowest and highest protocol versions spoken.
func (c *Config) versions() (lo, hi uint16) {
	if c.protocol != [2]uint16{} {
		return c.protocol[0], c.protocol[1]
	}
	return wire.MinVersion, wire.MaxVersion
}

// Defaults of the tuning fields.
const (
	DefaultGroupID                = 1
	DefaultMaxQueueMessages       = 4096
	DefaultMaxQueueBytes          = 64 << 20
	DefaultMaxLearnerQueueBytes   = 8 << 20
	DefaultLearnerBatchDelay      = 10 * time.Millisecond
	DefaultMaxFrameSize           = 64 << 20
	DefaultSnapshotChunkSize      = 256 << 10
	DefaultMaxConcurrentSnapshots = 2
	DefaultDialTimeout            = 5 * time.Second
	DefaultHandshakeTimeout       = 5 * time.Second
	DefaultReadTimeout            = 15 * time.Second
	DefaultWriteTimeout           = 10 * time.Second
	DefaultPingInterval           = time.Second
	// DefaultLivenessPings is LivenessTimeout's default, in PingIntervals.
	DefaultLivenessPings      = 3
	DefaultSnapshotAckTimeout = time.Minute
	DefaultMaxRequestDuration = 30 * time.Second
	DefaultMinBackoff         = 100 * time.Millisecond
	DefaultMaxBackoff         = 5 * time.Second

	minFrameSize = 64 << 10
	maxFrameSize = 1 << 30
)

// WithDefaults returns a copy of c with every zero tuning field set to its
// default and a nil Logger set to a discarding one.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.GroupID == 0 {
		c.GroupID = DefaultGroupID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def(&c.MaxQueueMessages, DefaultMaxQueueMessages)
	def64(&c.MaxQueueBytes, DefaultMaxQueueBytes)
	def64(&c.MaxLearnerQueueBytes, DefaultMaxLearnerQueueBytes)
	defDur(&c.LearnerBatchDelay, DefaultLearnerBatchDelay)
	def(&c.MaxFrameSize, DefaultMaxFrameSize)
	if c.SnapshotChunkSize == 0 && c.MaxFrameSize > 0 {
		c.SnapshotChunkSize = min(DefaultSnapshotChunkSize, c.MaxFrameSize)
	}
	def(&c.MaxConcurrentSnapshots, DefaultMaxConcurrentSnapshots)
	defDur(&c.DialTimeout, DefaultDialTimeout)
	defDur(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	defDur(&c.ReadTimeout, DefaultReadTimeout)
	defDur(&c.WriteTimeout, DefaultWriteTimeout)
	defDur(&c.PingInterval, DefaultPingInterval)
	defDur(&c.LivenessTimeout, DefaultLivenessPings*c.PingInterval)
	defDur(&c.SnapshotAckTimeout, DefaultSnapshotAckTimeout)
	defDur(&c.MaxRequestDuration, DefaultMaxRequestDuration)
	defDur(&c.MinBackoff, DefaultMinBackoff)
	defDur(&c.MaxBackoff, DefaultMaxBackoff)
	return c
}

// Validate reports every problem with c (with defaults applied), each
// naming the field and its value and wrapping ErrInvalidConfig. It does
// not modify c.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.ID == 0 {
		bad("ID must not be 0")
	}
	if c.Handler == nil {
		bad("Handler is required")
	}
	switch {
	case c.Mux != nil && (c.Listener != nil || c.ListenAddr != ""):
		bad("Mux and Listener or ListenAddr are both set (the Mux listens)")
	case c.Mux != nil:
	case c.Listener == nil && c.ListenAddr == "":
		bad("one of Listener and ListenAddr is required")
	case c.Listener != nil && c.ListenAddr != "":
		bad("Listener and ListenAddr (%q) are both set", c.ListenAddr)
	}
	nonNeg := func(name string, v int64) {
		if v < 0 {
			bad("%s (%d) must not be negative", name, v)
		}
	}
	nonNeg("MaxQueueMessages", int64(c.MaxQueueMessages))
	nonNeg("MaxQueueBytes", c.MaxQueueBytes)
	nonNeg("MaxLearnerQueueBytes", c.MaxLearnerQueueBytes)
	nonNeg("MaxFrameSize", int64(c.MaxFrameSize))
	nonNeg("SnapshotChunkSize", int64(c.SnapshotChunkSize))
	nonNeg("MaxConcurrentSnapshots", int64(c.MaxConcurrentSnapshots))
	nonNeg("SnapshotBytesPerSec", c.SnapshotBytesPerSec)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", c.DialTimeout}, {"HandshakeTimeout", c.HandshakeTimeout},
		{"ReadTimeout", c.ReadTimeout}, {"WriteTimeout", c.WriteTimeout},
		{"PingInterval", c.PingInterval}, {"LivenessTimeout", c.LivenessTimeout}, {"SnapshotAckTimeout", c.SnapshotAckTimeout},
		{"MaxRequestDuration", c.MaxRequestDuration},
		{"MinBackoff", c.MinBackoff}, {"MaxBackoff", c.MaxBackoff},
	} {
		if d.v < 0 {
			bad("%s (%v) must not be negative", d.name, d.v)
		}
	}
	d := c.WithDefaults()
	if d.MaxFrameSize > 0 && (d.MaxFrameSize < minFrameSize || d.MaxFrameSize > maxFrameSize) {
		bad("MaxFrameSize (%d) must be between %d and %d", d.MaxFrameSize, minFrameSize, maxFrameSize)
	}
	if d.SnapshotChunkSize > d.MaxFrameSize {
		bad("SnapshotChunkSize (%d) must not exceed MaxFrameSize (%d)", d.SnapshotChunkSize, d.MaxFrameSize)
	}
	if d.PingInterval > 0 && d.ReadTimeout > 0 && d.ReadTimeout < 2*d.PingInterval {
		bad("ReadTimeout (%v) must be at least twice PingInterval (%v)", d.ReadTimeout, d.PingInterval)
	}
	if d.PingInterval > 0 && d.LivenessTimeout > 0 && d.LivenessTimeout < 2*d.PingInterval {
		bad("LivenessTimeout (%v) must be at least twice PingInterval (%v): one late pong is no death", d.LivenessTimeout, d.PingInterval)
	}
	if d.MinBackoff > d.MaxBackoff {
		bad("MinBackoff (%v) must not exceed MaxBackoff (%v)", d.MinBackoff, d.MaxBackoff)
	}
	return errors.Join(errs...)
}

// nopHandler is a Handler that does nothing, for validating settings.
type nopHandler struct{}

func (nopHandler) Process(*raftpb.Message)                    {}
func (nopHandler) ReportUnreachable(uint64)                   {}
func (nopHandler) ReportSnapshot(uint64, raft.SnapshotStatus) {}
func (nopHandler) ReportRefused(uint64, error)                {}
func (nopHandler) ServeRequest(context.Context, uint64, []byte) ([]byte, error) {
	return nil, nil
}
