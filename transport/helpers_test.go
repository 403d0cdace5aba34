package transport

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testCluster = 0xc1

// waitFor polls cond until it holds, failing the test after a generous
// deadline. It is how tests wait: never a bare sleep.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type refusal struct {
	id  uint64
	err error
}

type snapReport struct {
	id     uint64
	status raft.SnapshotStatus
}

// fakeHandler records everything the transport hands it.
type fakeHandler struct {
	mu          sync.Mutex
	msgs        []*raftpb.Message
	unreachable map[uint64]int
	snaps       []snapReport
	refused     []refusal
	serve       func(ctx context.Context, from uint64, req []byte) ([]byte, error)
	process     func(m *raftpb.Message) // called before recording, if set
}

func (h *fakeHandler) Process(m *raftpb.Message) {
	if h.process != nil {
		h.process(m)
	}
	h.mu.Lock()
	h.msgs = append(h.msgs, m)
	h.mu.Unlock()
}

func (h *fakeHandler) ReportUnreachable(id uint64) {
	h.mu.Lock()
	if h.unreachable == nil {
		h.unreachable = make(map[uint64]int)
	}
	h.unreachable[id]++
	h.mu.Unlock()
}

func (h *fakeHandler) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	h.mu.Lock()
	h.snaps = append(h.snaps, snapReport{id, status})
	h.mu.Unlock()
}

func (h *fakeHandler) ServeRequest(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	if h.serve != nil {
		return h.serve(ctx, from, req)
	}
	return append([]byte(fmt.Sprintf("%x:", from)), req...), nil
}

func (h *fakeHandler) ReportRefused(id uint64, err error) {
	h.mu.Lock()
	h.refused = append(h.refused, refusal{id, err})
	h.mu.Unlock()
}

// refusals returns the refusals reported so far.
func (h *fakeHandler) refusals() []refusal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]refusal(nil), h.refused...)
}

func (h *fakeHandler) received() []*raftpb.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*raftpb.Message(nil), h.msgs...)
}

func (h *fakeHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

func (h *fakeHandler) unreachableCount(id uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unreachable[id]
}

func (h *fakeHandler) snapReports() []snapReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]snapReport(nil), h.snaps...)
}

func (h *fakeHandler) refusedWith(target error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.refused {
		if errors.Is(r.err, target) {
			return true
		}
	}
	return false
}

// testLogger logs to the test output when -v is set.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newTestTransport starts a transport on 127.0.0.1 with fast reconnects;
// opts adjust the config. It is closed when the test ends.
func newTestTransport(t testing.TB, id uint64, h Handler, opts ...func(*Config)) *Transport {
	t.Helper()
	cfg := Config{
		ID:         id,
		ClusterID:  testCluster,
		ListenAddr: "127.0.0.1:0",
		Handler:    h,
		Logger:     testLogger(t),
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// addPeers makes every transport a peer of every other.
func addPeers(ts ...*Transport) {
	for _, a := range ts {
		for _, b := range ts {
			if a != b {
				a.AddPeer(b.cfg.ID, b.Addr().String())
			}
		}
	}
}

// connect makes every transport a peer of every other, and waits until
// every raft stream is up (a stream dialed before the other side added its
// peer is refused at first, and its messages dropped).
func connect(ts ...*Transport) {
	addPeers(ts...)
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range ts {
		for _, p := range a.Stats().Peers {
			for !a.peer(p.ID).c.connected.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
	}
}

func u64(v uint64) *uint64 { return &v }

func appMsg(from, to, index uint64, size int) *raftpb.Message {
	return &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: u64(from), To: u64(to), Term: u64(1),
		LogTerm: u64(1), Index: u64(index - 1), Commit: u64(index - 1),
		Entries: []*raftpb.Entry{{Term: u64(1), Index: u64(index), Data: bytes.Repeat([]byte{byte(index)}, size)}},
	}
}

func heartbeat(from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: u64(from), To: u64(to), Term: u64(1)}
}

// sendUntil resends msgs until cond holds: a stream being (re)established
// drops messages, as it should, and raft would resend them.
func sendUntil(t testing.TB, tr *Transport, msgs []*raftpb.Message, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%v", what, tr.Stats())
		}
		tr.Send(msgs)
		time.Sleep(5 * time.Millisecond)
	}
}

// testPKI is a CA and the certificates it signs, generated in process.
type testPKI struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	pool   *x509.CertPool
	serial int64
}

func newTestPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{ca: ca, caKey: key, caPEM: pemEncode("CERTIFICATE", der), pool: pool, serial: 1}
}

// issue returns a member certificate (server and client auth) for name,
// valid for 127.0.0.1, as PEM.
func (p *testPKI) issue(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemEncode("CERTIFICATE", der), pemEncode("EC PRIVATE KEY", kder)
}

// tlsConfig issues a certificate for name and returns a mutual TLS config
// trusting this CA, built by NewMutualTLS from files.
func (p *testPKI) tlsConfig(t testing.TB, name string, allowed ...string) *tls.Config {
	t.Helper()
	certPEM, keyPEM := p.issue(t, name)
	dir := t.TempDir()
	write := func(file string, b []byte) string {
		path := dir + "/" + file
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg, err := NewMutualTLS(write("cert.pem", certPEM), write("key.pem", keyPEM), write("ca.pem", p.caPEM), allowed)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// patternReader produces n deterministic pseudo-random bytes without
// holding them: copies of a 64 KiB block, each one varied by its offset.
type patternReader struct {
	block     []byte
	n, off    int64
	remaining int64
}

func newPatternReader(n int64) *patternReader {
	block := make([]byte, 64<<10)
	x := uint32(2463534242)
	for i := range block {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		block[i] = byte(x)
	}
	return &patternReader{block: block, n: n, remaining: n}
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.remaining == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.remaining)]
	total := 0
	for len(p) > 0 {
		i := r.off % int64(len(r.block))
		n := copy(p, r.block[i:])
		if i == 0 {
			p[0] ^= byte(r.off / int64(len(r.block))) // vary each block
		}
		p = p[n:]
		r.off += int64(n)
		total += n
	}
	r.remaining -= int64(total)
	return total, nil
}

func (r *patternReader) Close() error { return nil }
