package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinSelf binds every thread of this process to cpus and sets GOMAXPROCS
// to their count. sched_setaffinity binds one thread (pid 0 is the calling
// thread, not the process), and a new thread inherits the mask of the
// thread that made it: so every thread listed in /proc/self/task is bound,
// again until a pass finds none unbound (one the runtime started during the
// pass). The runtime sets GOMAXPROCS from the mask at start only (and Go
// 1.25+ re-reads it about once a second): the process is already running,
// so GOMAXPROCS is set here. A CPU that does not exist, or that this
// process may not use (a cpuset), is an error that leaves the process as it
// was, as is an empty list.
func pinSelf(cpus []int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("%w: no CPU", errPin)
	}
	online, err := onlineCPUs()
	if err != nil {
		return err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if !slices.Contains(online, c) {
			return fmt.Errorf("%w: CPU %d does not exist or is offline (online: %s)", errPin, c, formatCPUs(online))
		}
		set.Set(c)
	}
	// A CPU outside the process's cpuset is dropped by the kernel (all of
	// them: EINVAL): the first thread's mask is read back, and restored if
	// it is not the set.
	var before, got unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return fmt.Errorf("%w: sched_getaffinity: %v", errPin, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = unix.SchedSetaffinity(0, &set)
	if err == nil {
		err = unix.SchedGetaffinity(0, &got)
	}
	if err != nil || got != set {
		_ = unix.SchedSetaffinity(0, &before)
		return fmt.Errorf("%w: CPUs %s are not all available to this process (it may use %s; %v)", errPin, formatCPUs(cpus), formatCPUs(cpusOf(&got)), err)
	}
	for pass := 0; ; pass++ {
		if pass == 10 {
			return fmt.Errorf("%w: threads still unbound after %d passes", errPin, pass)
		}
		tids, err := threads()
		if err != nil {
			return err
		}
		bound := 0
		for _, tid := range tids {
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("%w: sched_setaffinity of thread %d: %v", errPin, tid, err)
			}
			bound++
		}
		if bound == 0 {
			break
		}
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

// pinnedCPUs is the calling thread's CPU mask (every thread's, after
// pinSelf).
func pinnedCPUs() []int {
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		return nil
	}
	return cpusOf(&cur)
}

func cpusOf(s *unix.CPUSet) []int {
	var out []int
	for c := range maxCPU + 1 {
		if s.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// onlineCPUs lists the machine's online CPUs.
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPin, err)
	}
	return parseCPUs(strings.TrimSpace(string(b)))
}

// threads lists this process's thread IDs.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPin, err)
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	slices.Sort(out)
	return out, nil
}

// cpuTimes returns the busy and total clock ticks of cpus so far, from
// /proc/stat (busy: all but idle and iowait).
func cpuTimes(cpus []int) (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || !slices.Contains(cpus, n) {
			continue
		}
		found++
		for i, v := range f[1:min(len(f), 9)] { // guest times are in user's already
			t, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
			}
			total += t
			if i != 3 && i != 4 { // idle, iowait
				busy += t
			}
		}
	}
	if found != len(cpus) {
		return 0, 0, fmt.Errorf("/proc/stat: %d of CPUs %v", found, cpus)
	}
	return busy, total, nil
}
