package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
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
