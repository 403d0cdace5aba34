package transport

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/understudy-raft/understudy/internal/wire"
)

// The transport calls its Handler from goroutines it starts on demand and
// that end when idle: a group has none while nothing happens. A shared
// link's reader never waits for a group: it hands a BatchHandler its
// messages directly (ProcessBatch must not block), and queues them for a
// plain Handler, whose Process may block, in the group's bounded inbox.

// deliver hands the messages one read pass of a host link got for this
// group to the handler. It never blocks on the handler... unless the
// handler's ProcessBatch does.
func (t *Transport) deliver(msgs []*raftpb.Message) {
	if hasRelayCarrier(msgs) {
		t.deliverRelayed(msgs)
		return
	}
	if bh, ok := t.handler.(BatchHandler); ok {
		t.hmu.RLock()
		if !t.hclosed {
			bh.ProcessBatch(msgs)
		}
		t.hmu.RUnlock()
		return
	}
	t.inbox.push(t, msgs)
}

// inbox holds received messages for a plain Handler's Process, called
// from a goroutine that runs while the inbox is not empty.
type inbox struct {
	mu      sync.Mutex
	q       []*raftpb.Message
	bytes   int64
	running bool
	closed  bool
	dropped uint64 // messages dropped for a full inbox
}

func (in *inbox) push(t *Transport, msgs []*raftpb.Message) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	for _, m := range msgs {
		size := int64(wire.MessageSize(m))
		if len(in.q) >= t.cfg.MaxQueueMessages || (len(in.q) > 0 && in.bytes+size > t.cfg.MaxQueueBytes) {
			in.dropped++ // a lossy network, as raft expects: the sender resends
			continue
		}
		in.q = append(in.q, m)
		in.bytes += size
	}
	start := !in.running && len(in.q) > 0
	if start {
		in.running = true
		t.wg.Add(1)
	}
	in.mu.Unlock()
	if start {
		go in.drain(t)
	}
}

func (in *inbox) drain(t *Transport) {
	defer t.wg.Done()
	var batch []*raftpb.Message
	for {
		in.mu.Lock()
		if len(in.q) == 0 || in.closed {
			in.running = false
			in.q, in.bytes = nil, 0
			in.mu.Unlock()
			return
		}
		batch, in.q, in.bytes = in.q, batch[:0], 0
		in.mu.Unlock()
		for i, m := range batch {
			t.handler.Process(m)
			batch[i] = nil
		}
	}
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
}

func (in *inbox) droppedCount() uint64 {
	if in == nil {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.dropped
}

// events runs the transport's reports to the Handler (unreachable peers,
// refusals) in order, on a goroutine that runs while there are some, so
// that neither Send nor a shared link's goroutines ever wait for the
// Handler. Unreachable peers are reported once per batch.
type events struct {
	mu          sync.Mutex
	unreachable map[uint64]struct{}
	fns         []func()
	running     bool
	closed      bool
}

// markUnreachable reports member id to Handler.ReportUnreachable soon.
func (t *Transport) markUnreachable(id uint64) {
	e := &t.events
	e.mu.Lock()
	if e.unreachable == nil {
		e.unreachable = make(map[uint64]struct{})
	}
	e.unreachable[id] = struct{}{}
	start := e.startLocked(t)
	e.mu.Unlock()
	if start {
		go e.run(t)
	}
}

// report runs f (a Handler call) soon, after the reports queued before it.
func (t *Transport) report(f func()) {
	e := &t.events
	e.mu.Lock()
	e.fns = append(e.fns, f)
	start := e.startLocked(t)
	e.mu.Unlock()
	if start {
		go e.run(t)
	}
}

// startLocked reports whether the caller must start the goroutine.
func (e *events) startLocked(t *Transport) bool {
	if e.running || e.closed {
		return false
	}
	e.running = true
	t.wg.Add(1)
	return true
}

func (e *events) run(t *Transport) {
	defer t.wg.Done()
	for {
		e.mu.Lock()
		ids, fns := e.unreachable, e.fns
		e.unreachable, e.fns = nil, nil
		if e.closed || (len(ids) == 0 && len(fns) == 0) {
			e.running = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		for _, f := range fns {
			if t.closing.Load() {
				break
			}
			f()
		}
		for id := range ids {
			if t.closing.Load() {
				break
			}
			t.handler.ReportUnreachable(id)
		}
	}
}

func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}
