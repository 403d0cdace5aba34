package storage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// TestEngineMetricsCountWrites: the engine counts what its commits wrote —
// bbolt's pages (at least the tail leaf and the meta page of a Save) and
// their bytes, or the bytes of Pebble's batches.
func TestEngineMetricsCountWrites(t *testing.T) {
	e, stores := openGroups(t, t.TempDir(), 1)
	before := e.Metrics()
	require.NoError(t, stores[0].Save(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, strings.Repeat("x", 256))}, nil))
	m := e.Metrics()
	require.Greater(t, m.BytesWritten-before.BytesWritten, uint64(256), "a Save of 256 bytes")
	if e.Backend() == BackendPebble {
		require.Zero(t, m.PagesWritten)
		return
	}
	pages := m.PagesWritten - before.PagesWritten
	require.GreaterOrEqual(t, pages, uint64(2), "the log's leaf and the meta page at least")
	require.Equal(t, pages*uint64(e.db.Info().PageSize), m.BytesWritten-before.BytesWritten)
}
