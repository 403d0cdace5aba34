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
