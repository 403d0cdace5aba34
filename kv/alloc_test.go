package kv_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/understudy-raft/understudy/kv"
	"github.com/understudy-raft/understudy/raft"
)

// Applying a put allocates its key and value together, once (they were
// two allocations), and a compare-and-set compares its previous value
// without a copy; the store keeps no more than the live pairs: a put that
// overwrites a key lets the old key and value go together.
func TestApplyAllocations(t *testing.T) {
	s := kv.New()
	value := strings.Repeat("v", 240)
	put, cas := kv.Put("key", value), kv.CAS("key", value, value)
	batch, results := []raft.Command{{Index: 1}}, make([]raft.Result, 1)
	applyOne := func(cmd []byte) func() {
		return func() {
			batch[0].Data = cmd
			s.Apply(batch, results)
			if results[0].Err != nil {
				t.Fatal(results[0].Err)
			}
		}
	}
	applyOne(put)()
	for _, c := range []struct {
		name string
		cmd  []byte
	}{{"put", put}, {"cas", cas}} {
		if n := testing.AllocsPerRun(100, applyOne(c.cmd)); n != 1 {
			t.Errorf("%s of an existing key: %.1f allocations, want 1 (its key and value)", c.name, n)
		}
	}

	// 64 MiB of values put to one key: what stays is one pair.
	big := kv.Put("key", strings.Repeat("x", 1<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 64 {
		applyOne(big)()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Fatalf("the heap grew by %d bytes after 64 puts of 1 MiB to one key: old values are kept", grown)
	}
	if v, _ := s.Get("key"); len(v) != 1<<20 {
		t.Fatalf("the key's value has %d bytes, want %d", len(v), 1<<20)
	}
}
