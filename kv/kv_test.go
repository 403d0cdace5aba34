package kv_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

func apply(s *kv.Store, cmds ...[]byte) []raft.Result {
	batch := make([]raft.Command, len(cmds))
	for i, c := range cmds {
		batch[i] = raft.Command{Index: uint64(i + 1), Data: c}
	}
	results := make([]raft.Result, len(cmds))
	s.Apply(batch, results)
	return results
}

func TestCommandsAndResults(t *testing.T) {
	s := kv.New()
	res := apply(s,
		kv.Put("a", "1"),
		kv.CAS("a", "1", "2"),  // swaps
		kv.CAS("a", "1", "3"),  // fails: a is 2
		kv.CAS("b", "", "new"), // "" matches a missing key
		kv.Delete("b"),
		[]byte{9}, // not a command
		append([]byte{9}, kv.Put("x", "y")[1:]...), // decodes, unknown op
	)
	want := []error{nil, nil, kv.ErrCompareFailed, nil, nil, kv.ErrBadCommand, kv.ErrBadCommand}
	for i, w := range want {
		if !errors.Is(res[i].Err, w) {
			t.Fatalf("command %d: %v, want %v", i, res[i].Err, w)
		}
	}
	if string(res[2].Value) != "2" {
		t.Fatalf("a failed compare-and-swap's value is %q, want the current value", res[2].Value)
	}
	if v, _ := s.Lookup([]byte("a")); string(v) != "2" {
		t.Fatalf("a = %q", v)
	}
	if _, ok := s.Get("b"); ok {
		t.Fatal("b was deleted")
	}
}

func TestSnapshotRestore(t *testing.T) {
	s := kv.New()
	apply(s, kv.Put("a", "1"), kv.Put("k/with/slashes", "v"))
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(s, kv.Put("after", "snapshot")) // not in the snapshot
	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	r := kv.New()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got := r.Clone(); len(got) != 2 || got["a"] != "1" || got["k/with/slashes"] != "v" {
		t.Fatalf("restored %v", got)
	}
	if err := kv.New().Restore(bytes.NewReader([]byte{5, 1})); err == nil {
		t.Fatal("a truncated snapshot restored without an error")
	}
}

func FuzzApply(f *testing.F) {
	f.Add(kv.Put("k", "v"))
	f.Add(kv.CAS("k", "a", "b"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := kv.New()
		apply(s, b) // never panics: a bad command is a result
	})
}

// TestSnapshotIsCopyOnWrite: a snapshot keeps the state of the moment it
// was taken while writes go on, and a second snapshot sees those writes.
func TestSnapshotIsCopyOnWrite(t *testing.T) {
	s := kv.New()
	var cmds [][]byte
	for i := range 1000 {
		cmds = append(cmds, kv.Put(fmt.Sprintf("k%d", i), "old"))
	}
	apply(s, cmds...)
	snap1, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(s, kv.Put("k1", "new"), kv.Delete("k2"), kv.Put("fresh", "x"), kv.CAS("k3", "old", "swapped"))
	snap2, _ := s.Snapshot()
	apply(s, kv.Put("k4", "later"))

	restore := func(snap raft.Snapshot) map[string]string {
		var buf bytes.Buffer
		if err := snap.Write(&buf); err != nil {
			t.Fatal(err)
		}
		r := kv.New()
		if err := r.Restore(&buf); err != nil {
			t.Fatal(err)
		}
		return r.Clone()
	}
	m1, m2 := restore(snap1), restore(snap2)
	if len(m1) != 1000 || m1["k1"] != "old" || m1["k2"] != "old" || m1["fresh"] != "" || m1["k3"] != "old" {
		t.Fatalf("the first snapshot saw later writes: %d keys, k1=%q k2=%q k3=%q", len(m1), m1["k1"], m1["k2"], m1["k3"])
	}
	if len(m2) != 1000 || m2["k1"] != "new" || m2["fresh"] != "x" || m2["k3"] != "swapped" || m2["k4"] != "old" {
		t.Fatalf("the second snapshot: %d keys, k1=%q fresh=%q k3=%q k4=%q", len(m2), m2["k1"], m2["fresh"], m2["k3"], m2["k4"])
	}
	if _, ok := m2["k2"]; ok {
		t.Fatal("a deleted key is in the second snapshot")
	}
	if s.Len() != 1000 || s.Clone()["k4"] != "later" {
		t.Fatalf("the store: %d keys, k4=%q", s.Len(), s.Clone()["k4"])
	}
}

// BenchmarkSnapshotTake is what taking a snapshot costs the apply path
// with 400,000 keys (the shards are frozen, nothing is copied), plus the
// first write after it (one shard copied).
func BenchmarkSnapshotTake(b *testing.B) {
	s := kv.New()
	cmds := make([]raft.Command, 0, 1000)
	for i := range 400_000 {
		cmds = append(cmds, raft.Command{Data: kv.Put(fmt.Sprintf("key-%d", i), "value")})
		if len(cmds) == cap(cmds) {
			s.Apply(cmds, make([]raft.Result, len(cmds)))
			cmds = cmds[:0]
		}
	}
	put := []raft.Command{{Data: kv.Put("key-1", "v2")}}
	res := make([]raft.Result, 1)
	b.ResetTimer()
	for range b.N {
		if _, err := s.Snapshot(); err != nil {
			b.Fatal(err)
		}
		s.Apply(put, res)
	}
}

// BenchmarkSnapshotRestore is a learner's restore of a ~100 MB state
// (100,000 keys of 1 KiB, the catch-up benchmark's size): what it costs
// the cores it shares.
func BenchmarkSnapshotRestore(b *testing.B) {
	s := kv.New()
	val := strings.Repeat("v", 1024)
	cmds := make([]raft.Command, 0, 1000)
	for i := range 100_000 {
		cmds = append(cmds, raft.Command{Data: kv.Put(fmt.Sprintf("c%08d", i), val)})
		if len(cmds) == cap(cmds) {
			s.Apply(cmds, make([]raft.Result, len(cmds)))
			cmds = cmds[:0]
		}
	}
	snap, _ := s.Snapshot()
	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := kv.New()
		if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzRestore: any bytes restore or fail with an error, never a panic, and
// never allocate by what a corrupt length prefix claims.
func FuzzRestore(f *testing.F) {
	s := kv.New()
	apply(s, kv.Put("a", "1"), kv.Put("b", "22"))
	snap, _ := s.Snapshot()
	var buf bytes.Buffer
	_ = snap.Write(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := kv.New()
		if err := r.Restore(bytes.NewReader(b)); err != nil {
			return
		}
		// What restored snapshots again to the same contents.
		snap, err := r.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := snap.Write(&out); err != nil {
			t.Fatal(err)
		}
		r2 := kv.New()
		if err := r2.Restore(&out); err != nil || r2.Len() != r.Len() {
			t.Fatalf("re-restore: %v, %d keys vs %d", err, r2.Len(), r.Len())
		}
	})
}

// The Append forms encode what Put, CAS and Delete do, after what the
// buffer holds, and into a buffer large enough allocate nothing.
func TestAppendCommands(t *testing.T) {
	value := []byte(strings.Repeat("v", 300)) // a length of two uvarint bytes
	for _, c := range []struct {
		name      string
		append    func([]byte) []byte
		reference []byte
	}{
		{"put", func(b []byte) []byte { return kv.AppendPut(b, "key", value) }, kv.Put("key", string(value))},
		{"cas", func(b []byte) []byte { return kv.AppendCAS(b, "key", "old", value) }, kv.CAS("key", "old", string(value))},
		{"cas from missing", func(b []byte) []byte { return kv.AppendCAS(b, "key", "", value) }, kv.CAS("key", "", string(value))},
		{"delete", func(b []byte) []byte { return kv.AppendDelete(b, "key") }, kv.Delete("key")},
	} {
		if got := c.append(nil); !bytes.Equal(got, c.reference) {
			t.Errorf("%s: %x, want %x", c.name, got, c.reference)
		}
		if got := c.append([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), c.reference...)) {
			t.Errorf("%s after a prefix: %x", c.name, got)
		}
		buf := make([]byte, 0, 1024)
		if n := testing.AllocsPerRun(100, func() { buf = c.append(buf[:0]) }); n != 0 {
			t.Errorf("%s into a large enough buffer: %v allocations, want 0", c.name, n)
		}
	}
	s := kv.New()
	if res := apply(s, kv.AppendPut(nil, "a", []byte("1")), kv.AppendCAS(nil, "a", "1", []byte("2")), kv.AppendDelete(nil, "b")); res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("applying appended commands: %+v", res)
	}
	if v, _ := s.Get("a"); v != "2" {
		t.Fatalf("a = %q, want 2", v)
	}
}
