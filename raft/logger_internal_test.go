package raft

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChatterLoggedAtDebug: etcd raft's harmless, frequent Info messages
// are logged at Debug (an Info log saw ~10,000 a minute), other Info
// messages stay at Info — and each demoted format is one etcd raft really
// logs, read from the module's source, so that an upgrade that rewords one
// fails here instead of flooding Info again.
func TestChatterLoggedAtDebug(t *testing.T) {
	var buf bytes.Buffer
	l := raftLogger{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Infof("entry at index %d missing from unstable log; ignoring", 7)
	l.Infof("%x became leader at term %d", 1, 2)
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG msg=\"entry at index 7 missing") || !strings.Contains(out, "level=INFO msg=\"1 became leader at term 2\"") {
		t.Fatalf("levels:\n%s", out)
	}

	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.etcd.io/raft/v3").Output()
	if err != nil {
		t.Skipf("cannot locate etcd raft's source: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "*.go"))
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, format := range chatterFormats {
		if !strings.Contains(src.String(), `Infof("`+format) {
			t.Errorf("etcd raft logs no Infof(%q): the format was reworded", format)
		}
	}
}

// TestSmallSnapshotCountValidates: a small SnapshotCount is valid with the
// other defaults, which scale with it (SnapshotCatchUpEntries, MaxLag).
func TestSmallSnapshotCountValidates(t *testing.T) {
	for _, n := range []uint64{1, 10, 100, 499, 500, 10_000} {
		c := Config{ID: 1, SnapshotCount: n}.WithDefaults()
		if err := c.Validate(); err != nil {
			t.Errorf("SnapshotCount %d: %v", n, err)
		}
		if c.SnapshotCatchUpEntries > n && n >= 2 {
			t.Errorf("SnapshotCount %d: SnapshotCatchUpEntries %d keeps more than a snapshot's worth", n, c.SnapshotCatchUpEntries)
		}
	}
}
