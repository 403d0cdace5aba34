// Package benchmarks compares understudy with hashicorp/raft in one process:
// the same three-member cluster shape (each member with durable storage,
// fsync on, in its own temporary directory — understudy's on Pebble, as
// understudy.Start opens it, or on bbolt with -understudy.engine bolt;
// hashicorp's on raft-boltdb — and a TCP transport on 127.0.0.1), the same
// 256-byte put commands, the same concurrent writers.
//
// Two configurations (Profile): Tuned is BenchmarkCompare's (short timers, no
// snapshots); Defaults is every library default, snapshots on
// (BenchmarkDefaults, BenchmarkCatchUp). BenchmarkCatchUp loads a state into
// a cluster, adds a fourth member as a learner (non-voter) while writers keep
// writing, and measures the catch-up; see RunCatchUp.
//
// It is a nested module, so that hashicorp/raft and its dependencies stay out
// of the root module. Run it from this directory:
//
//	go test -run '^$' -bench Compare -benchtime 3000x -count 3 -benchmem .
//	go test -run '^$' -bench Defaults -benchtime 3000x -benchmem .
//	go test -run '^$' -bench CatchUp -benchtime 1x .
package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/kv"
)

// CommandSize is the size in bytes of every command written.
const CommandSize = 256

// Profile is how both systems are configured.
type Profile int

const (
	// Tuned is BenchmarkCompare's configuration (the published snapshots-off
	// tables): short timers (understudy's tick 10ms; hashicorp's heartbeat and
	// election timeouts 200ms, lease 100ms) and no snapshots (understudy's
	// SnapshotCount and hashicorp's SnapshotThreshold out of reach).
	Tuned Profile = iota
	// Defaults is each library's defaults, snapshots on: understudy's
	// raft.Config with only ID, InitialMembers and Logger set (tick 100ms,
	// SnapshotCount 10,000, SnapshotCatchUpEntries 5,000), hashicorp's
	// DefaultConfig with only LocalID and Logger set (timeouts 1s/1s/500ms,
	// SnapshotThreshold 8192, SnapshotInterval 120s, TrailingLogs 10240).
	Defaults
)

func (p Profile) String() string {
	switch p {
	case Tuned:
		return "tuned"
	case Defaults:
		return "defaults"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// Cluster is a running three-member cluster of one system, to which one
// learner (a non-voter) can be added.
type Cluster interface {
	// Write replicates one command through the leader and waits until the
	// leader has applied it.
	Write(ctx context.Context, cmd []byte) error
	// Read returns key's value linearizably, as the leader sees it.
	Read(ctx context.Context, key string) (value string, ok bool, err error)
	// Close stops every member (the learner included) and releases its
	// storage and transport.
	Close() error

	// SnapshotsTaken counts the snapshots the leader's state machine was
	// asked for since it started (the system's own, or TakeSnapshot's).
	SnapshotsTaken() uint64

	// AddLearner adds a fourth member as a learner (understudy) or non-voter
	// (hashicorp) through the leader, starts it with empty storage under
	// dir, and returns the leader's commit index read once the addition was
	// committed: the learner has caught up when its applied index reaches it.
	AddLearner(ctx context.Context, dir string) (target uint64, err error)
	// LearnerApplied returns the learner's applied index (0 before
	// AddLearner).
	LearnerApplied() uint64
	// SnapshotsToLearner returns what every member sent the learner so far.
	SnapshotsToLearner() SnapshotStats
	// CheckLearner, once writes have stopped, waits until the learner has
	// applied everything the leader has and compares their states.
	CheckLearner(ctx context.Context) error
	// RemoveLearner removes the learner from the cluster and stops it.
	RemoveLearner(ctx context.Context) error
	// TakeSnapshot makes the leader snapshot now, if the system has an API
	// for it (errors.ErrUnsupported otherwise).
	TakeSnapshot(ctx context.Context) error
}

// SnapshotStats counts snapshots sent to one member.
type SnapshotStats struct {
	Sent   uint64 // snapshots the receiver accepted
	Failed uint64 // attempts that failed or were refused
	Bytes  uint64 // bytes of the accepted snapshots' data
	// Restored counts the snapshots the learner's state machine restored
	// from: fewer than Sent when the receiver stored a snapshot that raft
	// then ignored.
	Restored uint64
	// SendTime is the time the accepted snapshots took to send, from the
	// sender's dial to the receiver's ack (0: not measured): Bytes /
	// SendTime is the stream's rate on the link.
	SendTime time.Duration
	// How says where the figures come from.
	How string
}

// System names a system and starts fresh clusters of it.
type System struct {
	Name string
	// Start starts a three-member cluster configured by p with data under
	// dir and returns once it has a leader that has committed a write.
	Start func(dir string, p Profile) (Cluster, error)
}

// Systems are the systems compared, in the order they are benchmarked.
var Systems = []System{
	{Name: "understudy", Start: StartUnderstudy},
	{Name: "hashicorp", Start: StartHashicorp},
}

var padding = string(make([]byte, CommandSize))

// Key is the key of write number i (1024 distinct keys, overwritten in turn).
func Key(i int) string { return fmt.Sprintf("k%d", i%1024) }

// Command encodes a put of key to a value whose length makes the command
// exactly CommandSize bytes (kv's encoding: an op byte, then
// length-prefixed key, value and expected value). Both systems apply these
// same bytes.
func Command(key string) []byte {
	// op + uvarint(len key) + key + uvarint(len value) (2 bytes: 128..16383) + value + uvarint(0)
	n := CommandSize - (1 + 1 + len(key) + 2 + 1)
	return kv.Put(key, padding[:n])
}

// ValueFor is the value Command(key) puts.
func ValueFor(key string) string { return padding[:CommandSize-(1+1+len(key)+2+1)] }

// Result is the outcome of one load run.
type Result struct {
	Writes    int
	Elapsed   time.Duration
	Latencies []time.Duration // sorted, one per successful write
	Errors    int
	FirstErr  error
}

// WritesPerSec is the successful writes per second.
func (r Result) WritesPerSec() float64 { return float64(len(r.Latencies)) / r.Elapsed.Seconds() }

// Percentile returns the p-th percentile latency (0 <= p < 100).
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[int(float64(len(r.Latencies))*p/100)]
}

// Load runs n writes from the given number of concurrent writers on c, each
// writer taking the next write number i, and writing Key(i), until n are
// taken.
func Load(ctx context.Context, c Cluster, writers, n int) Result {
	var (
		next   atomic.Int64
		mu     sync.Mutex
		lats   = make([]time.Duration, 0, n)
		wg     sync.WaitGroup
		fails  atomic.Int64
		errMu  sync.Mutex
		first  error
		record = func(err error) {
			fails.Add(1)
			errMu.Lock()
			if first == nil {
				first = err
			}
			errMu.Unlock()
		}
	)
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, n/writers+1)
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				cmd := Command(Key(i))
				t0 := time.Now()
				if err := c.Write(ctx, cmd); err != nil {
					record(fmt.Errorf("write %d by writer %d after %s: %w", i, w, time.Since(t0), err))
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lats)
	return Result{Writes: n, Elapsed: elapsed, Latencies: lats, Errors: int(fails.Load()), FirstErr: first}
}
