package storage

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// SaveQueued never makes the commit on its caller's goroutine, even when
// no commit runs: done is called on the engine's commit goroutine, and the
// write reads back once it is. (With SaveAsync the caller commits a lone
// write itself, and done runs before it returns.)
func TestSaveQueuedLeavesTheCommitToTheCommitGoroutine(t *testing.T) {
	e, stores := openGroups(t, t.TempDir(), 1)
	before := e.Metrics()
	ran, returned, errc := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		stores[0].SaveQueued(hardState(1, 1, 1), []*raftpb.Entry{ent(1, 1, "queued")}, nil, func(err error) {
			close(ran)
			<-returned // blocks forever if run by SaveQueued's caller, before it returns
			errc <- err
		})
		close(returned)
	}()
	<-ran
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("SaveQueued made the commit and called done itself, before returning")
	}
	require.NoError(t, <-errc)
	li, err := stores[0].LastIndex()
	require.NoError(t, err)
	require.EqualValues(t, 1, li)
	require.EqualValues(t, 1, e.Metrics().Commits-before.Commits)
}

// Queue-only writes of many groups, mixed with synchronous Saves and
// SaveAsyncs of others, all complete and read back: a synchronous writer
// that joins a batch the commit goroutine was told to take leads it.
func TestSaveQueuedMixedWithOtherWrites(t *testing.T) {
	const groups, rounds = 12, 40
	e, stores := openGroups(t, t.TempDir(), groups)
	var wg sync.WaitGroup
	errc := make(chan error, groups*rounds)
	for g, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= rounds; i++ {
				data := []*raftpb.Entry{ent(i, 1, fmt.Sprint(g, "-", i))}
				switch g % 3 {
				case 0:
					c := make(chan error, 1)
					s.SaveQueued(hardState(1, 1, i), data, nil, func(err error) { c <- err })
					errc <- <-c
				case 1:
					c := make(chan error, 1)
					s.SaveAsync(hardState(1, 1, i), data, nil, func(err error) { c <- err })
					errc <- <-c
				default:
					errc <- s.Save(hardState(1, 1, i), data, nil)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("writes did not complete (a batch left without a leader)")
	}
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	for g, s := range stores {
		li, err := s.LastIndex()
		require.NoError(t, err)
		require.EqualValues(t, rounds, li, "group %d", g+1)
	}
	_ = e
}

// SaveQueued refuses, having written nothing and not called done, a write
// that would remove entries (a conflicting append, a snapshot): Save makes
// those with the group's readers held, which its caller must not wait for.
func TestSaveQueuedRefusesWritesThatRemoveEntries(t *testing.T) {
	e, stores := openGroups(t, t.TempDir(), 1)
	s := stores[0]
	require.NoError(t, s.Save(hardState(1, 1, 0), ents(1, 4, 1), nil))
	before := e.Metrics()
	called := false
	require.False(t, s.SaveQueued(hardState(2, 1, 0), ents(2, 3, 2), nil, func(error) { called = true }), "a conflicting append")
	require.False(t, called)
	require.EqualValues(t, before.Commits, e.Metrics().Commits)
	li, err := s.LastIndex()
	require.NoError(t, err)
	require.EqualValues(t, 3, li)
	term, err := s.Term(2)
	require.NoError(t, err)
	require.EqualValues(t, 1, term, "the entry the refused append would replace is still there")
	// The store takes writes after a refusal: the same append through Save.
	require.NoError(t, s.Save(hardState(2, 1, 0), ents(2, 3, 2), nil))
	term, err = s.Term(2)
	require.NoError(t, err)
	require.EqualValues(t, 2, term)
}

// SaveQueued refuses a write that would wait for another write of its
// group (here a write holding the group's write lock, as a Compact does
// through its commit), having written nothing.
func TestSaveQueuedRefusesToWaitForTheGroupsOtherWrite(t *testing.T) {
	_, stores := openGroups(t, t.TempDir(), 1)
	s := stores[0]
	s.wmu.Lock()
	called := false
	queued := s.SaveQueued(hardState(1, 1, 0), ents(1, 2, 1), nil, func(error) { called = true })
	s.wmu.Unlock()
	require.False(t, queued)
	require.False(t, called)
	li, err := s.LastIndex()
	require.NoError(t, err)
	require.Zero(t, li)
	c := make(chan error, 1)
	require.True(t, s.SaveQueued(hardState(1, 1, 0), ents(1, 2, 1), nil, func(err error) { c <- err }))
	require.NoError(t, <-c)
	li, err = s.LastIndex()
	require.NoError(t, err)
	require.EqualValues(t, 1, li)
}
