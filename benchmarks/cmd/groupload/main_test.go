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
		"-duration", "1s", "-warmup", "200ms", "-idle", "300ms", "-tick", "10ms", "-v"})
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
