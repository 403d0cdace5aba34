package understudy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
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
	largeBesideBusy(ctx, t, groups[large], groups[busy], largeWrites, busyWriters, busyWrites)
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

// TestHostPeerWithSmallerFrameLimit: host 2 accepts frames of at most
// 64 KiB on its links; a group writes 128 KiB values beside a busy group.
// The large group's leader (kept off host 2) drops its appends to host 2
// and counts them, and the links to host 2 never break: the busy group's
// replica there applies every write. A frame over host 2's limit used to
// break the link for every group, again at each retransmission.
func TestHostPeerWithSmallerFrameLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hc := &hostsCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		ln := listen(t)
		cfg := understudy.HostConfig{
			DataDir: filepath.Join(hc.dir, fmt.Sprint(i)), Listener: ln, AdvertisePeer: ln.Addr().String(),
			Storage: storage.EngineOptions{NoSync: true},
		}
		if i == 2 {
			cfg.Links.MaxFrameSize = 64 << 10
		}
		h, err := understudy.NewHost(cfg)
		require.NoError(t, err)
		hc.hosts = append(hc.hosts, h)
		hc.addrs = append(hc.addrs, ln.Addr().String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, h := range hc.hosts {
			_ = h.Close(ctx)
		}
	})
	const large, busy = 1, 2
	groups := map[uint64][]*understudy.Group{}
	for _, g := range []uint64{large, busy} {
		groups[g] = hc.start(ctx, g, func() raft.StateMachine { return kv.New() })
	}
	// The large group's leader off host 2: host 2 never gets its large
	// entries, so it cannot be elected once one committed.
	for leaderOf(ctx, t, groups[large]) == groups[large][2] {
		require.NoError(t, ctx.Err(), "moving the large group's leader off host 2")
		_ = groups[large][2].TransferLeadership(ctx, replicaID(large, 0))
	}
	const busyWriters, busyWrites = 2, 40
	largeBesideBusy(ctx, t, groups[large][:2], groups[busy], 8, busyWriters, busyWrites)
	for i, r := range groups[busy] {
		for w := range busyWriters {
			v, err := r.Read(ctx, []byte(fmt.Sprintf("w%d", w)))
			require.NoError(t, err, "busy group on host %d", i)
			require.Equal(t, fmt.Sprint(busyWrites-1), string(v), "busy group on host %d", i)
		}
	}
	for i, h := range hc.hosts {
		require.Zero(t, h.Mux().Stats().ConnErrors["frame_too_large"], "host %d: a link broke on a frame too large", i)
	}
	var dropped uint64
	for _, r := range groups[large][:2] {
		for _, p := range r.Transport().Stats().Peers {
			if p.ID == replicaID(large, 2) {
				dropped += p.DroppedTooLarge
			}
		}
	}
	require.NotZero(t, dropped, "the large group's appends to host 2 were not dropped and counted")
}

// largeBesideBusy writes largeWrites 128 KiB values ("large" = "i:…")
// through the large group's replicas beside busyWriters writers of
// busyWrites small values each ("wN" = "i") in the busy group, and fails
// the test on the first write that does not commit.
func largeBesideBusy(ctx context.Context, t *testing.T, large, busy []*understudy.Group, largeWrites, busyWriters, busyWrites int) {
	t.Helper()
	value := strings.Repeat("v", 128<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 1+busyWriters)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range largeWrites {
			if err := put(ctx, t, large, "large", fmt.Sprintf("%d:%s", i, value)); err != nil {
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
				if err := put(ctx, t, busy, fmt.Sprintf("w%d", w), fmt.Sprint(i)); err != nil {
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
}
