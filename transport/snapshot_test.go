package transport

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/understudy-raft/understudy/internal/wire"
)

// patternStore serves snapshots whose Data is "size=N" as N pattern bytes,
// and receives them by checksumming, without keeping them.
type patternStore struct {
	mu       sync.Mutex
	received []uint32 // CRC-32C of each file received
	recvErr  error    // returned by ReceiveSnapshot after reading
	gate     chan struct{}
	entered  chan struct{}
	onRead   func(total int64)
}

func snapSize(snap *raftpb.Snapshot) int64 {
	n, _ := strconv.ParseInt(strings.TrimPrefix(string(snap.GetData()), "size="), 10, 64)
	return n
}

func (s *patternStore) OpenSnapshot(snap *raftpb.Snapshot) (io.ReadCloser, int64, error) {
	n := snapSize(snap)
	return newPatternReader(n), n, nil
}

func (s *patternStore) ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	buf := make([]byte, 128<<10)
	var crc uint32
	var total int64
	for {
		n, err := r.Read(buf)
		crc = wire.CRC(crc, buf[:n])
		total += int64(n)
		if s.onRead != nil {
			s.onRead(total)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if total != snapSize(snap) {
		return fmt.Errorf("got %d bytes, descriptor says %d", total, snapSize(snap))
	}
	if s.recvErr != nil {
		return s.recvErr
	}
	s.mu.Lock()
	s.received = append(s.received, crc)
	s.mu.Unlock()
	return nil
}

func patternCRC(n int64) uint32 {
	var crc uint32
	r := newPatternReader(n)
	buf := make([]byte, 1<<20)
	for {
		k, err := r.Read(buf)
		crc = wire.CRC(crc, buf[:k])
		if err != nil {
			return crc
		}
	}
}

func snapMsg(from, to uint64, size int64) *raftpb.Message {
	return &raftpb.Message{
		Type: raftpb.MsgSnap.Enum(), From: u64(from), To: u64(to), Term: u64(3),
		Snapshot: &raftpb.Snapshot{
			Data: []byte(fmt.Sprintf("size=%d", size)),
			Metadata: &raftpb.SnapshotMetadata{Index: u64(100), Term: u64(3),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}},
		},
	}
}

func (h *fakeHandler) waitSnapReport(t *testing.T, id uint64) raft.SnapshotStatus {
	t.Helper()
	waitFor(t, "a snapshot report", func() bool { return len(h.snapReports()) > 0 })
	r := h.snapReports()[0]
	if r.id != id {
		t.Fatalf("snapshot report for %d, want %d", r.id, id)
	}
	return r.status
}

func TestSnapshotStreaming(t *testing.T) {
	for _, size := range []int64{0, 1, 1000, 3*DefaultSnapshotChunkSize + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ha, hb := &fakeHandler{}, &fakeHandler{}
			sa, sb := &patternStore{}, &patternStore{}
			a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = sa })
			b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
			connect(a, b)
			m := snapMsg(1, 2, size)
			a.Send([]*raftpb.Message{m})
			if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
				t.Fatalf("status %v", st)
			}
			// The message reached b, after its file was stored.
			got := hb.received()
			if len(got) != 1 || !proto.Equal(got[0], m) {
				t.Fatalf("b received %v", got)
			}
			if len(sb.received) != 1 || sb.received[0] != patternCRC(size) {
				t.Fatalf("stored files %x, want one with CRC %x", sb.received, patternCRC(size))
			}
			if s := a.Stats().Peers[0]; s.SnapshotsSent != 1 || s.SnapshotBytesSent != uint64(size) || s.SnapshotSendDuration.Count != 1 {
				t.Errorf("sender stats: %+v", s)
			}
			if s := b.Stats().Peers[0]; s.SnapshotsReceived != 1 || s.SnapshotBytesReceived != uint64(size) {
				t.Errorf("receiver stats: %+v", s)
			}
		})
	}
}

func TestSnapshotWithoutStore(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha)
	b := newTestTransport(t, 2, hb)
	connect(a, b)
	a.Send([]*raftpb.Message{snapMsg(1, 2, 12345)}) // the descriptor is just data here
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
		t.Fatalf("status %v", st)
	}
	waitFor(t, "MsgSnap delivered", func() bool { return hb.count() == 1 })
}

func TestSnapshotStoreFailure(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = &patternStore{} })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = &patternStore{recvErr: errors.New("disk full")} })
	connect(a, b)
	a.Send([]*raftpb.Message{snapMsg(1, 2, 100000)})
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFailure {
		t.Fatalf("status %v", st)
	}
	if hb.count() != 0 {
		t.Fatal("MsgSnap delivered although its file was not stored")
	}
	if s := a.Stats().Peers[0]; s.SnapshotsFailed != 1 {
		t.Errorf("sender stats: %+v", s)
	}
	if b.Stats().ConnErrors[ReasonSnapshotStore] != 1 {
		t.Errorf("receiver stats: %v", b.Stats())
	}
}

// A snapshot in flight delays neither heartbeats to the same peer nor
// traffic to others; a receiver at its snapshot limit refuses more.
func TestSnapshotIsolationAndBusy(t *testing.T) {
	ha, hb, hc := &fakeHandler{}, &fakeHandler{}, &fakeHandler{}
	sb := &patternStore{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = &patternStore{} })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb; c.MaxConcurrentSnapshots = 1 })
	c := newTestTransport(t, 3, hc, func(c *Config) { c.Snapshots = &patternStore{} })
	connect(a, b, c)

	a.Send([]*raftpb.Message{snapMsg(1, 2, 4<<20)})
	<-sb.entered // b's store is now stuck on a's snapshot

	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 2), heartbeat(1, 3)}, "heartbeats during the snapshot",
		func() bool { return hb.count() > 0 && hc.count() > 0 })

	c.Send([]*raftpb.Message{snapMsg(3, 2, 1000)})
	if st := hc.waitSnapReport(t, 2); st != raft.SnapshotFailure {
		t.Fatalf("second snapshot: %v", st)
	}
	if b.Stats().Refused[ReasonBusy] != 1 {
		t.Fatalf("busy refusal not counted: %v", b.Stats().Refused)
	}
	if hc.refusedWith(ErrBusy) {
		t.Fatal("busy reported as a refusal to the handler")
	}
	close(sb.gate)
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
		t.Fatalf("first snapshot: %v", st)
	}
}

// TestSnapshotLarge streams a file larger than the test's heap budget:
// generated on the fly by the sender, checksummed and discarded by the
// receiver, while the heap is sampled. 256 MiB, also under the race
// detector (the bulk of the work is copying and CRC-32C in assembly, which
// it does not slow: about a second on loopback); 16 MiB with -short.
func TestSnapshotLarge(t *testing.T) {
	size := int64(256 << 20)
	if testing.Short() {
		size = 16 << 20
	}
	budget := min(uint64(32<<20), uint64(size/2))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	var next int64
	sb := &patternStore{onRead: func(total int64) {
		if total < next {
			return
		}
		next = total + 4<<20
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}}
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = &patternStore{} })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
	connect(a, b)
	a.Send([]*raftpb.Message{snapMsg(1, 2, size)})
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
		t.Fatalf("status %v", st)
	}
	if len(sb.received) != 1 || sb.received[0] != patternCRC(size) {
		t.Fatalf("stored CRC %x, want %x", sb.received, patternCRC(size))
	}
	if peak > base+budget {
		t.Fatalf("heap grew by %d MiB streaming a %d MiB snapshot (budget %d MiB)", (peak-base)>>20, size>>20, budget>>20)
	}
	t.Logf("%d MiB streamed; heap peak %d MiB above the start", size>>20, (peak-min(peak, base))>>20)
}

func TestCloseDuringSnapshot(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	sb := &patternStore{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = &patternStore{} })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
	connect(a, b)
	a.Send([]*raftpb.Message{snapMsg(1, 2, 8<<20)})
	<-sb.entered
	if err := a.Close(); err != nil { // must not wait for the receiver
		t.Fatal(err)
	}
	if n := len(ha.snapReports()); n != 0 {
		t.Fatalf("%d snapshot reports after Close", n)
	}
	close(sb.gate) // b's store now reads a broken stream
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if hb.count() != 0 || len(sb.received) != 0 {
		t.Fatal("a cut snapshot was delivered or stored")
	}
}

func TestRemovePeerAbortsSnapshot(t *testing.T) {
	ha := &fakeHandler{}
	sb := &patternStore{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.Snapshots = &patternStore{} })
	b := newTestTransport(t, 2, &fakeHandler{}, func(c *Config) { c.Snapshots = sb })
	connect(a, b)
	a.Send([]*raftpb.Message{snapMsg(1, 2, 8<<20)})
	<-sb.entered
	a.RemovePeer(2)
	close(sb.gate)
	waitFor(t, "the snapshot sender to finish", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.conns) == 0
	})
	if n := len(ha.snapReports()); n != 0 {
		t.Fatalf("%d snapshot reports for a removed peer", n)
	}
}

// A rate-limited snapshot stream shows its progress while it runs, and
// arrives whole; the progress is cleared when it ends.
func TestSnapshotRateLimitAndProgress(t *testing.T) {
	ha, hb := &fakeHandler{}, &fakeHandler{}
	sa, sb := &patternStore{}, &patternStore{}
	const chunk, size = 64 << 10, 8 * 64 << 10
	a := newTestTransport(t, 1, ha, func(c *Config) {
		c.Snapshots, c.SnapshotChunkSize, c.SnapshotBytesPerSec = sa, chunk, 4*chunk // two seconds for the file
	})
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
	connect(a, b)
	m := snapMsg(1, 2, size)
	a.Send([]*raftpb.Message{m})
	waitFor(t, "progress part-way through the stream", func() bool {
		p := a.SnapshotProgress(2)
		return p.Index == m.GetSnapshot().GetMetadata().GetIndex() && p.Sent > 0 && p.Sent < p.Total && p.Total == size
	})
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
		t.Fatalf("status %v", st)
	}
	if len(sb.received) != 1 || sb.received[0] != patternCRC(size) {
		t.Fatalf("stored files %x, want one with CRC %x", sb.received, patternCRC(size))
	}
	if p := a.SnapshotProgress(2); p != (SnapshotProgress{}) {
		t.Fatalf("progress after the stream: %+v", p)
	}
}
