package transport

import (
	"testing"
	"unsafe"
)

// TestGroupSizeClasses: a group's Transport, with the 8-byte header the Go
// runtime puts before an object of more than 512 bytes that holds
// pointers, fits the 640-byte size class (it took 896), and each of its
// peers the 288-byte class (288 plus 176 for its counters before), and
// each peer's flow on its host link the 80-byte class (96 before). A host
// holds one Transport and a peer and a flow per other member for each
// replica of its many groups (see "Memory of an idle group" in docs/architecture.md).
func TestGroupSizeClasses(t *testing.T) {
	if size := unsafe.Sizeof(Transport{}) + 8; size > 640 {
		t.Errorf("a Transport takes %d bytes with its allocation header: over the 640-byte size class", size)
	}
	if size := unsafe.Sizeof(peer{}); size > 288 {
		t.Errorf("a peer takes %d bytes: over the 288-byte size class", size)
	}
	if size := unsafe.Sizeof(flow{}); size > 80 {
		t.Errorf("a flow takes %d bytes: over the 80-byte size class", size)
	}
}
