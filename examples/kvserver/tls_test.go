package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a test CA writing PEM files into dir.
type pki struct {
	dir    string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
	serial int64
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, ca: ca, key: key, caFile: filepath.Join(dir, "ca.pem"), serial: 1}
	writePEM(t, p.caFile, "CERTIFICATE", der)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate for 127.0.0.1 (server and client use) and
// returns the cert and key files.
func (p *pki) issue(t *testing.T, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, key, "EC PRIVATE KEY", kder)
	return cert, key
}

func (p *pki) flags(t *testing.T, name string) []string {
	cert, key := p.issue(t, name)
	return []string{"--peer-cert", cert, "--peer-key", key, "--peer-ca", p.caFile,
		"--client-cert", cert, "--client-key", key, "--client-ca", p.caFile}
}

func kvctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(ctlBin, args...).CombinedOutput()
	return string(out), err
}

// exitCode is the exit code of a process that ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestTLS: members speak mutual TLS on the peer port and HTTPS with client
// certificates on the client API; a member with a certificate from another
// CA cannot join, and a client without a certificate is refused.
func TestTLS(t *testing.T) {
	root := t.TempDir()
	ca, other := newPKI(t, "cluster-ca"), newPKI(t, "other-ca")
	p1 := newProc(t, root, 1)
	p1.start(ca.flags(t, "m1")...)
	cliCert, cliKey := ca.issue(t, "operator")
	tlsArgs := []string{"--endpoints", p1.client, "--cacert", ca.caFile, "--cert", cliCert, "--key", cliKey}
	eventually(t, 20*time.Second, func() string {
		out, err := kvctl(t, append(tlsArgs, "put", "secure", "yes")...)
		if err != nil {
			return fmt.Sprintf("kvctl put over HTTPS: %v %s; server: %s", err, out, p1.out)
		}
		return ""
	})
	if out, err := kvctl(t, append(tlsArgs, "get", "secure")...); err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("kvctl get over HTTPS: %v %q", err, out)
	}
	// Without a client certificate (trusting the server): refused.
	if out, err := kvctl(t, "--endpoints", p1.client, "--cacert", ca.caFile, "get", "secure"); err == nil {
		t.Fatalf("a client without a certificate was served: %s", out)
	}
	// A certificate of another CA: refused too.
	oc, ok := other.issue(t, "intruder")
	if out, err := kvctl(t, "--endpoints", p1.client, "--cacert", ca.caFile, "--cert", oc, "--key", ok, "get", "secure"); err == nil {
		t.Fatalf("a client of another CA was served: %s", out)
	}

	// Member 2 is added, but started with a certificate of another CA.
	p2 := newProc(t, root, 2)
	body := fmt.Sprintf(`{"id": 2, "peer_addr": %q, "client_addr": %q}`, p2.peer, p2.client)
	if out, err := kvctl(t, append(tlsArgs, "member", "add", "2", p2.peer, "--client-addr", p2.client)...); err != nil {
		t.Fatalf("member add: %v %s (%s)", err, out, body)
	}
	p2.start(append(other.flags(t, "m2"), "--join", "--peers", p1.peer)...)
	time.Sleep(3 * time.Second)
	select {
	case <-p2.done:
	default:
		if code, _ := p2.req("GET", "/healthz", ""); code == 200 {
			t.Fatal("a member with another CA's certificate joined")
		}
	}
	p2.kill()
	// With the cluster's CA it joins.
	p3 := newProc(t, root, 3)
	if out, err := kvctl(t, append(tlsArgs, "member", "remove", "2")...); err != nil {
		t.Fatalf("member remove: %v %s", err, out)
	}
	if out, err := kvctl(t, append(tlsArgs, "member", "add", "3", p3.peer, "--client-addr", p3.client)...); err != nil {
		t.Fatalf("member add: %v %s", err, out)
	}
	p3.start(append(ca.flags(t, "m3"), "--join", "--peers", p1.peer)...)
	eventually(t, 20*time.Second, func() string {
		out, err := kvctl(t, "--endpoints", p3.client, "--cacert", ca.caFile, "--cert", cliCert, "--key", cliKey, "get", "secure")
		if err != nil || strings.TrimSpace(out) != "yes" {
			return fmt.Sprintf("member 3 over TLS: %v %q; server: %s", err, out, p3.out)
		}
		return ""
	})
}

// TestKvctlOutput: kvctl's table and JSON output against a running cluster.
func TestKvctlOutput(t *testing.T) {
	root := t.TempDir()
	ps := startCluster(t, root, 3)
	eps := ps[0].client + "," + ps[1].client + "," + ps[2].client
	out, err := kvctl(t, "--endpoints", eps, "member", "list")
	if err != nil {
		t.Fatalf("member list: %v %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(out, "*") || !strings.Contains(out, "leader") {
		t.Fatalf("member list table:\n%s", out)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, "127.0.0.1:") {
			t.Fatalf("member list row without addresses: %q", l)
		}
	}
	out, err = kvctl(t, "--endpoints", eps, "-w", "json", "member", "list")
	if err != nil || !strings.Contains(out, `"members"`) || !strings.Contains(out, `"peer_addr"`) {
		t.Fatalf("member list -w json: %v %s", err, out)
	}
	// Every field of the contract is there, "not_ready_reason" too when a
	// member is ready (""); progress for every member but the leader.
	eventually(t, 10*time.Second, func() string {
		out, err := kvctl(t, "--endpoints", eps, "-w", "json", "member", "list")
		var raw struct {
			Leader  uint64           `json:"leader"`
			Members []map[string]any `json:"members"`
		}
		if err != nil || json.Unmarshal([]byte(out), &raw) != nil || len(raw.Members) != 3 {
			return fmt.Sprintf("member list -w json: %v %s", err, out)
		}
		for _, m := range raw.Members {
			for _, f := range []string{"id", "peer_addr", "client_addr", "role", "read_only"} {
				if _, ok := m[f]; !ok {
					return fmt.Sprintf("no %q in %v", f, m)
				}
			}
			if m["id"] == float64(raw.Leader) {
				continue
			}
			p, _ := m["progress"].(map[string]any)
			for _, f := range []string{"match", "lag", "state", "ready", "not_ready_reason"} {
				if _, ok := p[f]; !ok {
					return fmt.Sprintf("no progress %q in %v", f, m)
				}
			}
			if p["ready"] != true || p["not_ready_reason"] != "" {
				return fmt.Sprintf("member %v not ready yet: %v", m["id"], p)
			}
		}
		return ""
	})
	// The first endpoint is down (a follower: a write during the election
	// that losing the leader starts would answer 503): the next one answers.
	m, _ := ps[0].members(t)
	var down *proc
	var rest []string
	for _, p := range ps {
		if down == nil && p.id != m.Leader {
			down = p
		} else {
			rest = append(rest, p.client)
		}
	}
	eps = down.client + "," + strings.Join(rest, ",")
	down.kill()
	if out, err := kvctl(t, "--endpoints", eps, "put", "k", "v"); err != nil {
		t.Fatalf("put with the first endpoint down: %v %s", err, out)
	}
	out, err = kvctl(t, "--endpoints", eps, "status")
	if err != nil || strings.Count(out, "unreachable") != 1 || !strings.Contains(out, "leader") {
		t.Fatalf("status:\n%s (%v)", out, err)
	}
	// An error prints the server's code and exits non-zero.
	out, err = kvctl(t, "--endpoints", eps, "member", "promote", "42")
	if err == nil || !strings.Contains(out, "unknown_member") {
		t.Fatalf("promote of an unknown member: %v %s", err, out)
	}
	// Dry runs: the plan, every refusal, nothing changed.
	out, err = kvctl(t, "--endpoints", eps, "member", "add", "9", "127.0.0.1:1", "--dry-run")
	if err != nil || !strings.Contains(out, "it would go through") {
		t.Fatalf("member add --dry-run: %v %s", err, out)
	}
	// A dry run that would be refused exits 3, its refusals printed.
	out, err = kvctl(t, "--endpoints", eps, "member", "promote", "42", "--dry-run")
	if exitCode(err) != 3 || !strings.Contains(out, "refused: unknown_member") {
		t.Fatalf("member promote --dry-run: %v %s", err, out)
	}
	out, err = kvctl(t, "--endpoints", eps, "cluster", "set", "target-voters", "4", "max-learners", "0", "--dry-run")
	if exitCode(err) != 3 || strings.Count(out, "refused: invalid_setting") != 2 {
		t.Fatalf("cluster set --dry-run: %v %s", err, out)
	}
	out, err = kvctl(t, "--endpoints", eps, "member", "watch", "--count", "1", "--interval", "100ms")
	if err != nil || !strings.Contains(out, "leader") {
		t.Fatalf("member watch: %v %s", err, out)
	}
}
