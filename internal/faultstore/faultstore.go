// Package faultstore wraps a raft storage (a *storage.Store in practice) to
// inject disk faults for the node's tests, in the manner of pebble's errorfs:
// fail the next N Saves, fail once N bytes have been written (a full disk),
// delay or hold Saves (a slow fsync), and fail snapshot creation or receipt.
// Every fault is a toggle that tests change at run time, from any goroutine.
//
// An injected Save failure writes nothing: the wrapped store's Save is not
// called, so the fault is a write that failed before its commit, as an
// fsync error is.
package faultstore

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/understudy-raft/understudy/storage"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrInjected is the error of every injected fault (wrapped, with the
// operation).
var ErrInjected = errors.New("faultstore: injected fault")

// Storage is the method set of *storage.Store that a Store wraps: etcd's
// raft.Storage and the write, snapshot and lifecycle methods.
type Storage interface {
	InitialState() (*raftpb.HardState, *raftpb.ConfState, error)
	Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error)
	Term(i uint64) (uint64, error)
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	Snapshot() (*raftpb.Snapshot, error)

	Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error
	CreateSnapshot(index uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error)
	Compact(index uint64) error
	ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error
	OpenSnapshot(snap *raftpb.Snapshot) (rc io.ReadCloser, size int64, err error)

	Identity() (storage.Identity, error)
	SetIdentity(id storage.Identity) error
	MarkRemoved() error
	Close() error
}

var _ Storage = (*storage.Store)(nil)

// Store wraps a Storage and injects the faults set on it. Reads pass
// through unchanged. The zero fault set injects nothing. Safe for concurrent
// use.
type Store struct {
	inner Storage

	mu           sync.Mutex
	failSaves    int           // Saves left to fail
	failSnaps    int           // CreateSnapshots left to fail
	failRecvs    int           // ReceiveSnapshots left to fail
	budget       int64         // bytes left before writes fail; < 0: no limit
	delay        time.Duration // added to every Save
	hold         *gate         // non-nil: Saves wait until it opens
	beforeSave   func(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error
	saves        atomic.Uint64
	injected     atomic.Uint64
	bytesWritten atomic.Int64
}

// Wrap returns a Store injecting faults into inner's writes.
func Wrap(inner Storage) *Store {
	return &Store{inner: inner, budget: -1}
}

// Inner returns the wrapped storage.
func (s *Store) Inner() Storage { return s.inner }

// FailSaves makes the next n Saves fail with ErrInjected, writing nothing.
// n = 0 cancels it.
func (s *Store) FailSaves(n int) {
	s.mu.Lock()
	s.failSaves = n
	s.mu.Unlock()
}

// FailAfterBytes lets n more bytes be written — entries (their protobuf
// size) and hard states in Saves, and snapshot files — and fails every write
// after that with ErrInjected, as a full disk does. A Save that does not fit
// writes nothing; a snapshot that does not fit fails part-way through, and
// the wrapped store removes its partial file. n < 0 removes the limit.
func (s *Store) FailAfterBytes(n int64) {
	s.mu.Lock()
	s.budget = n
	s.mu.Unlock()
}

// SetSaveDelay adds d before every Save (a slow fsync); 0 removes it. The
// delay runs before the wrapped Save, outside any lock of this Store.
func (s *Store) SetSaveDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// HoldSaves makes every Save wait, before writing, until release is called:
// a deterministic "fsync in progress" for tests that must act while a write
// is pending. Calling release more than once is harmless.
func (s *Store) HoldSaves() (release func()) {
	g := &gate{ch: make(chan struct{})}
	s.mu.Lock()
	old := s.hold
	s.hold = g
	s.mu.Unlock()
	old.open()
	return func() {
		s.mu.Lock()
		if s.hold == g {
			s.hold = nil
		}
		s.mu.Unlock()
		g.open()
	}
}

// gate is a channel closed once.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) open() {
	if g != nil {
		g.once.Do(func() { close(g.ch) })
	}
}

// FailSnapshots makes the next n CreateSnapshots fail with ErrInjected
// without writing anything. n = 0 cancels it.
func (s *Store) FailSnapshots(n int) {
	s.mu.Lock()
	s.failSnaps = n
	s.mu.Unlock()
}

// FailReceives makes the next n ReceiveSnapshots fail with ErrInjected after
// draining nothing from the stream. n = 0 cancels it.
func (s *Store) FailReceives(n int) {
	s.mu.Lock()
	s.failRecvs = n
	s.mu.Unlock()
}

// BeforeSave sets a hook run at the start of every Save, before any other
// fault; a non-nil error fails the Save with it (nothing written). Use it for
// crash points ("stop the node before this Save"). nil removes it.
func (s *Store) BeforeSave(hook func(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error) {
	s.mu.Lock()
	s.beforeSave = hook
	s.mu.Unlock()
}

// Reset removes every fault and releases held Saves.
func (s *Store) Reset() {
	s.mu.Lock()
	hold := s.hold
	s.failSaves, s.failSnaps, s.failRecvs, s.budget, s.delay, s.hold, s.beforeSave = 0, 0, 0, -1, 0, nil, nil
	s.mu.Unlock()
	hold.open()
}

// Stats are counters since Wrap.
type Stats struct {
	// Saves counts Saves that reached the wrapped store and succeeded.
	Saves uint64
	// Injected counts injected failures of any kind.
	Injected uint64
	// BytesWritten counts the bytes charged against FailAfterBytes.
	BytesWritten int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Saves: s.saves.Load(), Injected: s.injected.Load(), BytesWritten: s.bytesWritten.Load()}
}

func (s *Store) inject(op string, detail string) error {
	s.injected.Add(1)
	if detail != "" {
		return fmt.Errorf("%w: %s: %s", ErrInjected, op, detail)
	}
	return fmt.Errorf("%w: %s", ErrInjected, op)
}

// charge takes n bytes from the budget, reporting whether they fit.
// Caller holds mu.
func (s *Store) chargeLocked(n int64) bool {
	if s.budget < 0 {
		s.bytesWritten.Add(n)
		return true
	}
	if n > s.budget {
		s.budget = 0
		return false
	}
	s.budget -= n
	s.bytesWritten.Add(n)
	return true
}

// Save injects the faults set for Saves, then calls the wrapped Save.
func (s *Store) Save(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	s.mu.Lock()
	hook, delay, hold := s.beforeSave, s.delay, s.hold
	s.mu.Unlock()
	if hook != nil {
		if err := hook(hs, ents, snap); err != nil {
			s.injected.Add(1)
			return err
		}
	}
	if hold != nil {
		<-hold.ch
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	s.mu.Lock()
	if s.failSaves > 0 {
		s.failSaves--
		s.mu.Unlock()
		return s.inject("save", "")
	}
	n := int64(0)
	for _, e := range ents {
		n += int64(proto.Size(e))
	}
	if hs != nil {
		n += int64(proto.Size(hs))
	}
	if !s.chargeLocked(n) {
		s.mu.Unlock()
		return s.inject("save", fmt.Sprintf("disk full (%d bytes to write)", n))
	}
	s.mu.Unlock()
	if err := s.inner.Save(hs, ents, snap); err != nil {
		return err
	}
	s.saves.Add(1)
	return nil
}

// budgetWriter charges what goes through it against the byte budget.
type budgetWriter struct {
	s *Store
	w io.Writer
}

func (b budgetWriter) Write(p []byte) (int, error) {
	b.s.mu.Lock()
	ok := b.s.chargeLocked(int64(len(p)))
	b.s.mu.Unlock()
	if !ok {
		return 0, b.s.inject("write snapshot", "disk full")
	}
	return b.w.Write(p)
}

// CreateSnapshot fails if FailSnapshots says so, and otherwise writes through
// the byte budget.
func (s *Store) CreateSnapshot(index uint64, cs *raftpb.ConfState, write func(io.Writer) error) (*raftpb.Snapshot, error) {
	s.mu.Lock()
	if s.failSnaps > 0 {
		s.failSnaps--
		s.mu.Unlock()
		return nil, s.inject("create snapshot", "")
	}
	s.mu.Unlock()
	return s.inner.CreateSnapshot(index, cs, func(w io.Writer) error {
		return write(budgetWriter{s: s, w: w})
	})
}

// ReceiveSnapshot fails if FailReceives says so, and otherwise reads the
// stream through the byte budget.
func (s *Store) ReceiveSnapshot(snap *raftpb.Snapshot, r io.Reader) error {
	s.mu.Lock()
	if s.failRecvs > 0 {
		s.failRecvs--
		s.mu.Unlock()
		return s.inject("receive snapshot", "")
	}
	s.mu.Unlock()
	return s.inner.ReceiveSnapshot(snap, budgetReader{s: s, r: r})
}

// budgetReader charges what is read (to be written to a file) against the
// byte budget.
type budgetReader struct {
	s *Store
	r io.Reader
}

func (b budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.s.mu.Lock()
		ok := b.s.chargeLocked(int64(n))
		b.s.mu.Unlock()
		if !ok {
			return 0, b.s.inject("receive snapshot", "disk full")
		}
	}
	return n, err
}

// The rest pass through.

// InitialState calls the wrapped store.
func (s *Store) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	return s.inner.InitialState()
}

// Entries calls the wrapped store.
func (s *Store) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	return s.inner.Entries(lo, hi, maxSize)
}

// Term calls the wrapped store.
func (s *Store) Term(i uint64) (uint64, error) { return s.inner.Term(i) }

// FirstIndex calls the wrapped store.
func (s *Store) FirstIndex() (uint64, error) { return s.inner.FirstIndex() }

// LastIndex calls the wrapped store.
func (s *Store) LastIndex() (uint64, error) { return s.inner.LastIndex() }

// Snapshot calls the wrapped store.
func (s *Store) Snapshot() (*raftpb.Snapshot, error) { return s.inner.Snapshot() }

// Compact calls the wrapped store.
func (s *Store) Compact(index uint64) error { return s.inner.Compact(index) }

// OpenSnapshot calls the wrapped store.
func (s *Store) OpenSnapshot(snap *raftpb.Snapshot) (io.ReadCloser, int64, error) {
	return s.inner.OpenSnapshot(snap)
}

// Identity calls the wrapped store.
func (s *Store) Identity() (storage.Identity, error) { return s.inner.Identity() }

// SetIdentity calls the wrapped store.
func (s *Store) SetIdentity(id storage.Identity) error { return s.inner.SetIdentity(id) }

// MarkRemoved calls the wrapped store.
func (s *Store) MarkRemoved() error { return s.inner.MarkRemoved() }

// Close releases held Saves and closes the wrapped store.
func (s *Store) Close() error {
	s.mu.Lock()
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	hold.open()
	return s.inner.Close()
}

var _ Storage = (*Store)(nil)
