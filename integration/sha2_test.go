package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// caching_sha2_password is MySQL 8's default authentication, and no MySQL 8
// server can be installed on this machine (only MariaDB, which does not
// implement it). These tests therefore use go-mysql's server package
// (github.com/go-mysql-org/go-mysql/server) as the backend: an independent
// implementation of the server side of caching_sha2_password (fast auth from
// its cache, full auth in clear over TLS or RSA-encrypted with the public
// key exchange). It is NOT MySQL; against a real MySQL 8 the same paths
// should be run again when one is available.

const (
	sha2User     = "sha2user"
	sha2Password = "sha2-Secret-Pw"
)

// sha2Backend is a go-mysql server with caching_sha2_password as default.
type sha2Backend struct {
	addr  string
	srv   *server.Server
	auths atomic.Int64 // Authenticate calls: 1 per fast login, 2 per full one
}

// countingAuth counts how often the server checks authentication data: the
// first answer, then, for full authentication, the password itself.
type countingAuth struct {
	server.DefaultAuthenticationProvider
	n *atomic.Int64
}

func (a *countingAuth) Authenticate(c *server.Conn, plugin string, data []byte) error {
	a.n.Add(1)
	return a.DefaultAuthenticationProvider.Authenticate(c, plugin, data)
}

// sha2Handler answers every query with one row holding the query text.
type sha2Handler struct{ server.EmptyHandler }

func (sha2Handler) HandleQuery(q string) (*gomysql.Result, error) {
	rs, err := gomysql.BuildSimpleTextResultset([]string{"query"}, [][]any{{q}})
	if err != nil {
		return nil, err
	}
	return gomysql.NewResult(rs), nil
}

func startSHA2Backend(t *testing.T, tlsConf *tls.Config) *sha2Backend {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b := &sha2Backend{}
	b.srv = server.NewServerWithAuth("8.0.36-go-mysql-server", gomysql.DEFAULT_COLLATION_ID,
		gomysql.AUTH_CACHING_SHA2_PASSWORD, key, tlsConf, &countingAuth{n: &b.auths})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[nc] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				users := server.NewInMemoryAuthenticationHandler(gomysql.AUTH_CACHING_SHA2_PASSWORD)
				if err := users.AddUser(sha2User, sha2Password, gomysql.AUTH_CACHING_SHA2_PASSWORD); err != nil {
					return
				}
				c, err := b.srv.NewCustomizedConn(nc, users, sha2Handler{})
				if err != nil {
					return // authentication failed; the client got the server's ERR
				}
				for c.HandleCommand() == nil {
				}
			}()
		}
	}()
	return b
}

// forget empties the server's caching_sha2_password cache, so that the next
// login needs full authentication.
func (b *sha2Backend) forget() {
	b.srv.InvalidateCache(sha2User, b.addr)
}

var hostPort = regexp.MustCompile(`127\.0\.0\.1:\d+`)

// TestCachingSHA2Password runs caching_sha2_password's paths through the
// proxy against go-mysql's server (see the comment at the top of the file):
// full authentication (first login after the cache is emptied), fast
// authentication (second login), with TLS on both hops, on neither (RSA
// public key exchange), and the two mixed cases the proxy bridges; and a
// wrong password, which must get the server's own error.
func TestCachingSHA2Password(t *testing.T) {
	certs, _ := testProxyCerts(t)
	backendCerts, err := dbserver.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	backendTLS, err := backendCerts.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		clientTLS  bool
		backendTLS bool
	}{
		{"TLS on both hops", true, true},
		{"plain hops with RSA key exchange", false, false},
		{"client TLS, plain backend", true, false},
		{"plain client, TLS backend", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b *sha2Backend
			var backendYAML []string
			if tc.backendTLS {
				b = startSHA2Backend(t, backendTLS)
				backendYAML = []string{"tls: verify-full", "ca_file: " + backendCerts.CAFile}
			} else {
				b = startSHA2Backend(t, nil)
			}
			tp := startProxy(t, b.addr, clientTLSYAML(certs, false), backendYAML...)
			dsn := tp.DSN(sha2User, sha2Password, "")
			if tc.clientTLS {
				dsn += "&tls=" + proxyTLSName
			}
			login := func(t *testing.T, dsn string) error {
				t.Helper()
				db := dbtest.Open(t, dsn)
				var q string
				if err := db.QueryRow("SELECT 'hello'").Scan(&q); err != nil {
					return err
				}
				if q != "SELECT 'hello'" {
					t.Fatalf("backend answered %q", q)
				}
				return db.Close()
			}
			b.forget()
			before := b.auths.Load()
			if err := login(t, dsn); err != nil {
				t.Fatalf("full authentication: %v", err)
			}
			if n := b.auths.Load() - before; n != 2 {
				t.Errorf("first login took %d authentication steps, want 2 (full authentication)", n)
			}
			before = b.auths.Load()
			if err := login(t, dsn); err != nil {
				t.Fatalf("fast authentication: %v", err)
			}
			if n := b.auths.Load() - before; n != 1 {
				t.Errorf("second login took %d authentication steps, want 1 (fast authentication)", n)
			}
			t.Run("wrong password", func(t *testing.T) {
				for _, cached := range []bool{true, false} {
					if !cached {
						b.forget()
					}
					wrong := strings.Replace(dsn, sha2Password, "not-the-password", 1)
					perr := connectErr(wrong)
					// Direct, over the transport of the proxy's backend hop.
					directDSN := sha2User + ":not-the-password@tcp(" + b.addr + ")/"
					if tc.backendTLS {
						directDSN += "?tls=skip-verify"
					}
					derr := connectErr(directDSN)
					var pe, de *mysql.MySQLError
					if !errors.As(perr, &pe) || !errors.As(derr, &de) {
						t.Fatalf("cached=%v: want server errors, got proxy %v, direct %v", cached, perr, derr)
					}
					// The server names the client's address and port: mask them.
					pm, dm := hostPort.ReplaceAllString(pe.Message, "ADDR"), hostPort.ReplaceAllString(de.Message, "ADDR")
					if pe.Number != 1045 || pe.Number != de.Number || pe.SQLState != de.SQLState || pm != dm {
						t.Errorf("cached=%v: proxy %v, direct %v", cached, pe, de)
					}
				}
			})
			if n := testutilCounter(t, tp.Reg, "fenceproxy_auth_failures_total"); n != 2 {
				t.Errorf("auth_failures_total = %v, want 2", n)
			}
		})
	}
}
