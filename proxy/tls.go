package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/fenceproxy/fenceproxy/policy"
)

// backendTLSConfig builds the TLS client configuration for the backend hop;
// nil means plain TCP.
func backendTLSConfig(b policy.Backend) (*tls.Config, error) {
	mode := b.TLS
	if mode == "" || mode == policy.TLSDisabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if b.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(b.CertFile, b.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("backend client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	var roots *x509.CertPool
	if b.CAFile != "" {
		pem, err := os.ReadFile(b.CAFile)
		if err != nil {
			return nil, fmt.Errorf("backend CA: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("backend CA %s: no PEM certificate found", b.CAFile)
		}
	}
	switch mode {
	case policy.TLSPreferred, policy.TLSRequired:
		// Encryption without authentication, as MySQL's own modes of the
		// same names.
		cfg.InsecureSkipVerify = true
	case policy.TLSVerifyCA:
		// Chain must lead to the CA; the name is not checked.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("backend sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	case policy.TLSVerifyFull:
		cfg.RootCAs = roots
		cfg.ServerName = b.ServerName
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(b.Address)
			if err != nil {
				return nil, fmt.Errorf("backend address: %w", err)
			}
			cfg.ServerName = host
		}
	default:
		return nil, fmt.Errorf("backend.tls: unknown mode %q", mode)
	}
	return cfg, nil
}

// clientTLSConfig builds the TLS server configuration offered to clients;
// nil means TLS is not offered.
func clientTLSConfig(c policy.ClientTLS) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("client_tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.MinVersion == "1.3" {
		cfg.MinVersion = tls.VersionTLS13
	}
	return cfg, nil
}
