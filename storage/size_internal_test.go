package storage

import (
	"testing"
	"unsafe"
)

// TestStoreSizeClass: a Store, with the 8-byte header the Go runtime puts
// before an object of more than 512 bytes that holds pointers, fits the
// 704-byte size class (it was 760 bytes, in the 768 class: its directory,
// file and logger are now its Engine's). A host holds one per replica of
// its many groups (see "Memory of an idle group" in docs/architecture.md).
func TestStoreSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(Store{}) + 8; size > 704 {
		t.Fatalf("a Store takes %d bytes with its allocation header: over the 704-byte size class", size)
	}
}
