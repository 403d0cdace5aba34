package understudy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/transport"
)

// The host's transport tells its groups of their peers' hosts' liveness,
// both ways: reports (LivenessHandler) and on request (HostContact).
var (
	_ transport.LivenessHandler = (*lateHandler)(nil)
	_ raft.LivenessTransport    = (*transport.Transport)(nil)
)

// lateHandler is the transport's Handler until the node exists.
type lateHandler struct {
	// n is the node once made: an atomic pointer, not a locked handler,
	// so that each of a host's many groups keeps 8 bytes for it (48 with a
	// lock and an interface) and a message's delivery takes no lock.
	n atomic.Pointer[raft.Node]
}

func (l *lateHandler) set(n *raft.Node) { l.n.Store(n) }

// get returns the node's PeerHandler, nil before the node is made.
func (l *lateHandler) get() raft.PeerHandler {
	if n := l.n.Load(); n != nil {
		return n.PeerHandler()
	}
	return nil
}

func (l *lateHandler) Process(m *raftpb.Message) {
	if h := l.get(); h != nil {
		h.Process(m)
	}
}

func (l *lateHandler) ProcessBatch(ms []*raftpb.Message) {
	if h := l.get(); h != nil {
		h.ProcessBatch(ms)
	}
}

func (l *lateHandler) ReportUnreachable(id uint64) {
	if h := l.get(); h != nil {
		h.ReportUnreachable(id)
	}
}

func (l *lateHandler) ReportSnapshot(id uint64, st etcdraft.SnapshotStatus) {
	if h := l.get(); h != nil {
		h.ReportSnapshot(id, st)
	}
}

func (l *lateHandler) ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	if h := l.get(); h != nil {
		return h.ServeRequest(ctx, from, req)
	}
	return nil, errors.New("understudy: member starting")
}

func (l *lateHandler) ReportRefused(id uint64, err error) {
	if h := l.get(); h != nil {
		h.ReportRefused(id, err)
	}
}

func (l *lateHandler) HostLiveness(member uint64, live bool, since time.Time) {
	if h := l.get(); h != nil {
		h.HostLiveness(member, live, since)
	}
}
