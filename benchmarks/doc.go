// Package benchmarks compares understudy with hashicorp/raft in one process:
// the same three-member cluster shape (each member with durable storage on
// bbolt with fsync on, in its own temporary directory, and a TCP transport on
// 127.0.0.1), the same 256-byte put commands, the same concurrent writers.
//
// It is a nested module, so that hashicorp/raft and its dependencies stay out
// of the root module. Run it from this directory:
//
//	go test -run '^$' -bench Compare -benchtime 3000x -count 3 -benchmem .
package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/internal/testkv"
)

// CommandSize is the size in bytes of every command written.
const CommandSize = 256

// Cluster is a running three-member cluster of one system.
type Cluster interface {
	// Write replicates one command through the leader and waits until the
	// leader has applied it.
	Write(ctx context.Context, cmd []byte) error
	// Read returns key's value linearizably, as the leader sees it.
	Read(ctx context.Context, key string) (value string, ok bool, err error)
	// Close stops every member and releases its storage and transport.
	Close() error
}

// System names a system and starts fresh clusters of it.
type System struct {
	Name string
	// Start starts a three-member cluster with data under dir and returns
	// once it has a leader that has committed a write.
	Start func(dir string) (Cluster, error)
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
// exactly CommandSize bytes (testkv's encoding: an op byte, then
// length-prefixed key, value and expected value). Both systems apply these
// same bytes.
func Command(key string) []byte {
	// op + uvarint(len key) + key + uvarint(len value) (2 bytes: 128..16383) + value + uvarint(0)
	n := CommandSize - (1 + 1 + len(key) + 2 + 1)
	return testkv.Put(key, padding[:n])
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
