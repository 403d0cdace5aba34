package transport

import (
	"bytes"
	"testing"

	"github.com/understudy-raft/understudy/internal/wire"
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

// readFrames runs a test inLink's reader over frames, its messages all
// for group 1 from member 2 to member 1 (admitted), handed to h.
func readFrames(frames []byte, h BatchHandler) *inLink {
	tr := &Transport{handler: h}
	key := attachKey{group: 1, from: 2, to: 1}
	il := &inLink{
		m:        &Mux{},
		r:        wire.NewReader(bytes.NewReader(frames), 1<<20),
		groups:   map[uint64]int{1: 1},
		admitted: map[attachKey]admission{key: {t: tr, p: &peer{t: tr, id: 2}}},
		passIdx:  make(map[*Transport]int),
	}
	il.m.ls.maxFrame = 1 << 20
	return il
}

// A host link reads the answers and heartbeats it gets (messages without
// entries: most of what it reads) into one payload buffer it reuses,
// allocating only the decoded message; a message with entries keeps its
// payload (its entries' data alias it), intact after later frames are
// read. Before, every frame's payload was a new allocation.
func TestInLinkReusesAnswerPayloads(t *testing.T) {
	const runs = 100
	answer := &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(4))}
	app := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)),
		Entries: []*raftpb.Entry{{Index: new(uint64(5)), Term: new(uint64(3)), Data: []byte("the entry's data")}}}
	var frames []byte
	var err error
	for range runs + 2 {
		if frames, err = wire.AppendMessageFrame(frames, 1, answer); err != nil {
			t.Fatal(err)
		}
	}
	h := &keepBatches{msgs: make([]*raftpb.Message, 0, runs+2)}
	il := readFrames(frames, h)
	next := func() {
		if err := il.next(); err != nil {
			t.Fatal(err)
		}
		il.deliver()
	}
	next()
	if n := testing.AllocsPerRun(runs, next); n != 1 {
		t.Fatalf("%.1f allocations per answer read, want 1 (the message)", n)
	}
	for _, m := range h.msgs {
		if m.GetType() != raftpb.MsgAppResp || m.GetIndex() != 4 || m.GetFrom() != 2 {
			t.Fatalf("an answer read back as %v", m)
		}
	}

	// Entries, then answers: the entries' data stays.
	frames = frames[:0]
	if frames, err = wire.AppendMessageFrame(frames, 1, app); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if frames, err = wire.AppendMessageFrame(frames, 1, answer); err != nil {
			t.Fatal(err)
		}
	}
	h = &keepBatches{}
	il = readFrames(frames, h)
	for range 4 {
		next()
	}
	if len(h.msgs) != 4 || string(h.msgs[0].GetEntries()[0].GetData()) != "the entry's data" {
		t.Fatalf("read back %d messages, the first's entries %v", len(h.msgs), h.msgs[0].GetEntries())
	}
}

// keepBatches is a BatchHandler that keeps the messages it is handed.
type keepBatches struct {
	fakeHandler
	msgs []*raftpb.Message
}

func (h *keepBatches) ProcessBatch(ms []*raftpb.Message) { h.msgs = append(h.msgs, ms...) }
