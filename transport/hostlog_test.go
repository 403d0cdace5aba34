package transport

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
)

// warnCounter is a slog.Handler that counts the log records at warning level and above, by
// message.
type warnCounter struct {
	mu    sync.Mutex
	warns map[string]int
}

func (h *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		if h.warns == nil {
			h.warns = map[string]int{}
		}
		h.warns[r.Message]++
		h.mu.Unlock()
	}
	return nil
}
func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }

func (h *warnCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.warns[msg]
}

// TestGroupRefusalsLoggedOncePerPeerHost: host b starts its 40 groups and
// does not know host a's members in any yet (as while a host starts its
// groups), so every attachment of a's is refused. Each side logs that at
// warning level once for the peer host, not once per group: the refusals
// are counted (Stats) and logged at debug level, and the next warning for
// the host says how many it stood for.
func TestGroupRefusalsLoggedOncePerPeerHost(t *testing.T) {
	const n = 40
	ca, cb := &warnCounter{}, &warnCounter{}
	mk := func(id uint64, c *warnCounter) *Mux {
		m, err := NewMux(MuxConfig{ListenAddr: "127.0.0.1:0", HostID: id, Logger: slog.New(c)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b := mk(0xa, ca), mk(0xb, cb)
	// b runs every group before a dials: each refusal is the same one
	// (a's member unknown), not a group b does not run yet for the first
	// groups — another reason, which is logged on its own.
	for g := uint64(1); g <= n; g++ {
		newTestTransport(t, 2, &fakeHandler{}, func(c *Config) { c.ListenAddr, c.Mux, c.GroupID, c.Logger = "", b, g, slog.New(cb) })
	}
	var ha []*fakeHandler
	for g := uint64(1); g <= n; g++ {
		h := &fakeHandler{}
		ha = append(ha, h)
		ta := newTestTransport(t, 1, h, func(c *Config) { c.ListenAddr, c.Mux, c.GroupID, c.Logger = "", a, g, slog.New(ca) })
		ta.AddPeer(2, b.Addr().String())
	}
	for i, h := range ha {
		waitFor(t, fmt.Sprintf("group %d refused", i+1), func() bool { return h.refusedWith(ErrUnknownSender) })
	}
	if got := ca.count("peer refused our connection"); got != 1 {
		t.Errorf("the dialing host logged %d warnings for %d groups refused by one peer host, want 1", got, n)
	}
	if got := cb.count("refused inbound connection"); got != 1 {
		t.Errorf("the refusing host logged %d warnings for %d groups of one peer host, want 1", got, n)
	}
}
