package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// errPin is the error class of -pin: a bad CPU list, a CPU that does not
// exist or is not available to the process, or an OS without CPU affinity.
var errPin = errors.New("pin")

// pinning is -pin: the CPUs of the driver and the voter processes, and of
// the standby processes. nil: no pinning.
type pinning struct {
	voters   []int
	standbys []int
}

func (p *pinning) String() string {
	if p == nil {
		return "off"
	}
	return fmt.Sprintf("driver and voters on CPUs %s, standbys on CPUs %s", formatCPUs(p.voters), formatCPUs(p.standbys))
}

// parsePin parses -pin: "VOTERS:STANDBYS", each a CPU list as taskset's
// ("0", "0,2", "0-3", "0-1,4"); "" or "off": no pinning.
func parsePin(s string) (*pinning, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "off" {
		return nil, nil
	}
	v, sb, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("%w: %q is not VOTERS:STANDBYS (e.g. 0:1)", errPin, s)
	}
	voters, err := parseCPUs(v)
	if err != nil {
		return nil, err
	}
	standbys, err := parseCPUs(sb)
	if err != nil {
		return nil, err
	}
	return &pinning{voters: voters, standbys: standbys}, nil
}

// maxCPU bounds a CPU number (unix.CPUSet holds 1024).
const maxCPU = 1023

// parseCPUs parses a CPU list ("0", "0,2", "0-3", "0-1,4") into sorted,
// distinct CPU numbers.
func parseCPUs(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b > maxCPU {
			return nil, fmt.Errorf("%w: bad CPU list %q (want e.g. 0, 0,2 or 0-3)", errPin, s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatCPUs is parseCPUs' inverse for a comma list ("0,1").
func formatCPUs(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
