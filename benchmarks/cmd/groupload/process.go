package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
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

// gcStats are the Go collector's cycles so far and the CPU it took (its
// mark workers, assists and pauses, as runtime/metrics estimates them).
type gcStats struct {
	cycles uint64
	cpu    time.Duration
}

func readGC() gcStats {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	var g gcStats
	if s[0].Value.Kind() == metrics.KindUint64 {
		g.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		g.cpu = time.Duration(s[1].Value.Float64() * float64(time.Second))
	}
	return g
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

func writeHeapProfile(name string) error { return writeProfile("heap", name) }

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

// allocWindow is -allocprofile's measure of one window: the process's
// allocations (runtime.MemStats) and allocs profiles at its two ends.
type allocWindow struct {
	name           string
	bytes, objects uint64
}

// startAllocs starts an allocation window: it writes the allocs profile
// to name+".base" and reads the allocation counters. A GC first, since
// the profile shows the allocations as of the last completed cycle.
func startAllocs(name string) (*allocWindow, error) {
	runtime.GC()
	if err := writeProfile("allocs", name+".base"); err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &allocWindow{name: name, bytes: ms.TotalAlloc, objects: ms.Mallocs}, nil
}

// stop ends the window: the counters' deltas, then the allocs profile to
// the window's name (after a GC, for the same reason).
func (a *allocWindow) stop() error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	a.bytes, a.objects = ms.TotalAlloc-a.bytes, ms.Mallocs-a.objects
	runtime.GC()
	return writeProfile("allocs", a.name)
}

// line says what the window allocated per write.
func (a *allocWindow) line(writes int) string {
	if writes == 0 {
		return fmt.Sprintf("allocated in the window: %d bytes, %d objects, no write", a.bytes, a.objects)
	}
	return fmt.Sprintf("allocated in the window per write (the process: 3 hosts and the writers): %.0f bytes, %.1f objects; profiles %s.base and %s",
		float64(a.bytes)/float64(writes), float64(a.objects)/float64(writes), a.name, a.name)
}

// writeProfile writes the runtime/pprof profile kind to name.
func writeProfile(kind, name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(kind).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
