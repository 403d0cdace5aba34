package raft

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/understudy-raft/understudy/transport"
)

// TestRefusalNotLoggedTwice: a refusal other than "removed" is the
// transport's to log (once per peer host and reason, however many groups
// it refused); the node logs it at debug level only, so that one event is
// not a warning twice, nor one per retry.
func TestRefusalNotLoggedTwice(t *testing.T) {
	var buf bytes.Buffer
	n := &Node{cfg: nodeConfig{Config: &Config{}}, log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for range 3 {
		peerHandler{n}.ReportRefused(2, fmt.Errorf("refused: %w", transport.ErrUnknownSender))
	}
	if out := buf.String(); strings.Contains(out, "level=WARN") || strings.Count(out, "level=DEBUG") != 3 {
		t.Fatalf("node's log of 3 refusals:\n%s", out)
	}
}
