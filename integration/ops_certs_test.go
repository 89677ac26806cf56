package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// replaceFile puts src's contents at dst the way certificate tools do:
// a new file renamed over the old one.
func replaceFile(t *testing.T, dst string, data []byte) {
	t.Helper()
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// servedSerial records the serial number of the certificate a TLS
// server presents.
type servedSerial struct{ v atomic.Pointer[big.Int] }

func (s *servedSerial) verify(raw [][]byte, _ [][]*x509.Certificate) error {
	c, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return err
	}
	s.v.Store(c.SerialNumber)
	return nil
}

func leafSerial(t *testing.T, certFile string) *big.Int {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, strings.Replace(certFile, "cert", "key", 1))
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// TestCertificatesReloadOnSIGHUP: on SIGHUP the binary reads the client
// TLS certificate, the admin endpoint's, the backend CA and the client
// certificate it shows the backend again; new handshakes get the new
// ones, connections open across a reload (MySQL over TLS, a kept-alive
// admin HTTPS connection) go on; a file that does not load keeps the
// certificate in use, says so in the log and sets
// fenceproxy_certificate_last_reload_successful to 0.
func TestCertificatesReloadOnSIGHUP(t *testing.T) {
	s := dbtest.SharedTLS(t)
	dir := t.TempDir()
	a, err := dbserver.WriteCerts(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := dbserver.WriteCerts(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	// The files the proxy reads: A's certificates, and a CA that is not
	// the backend's.
	live := filepath.Join(dir, "live")
	os.Mkdir(live, 0o700)
	clientCert, clientKey := filepath.Join(live, "client-cert.pem"), filepath.Join(live, "client-key.pem")
	adminCert, adminKey := filepath.Join(live, "admin-cert.pem"), filepath.Join(live, "admin-key.pem")
	backendCA := filepath.Join(live, "backend-ca.pem")
	// The certificate the proxy shows the backend: A's client certificate
	// at first, which the backend's CA did not sign.
	backendCert, backendKey := filepath.Join(live, "backend-cert.pem"), filepath.Join(live, "backend-key.pem")
	for dst, src := range map[string]string{clientCert: a.ServerCertFile, clientKey: a.ServerKeyFile,
		adminCert: a.ServerCertFile, adminKey: a.ServerKeyFile, backendCA: b.CAFile,
		backendCert: a.ClientCertFile, backendKey: a.ClientKeyFile} {
		replaceFile(t, dst, readFile(t, src))
	}
	// An account the backend lets in only with a certificate its CA signed.
	root := dbtest.Open(t, s.RootDSN(""))
	x509User := fmt.Sprintf("fp_x509_%d", time.Now().UnixNano()%1e6)
	mustExec(t, root, "CREATE USER '"+x509User+"'@'%' IDENTIFIED BY 'x509-Pw-1' REQUIRE X509")
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + x509User + "'@'%'") })
	bin := buildFenceproxy(t)
	sp := startServe(t, bin, func(listen, admin string) string {
		return "listen: " + listen + "\nadmin: " + admin + "\nlog_format: json\n" +
			"client_tls: {cert_file: " + clientCert + ", key_file: " + clientKey + "}\n" +
			"admin_tls: {cert_file: " + adminCert + ", key_file: " + adminKey + "}\n" +
			"backend:\n  address: " + s.Addr + "\n  tls: verify-ca\n  ca_file: " + backendCA + "\n" +
			"  cert_file: " + backendCert + "\n  key_file: " + backendKey + "\n"
	})

	// Clients trust both CAs and note the certificate served.
	both := x509.NewCertPool()
	both.AppendCertsFromPEM(readFile(t, a.CAFile))
	both.AppendCertsFromPEM(readFile(t, b.CAFile))
	var mysqlSerial servedSerial
	tlsName := fmt.Sprintf("reload-%d", time.Now().UnixNano())
	if err := mysql.RegisterTLSConfig(tlsName, &tls.Config{RootCAs: both, ServerName: "127.0.0.1", VerifyPeerCertificate: mysqlSerial.verify}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mysql.DeregisterTLSConfig(tlsName) })
	dsn := dbserver.AppUser + ":" + dbserver.AppPassword + "@tcp(" + sp.addr + ")/?tls=" + tlsName
	x509DSN := x509User + ":x509-Pw-1@tcp(" + sp.addr + ")/?tls=" + tlsName
	connectAs := func(dsn string) (*sql.DB, *sql.Conn, error) {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, nil, err
		}
		c, err := db.Conn(context.Background())
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		if err := c.PingContext(context.Background()); err != nil {
			c.Close()
			db.Close()
			return nil, nil, err
		}
		return db, c, nil
	}
	connect := func() (*sql.DB, *sql.Conn, error) { return connectAs(dsn) }
	// x509Login: does the backend take the proxy's client certificate?
	x509Login := func() error {
		db, c, err := connectAs(x509DSN)
		if err == nil {
			c.Close()
			db.Close()
		}
		return err
	}
	var adminSerial servedSerial
	reused := false
	adminClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: both, VerifyPeerCertificate: adminSerial.verify}}}
	adminGet := func(path string) string {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "https://"+sp.admin+path, nil)
		resp, err := adminClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	metric := func(name, cert string) string {
		t.Helper()
		for _, l := range strings.Split(adminGet("/metrics"), "\n") {
			if strings.HasPrefix(l, name+`{certificate="`+cert+`"} `) {
				return strings.Fields(l)[1]
			}
		}
		return "absent"
	}

	// Before: the backend's CA is wrong, so the proxy cannot reach it.
	if _, _, err := connect(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("with the wrong backend CA: %v", err)
	}
	adminGet("/healthz")
	if adminSerial.v.Load().Cmp(leafSerial(t, a.ServerCertFile)) != 0 {
		t.Fatal("the admin endpoint does not serve A's certificate")
	}

	// Reload 1: the backend's own CA; the proxy still shows the backend
	// A's client certificate, which the backend's CA did not sign. The
	// server ends the login (TLS 1.3: after the proxy's side of the
	// handshake is done), and the client is told so with 9001.
	replaceFile(t, backendCA, readFile(t, s.Certs.CAFile))
	sp.hup(t, 1)
	var me *mysql.MySQLError
	dialFailures := func() string {
		t.Helper()
		for _, l := range strings.Split(adminGet("/metrics"), "\n") {
			if v, ok := strings.CutPrefix(l, "fenceproxy_backend_dial_failures_total "); ok {
				return v
			}
		}
		return "absent"
	}
	before := dialFailures()
	if _, _, err := connect(); !errors.As(err, &me) || me.Number != 9001 || !strings.Contains(me.Message, "backend.cert_file") {
		t.Fatalf("with a client certificate the backend does not take: %v, want ERR 9001 naming backend.cert_file", err)
	}
	if after := dialFailures(); after == before {
		t.Errorf("fenceproxy_backend_dial_failures_total %s before and after a login the backend ended", after)
	}

	// Reload 2: B's client and admin certificates, and a client
	// certificate for the backend that its CA signed.
	replaceFile(t, backendCert, readFile(t, s.Certs.ClientCertFile))
	replaceFile(t, backendKey, readFile(t, s.Certs.ClientKeyFile))
	replaceFile(t, clientCert, readFile(t, b.ServerCertFile))
	replaceFile(t, clientKey, readFile(t, b.ServerKeyFile))
	replaceFile(t, adminCert, readFile(t, b.ServerCertFile))
	replaceFile(t, adminKey, readFile(t, b.ServerKeyFile))
	sp.hup(t, 2)
	db1, c1, err := connect()
	if err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	defer db1.Close()
	defer c1.Close()
	if mysqlSerial.v.Load().Cmp(leafSerial(t, b.ServerCertFile)) != 0 {
		t.Error("new MySQL connections do not get B's certificate")
	}
	if err := x509Login(); err != nil {
		t.Errorf("REQUIRE X509 after reloading the backend client certificate: %v", err)
	}
	adminGet("/healthz") // a new connection? the transport may reuse; force one
	adminClient.CloseIdleConnections()
	adminGet("/healthz")
	if adminSerial.v.Load().Cmp(leafSerial(t, b.ServerCertFile)) != 0 {
		t.Error("the admin endpoint does not serve B's certificate after the reload")
	}
	for _, cert := range []string{"client_tls", "admin_tls", "backend_ca", "backend_client"} {
		if got := metric("fenceproxy_certificate_last_reload_successful", cert); got != "1" {
			t.Errorf("%s reload successful = %s", cert, got)
		}
		if got := metric("fenceproxy_certificate_expiry_timestamp_seconds", cert); got == "absent" || got == "0" {
			t.Errorf("%s expiry = %s", cert, got)
		}
	}

	// Reload 3: broken files. What is in use stays; open connections go on.
	replaceFile(t, backendKey, []byte("garbage"))
	replaceFile(t, clientCert, []byte("not a certificate\n"))
	replaceFile(t, adminKey, []byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"))
	replaceFile(t, backendCA, []byte("garbage"))
	adminGet("/healthz") // a kept-alive admin connection, across the reload
	sp.hup(t, 3)
	eventually(t, 10*time.Second, "the failed certificate reload in the log", func() bool {
		return strings.Count(sp.stderr(), "certificate reload failed") >= 2
	})
	adminGet("/healthz")
	if !reused {
		t.Error("the admin connection opened before the reload was not reused after it")
	}
	var one int
	if err := c1.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("a TLS connection open across the reload: %v", err)
	}
	db2, c2, err := connect()
	if err != nil {
		t.Fatalf("a new connection after a failed certificate reload: %v", err)
	}
	defer db2.Close()
	defer c2.Close()
	if mysqlSerial.v.Load().Cmp(leafSerial(t, b.ServerCertFile)) != 0 {
		t.Error("a failed reload changed the certificate served")
	}
	adminClient.CloseIdleConnections()
	if err := x509Login(); err != nil {
		t.Errorf("REQUIRE X509 after a broken backend key: %v (the certificate loaded before must stay)", err)
	}
	for _, cert := range []string{"client_tls", "admin_tls", "backend_ca", "backend_client"} {
		if got := metric("fenceproxy_certificate_last_reload_successful", cert); got != "0" {
			t.Errorf("%s reload successful = %s after broken files, want 0", cert, got)
		}
	}
	if adminSerial.v.Load().Cmp(leafSerial(t, b.ServerCertFile)) != 0 {
		t.Error("the admin endpoint lost its certificate")
	}
	lines := jsonLogLines(t, sp.stderr())
	said := map[string]bool{}
	for _, l := range lines {
		if l["msg"] == "certificate reload failed; the certificates loaded before stay in use" {
			e, _ := l["err"].(string)
			for _, k := range []string{"client_tls", "admin_tls", "backend CA", "backend client certificate"} {
				if strings.Contains(e, k) {
					said[k] = true
				}
			}
		}
	}
	if len(said) != 4 {
		t.Errorf("the log names %v of client_tls, admin_tls, the backend CA and client certificate", said)
	}

	// Reload 4: good files again (A's for clients and the admin endpoint):
	// the connections open across it (c1 and c2 over TLS, the kept-alive
	// admin connection) go on, new ones get A's certificate.
	replaceFile(t, clientCert, readFile(t, a.ServerCertFile))
	replaceFile(t, clientKey, readFile(t, a.ServerKeyFile))
	replaceFile(t, adminCert, readFile(t, a.ServerCertFile))
	replaceFile(t, adminKey, readFile(t, a.ServerKeyFile))
	replaceFile(t, backendCA, readFile(t, s.Certs.CAFile))
	replaceFile(t, backendKey, readFile(t, s.Certs.ClientKeyFile))
	adminGet("/healthz")
	sp.hup(t, 4)
	adminGet("/healthz")
	if !reused {
		t.Error("the admin connection opened before a successful reload was not reused after it")
	}
	for _, c := range []*sql.Conn{c1, c2} {
		if err := c.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil {
			t.Errorf("a TLS connection open across a successful reload: %v", err)
		}
	}
	db3, c3, err := connect()
	if err != nil {
		t.Fatalf("after reload 4: %v", err)
	}
	if mysqlSerial.v.Load().Cmp(leafSerial(t, a.ServerCertFile)) != 0 {
		t.Error("new MySQL connections do not get A's certificate after reload 4")
	}
	c3.Close()
	db3.Close()
	if err := x509Login(); err != nil {
		t.Errorf("REQUIRE X509 after reload 4: %v", err)
	}
	adminClient.CloseIdleConnections()
	for _, cert := range []string{"client_tls", "admin_tls", "backend_ca", "backend_client"} {
		if got := metric("fenceproxy_certificate_last_reload_successful", cert); got != "1" {
			t.Errorf("%s reload successful = %s after good files again", cert, got)
		}
	}
	if adminSerial.v.Load().Cmp(leafSerial(t, a.ServerCertFile)) != 0 {
		t.Error("the admin endpoint does not serve A's certificate after reload 4")
	}
	c1.Close()
	c2.Close()
	sp.stop(t)
}
