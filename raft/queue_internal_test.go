package raft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// A queue that holds one item at a time, as a busy node's apply queue
// mostly does, keeps its buffer: a push after the pop that emptied it
// allocates nothing (it allocated every time, before). An idle node's
// release still lets the buffer go.
func TestQueueOneAtATimeDoesNotAllocate(t *testing.T) {
	var q queue[applyTask]
	q.push(applyTask{})
	q.pop()
	if n := testing.AllocsPerRun(100, func() {
		q.push(applyTask{})
		if _, ok := q.pop(); !ok {
			t.Fatal("pop found nothing")
		}
	}); n != 0 {
		t.Fatalf("%.1f allocations per push and pop, want 0", n)
	}
	q.release()
	if q.items != nil {
		t.Fatal("release kept the empty queue's buffer")
	}
	for i := range 3 {
		q.push(applyTask{confStates: make([]*raftpb.ConfState, i)})
	}
	for i := range 3 {
		if v, ok := q.pop(); !ok || len(v.confStates) != i {
			t.Fatalf("pop %d: %v, %d conf states: want the items in order", i, ok, len(v.confStates))
		}
	}
	if _, ok := q.pop(); ok || q.len() != 0 {
		t.Fatal("pop found an item in an empty queue")
	}
}
