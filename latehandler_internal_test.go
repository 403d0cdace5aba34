package understudy

import (
	"testing"
	"unsafe"

	"github.com/understudy-raft/understudy/raft"
)

// TestLateHandlerIsAPointer: a group's transport handler holds its node by
// one pointer (it held a lock and an interface: 48 bytes for each of a
// host's many groups), nil before the node is made, and hands every call
// to the node's PeerHandler after.
func TestLateHandlerIsAPointer(t *testing.T) {
	if size := unsafe.Sizeof(lateHandler{}); size > 8 {
		t.Errorf("a lateHandler takes %d bytes, want 8", size)
	}
	var l lateHandler
	if l.get() != nil {
		t.Fatal("a handler before its node hands calls to something")
	}
	l.ReportUnreachable(2) // dropped, not a panic
	n := new(raft.Node)
	l.set(n)
	if h := l.get(); h == nil || h != n.PeerHandler() {
		t.Fatalf("handler %v after set, want the node's", h)
	}
}
