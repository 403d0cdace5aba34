package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft/raftio"
)

// peerHandler is the node's side of the Transport.
type peerHandler struct{ n *Node }

// Process queues m for the loop without waiting: a connection that other
// groups share is never held up by this one (beyond a bound, messages are
// dropped; raft retransmits).
func (h peerHandler) Process(m *raftpb.Message) {
	if relayable(m) && h.n.answers.route.Load() != nil {
		h.n.answers.route.Store(nil) // a leader's message came directly
	}
	if h.n.recv.put(m) {
		h.n.loopTask.Signal()
	}
}

// ProcessBatch is Process for the messages one read got for this node: the
// loop is woken once.
func (h peerHandler) ProcessBatch(ms []*raftpb.Message) {
	h.n.noteDirect(ms)
	h.enqueue(ms)
}

// enqueue queues ms for the loop and wakes it.
func (h peerHandler) enqueue(ms []*raftpb.Message) {
	if h.n.recv.put(ms...) {
		h.n.loopTask.Signal()
	}
}

// enqueue1 is enqueue for one message.
func (h peerHandler) enqueue1(m *raftpb.Message) {
	if h.n.recv.put(m) {
		h.n.loopTask.Signal()
	}
}

func (h peerHandler) ReportUnreachable(id uint64) {
	if h.n.quiesced.Load() {
		return // nothing was in flight; the leader probes after its next wake
	}
	h.n.post(func() { h.n.loop.rn.ReportUnreachable(id); h.n.relayUnreachable(id) })
}

func (h peerHandler) ReportSnapshot(id uint64, status etcdraft.SnapshotStatus) {
	h.n.post(func() { h.n.reportSnapshot(id, status) })
}

func (h peerHandler) ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	return h.n.serveRequest(ctx, from, req)
}

// HostLiveness counts the report and, on a quiesced node, wakes what a
// dead host needs awake (quiesce.go). Status, readiness and failover read
// the hosts' liveness from the transport (LivenessTransport).
func (h peerHandler) HostLiveness(member uint64, live bool, since time.Time) {
	h.n.hostReports.Add(1)
	h.n.quiesceHostLiveness(member, live)
}

func (h peerHandler) ReportRefused(id uint64, err error) {
	if errors.Is(err, raftio.ErrRemoved) {
		// IDs are never reused: a member that knows this ID as removed is
		// right, even if this member missed its removal entry (it was down).
		// A joint change this member entered was left, then (changeWaiter).
		h.n.changes.resolveEntered()
		h.n.removed(fmt.Sprintf("member %d refused it as removed", id), 0)
		return
	}
	if errors.Is(err, raftio.ErrWiped) {
		h.n.wiped(fmt.Sprintf("member %d refused it: %v", id, err))
		return
	}
	// The transport logged it, once per peer host and reason: a warning
	// here too was the same event twice, and once per retry.
	h.n.log.Debug("peer refused our connection", slog.Uint64("peer", id), slog.Any("err", err))
	h.n.quiesceRefused(id)
}
