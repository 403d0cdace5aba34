package aiosync

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestFlushesAFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plain := 0
	for i := range 10 {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		flush := Data
		if i%2 == 1 {
			flush = Full
		}
		aio0, direct0 := Stats()
		if err := flush(f.Fd(), func() error { plain++; return f.Sync() }); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		aio1, direct1 := Stats()
		if Available() && (aio1 != aio0+1 || direct1 != direct0) {
			t.Fatalf("flush %d: AIO is available, but the flush counted %d through it and %d plain", i, aio1-aio0, direct1-direct0)
		}
	}
	if Available() && plain != 0 {
		t.Fatalf("AIO is available, but %d flushes ran the plain call", plain)
	}
	t.Logf("AIO available: %t", Available())
}

// A descriptor that is not open fails as the plain call does, whichever
// path the flush takes.
func TestFlushOfAClosedDescriptorFails(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	fd := f.Fd()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	err = Data(fd, func() error { return syscall.EBADF })
	if !errors.Is(err, syscall.EBADF) {
		t.Fatalf("flush of a closed descriptor: %v, want EBADF", err)
	}
	if !Available() {
		t.Log("AIO not available: the plain call's error")
	}
}

// More flushes at once than the context holds: the ones over it run the
// plain call; every one completes and reports success.
func TestManyFlushesAtOnce(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 4*slots)
	for i := range 4 * slots {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, string(rune('a'+i%26))+string(rune('a'+i/26))))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for range 3 {
				if _, err := f.Write([]byte("x")); err != nil {
					errs <- err
					return
				}
				if err := Data(f.Fd(), f.Sync); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if Available() {
		if c := get(); c.inFlight() != 0 {
			t.Fatalf("%d slots still taken after every flush returned", c.inFlight())
		}
	}
}
