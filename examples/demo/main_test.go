package main

import (
	"log/slog"
	"testing"
)

// TestDemo runs the README's first command end to end (real storage, TCP on
// 127.0.0.1), so that it stays true.
func TestDemo(t *testing.T) {
	if err := run(t.TempDir(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}
