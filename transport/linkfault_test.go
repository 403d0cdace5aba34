package transport

import (
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestLinkFlowInDebtIsScheduledAgain: a flow that wrote one message larger
// than two quanta (a catch-up append) is in debt for more than a round; as
// long as another flow shares the writer's rounds it sits them out while
// its debt is repaid, then writes again. It used to be dropped from the
// rounds for good (its queue marked as on the active list, so that no send
// put it back): its messages piled up while the link stayed up.
func TestLinkFlowInDebtIsScheduledAgain(t *testing.T) {
	seq := &atomic.Int64{}
	recv, send := newTestMux(t), newTestMux(t)
	g := newGate(t, recv.Addr().String())
	g.hold()
	hr := map[uint64]*batchHandler{}
	st := map[uint64]*Transport{}
	for _, grp := range []uint64{1, 2} {
		hr[grp] = &batchHandler{seq: seq}
		groupOn(t, recv, grp, 2, hr[grp]).AddPeer(1, send.Addr().String())
		st[grp] = groupOn(t, send, grp, 1, &fakeHandler{})
		st[grp].AddPeer(2, g.addr())
	}
	// Queued while the handshake is held, so that the writer's first round
	// sees both flows: group 1 a message of more than three quanta and a
	// heartbeat behind it, group 2 a backlog of several rounds.
	q := send.quantum
	st[1].Send([]*raftpb.Message{appMsg(1, 2, 1, 3*q+q/2), heartbeat(1, 2)})
	const backlog = 40
	var msgs []*raftpb.Message
	for i := uint64(1); i <= backlog; i++ {
		msgs = append(msgs, appMsg(1, 2, i, q/2))
	}
	st[2].Send(msgs)
	g.release()
	waitFor(t, "group 2's backlog delivered", func() bool { return hr[2].count() == backlog })
	waitFor(t, "group 1's heartbeat behind its large append delivered", func() bool { return hr[1].count() == 2 })
	// And the flow goes on: a later message is written too.
	st[1].Send([]*raftpb.Message{heartbeat(1, 2)})
	waitFor(t, "group 1's next message delivered", func() bool { return hr[1].count() == 3 })
}
