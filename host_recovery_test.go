package understudy_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/internal/robustness"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// TestHostForceNewClusterIsLinearizable: writers run on every member while
// all three stop at once, abruptly (no hand-off, writes in flight); two
// never come back, and the operator forces a new cluster from the surviving
// data dir with the longest log. The history — the writes before, of known
// and unknown outcome, and a linearizable read of every key after — must be
// linearizable (porcupine): no acknowledged write lost, no value nobody
// wrote, an in-flight write either in or out.
func TestHostForceNewClusterIsLinearizable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := newTestCluster(t, 3)
	tc.leader(ctx)
	hist := robustness.NewHistory()
	keys := []string{"a", "b", "c", "d", "e", "f"}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked sync.Map
	for w := range 6 {
		h := tc.hosts[uint64(w%3+1)] // two writers per member: followers forward
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				in := robustness.Input{Op: "put", Key: keys[(w+i)%len(keys)], Value: fmt.Sprintf("w%d-%d", w, i)}
				call := time.Now()
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := h.Propose(wctx, kv.Put(in.Key, in.Value))
				wcancel()
				switch {
				case err == nil:
					hist.Op(w, in, robustness.Output{}, call, time.Now())
					acked.Store(w, i)
				case errors.Is(err, raft.ErrNotProposed):
					// never proposed: not part of the history
				default:
					hist.Op(w, in, robustness.Output{Unknown: true}, call, time.Now())
					return // the member is gone
				}
			}
		}()
	}
	// Let writes through every member be acknowledged, then stop them all
	// at once with writes in flight.
	require.Eventually(t, func() bool {
		n := 0
		acked.Range(func(any, any) bool { n++; return true })
		return n == 6
	}, 20*time.Second, time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	done, dcancel := context.WithCancel(ctx)
	dcancel()
	hist.Fault("crash", "every member stops at once, no hand-off")
	var closing sync.WaitGroup
	for _, h := range tc.hosts {
		closing.Add(1)
		go func() { defer closing.Done(); _ = h.Close(done) }()
	}
	closing.Wait()
	close(stop)
	wg.Wait()

	// The operator picks the surviving data dir with the longest log.
	var survivor, longest uint64
	for id := range tc.hosts {
		var store *storage.Store
		require.Eventually(t, func() bool { // closed once its node is done
			var err error
			store, err = storage.Open(filepath.Join(tc.dir, fmt.Sprint(id)), storage.Options{NoSync: true})
			return err == nil
		}, 10*time.Second, 5*time.Millisecond)
		last, err := store.LastIndex()
		require.NoError(t, err)
		require.NoError(t, store.Close())
		if last > longest {
			survivor, longest = id, last
		}
	}
	for id := range tc.hosts {
		delete(tc.hosts, id)
	}
	hist.Fault("recover", fmt.Sprintf("force a new cluster from member %d (last index %d)", survivor, longest))
	h, err := tc.restart(ctx, survivor, func(c *understudy.Config) { c.ForceNewCluster = true })
	require.NoError(t, err)
	for _, k := range keys {
		call := time.Now()
		v, err := h.Read(ctx, []byte(k))
		require.NoError(t, err)
		hist.Op(100, robustness.Input{Op: "get", Key: k}, robustness.Output{Value: string(v)}, call, time.Now())
	}
	if _, err := hist.Check(t.Name(), t.TempDir(), 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, robustness.FormatTimeline(hist.Timeline()))
	}
	t.Logf("%d operations checked; recovered from member %d at index %d", hist.Len(), survivor, longest)
}
