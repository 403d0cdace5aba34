package storage

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestDropCaches: DropCaches empties the tail; the log reads the same from
// the database after it, and the next Save starts a new tail.
func TestDropCaches(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	hs := &raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(9)}
	require.NoError(t, s.Save(hs, ents(1, 10, 2), nil))
	want, err := s.Entries(1, 10, 1<<20)
	require.NoError(t, err)
	require.Equal(t, 9, s.Metrics().TailEntries)

	s.DropCaches()
	m := s.Metrics()
	require.Zero(t, m.TailEntries)
	require.Zero(t, m.TailBytes)
	got, err := s.Entries(1, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "entry %d", i+1)
	}
	term, err := s.Term(9)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.EqualValues(t, 9, last)
	require.Greater(t, s.Metrics().TailMisses, m.TailMisses)

	require.NoError(t, s.Save(nil, ents(10, 12, 2), nil))
	require.Equal(t, 2, s.Metrics().TailEntries)
	got, err = s.Entries(8, 12, 1<<20)
	require.NoError(t, err)
	require.Len(t, got, 4)
	for i, e := range got {
		require.EqualValues(t, 8+i, e.GetIndex())
	}
}

// TestDropCachesKeepsTheLastTerm: after DropCaches the last entry's term
// (what an election reads on every member) is served without a database
// read (a tail hit, no miss); any other term is read from the database; a
// Save that replaces the log's end forgets it, and the term read is the new
// one.
func TestDropCachesKeepsTheLastTerm(t *testing.T) {
	s := open(t, t.TempDir(), testOpts())
	hs := &raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(5)}
	require.NoError(t, s.Save(hs, ents(1, 10, 2), nil))
	s.DropCaches()
	s.DropCaches() // again, already empty: still kept
	m := s.Metrics()
	term, err := s.Term(9)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)
	require.Equal(t, m.TailMisses, s.Metrics().TailMisses, "the last term read from the database")
	require.Equal(t, m.TailHits+1, s.Metrics().TailHits)
	term, err = s.Term(8)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)
	require.Equal(t, m.TailMisses+1, s.Metrics().TailMisses)

	// A new leader at term 3 overwrites index 9 on.
	require.NoError(t, s.Save(&raftpb.HardState{Term: proto.Uint64(3), Commit: proto.Uint64(5)}, ents(9, 10, 3), nil))
	s.DropCaches()
	term, err = s.Term(9)
	require.NoError(t, err)
	require.EqualValues(t, 3, term)
}
