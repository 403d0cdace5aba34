package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// NewMutualTLS returns a TLS configuration for Config.TLS from PEM files:
// this member's certificate and key, and the CA that signs every member's
// certificate.
//
// The configuration speaks TLS 1.3 only, presents the certificate on both
// sides and requires the peer's: a listener refuses a client without a
// certificate from the CA, and a dialer refuses a listener without one.
// Only caFile is trusted (never the system roots). Host names are not
// checked (members are dialed by address); instead, when allowedNames is
// not empty, the peer certificate's Common Name or one of its DNS SANs
// must be in it. Certificates must allow both server and client
// authentication (extended key usage), since every member is both.
//
// Errors: a file that cannot be read, a certificate and key that do not
// parse or do not match, a CA file with no PEM certificate: each names the
// file.
func NewMutualTLS(certFile, keyFile, caFile string, allowedNames []string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("transport: loading certificate %s and key %s: %w", certFile, keyFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("transport: reading CA %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("transport: no PEM certificate in CA file %s", caFile)
	}
	return mutualTLS(cert, pool, allowedNames), nil
}

func mutualTLS(cert tls.Certificate, pool *x509.CertPool, allowedNames []string) *tls.Config {
	allowed := slices.Clone(allowedNames)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		RootCAs:      pool,
		// The dialer verifies the listener's chain in VerifyConnection
		// below, without the host name check that does not fit members
		// dialed by IP address.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("transport: peer presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			if len(cs.VerifiedChains) == 0 {
				// Dialer side: the standard library verified nothing.
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				if _, err := leaf.Verify(x509.VerifyOptions{
					Roots:         pool,
					Intermediates: inter,
					KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				}); err != nil {
					return fmt.Errorf("transport: peer certificate: %w", err)
				}
			}
			if len(allowed) == 0 {
				return nil
			}
			if slices.Contains(allowed, leaf.Subject.CommonName) {
				return nil
			}
			for _, n := range leaf.DNSNames {
				if slices.Contains(allowed, n) {
					return nil
				}
			}
			return fmt.Errorf("transport: peer certificate names (CN %q, DNS %v) are not allowed", leaf.Subject.CommonName, leaf.DNSNames)
		},
	}
}
