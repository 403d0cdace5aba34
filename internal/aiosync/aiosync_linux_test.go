//go:build linux && (amd64 || arm64)

package aiosync

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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

// A descriptor whose file has no fsync (a pipe) is refused by io_submit
// with EINVAL: the flush runs the plain call, and so does every flush
// after it in the process (the file system has no AIO fsync).
func TestFileWithoutAIOFsyncFallsBack(t *testing.T) {
	c := get()
	if c == nil || c.off.Load() {
		t.Skip("AIO not available here")
	}
	t.Cleanup(func() { c.off.Store(false) })
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, direct0 := Stats()
	plain := errors.New("the plain call's result")
	if err := Data(uintptr(p[1]), func() error { return plain }); err != plain {
		t.Fatalf("flush of a pipe: %v, want the plain call's result", err)
	}
	if _, direct1 := Stats(); direct1 != direct0+1 {
		t.Fatalf("%d plain flushes counted, want 1", direct1-direct0)
	}
	if Available() {
		t.Fatal("AIO still used after the kernel refused a flush with EINVAL")
	}
}
