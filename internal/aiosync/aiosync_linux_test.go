//go:build linux && (amd64 || arm64)

package aiosync

import (
	"testing"
	"unsafe"
)

// The control block and the completion have the kernel's layout.
func TestABILayout(t *testing.T) {
	var cb iocb
	if s := unsafe.Sizeof(cb); s != 64 {
		t.Fatalf("iocb is %d bytes, want 64", s)
	}
	for name, off := range map[string]uintptr{"opcode": unsafe.Offsetof(cb.opcode), "fildes": unsafe.Offsetof(cb.fildes), "flags": unsafe.Offsetof(cb.flags), "resfd": unsafe.Offsetof(cb.resfd)} {
		want := map[string]uintptr{"opcode": 16, "fildes": 20, "flags": 56, "resfd": 60}[name]
		if off != want {
			t.Errorf("iocb.%s at offset %d, want %d", name, off, want)
		}
	}
	var ev ioEvent
	if s, off := unsafe.Sizeof(ev), unsafe.Offsetof(ev.res); s != 32 || off != 16 {
		t.Fatalf("io_event is %d bytes with res at %d, want 32 and 16", s, off)
	}
}
