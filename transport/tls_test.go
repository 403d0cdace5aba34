package transport

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t, "understudy test CA")
	ha, hb := &fakeHandler{}, &fakeHandler{}
	a := newTestTransport(t, 1, ha, func(c *Config) { c.TLS = pki.tlsConfig(t, "member-1", "member-1", "member-2") })
	b := newTestTransport(t, 2, hb, func(c *Config) { c.TLS = pki.tlsConfig(t, "member-2", "member-1", "member-2") })
	connect(a, b)
	sendUntil(t, a, []*raftpb.Message{appMsg(1, 2, 1, 256)}, "delivery over TLS", func() bool { return hb.count() > 0 })
	b.Send([]*raftpb.Message{heartbeat(2, 1)})
	sendUntil(t, b, []*raftpb.Message{heartbeat(2, 1)}, "delivery back", func() bool { return ha.count() > 0 })
	if r, err := a.Call(context.Background(), 2, []byte("x")); err != nil || string(r) != "1:x" {
		t.Fatalf("Call over TLS: %q %v", r, err)
	}
}

func TestMutualTLSRefusals(t *testing.T) {
	pki := newTestPKI(t, "understudy test CA")
	other := newTestPKI(t, "another CA")
	hb := &fakeHandler{}
	b := newTestTransport(t, 2, hb, func(c *Config) { c.TLS = pki.tlsConfig(t, "member-2", "member-1", "member-2") })

	tests := []struct {
		name string
		cfg  func(t *testing.T) *Config
	}{
		{"certificate from another CA", func(t *testing.T) *Config {
			return &Config{TLS: other.tlsConfig(t, "member-1")}
		}},
		{"name not allowed", func(t *testing.T) *Config {
			return &Config{TLS: pki.tlsConfig(t, "member-9")}
		}},
		{"plain TCP", func(t *testing.T) *Config { return &Config{} }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := uint64(10 + i)
			b.AddPeer(id, "127.0.0.1:1")
			before := b.Stats().ConnErrors[ReasonTLS]
			ha := &fakeHandler{}
			a := newTestTransport(t, id, ha, func(c *Config) { c.TLS = tt.cfg(t).TLS })
			a.AddPeer(2, b.Addr().String())
			sendUntil(t, a, []*raftpb.Message{heartbeat(id, 2)}, "a failed dial", func() bool { return a.Stats().Peers[0].DialFailures > 0 })
			waitFor(t, "the TLS failure counted", func() bool { return b.Stats().ConnErrors[ReasonTLS] > before })
			if _, err := a.Call(context.Background(), 2, nil); err == nil || errors.Is(err, ErrRemote) {
				t.Fatalf("Call went through: %v", err)
			}
		})
	}
	if hb.count() != 0 {
		t.Fatalf("%d messages delivered over refused TLS", hb.count())
	}

	// The dialer checks the listener too: a listener with a foreign
	// certificate is refused.
	c := newTestTransport(t, 3, &fakeHandler{}, func(c *Config) { c.TLS = other.tlsConfig(t, "member-3") })
	a := newTestTransport(t, 1, &fakeHandler{}, func(c *Config) { c.TLS = pki.tlsConfig(t, "member-1") })
	c.AddPeer(1, a.Addr().String())
	a.AddPeer(3, c.Addr().String())
	sendUntil(t, a, []*raftpb.Message{heartbeat(1, 3)}, "a failed dial", func() bool { return a.Stats().Peers[0].DialFailures > 0 })
	if a.Stats().ConnErrors[ReasonTLS] == 0 {
		t.Fatalf("dialer counted no TLS error: %v", a.Stats())
	}
}

func TestNewMutualTLSErrors(t *testing.T) {
	if _, err := NewMutualTLS("/nonexistent/cert", "/nonexistent/key", "/nonexistent/ca", nil); err == nil {
		t.Fatal("no error for missing files")
	}
}
