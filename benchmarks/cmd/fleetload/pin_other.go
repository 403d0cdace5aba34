//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

// pinSelf: CPU affinity is Linux only here.
func pinSelf(cpus []int) error {
	return fmt.Errorf("%w: CPU affinity is supported on Linux only, not %s", errPin, runtime.GOOS)
}

// pinnedCPUs: unknown outside Linux.
func pinnedCPUs() []int { return nil }

// cpuTimes: unknown outside Linux.
func cpuTimes(cpus []int) (busy, total uint64, err error) {
	return 0, 0, fmt.Errorf("CPU times are read on Linux only, not %s", runtime.GOOS)
}
