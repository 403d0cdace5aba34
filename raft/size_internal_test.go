package raft

import (
	"testing"
	"unsafe"
)

// TestNodeSizeClass: a Node, with the 8-byte header the Go runtime puts
// before an object of more than 512 bytes that holds pointers, fits the
// 1,792-byte size class. A host holds one per replica of its many groups
// (see "Memory of an idle group" in docs/architecture.md): it was 2,224
// bytes, in the 2,304 class; the leader's bookkeeping, the relay state and
// the apply task's buffers now live apart, made on use.
func TestNodeSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(Node{}) + 8; size > 1792 {
		t.Fatalf("a Node takes %d bytes with its allocation header: over the 1,792-byte size class", size)
	}
}
