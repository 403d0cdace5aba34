package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// NewBackend picks the backend of a new data dir only: an existing data dir
// keeps the one it was created with, and an explicit Backend wins.
func TestNewBackendOnlyForNewDataDirs(t *testing.T) {
	for _, tc := range []struct{ wrote, newB Backend }{
		{BackendBolt, BackendPebble},
		{BackendPebble, BackendBolt},
	} {
		t.Run(string(tc.newB), func(t *testing.T) {
			fresh := t.TempDir()
			e := openEngine(t, fresh, EngineOptions{NoSync: true, NewBackend: tc.newB})
			require.Equal(t, tc.newB, e.Backend(), "a new data dir")
			g := group(t, e, 1)
			require.NoError(t, g.Save(hardState(1, 0, 1), ents(1, 2, 1), nil))
			require.NoError(t, e.Close())
			e = openEngine(t, fresh, EngineOptions{NoSync: true, NewBackend: tc.wrote})
			require.Equal(t, tc.newB, e.Backend(), "reopened with another NewBackend: the one it holds")
			require.NoError(t, e.Close())

			old := t.TempDir()
			e = openEngine(t, old, EngineOptions{NoSync: true, Backend: tc.wrote})
			require.NoError(t, group(t, e, 1).Save(hardState(1, 0, 3), ents(1, 4, 1), nil))
			require.NoError(t, e.Close())
			e = openEngine(t, old, EngineOptions{NoSync: true, NewBackend: tc.newB})
			require.Equal(t, tc.wrote, e.Backend(), "an existing data dir keeps its backend")
			li, err := group(t, e, 1).LastIndex()
			require.NoError(t, err)
			require.EqualValues(t, 3, li)
			require.NoError(t, e.Close())

			e = openEngine(t, t.TempDir(), EngineOptions{NoSync: true, Backend: tc.wrote, NewBackend: tc.newB})
			require.Equal(t, tc.wrote, e.Backend(), "Backend wins")
		})
	}
	err := EngineOptions{NewBackend: "rocksdb"}.Validate()
	require.ErrorContains(t, err, "NewBackend")
}
