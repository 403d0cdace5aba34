package understudy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// TestHostLargeEntriesBesideABusyGroup: three hosts, one group writing
// 128 KiB values (each append more than twice a host link writer's
// quantum) beside a group busy with small writes, both over the same host
// links. Every write of both groups commits, and every replica of both
// applies the last ones. A flow that went into debt with a large append
// used to be dropped from its link writer's rounds for good while the busy
// group shared them: the large group's appends and heartbeats piled up
// behind a live link, its leader was deposed, and its writes stalled.
func TestHostLargeEntriesBesideABusyGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hc := newHosts(t, 3)
	const large, busy = 1, 2
	groups := map[uint64][]*understudy.Group{}
	for _, g := range []uint64{large, busy} {
		groups[g] = hc.start(ctx, g, func() raft.StateMachine { return kv.New() })
	}
	const largeWrites, busyWriters, busyWrites = 24, 3, 60
	value := strings.Repeat("v", 128<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 1+busyWriters)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range largeWrites {
			if err := put(ctx, t, groups[large], "large", fmt.Sprintf("%d:%s", i, value)); err != nil {
				errs <- fmt.Errorf("large group, write %d: %w", i, err)
				return
			}
		}
	}()
	for w := range busyWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range busyWrites {
				if err := put(ctx, t, groups[busy], fmt.Sprintf("w%d", w), fmt.Sprint(i)); err != nil {
					errs <- fmt.Errorf("busy group, writer %d write %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every replica applies the last writes: the leaders' flows to every
	// follower carry appends.
	for i, r := range groups[large] {
		v, err := r.Read(ctx, []byte("large"))
		require.NoError(t, err, "large group on host %d", i)
		require.True(t, strings.HasPrefix(string(v), fmt.Sprintf("%d:", largeWrites-1)), "large group on host %d", i)
	}
	for i, r := range groups[busy] {
		for w := range busyWriters {
			v, err := r.Read(ctx, []byte(fmt.Sprintf("w%d", w)))
			require.NoError(t, err, "busy group on host %d", i)
			require.Equal(t, fmt.Sprint(busyWrites-1), string(v), "busy group on host %d", i)
		}
	}
}
