package proxy

import (
	"crypto/tls"
	"fmt"

	"github.com/fenceproxy/fenceproxy/policy"
)

// AdminTLSConfig is the admin endpoint's TLS configuration, nil without
// admin_tls.
func AdminTLSConfig(a policy.AdminTLS) (*tls.Config, error) {
	if a.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("admin_tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
