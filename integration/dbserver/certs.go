package dbserver

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are PEM files of a throw-away CA, a server certificate and a client
// certificate it signed, all RSA-2048 (accepted by every MySQL/MariaDB TLS
// library, unlike some ECDSA curves on old builds).
type Certs struct {
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
	CAPool         *x509.CertPool // trusts CAFile only
}

// ClientTLS returns a client configuration that trusts the CA and verifies
// the server's name (go-sql-driver fills ServerName from the DSN host).
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.CAPool, MinVersion: tls.VersionTLS12}
}

// ServerTLS returns a server configuration presenting the server certificate,
// for the proxy's client-facing TLS in tests.
func (c *Certs) ServerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.ServerCertFile, c.ServerKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// WriteCerts creates dir (if needed) and writes ca.pem, server-cert.pem,
// server-key.pem, client-cert.pem and client-key.pem into it. The server
// certificate is valid for hosts (IPs or DNS names), by default 127.0.0.1,
// localhost and ::1.
func WriteCerts(dir string, hosts ...string) (*Certs, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost", "::1"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Certs{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server-cert.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client-cert.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()

	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "fenceproxy test CA"},
		NotBefore:             now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, caCert, err := sign(caTmpl, caKey, nil, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	c.CAPool = x509.NewCertPool()
	c.CAPool.AddCert(caCert)

	leaf := func(cn string, usage x509.ExtKeyUsage, hosts []string, certFile, keyFile string) error {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, _, err := sign(tmpl, key, caCert, caKey)
		if err != nil {
			return fmt.Errorf("%s certificate: %w", cn, err)
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		// PKCS#1 ("RSA PRIVATE KEY"): read by OpenSSL, wolfSSL and yaSSL builds alike.
		return writePEM(keyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	}
	if err := leaf(hosts[0], x509.ExtKeyUsageServerAuth, hosts, c.ServerCertFile, c.ServerKeyFile); err != nil {
		return nil, err
	}
	if err := leaf(AppUser, x509.ExtKeyUsageClientAuth, nil, c.ClientCertFile, c.ClientKeyFile); err != nil {
		return nil, err
	}
	return c, nil
}

// sign creates a certificate from tmpl for key's public half, signed by
// parent/parentKey (self-signed when parent is nil).
func sign(tmpl *x509.Certificate, key *rsa.PrivateKey, parent *x509.Certificate, parentKey *rsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func writePEM(path, typ string, der []byte) error {
	// 0600 also for certificates: nothing here is meant to be shared, and
	// the server runs as the same user.
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
