package kv_test

import (
	"bytes"
	"errors"
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
