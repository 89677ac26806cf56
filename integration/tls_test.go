package integration

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// go-sql-driver TLS config names registered by testProxyCerts.
const (
	proxyTLSName = "fp-proxy-ca"
	otherTLSName = "fp-other-ca"
)

// certFiles are the PEM files of dbserver.WriteCerts, generated once per
// test binary (RSA key generation is slow under -race) and written into
// each test's temp dir.
var certFiles struct {
	once sync.Once
	err  error
	sets [2]map[string][]byte // file name -> contents
}

func generateCertFiles() {
	dir, err := os.MkdirTemp("", "fp-certs-")
	if err != nil {
		certFiles.err = err
		return
	}
	defer os.RemoveAll(dir)
	for i := range certFiles.sets {
		sub := filepath.Join(dir, strconv.Itoa(i))
		if _, err := dbserver.WriteCerts(sub); err != nil {
			certFiles.err = err
			return
		}
		entries, err := os.ReadDir(sub)
		if err != nil {
			certFiles.err = err
			return
		}
		certFiles.sets[i] = map[string][]byte{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(sub, e.Name()))
			if err != nil {
				certFiles.err = err
				return
			}
			certFiles.sets[i][e.Name()] = b
		}
	}
}

// testProxyCerts writes certificates for the proxy's client-facing TLS and
// an unrelated CA (for verification failures) into the test's temp dir, and
// registers go-sql-driver TLS configs trusting each.
func testProxyCerts(t *testing.T) (certs, other *dbserver.Certs) {
	t.Helper()
	certFiles.once.Do(generateCertFiles)
	if certFiles.err != nil {
		t.Fatal(certFiles.err)
	}
	var out [2]*dbserver.Certs
	for i, set := range certFiles.sets {
		dir := t.TempDir()
		for name, b := range set {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(set["ca.pem"]) {
			t.Fatal("no CA certificate")
		}
		out[i] = &dbserver.Certs{
			CAFile:         filepath.Join(dir, "ca.pem"),
			ServerCertFile: filepath.Join(dir, "server-cert.pem"),
			ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
			ClientCertFile: filepath.Join(dir, "client-cert.pem"),
			ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
			CAPool:         pool,
		}
	}
	certs, other = out[0], out[1]
	for name, c := range map[string]*dbserver.Certs{proxyTLSName: certs, otherTLSName: other} {
		if err := mysql.RegisterTLSConfig(name, c.ClientTLS()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mysql.DeregisterTLSConfig(name) })
	}
	return certs, other
}

func clientTLSYAML(c *dbserver.Certs, required bool) string {
	return fmt.Sprintf("client_tls:\n  cert_file: %s\n  key_file: %s\n  required: %v\n", c.ServerCertFile, c.ServerKeyFile, required)
}

// sslCipher is the backend session's Ssl_cipher as seen through db.
func sslCipher(t *testing.T, db *sql.DB) string {
	t.Helper()
	var name, v string
	if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestClientTLS: clients may use TLS to the proxy, verifying its
// certificate; each hop negotiates its own TLS.
func TestClientTLS(t *testing.T) {
	s := dbtest.Shared(t)
	certs, _ := testProxyCerts(t)
	tp := startProxy(t, s.Addr, clientTLSYAML(certs, false))

	t.Run("go-sql-driver verifies the proxy", func(t *testing.T) {
		db := appDB(t, tp, "", "tls="+proxyTLSName)
		var one int
		if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 over TLS: %d, %v", one, err)
		}
		if c := sslCipher(t, db); c != "" {
			t.Errorf("backend hop is plain, yet Ssl_cipher = %q", c)
		}
	})
	t.Run("raw client sees the proxy's certificate", func(t *testing.T) {
		cfg := certs.ClientTLS()
		cfg.ServerName = "127.0.0.1"
		w, err := dialWire(tp.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		tc, ok := w.nc.(*tls.Conn)
		if !ok || len(tc.ConnectionState().VerifiedChains) == 0 {
			t.Fatalf("no verified TLS connection")
		}
		if rows := w.textRows(w.mustQuery(t, "SELECT 'over tls'")); rows[0][0] != "over tls" {
			t.Fatalf("rows %v", rows)
		}
	})
	t.Run("client with another CA refuses the proxy", func(t *testing.T) {
		err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, "") + "&tls=" + otherTLSName)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("want a certificate verification error, got %v", err)
		}
	})
	t.Run("plain clients still work when TLS is optional", func(t *testing.T) {
		db := appDB(t, tp, "")
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBackendTLSModes: the proxy's TLS to the backend in each mode, against
// a server with TLS and one without.
func TestBackendTLSModes(t *testing.T) {
	ts := dbtest.SharedTLS(t)
	plain := dbtest.Shared(t)
	_, other := testProxyCerts(t)
	cases := []struct {
		name    string
		addr    string
		backend []string
		cipher  bool   // Ssl_cipher non-empty through the proxy
		errCode uint16 // the login fails with this error
		errText string
	}{
		{"required", ts.Addr, []string{"tls: required"}, true, 0, ""},
		{"verify-ca", ts.Addr, []string{"tls: verify-ca", "ca_file: " + ts.Certs.CAFile}, true, 0, ""},
		{"verify-full", ts.Addr, []string{"tls: verify-full", "ca_file: " + ts.Certs.CAFile}, true, 0, ""},
		{"verify-full localhost", ts.Addr, []string{"tls: verify-full", "ca_file: " + ts.Certs.CAFile, "server_name: localhost"}, true, 0, ""},
		{"preferred with TLS", ts.Addr, []string{"tls: preferred"}, true, 0, ""},
		{"preferred without TLS", plain.Addr, []string{"tls: preferred"}, false, 0, ""},
		{"verify-full wrong server_name", ts.Addr, []string{"tls: verify-full", "ca_file: " + ts.Certs.CAFile, "server_name: wrong.example"},
			false, 9001, "wrong.example"},
		{"verify-ca unknown CA", ts.Addr, []string{"tls: verify-ca", "ca_file: " + other.CAFile}, false, 9001, "certificate"},
		{"required without TLS", plain.Addr, []string{"tls: required"}, false, 9001, "does not offer TLS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := startProxy(t, tc.addr, "", tc.backend...)
			dsn := tp.DSN(dbserver.AppUser, dbserver.AppPassword, "")
			if tc.errCode != 0 {
				start := time.Now()
				err := connectErr(dsn)
				var me *mysql.MySQLError
				if !errors.As(err, &me) || me.Number != tc.errCode || !strings.Contains(me.Message, tc.errText) {
					t.Fatalf("want error %d mentioning %q, got %v", tc.errCode, tc.errText, err)
				}
				if !strings.Contains(me.Message, "fenceproxy") {
					t.Errorf("the error does not say it comes from the proxy: %q", me.Message)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("failure took %v", d)
				}
				return
			}
			db := dbtest.Open(t, dsn)
			if got := sslCipher(t, db) != ""; got != tc.cipher {
				t.Fatalf("Ssl_cipher set = %v, want %v", got, tc.cipher)
			}
			var one int
			if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTLSBothHops: TLS from the client to the proxy and from the proxy to
// the backend at once.
func TestTLSBothHops(t *testing.T) {
	ts := dbtest.SharedTLS(t)
	certs, _ := testProxyCerts(t)
	tp := startProxy(t, ts.Addr, clientTLSYAML(certs, true), "tls: verify-full", "ca_file: "+ts.Certs.CAFile)
	db := appDB(t, tp, "", "tls="+proxyTLSName)
	if c := sslCipher(t, db); c == "" {
		t.Fatal("Ssl_cipher empty: the backend hop is not encrypted")
	}
	if o := runQuery(db, "SELECT ?, REPEAT('z', 100000)", 42); o.Err != "" || len(o.Rows) != 1 || len(o.Rows[0][1]) != 100000 {
		t.Fatalf("query over two TLS hops: %+v", o.Err)
	}
}

// TestClientTLSRequired: with client_tls.required a plain client is refused
// with error 3159, as a server with require_secure_transport does.
func TestClientTLSRequired(t *testing.T) {
	s := dbtest.Shared(t)
	certs, _ := testProxyCerts(t)
	tp := startProxy(t, s.Addr, clientTLSYAML(certs, true))
	err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, ""))
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 3159 || me.SQLState != [5]byte{'H', 'Y', '0', '0', '0'} {
		t.Fatalf("plain client: want error 3159, got %v", err)
	}
	if n := testutilCounter(t, tp.Reg, "fenceproxy_connections_rejected_total"); n != 1 {
		t.Errorf("connections_rejected_total = %v", n)
	}
	if err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, "") + "&tls=" + proxyTLSName); err != nil {
		t.Fatalf("TLS client refused: %v", err)
	}
}

// TestClientAsksTLSNotOffered: a client that wants TLS from a proxy that
// offers none fails at once with a clear error, and the proxy goes on.
func TestClientAsksTLSNotOffered(t *testing.T) {
	s := dbtest.Shared(t)
	certs, _ := testProxyCerts(t)
	tp := startProxy(t, s.Addr, "")
	t.Run("go-sql-driver", func(t *testing.T) {
		err := connectErr(tp.DSN(dbserver.AppUser, dbserver.AppPassword, "") + "&tls=" + proxyTLSName)
		if !errors.Is(err, mysql.ErrNoTLS) {
			t.Fatalf("want %v, got %v", mysql.ErrNoTLS, err)
		}
	})
	t.Run("SSLRequest sent anyway", func(t *testing.T) {
		start := time.Now()
		_, err := dialWire(tp.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword,
			TLS: certs.ClientTLS(), Timeout: 10 * time.Second})
		if err == nil {
			t.Fatal("TLS handshake with a proxy that offers no TLS succeeded")
		}
		if isTimeout(err) || time.Since(start) > 5*time.Second {
			t.Fatalf("the proxy did not end the connection: %v after %v", err, time.Since(start))
		}
	})
	if err := appDB(t, tp, "").Ping(); err != nil {
		t.Fatalf("proxy stopped serving: %v", err)
	}
}
