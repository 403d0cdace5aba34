package transport

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// passCounter is a BatchHandler that counts what it is handed.
type passCounter struct {
	fakeHandler
	msgs, batches int
}

func (h *passCounter) ProcessBatch(ms []*raftpb.Message) { h.batches++; h.msgs += len(ms) }

// A host link's read pass hands each group its messages in a slice it
// reuses for the next passes: a pass of two groups' messages allocates
// nothing once the link has run one (it allocated a slice per group per
// pass before), and every message is still handed over, once.
func TestInLinkPassReusesItsBuffers(t *testing.T) {
	h1, h2 := &passCounter{}, &passCounter{}
	t1, t2 := &Transport{handler: h1}, &Transport{handler: h2}
	il := &inLink{passIdx: make(map[*Transport]int)}
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum()}
	pass := func() {
		il.add(t1, m, 10)
		il.add(t2, m, 10)
		il.add(t1, m, 10)
		il.deliver()
	}
	pass()
	if n := testing.AllocsPerRun(100, pass); n != 0 {
		t.Fatalf("%.1f allocations per read pass, want 0", n)
	}
	if h1.batches != 102 || h1.msgs != 204 || h2.batches != 102 || h2.msgs != 102 {
		t.Fatalf("handed over %d batches of %d messages and %d of %d, want 102 of 204 and 102 of 102",
			h1.batches, h1.msgs, h2.batches, h2.msgs)
	}
}
