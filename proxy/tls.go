package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/policy"
)

// TLS material is read at start and again on every ReloadCertificates
// (SIGHUP): certificates, keys and CA bundles are replaced for the
// handshakes that follow, never for connections already open, and a file
// that does not load keeps what was loaded before (said in the log and in
// fenceproxy_certificate_last_reload_successful). The tls.Configs the
// handshakes use stay the same objects: they read the material through
// callbacks.

// Certificate labels of the certificate metrics.
const (
	certClient        = "client_tls"
	certAdmin         = "admin_tls"
	certBackendClient = "backend_client"
	certBackendCA     = "backend_ca"
)

// certReporter is told each load's outcome (Metrics, or nothing).
type certReporter interface {
	certLoaded(label string, ok bool, notAfter time.Time)
}

type noReport struct{}

func (noReport) certLoaded(string, bool, time.Time) {}

// keyPair is a certificate and its key read from two files.
type keyPair struct {
	label string
	rep   certReporter
	mu    sync.Mutex // serialises loads
	cur   atomic.Pointer[tls.Certificate]
}

// load reads certFile and keyFile and, if both load, uses them from now
// on. "" for both: no certificate.
func (k *keyPair) load(certFile, keyFile string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if certFile == "" && keyFile == "" {
		k.cur.Store(nil)
		return nil
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		k.rep.certLoaded(k.label, false, time.Time{})
		return fmt.Errorf("%s: %w", k.label, err)
	}
	k.cur.Store(&c)
	var notAfter time.Time
	if c.Leaf != nil {
		notAfter = c.Leaf.NotAfter
	}
	k.rep.certLoaded(k.label, true, notAfter)
	return nil
}

// caBundle is a pool of CA certificates read from a PEM file; nil pool:
// the system's roots.
type caBundle struct {
	label string
	rep   certReporter
	mu    sync.Mutex
	cur   atomic.Pointer[x509.CertPool]
}

func (b *caBundle) load(file string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if file == "" {
		b.cur.Store(nil)
		return nil
	}
	pool, notAfter, err := readCABundle(file)
	if err != nil {
		b.rep.certLoaded(b.label, false, time.Time{})
		return fmt.Errorf("%s: %w", b.label, err)
	}
	b.cur.Store(pool)
	b.rep.certLoaded(b.label, true, notAfter)
	return nil
}

// readCABundle reads every certificate of a PEM file; notAfter is the
// earliest expiry among them.
func readCABundle(file string) (*x509.CertPool, time.Time, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, time.Time{}, err
	}
	pool := x509.NewCertPool()
	var notAfter time.Time
	n := 0
	for rest := data; ; {
		var cert *x509.Certificate
		cert, rest, err = nextPEMCert(rest)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %w", file, err)
		}
		if cert == nil {
			break
		}
		pool.AddCert(cert)
		if n == 0 || cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
		n++
	}
	if n == 0 {
		return nil, time.Time{}, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return pool, notAfter, nil
}

// clientTLS is the TLS the proxy offers to clients (client_tls).
type clientTLS struct {
	cert   keyPair
	min    atomic.Uint32 // client_tls.min_version, a tls.Version
	config *tls.Config   // the one the handshakes use
	inner  atomic.Pointer[tls.Config]
}

func newClientTLS(c policy.ClientTLS, rep certReporter) (*clientTLS, error) {
	if !c.Enabled() {
		return nil, nil
	}
	ct := &clientTLS{cert: keyPair{label: certClient, rep: rep}}
	if err := ct.reload(c); err != nil {
		return nil, err
	}
	ct.config = &tls.Config{MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return ct.inner.Load(), nil }}
	return ct, nil
}

// reload reads client_tls's files and minimum version again.
func (ct *clientTLS) reload(c policy.ClientTLS) error {
	if err := ct.cert.load(c.CertFile, c.KeyFile); err != nil {
		return fmt.Errorf("client_tls: %w", errors.Unwrap(err))
	}
	min := uint16(tls.VersionTLS12)
	if c.MinVersion == "1.3" {
		min = tls.VersionTLS13
	}
	ct.inner.Store(&tls.Config{Certificates: []tls.Certificate{*ct.cert.cur.Load()}, MinVersion: min})
	return nil
}

// clientTLSConfig loads client_tls once (Preflight's check).
func clientTLSConfig(c policy.ClientTLS) (*tls.Config, error) {
	ct, err := newClientTLS(c, noReport{})
	if ct == nil || err != nil {
		return nil, err
	}
	return ct.config, nil
}

// backendTLS is the TLS of the backend hop (backend.tls and its files).
type backendTLS struct {
	mode       string
	serverName string // verify-full: the name the certificate must have
	cert       keyPair
	ca         caBundle
	config     *tls.Config
}

func newBackendTLS(b policy.Backend, rep certReporter) (*backendTLS, error) {
	mode := b.TLS
	if mode == "" || mode == policy.TLSDisabled {
		return nil, nil
	}
	bt := &backendTLS{mode: mode, cert: keyPair{label: certBackendClient, rep: rep}, ca: caBundle{label: certBackendCA, rep: rep}}
	switch mode {
	case policy.TLSPreferred, policy.TLSRequired, policy.TLSVerifyCA:
	case policy.TLSVerifyFull:
		bt.serverName = b.ServerName
		if bt.serverName == "" {
			host, _, err := net.SplitHostPort(b.Address)
			if err != nil {
				return nil, fmt.Errorf("backend address: %w", err)
			}
			bt.serverName = host
		}
	default:
		return nil, fmt.Errorf("backend.tls: unknown mode %q", mode)
	}
	if err := bt.reload(b); err != nil {
		return nil, err
	}
	bt.config = &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: bt.serverName,
		// Verification is VerifyConnection's, with the CA bundle loaded
		// last: RootCAs could not change after the config is in use.
		InsecureSkipVerify: true,
		VerifyConnection:   bt.verify,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := bt.cert.cur.Load(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
	}
	return bt, nil
}

// reload reads backend.ca_file, cert_file and key_file again; each keeps
// what it had when its files do not load.
func (bt *backendTLS) reload(b policy.Backend) error {
	var errs []error
	if err := bt.cert.load(b.CertFile, b.KeyFile); err != nil {
		errs = append(errs, fmt.Errorf("backend client certificate: %w", errors.Unwrap(err)))
	}
	if err := bt.ca.load(b.CAFile); err != nil {
		errs = append(errs, fmt.Errorf("backend CA: %w", errors.Unwrap(err)))
	}
	return errors.Join(errs...)
}

// verify checks the backend's certificate as backend.tls says: preferred
// and required encrypt without authenticating (as MySQL's own modes of
// the same names); verify-ca needs a chain to the CA; verify-full also
// the server name.
func (bt *backendTLS) verify(cs tls.ConnectionState) error {
	if bt.mode != policy.TLSVerifyCA && bt.mode != policy.TLSVerifyFull {
		return nil
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("backend sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: bt.ca.cur.Load(), Intermediates: x509.NewCertPool()}
	if bt.mode == policy.TLSVerifyFull {
		opts.DNSName = bt.serverName
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// backendTLSConfig loads the backend's TLS material once (Preflight's
// check, and OpenAdminDB for the CLI).
func backendTLSConfig(b policy.Backend) (*tls.Config, error) {
	bt, err := newBackendTLS(b, noReport{})
	if bt == nil || err != nil {
		return nil, err
	}
	return bt.config, nil
}

// ReloadCertificates reads the TLS files of client_tls and backend
// (ca_file, cert_file, key_file) again, from the paths cfg names, for the
// handshakes that follow; connections already open keep theirs. A file
// that does not load keeps the one loaded before: the error says which,
// the log too, and fenceproxy_certificate_last_reload_successful is 0 for
// it. Turning TLS on or off, or changing backend.tls, needs a restart.
func (p *Proxy) ReloadCertificates(cfg *policy.Config) error {
	var errs []error
	if p.clientTLSState != nil && cfg.ClientTLS.Enabled() {
		errs = append(errs, p.clientTLSState.reload(cfg.ClientTLS))
	}
	if p.backendTLSState != nil {
		errs = append(errs, p.backendTLSState.reload(cfg.Backend))
	}
	err := errors.Join(errs...)
	if err != nil {
		p.logger.Error("certificate reload failed; the certificates loaded before stay in use", "err", err)
	}
	return err
}

// AdminTLS is the admin endpoint's TLS (admin_tls), reloadable.
type AdminTLS struct {
	cert   keyPair
	config *tls.Config
	logger *slog.Logger
}

// NewAdminTLS loads admin_tls; nil without it. m (may be nil) gets the
// certificate metrics.
func NewAdminTLS(a policy.AdminTLS, m *Metrics, logger *slog.Logger) (*AdminTLS, error) {
	if a.CertFile == "" {
		return nil, nil
	}
	var rep certReporter = noReport{}
	if m != nil {
		rep = m
	}
	if logger == nil {
		logger = slog.Default()
	}
	at := &AdminTLS{cert: keyPair{label: certAdmin, rep: rep}, logger: logger}
	if err := at.cert.load(a.CertFile, a.KeyFile); err != nil {
		return nil, fmt.Errorf("admin_tls: %w", errors.Unwrap(err))
	}
	at.config = &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return at.cert.cur.Load(), nil }}
	return at, nil
}

// Config is the tls.Config to serve with; nil for a nil AdminTLS.
func (at *AdminTLS) Config() *tls.Config {
	if at == nil {
		return nil
	}
	return at.config
}

// Reload reads admin_tls's files again (see ReloadCertificates).
func (at *AdminTLS) Reload(a policy.AdminTLS) error {
	if at == nil || a.CertFile == "" {
		return nil
	}
	if err := at.cert.load(a.CertFile, a.KeyFile); err != nil {
		err = fmt.Errorf("admin_tls: %w", errors.Unwrap(err))
		at.logger.Error("certificate reload failed; the certificates loaded before stay in use", "err", err)
		return err
	}
	return nil
}

// AdminTLSConfig loads admin_tls once (Preflight's check).
func AdminTLSConfig(a policy.AdminTLS) (*tls.Config, error) {
	at, err := NewAdminTLS(a, nil, nil)
	return at.Config(), err
}
