package raft

import (
	"context"
	"io"
	"time"

	"github.com/understudy-raft/understudy/confchange"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Storage is the durable state a Node needs: etcd raft's Storage (read side)
// plus the write side the node's append task calls. storage.Store
// implements it; tests wrap it to inject faults. Every method must be safe for
// concurrent use: the run loop reads the log while the append task
// writes, and the apply task snapshots and compacts.
type Storage interface {
	etcdraft.Storage

	// Save persists, in one atomic and durable write: snap (if non-empty, the
	// log up to it is discarded), then ents (a conflicting tail is
	// truncated), then hs (if non-empty).
	Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error
	// CreateSnapshot writes a local snapshot at index through write and
	// records it as the latest snapshot. It does not compact the log.
	CreateSnapshot(index uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error)
	// Compact discards the log up to and including index.
	Compact(index uint64) error
	// OpenSnapshot opens the data of snap for reading; the reader verifies its
	// checksum. size is its length in bytes.
	OpenSnapshot(snap *raftpb.Snapshot) (rc io.ReadCloser, size int64, err error)
	// ReceiveSnapshot durably stores the data of snap read from r (a snapshot
	// streamed by the leader), verifying it, before the MsgSnap is stepped.
	ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error
	// MarkRemoved durably records that this member was removed from the
	// cluster, so that it refuses to start again from this storage.
	MarkRemoved() error
}

// Transport carries raft messages between members. transport.Transport
// implements it; the in-process test cluster implements it over a
// fault-injecting network. Send must never block: a message that cannot be
// queued is dropped and the peer reported unreachable through the
// PeerHandler.
type Transport interface {
	// Send queues messages for their recipients. The messages are shared with
	// raft: the transport must not modify them.
	Send(msgs []*raftpb.Message)
	// AddPeer makes a member reachable at addr.
	AddPeer(id uint64, addr string)
	// UpdatePeer changes a member's address.
	UpdatePeer(id uint64, addr string)
	// RemovePeer forgets a member; its connections are refused from now on.
	RemovePeer(id uint64)
	// SetLearner tells the transport whether a known member is a learner
	// (learners get a smaller queue: a catching-up learner must not crowd
	// out the voters). The node calls it after AddPeer, whenever the
	// configuration changes however it arrives: a conf change, an installed
	// snapshot, a restart.
	SetLearner(id uint64, learner bool)
	// Call sends a member-to-member request to member to and returns the
	// answer of its PeerHandler.ServeRequest, waiting within ctx. The node
	// uses it to forward membership requests to the leader.
	// Call's error matches raftio.ErrNotSent when the request certainly
	// never reached the peer (a retry is then safe).
	Call(ctx context.Context, to uint64, req []byte) ([]byte, error)
}

// PeerHandler is what a Transport delivers to. Node.PeerHandler returns the
// node's; it has the method set transport.Handler requires.
type PeerHandler interface {
	// Process hands a received raft message to the node. A MsgSnap arrives
	// only after its data was stored with Storage.ReceiveSnapshot. It never
	// waits: the node queues the message for its run loop (beyond a bound,
	// it drops it; raft retransmits), so that a connection other groups
	// share is never held up by this one.
	Process(m *raftpb.Message)
	// ProcessBatch is Process for the messages one read got for the node:
	// its run loop is woken once.
	ProcessBatch(ms []*raftpb.Message)
	// ReportUnreachable tells raft that a message to id could not be sent.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells raft how sending a snapshot to id ended.
	ReportSnapshot(id uint64, status etcdraft.SnapshotStatus)
	// ServeRequest answers a member-to-member request from a peer.
	ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error)
	// ReportRefused tells the node that peer id refused its connection, and
	// why. The node acts on errors that match raftio.ErrRemoved (it was
	// removed: it stops for good) and raftio.ErrWiped (its data is not the
	// copy the peers knew: it stops with ErrReplicaWiped); any other is
	// logged.
	ReportRefused(id uint64, err error)
	// HostLiveness tells the node that the host member runs on turned live
	// or not live (transport.LivenessHandler); since is when it was last
	// heard. It never waits. The node counts it
	// (Status.HostLivenessReports) and, when quiesced (Config.Quiesce),
	// wakes if the host's death concerns its group;
	// LivenessTransport.HostContact is what Status and, while quiesced,
	// readiness and failover read.
	HostLiveness(member uint64, live bool, since time.Time)
}

// LivenessTransport is a Transport that knows whether the host each peer
// member runs on is live: one answer for every group there, from the
// host's own link (transport.Transport implements it). The node looks for
// it, as for the Transport's other optional methods; without it, Status
// says nothing of the peers' hosts.
type LivenessTransport interface {
	Transport
	// HostContact returns (now, true) while the host that member id runs
	// on is live, else when it was last heard and false; the zero time and
	// false when nothing is known of it.
	HostContact(id uint64) (at time.Time, live bool)
}

// Member is a member of the cluster as every member knows it: its ID, the
// address of its peer port and application metadata (e.g. its client URL).
// Members learn each other through the log: the records travel in the
// context of every configuration change.
type Member = confchange.Member
