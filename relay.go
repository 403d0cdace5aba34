package understudy

import (
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/transport"
)

// A group's transport carries relay envelopes (raft.Config.Relay) to its
// node.
var (
	_ transport.RelayHandler = (*lateHandler)(nil)
	_ raft.RelayTransport    = (*transport.Transport)(nil)
)

// ProcessRelay hands env to the node, once it exists (before, it is
// dropped: raft resends).
func (l *lateHandler) ProcessRelay(from uint64, env *raft.RelayEnvelope) {
	if h, ok := l.get().(raft.RelayHandler); ok {
		h.ProcessRelay(from, env)
	}
}
