package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestDifferential applies random sequences of appends (conflicting ones
// included), hard states, compactions, created and applied snapshots, and
// close-and-reopen to a Store and to etcd's raft.MemoryStorage, and checks
// after every step that every raft.Storage method answers the same.
func TestDifferential(t *testing.T) {
	for seed := range uint64(12) {
		tailBytes := []int64{0, -1, 700}[seed%3]
		t.Run(fmt.Sprintf("seed=%d,tail=%d", seed, tailBytes), func(t *testing.T) {
			d := &diff{
				t:    t,
				rng:  rand.New(rand.NewPCG(seed, 0x5eed)),
				mem:  raft.NewMemoryStorage(),
				opts: Options{Backend: testBackend, NoSync: true, TailCacheBytes: tailBytes},
				dir:  t.TempDir(),
				data: map[uint64][]byte{},
			}
			d.reopen()
			defer func() { _ = d.s.Close() }()
			for step := range 250 {
				d.step = step
				d.randomOp()
				d.compare()
			}
		})
	}
}

type diff struct {
	t    *testing.T
	rng  *rand.Rand
	mem  *raft.MemoryStorage
	s    *Store
	opts Options
	dir  string
	step int
	op   string
	term uint64
	data map[uint64][]byte // snapshot index → state machine bytes
}

func (d *diff) reopen() {
	if d.s != nil {
		require.NoError(d.t, d.s.Close())
	}
	s, err := Open(d.dir, d.opts)
	require.NoError(d.t, err)
	d.s = s
}

func (d *diff) bounds() (first, last uint64) {
	first, _ = d.mem.FirstIndex()
	last, _ = d.mem.LastIndex()
	return first, last
}

func (d *diff) randomEntries(at uint64, n int) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := range n {
		e := &raftpb.Entry{Index: proto.Uint64(at + uint64(i)), Term: proto.Uint64(d.term)}
		switch d.rng.IntN(4) {
		case 0: // no Data, no Type: an empty entry after an election
		case 1:
			e.Type = raftpb.EntryConfChangeV2.Enum()
			e.Data = []byte{}
		default:
			e.Type = raftpb.EntryNormal.Enum()
			e.Data = make([]byte, d.rng.IntN(300))
			for j := range e.Data {
				e.Data[j] = byte(d.rng.Uint32())
			}
		}
		out = append(out, e)
	}
	return out
}

func (d *diff) randomOp() {
	t, rng := d.t, d.rng
	first, last := d.bounds()
	switch r := rng.IntN(100); {
	case r < 45: // append, sometimes conflicting, sometimes overlapping the compacted part
		if rng.IntN(4) == 0 {
			d.term++
		}
		lo := max(first, 2) - 2
		at := lo + rng.Uint64N(last+2-lo)
		if at == 0 {
			at = 1
		}
		es := d.randomEntries(at, rng.IntN(12))
		d.op = fmt.Sprintf("append [%d, %d)", at, at+uint64(len(es)))
		var hs *raftpb.HardState
		if rng.IntN(2) == 0 {
			hs = d.randomHardState(last)
			d.memSetHardState(hs)
		}
		require.NoError(t, d.mem.Append(es))
		require.NoError(t, d.s.Save(hs, es, nil), d.op)
	case r < 55:
		hs := d.randomHardState(last)
		d.op = "hard state"
		d.memSetHardState(hs)
		require.NoError(t, d.s.Save(hs, nil, nil))
	case r < 67: // compact anywhere in [first-1, last+1]
		i := first - 1 + rng.Uint64N(last-first+3)
		d.op = fmt.Sprintf("compact %d", i)
		err := d.s.Compact(i)
		if i > last {
			require.ErrorIs(t, err, ErrOutOfBounds, d.op) // MemoryStorage panics
			return
		}
		require.Equal(t, d.mem.Compact(i), err, d.op)
	case r < 79: // create a snapshot
		snap, _ := d.mem.Snapshot()
		i := first - 1 + rng.Uint64N(last-first+3)
		d.op = fmt.Sprintf("create snapshot %d", i)
		data := []byte(fmt.Sprintf("state at %d", i))
		var cs *raftpb.ConfState
		if rng.IntN(3) > 0 {
			cs = confState(rng.Uint64N(5), rng.Uint64N(5))
		}
		got, err := d.s.CreateSnapshot(i, cs, writeBytes(data))
		switch {
		case i <= snap.GetMetadata().GetIndex():
			require.Equal(t, raft.ErrSnapOutOfDate, err, d.op)
		case i > last:
			require.ErrorIs(t, err, ErrOutOfBounds, d.op)
		case i < first-1:
			require.Equal(t, raft.ErrCompacted, err, d.op)
		default:
			require.NoError(t, err, d.op)
			want, err := d.mem.CreateSnapshot(i, cs, data)
			require.NoError(t, err)
			requireSameSnapshotMeta(t, want, got, d.op)
			d.data[i] = data
		}
	case r < 87: // apply a snapshot from a leader, maybe with entries
		snap, _ := d.mem.Snapshot()
		i := snap.GetMetadata().GetIndex() + rng.Uint64N(last+10-snap.GetMetadata().GetIndex())
		if i == 0 {
			return
		}
		d.term++
		d.op = fmt.Sprintf("apply snapshot %d", i)
		var data []byte
		if rng.IntN(4) > 0 {
			data = []byte(fmt.Sprintf("leader's state at %d", i))
		}
		in := snapshotFor(1, i, d.term, confState(1, 2, 3), data)
		require.NoError(t, d.s.ReceiveSnapshot(in, bytesReader(data)))
		es := d.randomEntries(i+1, rng.IntN(4))
		err := d.s.Save(nil, es, in)
		memSnap := proto.Clone(in).(*raftpb.Snapshot)
		memSnap.Data = data
		if want := d.mem.ApplySnapshot(memSnap); want != nil {
			require.Equal(t, want, err, d.op)
			return
		}
		require.NoError(t, err, d.op)
		require.NoError(t, d.mem.Append(es))
		d.data[i] = data
	case r < 92:
		d.op = "reopen"
		d.reopen()
	default: // a Save that carries nothing
		d.op = "empty save"
		require.NoError(t, d.s.Save(&raftpb.HardState{}, nil, &raftpb.Snapshot{}))
	}
}

func (d *diff) randomHardState(last uint64) *raftpb.HardState {
	return hardState(d.term, d.rng.Uint64N(4), d.rng.Uint64N(last+1))
}

// memSetHardState sets hs on the MemoryStorage as Save does on the Store:
// Save ignores an empty hard state (raft never sends one after a non-empty
// one).
func (d *diff) memSetHardState(hs *raftpb.HardState) {
	if !raft.IsEmptyHardState(hs) {
		require.NoError(d.t, d.mem.SetHardState(hs))
	}
}

func requireSameSnapshotMeta(t *testing.T, want, got *raftpb.Snapshot, op string) {
	t.Helper()
	if !proto.Equal(want.GetMetadata(), got.GetMetadata()) {
		t.Fatalf("%s: snapshot metadata: want %v, got %v", op, want.GetMetadata(), got.GetMetadata())
	}
}

func (d *diff) compare() {
	t, rng, op := d.t, d.rng, fmt.Sprintf("step %d (%s)", d.step, d.op)
	mhs, mcs, _ := d.mem.InitialState()
	hs, cs, err := d.s.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(raftpb.EnsureConfState(proto.Clone(mcs).(*raftpb.ConfState)), cs), "%s: conf state %v vs %v", op, mcs, cs)
	require.Equal(t, raft.IsEmptyHardState(mhs), raft.IsEmptyHardState(hs), op)
	if !raft.IsEmptyHardState(mhs) {
		require.True(t, proto.Equal(mhs, hs), "%s: hard state %v vs %v", op, mhs, hs)
	}
	mfirst, mlast := d.bounds()
	first, err := d.s.FirstIndex()
	require.NoError(t, err)
	last, err := d.s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, mfirst, first, op)
	require.Equal(t, mlast, last, op)
	for i := max(first, 2) - 2; i <= last+2; i++ {
		mt, merr := d.mem.Term(i)
		st, serr := d.s.Term(i)
		require.Equal(t, merr, serr, "%s: Term(%d)", op, i)
		require.Equal(t, mt, st, "%s: Term(%d)", op, i)
	}
	for range 8 {
		lo := max(first, 2) - 1 + rng.Uint64N(last-first+3)
		hi := lo + rng.Uint64N(last+2-min(lo, last+1))
		if hi > last+1 {
			hi = last + 1
		}
		if lo > hi {
			continue
		}
		maxSize := []uint64{0, 100, 1000, raftNoLimit}[rng.IntN(4)]
		me, merr := d.mem.Entries(lo, hi, maxSize)
		se, serr := d.s.Entries(lo, hi, maxSize)
		require.Equal(t, merr, serr, "%s: Entries(%d, %d, %d)", op, lo, hi, maxSize)
		requireEntriesEqual(t, me, se, "%s: Entries(%d, %d, %d)", op, lo, hi, maxSize)
	}
	msnap, _ := d.mem.Snapshot()
	snap, err := d.s.Snapshot()
	require.NoError(t, err)
	requireSameSnapshotMeta(t, msnap, snap, op)
	if !raft.IsEmptySnap(snap) {
		b, err := readSnapshot(t, d.s, snap)
		require.NoError(t, err, op)
		require.Equal(t, string(msnap.GetData()), string(b), op)
	}
}
