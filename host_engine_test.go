package understudy_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/understudy-raft/understudy"
	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
	"github.com/understudy-raft/understudy/storage"
)

// The engine of a new data dir: Pebble whether NewHost (a host of many
// groups) or Start (one group) opens it, and a data dir keeps the backend
// it was created with whichever opens it.
func TestNewDataDirsGetPebble(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newHost := func(dir string) *understudy.Host {
		ln := listen(t)
		h, err := understudy.NewHost(understudy.HostConfig{DataDir: dir, Listener: ln,
			Storage: storage.EngineOptions{NoSync: true}})
		require.NoError(t, err)
		return h
	}

	hostDir := filepath.Join(t.TempDir(), "host")
	h := newHost(hostDir)
	require.Equal(t, storage.BackendPebble, h.Engine().Backend(), "a new host's data dir")
	require.NoError(t, h.Close(ctx))
	h = newHost(hostDir)
	require.Equal(t, storage.BackendPebble, h.Engine().Backend())
	require.NoError(t, h.Close(ctx))

	oneDir := filepath.Join(t.TempDir(), "one")
	ln := listen(t)
	g, err := understudy.Start(ctx, understudy.Config{ID: 1, DataDir: oneDir, Listener: ln,
		InitialMembers: []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}},
		Storage:        storage.Options{NoSync: true}}, kv.New())
	require.NoError(t, err)
	require.Equal(t, storage.BackendPebble, g.Host().Engine().Backend(), "a new data dir of one group")
	require.NoError(t, g.Close(ctx))
	h = newHost(oneDir)
	require.Equal(t, storage.BackendPebble, h.Engine().Backend(), "a data dir keeps its backend")
	require.NoError(t, h.Close(ctx))
}

// Start's Storage.NewBackend chooses the engine of a new data dir only:
// bbolt for a new one when asked, and a data dir of bbolt stays bbolt when
// started again with the default, or asking for Pebble (kvserver's
// --storage-engine).
func TestStartNewBackendForNewDataDirOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(dir string, so storage.Options) *understudy.Group {
		ln := listen(t)
		g, err := understudy.Start(ctx, understudy.Config{ID: 1, DataDir: dir, Listener: ln,
			InitialMembers: []raft.Member{{ID: 1, PeerAddr: ln.Addr().String()}}, Storage: so}, kv.New())
		require.NoError(t, err)
		return g
	}
	pebble := storage.Options{NoSync: true, NewBackend: storage.BackendPebble}
	bolt := storage.Options{NoSync: true, NewBackend: storage.BackendBolt}

	newDir := filepath.Join(t.TempDir(), "new")
	g := start(newDir, pebble)
	require.Equal(t, storage.BackendPebble, g.Host().Engine().Backend(), "a new data dir with NewBackend pebble")
	require.NoError(t, g.Close(ctx))

	boltDir := filepath.Join(t.TempDir(), "bolt")
	g = start(boltDir, bolt)
	require.Equal(t, storage.BackendBolt, g.Host().Engine().Backend(), "a new data dir with NewBackend bbolt")
	require.NoError(t, g.Close(ctx))
	g = start(boltDir, storage.Options{NoSync: true})
	require.Equal(t, storage.BackendBolt, g.Host().Engine().Backend(), "a data dir keeps its backend with the default")
	require.NoError(t, g.Close(ctx))
	g = start(boltDir, pebble)
	require.Equal(t, storage.BackendBolt, g.Host().Engine().Backend(), "a data dir keeps its backend whatever NewBackend says")
	require.NoError(t, g.Close(ctx))

	require.Error(t, storage.Options{NewBackend: "rocks"}.Validate())
}
