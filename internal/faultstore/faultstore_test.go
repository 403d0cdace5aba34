package faultstore

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/understudy-raft/understudy/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T) *Store {
	t.Helper()
	inner, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	require.NoError(t, err)
	s := Wrap(inner)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ents(lo, hi uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i < hi; i++ {
		out = append(out, &raftpb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Data: bytes.Repeat([]byte{'x'}, 100)})
	}
	return out
}

func last(t *testing.T, s *Store) uint64 {
	t.Helper()
	li, err := s.LastIndex()
	require.NoError(t, err)
	return li
}

func TestFailSaves(t *testing.T) {
	s := newStore(t)
	require.NoError(t, s.Save(nil, ents(1, 3), nil))
	s.FailSaves(2)
	for range 2 {
		err := s.Save(nil, ents(3, 5), nil)
		require.ErrorIs(t, err, ErrInjected)
		require.Equal(t, uint64(2), last(t, s), "nothing written")
	}
	require.NoError(t, s.Save(nil, ents(3, 5), nil))
	require.Equal(t, uint64(4), last(t, s))
	st := s.Stats()
	require.Equal(t, uint64(2), st.Saves)
	require.Equal(t, uint64(2), st.Injected)
}

func TestFailAfterBytes(t *testing.T) {
	s := newStore(t)
	one := int64(proto.Size(ents(1, 2)[0]))
	s.FailAfterBytes(3*one + one/2)
	require.NoError(t, s.Save(nil, ents(1, 3), nil))
	require.NoError(t, s.Save(nil, ents(3, 4), nil))
	err := s.Save(nil, ents(4, 5), nil)
	require.ErrorIs(t, err, ErrInjected)
	require.ErrorContains(t, err, "disk full")
	require.Equal(t, uint64(3), last(t, s))
	require.ErrorIs(t, s.Save(nil, ents(4, 5), nil), ErrInjected, "the disk stays full")

	// Snapshots fail part-way and leave nothing recorded.
	_, err = s.CreateSnapshot(2, &raftpb.ConfState{Voters: []uint64{1}}, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 1<<20))
		return err
	})
	require.ErrorIs(t, err, ErrInjected)
	snap, err := s.Snapshot()
	require.NoError(t, err)
	require.True(t, raft.IsEmptySnap(snap))

	s.FailAfterBytes(-1)
	require.NoError(t, s.Save(nil, ents(4, 5), nil))
	require.Equal(t, 4*one, s.Stats().BytesWritten)
}

func TestFailSnapshotsAndReceives(t *testing.T) {
	s := newStore(t)
	require.NoError(t, s.Save(nil, ents(1, 5), nil))
	s.FailSnapshots(1)
	write := func(w io.Writer) error { _, err := w.Write([]byte("state")); return err }
	_, err := s.CreateSnapshot(3, nil, write)
	require.ErrorIs(t, err, ErrInjected)
	snap, err := s.CreateSnapshot(3, nil, write)
	require.NoError(t, err)

	// The transport's path: receive the snapshot's file through the wrapper.
	s.FailReceives(1)
	require.ErrorIs(t, s.ReceiveSnapshot(snap, bytes.NewReader([]byte("state"))), ErrInjected)
	require.NoError(t, s.ReceiveSnapshot(snap, bytes.NewReader([]byte("state"))))

	s.FailAfterBytes(2)
	err = s.ReceiveSnapshot(snap, bytes.NewReader([]byte("state")))
	require.ErrorIs(t, err, ErrInjected)
}

// TestHoldSaves holds a Save "in fsync" deterministically: the hook says it
// arrived, and it cannot complete before release.
func TestHoldSaves(t *testing.T) {
	s := newStore(t)
	arrived := make(chan struct{}, 1)
	s.BeforeSave(func(*raftpb.HardState, []*raftpb.Entry, *raftpb.Snapshot) error {
		arrived <- struct{}{}
		return nil
	})
	release := s.HoldSaves()
	done := make(chan error, 1)
	go func() { done <- s.Save(nil, ents(1, 3), nil) }()
	<-arrived
	require.Zero(t, last(t, s), "held: not written")
	release()
	require.NoError(t, <-done)
	require.Equal(t, uint64(2), last(t, s))
	release() // harmless
	// Reset releases a hold too.
	release = s.HoldSaves()
	go func() { done <- s.Save(nil, ents(3, 4), nil) }()
	<-arrived
	s.Reset()
	require.NoError(t, <-done)
	release()
}

func TestBeforeSaveHook(t *testing.T) {
	s := newStore(t)
	crash := errors.New("crash point")
	s.BeforeSave(func(_ *raftpb.HardState, ents []*raftpb.Entry, _ *raftpb.Snapshot) error {
		if len(ents) > 0 && ents[0].GetIndex() == 3 {
			return crash
		}
		return nil
	})
	require.NoError(t, s.Save(nil, ents(1, 3), nil))
	require.ErrorIs(t, s.Save(nil, ents(3, 4), nil), crash)
	s.BeforeSave(nil)
	require.NoError(t, s.Save(nil, ents(3, 4), nil))
}

func TestSaveDelay(t *testing.T) {
	s := newStore(t)
	s.SetSaveDelay(time.Millisecond)
	require.NoError(t, s.Save(nil, ents(1, 2), nil))
	s.SetSaveDelay(0)
	require.NoError(t, s.Save(nil, ents(2, 3), nil))
}

// TestToggleConcurrently flips every fault while Saves and reads run; run
// with -race.
func TestToggleConcurrently(t *testing.T) {
	s := newStore(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 5 {
			case 0:
				s.FailSaves(1)
			case 1:
				s.FailAfterBytes(1 << 20)
			case 2:
				s.SetSaveDelay(time.Microsecond)
			case 3:
				s.HoldSaves()()
			case 4:
				s.Reset()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = s.Entries(1, last(t, s)+1, 1<<20)
		}
	}()
	next := uint64(1)
	for range 300 {
		err := s.Save(nil, ents(next, next+1), nil)
		if err == nil {
			next++
			continue
		}
		require.ErrorIs(t, err, ErrInjected)
	}
	close(stop)
	wg.Wait()
	require.Equal(t, next-1, last(t, s))
}

func TestPassThrough(t *testing.T) {
	s := newStore(t)
	require.NoError(t, s.SetIdentity(storage.Identity{ClusterID: 1, MemberID: 2}))
	id, err := s.Identity()
	require.NoError(t, err)
	require.Equal(t, storage.Identity{ClusterID: 1, MemberID: 2}, id)
	require.NoError(t, s.Save(&raftpb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(2)}, ents(1, 4), nil))
	hs, _, err := s.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(2), hs.GetCommit())
	fi, _ := s.FirstIndex()
	require.Equal(t, uint64(1), fi)
	term, err := s.Term(3)
	require.NoError(t, err)
	require.Equal(t, uint64(1), term)
	require.NoError(t, s.Compact(2))
	snap, err := s.CreateSnapshot(3, nil, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
	require.NoError(t, err)
	rc, size, err := s.OpenSnapshot(snap)
	require.NoError(t, err)
	require.EqualValues(t, 1, size)
	require.NoError(t, rc.Close())
	require.NotNil(t, s.Inner())
	require.NoError(t, s.MarkRemoved())
}
