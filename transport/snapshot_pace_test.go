package transport

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestLearnerSnapshotPaced streams a snapshot of 8 chunks to a learner
// paced at 4 chunks a second, and checks at each read of the receiving
// store that no more arrived than the pace allows since the send (one
// chunk of slack): a bound a slow machine can only stay further within.
// Unpaced, the whole file arrives within milliseconds.
func TestLearnerSnapshotPaced(t *testing.T) {
	const chunk = 16 << 10
	const size = 8 * chunk
	const perSec = 4 * chunk
	var (
		mu      sync.Mutex
		start   time.Time
		over    []string
		samples int
	)
	sb := &patternStore{onRead: func(total int64) {
		mu.Lock()
		defer mu.Unlock()
		samples++
		el := time.Since(start)
		if allowed := chunk + int64(el.Seconds()*perSec); total > allowed {
			over = append(over, time.Duration(el).Round(time.Millisecond).String())
		}
	}}
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) {
		c.Snapshots = &patternStore{}
		c.SnapshotChunkSize = chunk
		c.LearnerSnapshotBytesPerSec = perSec
	})
	b := newTestTransport(t, 2, hb, func(c *Config) { c.Snapshots = sb })
	connect(a, b)
	a.SetLearner(2, true)
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	a.Send([]*raftpb.Message{snapMsg(1, 2, size)})
	if st := ha.waitSnapReport(t, 2); st != raft.SnapshotFinish {
		t.Fatalf("status %v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(over) > 0 {
		t.Errorf("the learner's snapshot arrived faster than %d bytes/s (after one chunk) at %d of %d reads, at %v after the send", perSec, len(over), samples, over)
	}
	if s := a.Stats().Peers[0]; s.SnapshotBytesSent != size {
		t.Errorf("sent %d bytes, want %d", s.SnapshotBytesSent, size)
	}
}

// TestLearnerPacer: pacing is off by default; when set, only a learner's
// stream is paced, never in bursts of more than a chunk, and a negative
// rate turns it off.
func TestLearnerPacer(t *testing.T) {
	cfg := Config{}.WithDefaults()
	if l := learnerPacer(cfg, true, 1<<18); l != nil {
		t.Fatalf("a learner's stream is paced by default: %v", l.Limit())
	}
	cfg.LearnerSnapshotBytesPerSec = 64 << 20
	if l := learnerPacer(cfg, false, 1<<18); l != nil {
		t.Errorf("a voter's stream is paced: %v", l.Limit())
	}
	l := learnerPacer(cfg, true, 1<<18)
	if l == nil || l.Burst() != 1<<18 || int64(l.Limit()) != 64<<20 {
		t.Fatalf("a learner's pacer: %+v", l)
	}
	cfg.LearnerSnapshotBytesPerSec = -1
	if l := learnerPacer(cfg, true, 1<<18); l != nil {
		t.Errorf("pacing off, yet paced at %v", l.Limit())
	}
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "LearnerSnapshotBytesPerSec") {
		t.Errorf("a negative LearnerSnapshotBytesPerSec is valid (no pacing): %v", err)
	}
}
