package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGroupLoadSmoke runs the tool end to end in both layouts on 3 hosts x
// 3 groups, briefly and with a 10ms tick, so that it cannot rot: every
// group has a leader, every group is written without an error, and every
// figure of the line is there.
func TestGroupLoadSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 x 9 replicas with fsync on")
	}
	var out bytes.Buffer
	cfg, err := parseFlags([]string{"-groups", "3", "-layout", "host,process", "-writers", "7",
		"-duration", "1s", "-warmup", "200ms", "-idle", "300ms", "-tick", "10ms", "-inline-apply", "-v"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.out = &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	printHeader(cfg.out)
	for _, layout := range cfg.layouts {
		r, err := runOne(ctx, cfg, layout, 3)
		if err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		printResult(cfg.out, r)
		switch {
		case r.errors != 0:
			t.Errorf("%s: %d writes failed, first: %v", layout, r.errors, r.firstErr)
		case r.load.writes == 0 || r.load.perSec <= 0:
			t.Errorf("%s: no write in the measured window", layout)
		case r.load.groupsWritten != 3 || r.load.minGroupWrites == 0:
			t.Errorf("%s: %d of 3 groups written", layout, r.load.groupsWritten)
		case r.load.p50 <= 0 || r.load.p99 < r.load.p50 || r.load.groupP99 <= 0:
			t.Errorf("%s: latencies p50 %s p99 %s group p99 %s", layout, r.load.p50, r.load.p99, r.load.groupP99)
		case r.goroutinesHost <= 0 || r.heapReplica <= 0:
			t.Errorf("%s: goroutines per host %.0f, heap per replica %.0f", layout, r.goroutinesHost, r.heapReplica)
		case r.syncsPerSec <= 0 || r.groupsPerCommit < 1:
			t.Errorf("%s: syncs/s %.0f, groups per commit %.2f", layout, r.syncsPerSec, r.groupsPerCommit)
		case r.leaders <= 0 || r.leaders < r.started:
			t.Errorf("%s: start calls %s, leaders after %s", layout, r.started, r.leaders)
		}
	}
	t.Logf("\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "layout") || !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "process ") }) {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestGroupLoadKillRestart runs -active, -quiesce, -kill and -restart on 3
// hosts x 4 groups with a 10ms tick: only the active group is written, the
// killed host led at least one group and each of them has a leader again,
// the host restarts and every group is led, and the kill's line is printed.
func TestGroupLoadKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 hosts x 4 groups with fsync on, kills one and restarts it")
	}
	var out bytes.Buffer
	cfg, err := parseFlags([]string{"-groups", "4", "-active", "1", "-writers", "3", "-quiesce", "-restart",
		"-duration", "500ms", "-warmup", "100ms", "-idle", "500ms", "-tick", "10ms", "-v"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.kill {
		t.Fatal("-restart does not imply -kill")
	}
	cfg.out = &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	printHeader(cfg.out)
	r, err := runOne(ctx, cfg, layoutHost, 4)
	if err != nil {
		t.Fatal(err)
	}
	printResult(cfg.out, r)
	t.Logf("\n%s", out.String())
	f := r.failover
	switch {
	case r.errors != 0:
		t.Errorf("%d writes failed, first: %v", r.errors, r.firstErr)
	case r.active != 1 || r.load.groupsWritten != 1 || r.load.writes == 0:
		t.Errorf("active %d: %d groups written, %d writes", r.active, r.load.groupsWritten, r.load.writes)
	case f == nil:
		t.Fatal("no failover figures")
	case f.led < 1 || f.leaderless != 0:
		t.Errorf("killed host %d led %d groups; %d without a leader after the kill", f.host, f.led, f.leaderless)
	case f.p50 <= 0 || f.p99 < f.p50 || f.max < f.p99 || f.all < f.max:
		t.Errorf("times to a leader: p50 %s p99 %s max %s all %s", f.p50, f.p99, f.max, f.all)
	case !f.restarted || f.restartRunning <= 0 || f.restartLed < f.restartRunning:
		t.Errorf("restart: running after %s, led after %s", f.restartRunning, f.restartLed)
	case !strings.Contains(out.String(), "kill host") || !strings.Contains(out.String(), "restart:"):
		t.Errorf("no kill line in the output:\n%s", out.String())
	}
}

func TestParseFlagsRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-kill", "-layout", "host,process"},
		{"-restart", "-layout", "process"},
		{"-active", "-1"},
		{"-sched", "1,2"},
		{"-sched", "1,2,3,4,5"},
		{"-sched", "1,x,3"},
		{"-sched", "1,-2,3"},
		{"-sync-wait", "sometimes"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	cfg, err := parseFlags([]string{"-sched", "2,4,8,500"})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.sched; s.Workers != 2 || s.IOWorkers != 4 || s.ApplyWorkers != 8 || s.MaxWakesPerSec != 500 {
		t.Errorf("-sched 2,4,8,500: %+v", s)
	}
}

func TestWriterGroups(t *testing.T) {
	for _, tc := range []struct{ writers, groups int }{{256, 1}, {256, 10}, {256, 100}, {256, 256}, {256, 1000}, {7, 3}} {
		share := make([]int, tc.groups) // writers per group (groups >= writers: 1 each)
		for w := range tc.writers {
			for _, g := range writerGroups(w, tc.writers, tc.groups) {
				share[g]++
			}
		}
		if lo, hi := slices.Min(share), slices.Max(share); lo < 1 || hi-lo > 1 {
			t.Errorf("%d writers over %d groups: writers per group from %d to %d", tc.writers, tc.groups, lo, hi)
		}
	}
}

func TestCommandSize(t *testing.T) {
	for _, k := range []string{"", "w0-0", "w255-1023", strings.Repeat("k", 100)} {
		if n := len(command(k)); n != commandSize {
			t.Errorf("command(%q) is %d bytes", k, n)
		}
	}
}

func TestWindow(t *testing.T) {
	ms := time.Millisecond
	s := []sample{
		{group: 0, end: 1 * ms, lat: 100 * ms}, // before the window
		{group: 0, end: 10 * ms, lat: 2 * ms},
		{group: 1, end: 20 * ms, lat: 4 * ms},
		{group: 1, end: 30 * ms, lat: 6 * ms},
		{group: 0, end: 1000 * ms, lat: 100 * ms}, // after
	}
	r := window(s, 3, 5*ms, 505*ms)
	if r.writes != 3 || r.perSec != 6 || r.p50 != 4*ms || r.p99 != 6*ms || r.groupP99 != 6*ms || r.groupsWritten != 2 || r.minGroupWrites != 0 {
		t.Errorf("window: %+v", r)
	}
}
