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
