package storage

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// saveAsync calls SaveAsync and returns a channel of its done's error.
func saveAsync(s *Store, hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) <-chan error {
	c := make(chan error, 1)
	s.SaveAsync(hs, ents, snap, func(err error) { c <- err })
	return c
}

// SaveAsync returns at once while a commit runs; the writes queued meanwhile
// go into one commit, made by the engine's commit goroutine, whose done
// callbacks run once it is durable, and what they saved reads back, after a
// reopen too. A synchronous write that joins a batch of asynchronous ones
// commits it itself.
func TestSaveAsyncGroupCommit(t *testing.T) {
	const groups = 20
	dir := t.TempDir()
	e, stores := openGroups(t, dir, groups)
	before := e.Metrics()

	release := holdCommitter(t, e)
	dones := make([]<-chan error, groups)
	for g, s := range stores {
		dones[g] = saveAsync(s, hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, fmt.Sprintf("group %d", g+1))}, nil)
	}
	waitPending(t, e, groups)
	for g := range stores {
		select {
		case err := <-dones[g]:
			t.Fatalf("group %d's done was called before its commit ran: %v", g+1, err)
		default:
		}
		li, err := stores[g].LastIndex()
		require.NoError(t, err)
		require.Zero(t, li, "a queued write is not visible before its commit")
	}
	release()
	for g := range stores {
		require.NoError(t, <-dones[g])
		li, err := stores[g].LastIndex()
		require.NoError(t, err)
		require.EqualValues(t, 1, li)
	}
	m := e.Metrics()
	require.EqualValues(t, groups, m.MaxWritesPerCommit)
	require.EqualValues(t, 2, m.Commits-before.Commits, "the held commit, then one for every queued write")

	// Asynchronous writes, then a synchronous one, queued behind a held
	// commit: the synchronous writer leads the batch.
	release = holdCommitter(t, e)
	a := saveAsync(stores[0], nil, []*raftpb.Entry{ent(2, 1, "async")}, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		require.NoError(t, stores[1].Save(nil, []*raftpb.Entry{ent(2, 1, "sync")}, nil))
	}()
	waitPending(t, e, 2)
	release()
	wg.Wait()
	require.NoError(t, <-a)

	require.NoError(t, e.Close())
	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	for g := range groups {
		s := group(t, e, uint64(g+1))
		es, err := s.Entries(1, 2, raftNoLimit)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("group %d", g+1), string(es[0].GetData()))
	}
}

// A group has one write at a time: a write of the group waits until its
// SaveAsync is done. Writes that remove entries (a conflicting append, a
// snapshot) and invalid ones complete before SaveAsync returns, as Save.
func TestSaveAsyncOrderAndFallbacks(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testOpts())
	require.NoError(t, <-saveAsync(s, hardState(1, 1, 0), ents(1, 11, 1), nil))

	release := holdCommitter(t, s.e)
	first := saveAsync(s, nil, ents(11, 12, 1), nil)
	second := make(chan error, 1)
	go func() { second <- s.Save(nil, ents(12, 13, 1), nil) }() // waits for first's done
	waitPending(t, s.e, 1)
	release()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	li, _ := s.LastIndex()
	require.EqualValues(t, 12, li)

	// A conflicting append (term 2 from index 5) runs synchronously: done
	// is called before SaveAsync returns.
	called := false
	s.SaveAsync(nil, ents(5, 7, 2), nil, func(err error) { called = true; require.NoError(t, err) })
	require.True(t, called)
	li, _ = s.LastIndex()
	require.EqualValues(t, 6, li)
	term, err := s.Term(6)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)

	// A gap is refused at once, as Save refuses it.
	require.ErrorIs(t, <-saveAsync(s, nil, ents(9, 10, 2), nil), ErrOutOfBounds)
	// Nothing to write: done(nil) at once.
	require.NoError(t, <-saveAsync(s, nil, nil, nil))
}

// A failed commit fails every asynchronous write it carried and the
// engine: later ones are refused with ErrFailed; after Close, ErrClosed.
func TestSaveAsyncFailure(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	a, b := group(t, e, 1), group(t, e, 2)
	require.NoError(t, <-saveAsync(a, nil, ents(1, 2, 1), nil))
	heal := breakDisk(t, e)
	require.Error(t, <-saveAsync(a, nil, ents(2, 3, 1), nil))
	require.ErrorIs(t, <-saveAsync(b, nil, ents(1, 2, 1), nil), ErrFailed)
	li, _ := a.LastIndex()
	require.EqualValues(t, 1, li, "the failed write is not visible")
	_ = e.Close()
	heal()
	require.ErrorIs(t, <-saveAsync(a, nil, ents(2, 3, 1), nil), ErrClosed)

	e = openEngine(t, dir, EngineOptions{Backend: testBackend, NoSync: true})
	a = group(t, e, 1)
	li, _ = a.LastIndex()
	require.EqualValues(t, 1, li)
	require.NoError(t, e.Close())
}
