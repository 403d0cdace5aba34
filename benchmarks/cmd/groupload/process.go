package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"
)

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heapAlloc is HeapAlloc after a full GC.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// openFiles counts the process's open file descriptors (Linux: entries of
// /proc/self/fd; -1 elsewhere).
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileName is the profile file of one configuration: name itself when
// the run has one configuration, otherwise name with -<layout>-<groups>
// before its extension.
func profileName(cfg *config, name, layout string, n int) string {
	if len(cfg.groups)*len(cfg.layouts) == 1 {
		return name
	}
	ext := filepath.Ext(name)
	return fmt.Sprintf("%s-%s-%d%s", strings.TrimSuffix(name, ext), layout, n, ext)
}

func startCPUProfile(name string) (func() error, error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeTrace writes an execution trace of the next d to name.
func writeTrace(ctx context.Context, name string, d time.Duration) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return err
	}
	serr := sleep(ctx, d)
	trace.Stop()
	return errors.Join(serr, f.Close())
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// raiseOpenFiles raises the process's soft limit on open files to its hard
// limit: 10,000 groups need more than a default 1,024.
func raiseOpenFiles() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= l.Max {
		return nil
	}
	l.Cur = l.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}
