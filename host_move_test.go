package understudy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// TestHostMovesInOneUpdate: a host of 6 groups restarts at a new address.
// Each peer host learns the move once — from the moved host's first
// attachment — for all 6 groups (MuxStats.AddressesLearned 1, the book in
// its data dir), and every group's replica on the moved host catches up
// with what was written while it was away.
func TestHostMovesInOneUpdate(t *testing.T) {
	hc := newHosts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const groups = 6
	all := make([][]*understudy.Group, groups+1)
	for g := uint64(1); g <= groups; g++ {
		all[g] = hc.start(ctx, g, func() raft.StateMachine { return kv.New() })
		require.NoError(t, put(ctx, t, all[g], "before", "1"))
	}
	old, id := hc.addrs[2], hc.hosts[2].ID()
	require.NotZero(t, id)
	require.NoError(t, hc.hosts[2].Close(ctx))
	for g := uint64(1); g <= groups; g++ {
		require.NoError(t, put(ctx, t, all[g][:2], "while-away", fmt.Sprint(g)))
	}

	ln := listen(t) // the new address
	h, err := understudy.NewHost(understudy.HostConfig{
		DataDir: filepath.Join(hc.dir, "2"), Listener: ln, AdvertisePeer: ln.Addr().String(),
		Storage: storage.EngineOptions{NoSync: true},
	})
	require.NoError(t, err)
	require.Equal(t, id, h.ID(), "the host ID survives the restart")
	hc.hosts[2], hc.addrs[2] = h, ln.Addr().String()
	for g := uint64(1); g <= groups; g++ {
		cfg := hc.groupConfig(g, 2) // a restart: the data dir says who it is
		rep, err := h.StartGroup(ctx, cfg, kv.New())
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			v, err := rep.StaleRead([]byte("while-away"))
			return err == nil && string(v) == fmt.Sprint(g)
		}, 30*time.Second, 10*time.Millisecond, "group %d on the moved host", g)
	}
	for i := range 2 {
		m := hc.hosts[i].Mux()
		require.Equal(t, ln.Addr().String(), m.Addresses()[id].Addr, "host %d's address book", i)
		require.Equal(t, []string{old}, m.Addresses()[id].Recorded, "host %d's address book", i)
		require.EqualValues(t, 1, m.Stats().AddressesLearned, "host %d learned the move once for every group", i)
		var book struct {
			Hosts map[uint64]struct{ Addr string }
		}
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(hc.dir, fmt.Sprint(i), "peer-addresses.json"))
			return err == nil && json.Unmarshal(b, &book) == nil && book.Hosts[id].Addr == ln.Addr().String()
		}, 5*time.Second, 10*time.Millisecond, "host %d keeps the book in its data dir", i)
	}
}

// TestHostIDAndAddressBookFiles: a host makes its ID once and keeps it
// across restarts; an address book of the first format (keyed by address,
// which could route one host's traffic to another) does not stop the host
// from starting: it is discarded, and replaced by the next save; a host-id
// file that holds no ID is refused as corrupt rather than replaced (the
// peers know the host by its ID).
func TestHostIDAndAddressBookFiles(t *testing.T) {
	dir := t.TempDir()
	open := func() (*understudy.Host, error) {
		return understudy.NewHost(understudy.HostConfig{DataDir: dir, ListenPeer: "127.0.0.1:0", Storage: storage.EngineOptions{NoSync: true}})
	}
	h, err := open()
	require.NoError(t, err)
	id := h.ID()
	require.NotZero(t, id)
	require.NoError(t, h.Close(context.Background()))

	old := []byte(`{"127.0.0.1:7001": "127.0.0.1:7002"}`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "peer-addresses.json"), old, 0o600))
	h, err = open()
	require.NoError(t, err, "a book of the first format")
	require.Equal(t, id, h.ID())
	require.Empty(t, h.Mux().Addresses())
	require.NoError(t, h.Close(context.Background()))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "host-id"), []byte("nonsense\n"), 0o600))
	_, err = open()
	require.ErrorIs(t, err, storage.ErrCorrupt)
}
