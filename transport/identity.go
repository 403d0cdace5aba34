package transport

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"
)

// Host identity. A host sends its host ID (MuxConfig.HostID) in the hello
// of its host links and in every attachment; the listener binds each link
// to it:
//
//   - an attachment whose host ID is not its link's is refused;
//   - each member of each group is owned by the host ID that first spoke
//     for it on this host's links (peer.owner, for the peer's lifetime, or
//     until another host speaks for it while the owner has no link here
//     and no incarnation is recorded for the member: claim):
//     an attachment of the member from a link of another host ID is
//     refused, and only the owner's attachments teach the address book
//     where the member's host is (addresses.go);
//   - with TLS, a host ID that owns a member here is bound to the identity
//     of the certificate it was first seen with (its subject): a link or an
//     attachment that presents that host ID with a certificate of another
//     identity is refused.
//
// What this does not prevent is written in docs/architecture.md, "Host
// identity and what a peer may do".

// certIdentity returns the identity of the certificate the peer presented
// on nc: its subject, or the hash of its public key if the subject is
// empty; "" without TLS or a certificate.
func certIdentity(nc net.Conn) string {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return ""
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	if s := certs[0].Subject.String(); s != "" {
		return "subject " + s
	}
	sum := sha256.Sum256(certs[0].RawSubjectPublicKeyInfo)
	return "key " + hex.EncodeToString(sum[:])
}

// certMatches reports whether host may present a certificate of identity
// cert: it is not bound to another one.
func (m *Mux) certMatches(host uint64, cert string) bool {
	if host == 0 {
		return true
	}
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	bound, ok := m.certs[host]
	return !ok || bound == cert
}

// bindCert binds host to the certificate identity cert, unless it is bound
// already. It reports whether host is bound to cert now.
func (m *Mux) bindCert(host uint64, cert string) bool {
	if host == 0 {
		return true
	}
	m.bookMu.Lock()
	defer m.bookMu.Unlock()
	bound, ok := m.certs[host]
	if !ok {
		m.certs[host] = cert
		return true
	}
	return bound == cert
}

// claim records that host speaks for the peer, if no host did before (a
// host ID of 0, unknown, claims nothing), or if the host that did is gone
// and the member never ran as far as this host knows: no link of the owner
// is admitted for it now and no incarnation is recorded for it (a member
// killed after it joined but before it published its incarnation, started
// again with an empty data dir: a new host ID, and a first join by the
// join's rules; without this its peers refused it until they restarted).
// It returns the peer's owner and whether this claim made it so.
func (p *peer) claim(host uint64) (owner uint64, first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if host != 0 && (p.owner == 0 || (p.owner != host && len(p.inLinks) == 0 && p.inc.Load() == 0)) {
		p.owner = host
		return host, true
	}
	return p.owner, false
}
