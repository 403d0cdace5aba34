package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the member role when the test binary is started as a
// member process by the driver under test.
func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		if err := runMember(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "fleetload member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCommandSize: a write is exactly -size bytes, as the 512 B.
func TestCommandSize(t *testing.T) {
	for _, key := range []string{"w0-0", "w31-999"} {
		if n := len(command(key, 512)); n != 512 {
			t.Errorf("command(%q, 512) is %d bytes", key, n)
		}
	}
}

// TestFleetLoadSmoke runs the tool end to end on both systems with two
// standby processes, briefly, so that it cannot rot: every write commits,
// every figure is there, understudy's standbys are fed through relays, and
// every standby applied every sampled index. With -kill-relays the relay
// killed and restarted leaves the run going.
func TestFleetLoadSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 x 5 member processes with fsync on")
	}
	for _, kill := range []string{"0", "700ms"} {
		t.Run("kill-relays="+kill, func(t *testing.T) {
			var out bytes.Buffer
			cfg, err := parseFlags([]string{"-system", "understudy,hashicorp", "-standbys", "2", "-writers", "8",
				"-duration", "1s", "-warmup", "300ms", "-kill-relays", kill, "-dir", t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			cfg.out = &out
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, sys := range cfg.systems {
				r, err := runOne(ctx, cfg, sys, 2)
				if err != nil {
					t.Fatalf("%s: %v", sys, err)
				}
				printRow(&out, r, result{})
				switch {
				case r.load.Errors != 0:
					t.Errorf("%s: %d writes failed, first: %s", sys, r.load.Errors, r.load.FirstErr)
				case r.load.Writes == 0 || r.load.P50 <= 0 || r.load.P99 < r.load.P50:
					t.Errorf("%s: %d writes, p50 %s, p99 %s", sys, r.load.Writes, r.load.P50, r.load.P99)
				case r.load.Bytes < r.load.Writes*512 || r.load.Msgs == 0 || r.load.CPU <= 0:
					t.Errorf("%s: the leader sent %d bytes and %d messages for %d writes of 512 B, CPU %s", sys, r.load.Bytes, r.load.Msgs, r.load.Writes, r.load.CPU)
				case sys == "understudy" && r.relayed != 2:
					t.Errorf("understudy: %d of 2 standbys relayed", r.relayed)
				case kill != "0" && r.kills == 0:
					t.Errorf("%s: nothing killed", sys)
				case kill == "0" && (r.lagStandbys != 2 || r.lagSamples == 0 || r.lagMissing != 0):
					t.Errorf("%s: lag over %d standbys, %d samples, %d missing", sys, r.lagStandbys, r.lagSamples, r.lagMissing)
				}
			}
			t.Logf("\n%s", out.String())
			if !strings.Contains(out.String(), "understudy") || !strings.Contains(out.String(), "hashicorp") {
				t.Errorf("output:\n%s", out.String())
			}
		})
	}
}

// TestParsePin: -pin's VOTERS:STANDBYS CPU lists, and the member's -cpus.
func TestParsePin(t *testing.T) {
	for _, tc := range []struct {
		in       string
		voters   []int
		standbys []int
	}{
		{"0:1", []int{0}, []int{1}},
		{"0-1:2,3", []int{0, 1}, []int{2, 3}},
		{" 1,0,1 : 3-4,2 ", []int{0, 1}, []int{2, 3, 4}},
		{"0:0", []int{0}, []int{0}},
	} {
		p, err := parsePin(tc.in)
		if err != nil || !slices.Equal(p.voters, tc.voters) || !slices.Equal(p.standbys, tc.standbys) {
			t.Errorf("parsePin(%q) = %v, %v; want %v:%v", tc.in, p, err, tc.voters, tc.standbys)
		}
	}
	for _, off := range []string{"", "off"} {
		if p, err := parsePin(off); p != nil || err != nil {
			t.Errorf("parsePin(%q) = %v, %v; want no pinning", off, p, err)
		}
	}
	for _, bad := range []string{"0", "0:", ":1", "a:1", "0:1-", "1-0:2", "-1:0", "0:1:2", "0:2000", "0,,1:2"} {
		if p, err := parsePin(bad); !errors.Is(err, errPin) {
			t.Errorf("parsePin(%q) = %v, %v; want an errPin", bad, p, err)
		}
	}
	cfg, err := parseFlags([]string{"-pin", "0:1"})
	if err != nil || cfg.pin == nil || !strings.Contains(cfg.pin.String(), "voters on CPUs 0, standbys on CPUs 1") {
		t.Errorf("-pin 0:1: %v, %v", cfg.pin, err)
	}
	if _, err := parseFlags([]string{"-pin", "x"}); !errors.Is(err, errPin) {
		t.Errorf("-pin x: %v", err)
	}
	// The member flag round-trips, and is absent when not pinned.
	f := memberFlags{system: "understudy", id: 4, dir: "d", listen: "l", ctl: "c", voters: []string{"a", "b", "c"},
		tick: time.Millisecond, sampleEvery: 8, cpus: []int{1, 3}}
	g, err := parseMemberFlags(f.args())
	if err != nil || !slices.Equal(g.cpus, []int{1, 3}) {
		t.Errorf("member -cpus: %v, %v", g, err)
	}
	f.cpus = nil
	if g, err := parseMemberFlags(f.args()); err != nil || g.cpus != nil {
		t.Errorf("member without -cpus: %v, %v", g, err)
	}
}

// TestPinSelfRejectsAMissingCPU: a CPU the process may not use is an error
// that names it, and leaves the process as it was.
func TestPinSelfRejectsAMissingCPU(t *testing.T) {
	before := pinnedCPUs()
	err := pinSelf([]int{maxCPU})
	if !errors.Is(err, errPin) || (runtime.GOOS == "linux" && !strings.Contains(err.Error(), "1023")) {
		t.Fatalf("pinSelf(1023) = %v", err)
	}
	if after := pinnedCPUs(); !slices.Equal(before, after) {
		t.Errorf("CPUs %v before, %v after", before, after)
	}
}

// TestFleetLoadPinned runs the driver (run, as main does) with -pin on
// both systems: the driver and every member run on the CPUs -pin gave them
// with GOMAXPROCS their count (runOne checks each member's), and the
// header says so. On a machine of one CPU both sides share it.
func TestFleetLoadPinned(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 x 4 member processes with fsync on")
	}
	if runtime.GOOS != "linux" {
		t.Skip("CPU affinity: Linux only")
	}
	avail := pinnedCPUs()
	pin := fmt.Sprintf("%d:%d", avail[0], avail[len(avail)-1])
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		if err := pinSelf(avail); err != nil {
			t.Error(err)
		}
		runtime.GOMAXPROCS(procs)
	})
	var out bytes.Buffer
	cfg, err := parseFlags([]string{"-system", "understudy,hashicorp", "-standbys", "1", "-writers", "4",
		"-duration", "500ms", "-warmup", "200ms", "-pin", pin, "-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if got := pinnedCPUs(); !slices.Equal(got, avail[:1]) || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("the driver runs on CPUs %v with GOMAXPROCS %d, want [%d] and 1", got, runtime.GOMAXPROCS(0), avail[0])
	}
	head := fmt.Sprintf("pinning: driver and voters on CPUs %d, standbys on CPUs %d", avail[0], avail[len(avail)-1])
	if !strings.HasPrefix(out.String(), head) || !strings.Contains(out.String(), "understudy") || !strings.Contains(out.String(), "hashicorp") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestFleetLoadGoesOnAfterAFailure: a configuration whose member dies (a
// standby killed behind the driver's back before the load) prints its row
// with the error, the next configuration still runs and prints its
// figures, and the run fails at the end.
func TestFleetLoadGoesOnAfterAFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 x 4 member processes with fsync on")
	}
	var out bytes.Buffer
	cfg, err := parseFlags([]string{"-system", "understudy,hashicorp", "-standbys", "1", "-writers", "4",
		"-duration", "300ms", "-warmup", "100ms", "-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.out = &out
	cfg.beforeLoad = func(c *cluster) {
		if c.system != "understudy" {
			return
		}
		p := c.standbys[0]
		p.proc.mu.Lock()
		cmd, done := p.proc.cmd, p.proc.done
		p.proc.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGKILL) // not p.kill: a death, not the driver's
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, cfg)
	t.Logf("\n%s", out.String())
	if err == nil || !strings.Contains(err.Error(), "1 of 2 configurations failed") || !strings.Contains(err.Error(), "member 4 died") {
		t.Errorf("run: %v; want 1 of 2 failed, member 4 died", err)
	}
	lines := strings.Split(out.String(), "\n")
	var us, hc string
	for _, l := range lines {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "understudy":
			us = l
		case len(f) > 0 && f[0] == "hashicorp":
			hc = l
		}
	}
	if !strings.Contains(us, "FAILED") || !strings.Contains(us, "member 4 died") {
		t.Errorf("understudy's row: %q", us)
	}
	if hc == "" || strings.Contains(hc, "FAILED") {
		t.Errorf("hashicorp's row: %q", hc)
	}
}

// TestFleetLoadStandbysShareProcesses: with -standby-procs, 3 standbys run
// in 2 processes (1 and 2 members, each member its own replica, listener
// and data dir), and the run is whole: every write commits, understudy's
// standbys are fed through relays, every standby applied every sampled
// index.
func TestFleetLoadStandbysShareProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 x 5 member processes with fsync on")
	}
	cfg, err := parseFlags([]string{"-system", "understudy,hashicorp", "-standbys", "3", "-standby-procs", "2", "-standby-gogc", "200",
		"-writers", "8", "-duration", "1s", "-warmup", "300ms", "-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg.out = &out
	cfg.beforeLoad = func(c *cluster) {
		pids := map[int][]uint64{}
		for _, p := range c.standbys {
			p.proc.mu.Lock()
			pids[p.proc.cmd.Process.Pid] = append(pids[p.proc.cmd.Process.Pid], p.flags.id)
			p.proc.mu.Unlock()
		}
		if len(pids) != 2 {
			t.Errorf("%s: standbys by process %v, want 2 processes", c.system, pids)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, sys := range cfg.systems {
		r, err := runOne(ctx, cfg, sys, 3)
		if err != nil {
			t.Fatalf("%s: %v", sys, err)
		}
		printRow(&out, r, result{})
		switch {
		case r.load.Errors != 0 || r.load.Writes == 0:
			t.Errorf("%s: %d writes, %d failed, first: %s", sys, r.load.Writes, r.load.Errors, r.load.FirstErr)
		case sys == "understudy" && r.relayed != 3:
			t.Errorf("understudy: %d of 3 standbys relayed", r.relayed)
		case r.lagStandbys != 3 || r.lagSamples == 0 || r.lagMissing != 0:
			t.Errorf("%s: lag over %d standbys, %d samples, %d missing", sys, r.lagStandbys, r.lagSamples, r.lagMissing)
		}
	}
	t.Logf("\n%s", out.String())
}

// TestSplitArgs: a process's arguments split into its members' flags.
func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want [][]string
	}{
		{nil, nil},
		{[]string{"-id", "4"}, [][]string{{"-id", "4"}}},
		{[]string{"-id", "4", memberSep, "-id", "5", memberSep, "-id", "6"}, [][]string{{"-id", "4"}, {"-id", "5"}, {"-id", "6"}}},
	} {
		var got [][]string
		for set := range splitArgs(tc.in, memberSep) {
			got = append(got, set)
		}
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("splitArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCPUTimes: the busy and total ticks of CPUs from /proc/stat (Linux):
// busy within total, neither going back, and a CPU the machine lacks an
// error.
func TestCPUTimes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat: Linux only")
	}
	cpus := pinnedCPUs()[:1]
	b0, t0, err := cpuTimes(cpus)
	if err != nil || t0 == 0 || b0 > t0 {
		t.Fatalf("cpuTimes(%v) = %d, %d, %v", cpus, b0, t0, err)
	}
	if b1, t1, err := cpuTimes(cpus); err != nil || t1 < t0 || b1 < b0 || b1 > t1 {
		t.Errorf("cpuTimes(%v) later = %d, %d, %v; before %d, %d", cpus, b1, t1, err, b0, t0)
	}
	if _, _, err := cpuTimes([]int{1 << 20}); err == nil {
		t.Error("cpuTimes of a CPU the machine lacks: no error")
	}
}
