// Package dbtest gives tests a real MariaDB/MySQL server: one disposable
// server per test binary (plain, and one with TLS), started on first use, or
// the server named by FENCEPROXY_TEST_DSN.
//
// Use it from TestMain so the servers are stopped and their temp dirs
// removed when the tests end:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// When no server binary is installed, tests that ask for a server are
// skipped, unless FENCEPROXY_REQUIRE_SERVER=1 (CI): then they fail. They
// are skipped too outside their tier (dbserver.EnvTier): always with
// FENCEPROXY_TEST_TIER=unit, and in unit packages (anything outside
// integration/) unless FENCEPROXY_TEST_TIER=all or
// FENCEPROXY_REQUIRE_SERVER=1.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/go-sql-driver/mysql"
)

// Environment variables.
const (
	EnvDSN     = "FENCEPROXY_TEST_DSN"       // use this server instead of starting one
	EnvRequire = "FENCEPROXY_REQUIRE_SERVER" // "1": a missing server fails instead of skipping
)

// startTimeout bounds starting one server (initializing its datadir included).
const startTimeout = 2 * time.Minute

// shared is one lazily started server; a failed start is remembered so
// that every test reports it without retrying.
type shared struct {
	once sync.Once
	srv  *dbserver.Server
	err  error
}

var plain, withTLS shared

// galera is the test binary's Galera cluster, started on first use.
var galera struct {
	once    sync.Once
	cluster *dbserver.Cluster
	err     error
}

// galeraStartTimeout bounds starting a cluster: three nodes, one after the
// other through their state transfers, on a machine that may be busy.
const galeraStartTimeout = 4 * time.Minute

func (sh *shared) get(t testing.TB, opts dbserver.Options) *dbserver.Server {
	t.Helper()
	sh.once.Do(func() {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			sh.srv, sh.err = dbserver.FromDSN(dsn)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		sh.srv, sh.err = dbserver.Start(ctx, opts)
	})
	if sh.err != nil {
		Unavailable(t, sh.err)
	}
	return sh.srv
}

// Unavailable ends the test because no server could be had: a skip when no
// server binary is installed or the tier being run has no servers (unless
// FENCEPROXY_REQUIRE_SERVER=1), a failure for any other reason (a broken
// server is a bug, not a skip).
func Unavailable(t testing.TB, err error) {
	t.Helper()
	missing := errors.Is(err, dbserver.ErrNotFound) || errors.Is(err, dbserver.ErrTiDBNotFound)
	outside := errors.Is(err, dbserver.ErrOutsideTier)
	switch {
	case os.Getenv(EnvRequire) == "1":
		t.Fatal(err)
	case outside:
		t.Skip(err)
	case missing:
		t.Skip("no database server: ", err)
	}
	t.Fatal(err)
}

// Shared returns the test binary's plain server.
func Shared(t testing.TB) *dbserver.Server {
	t.Helper()
	return plain.get(t, dbserver.Options{})
}

// SharedTLS returns the test binary's server with TLS; Certs is set. With
// FENCEPROXY_TEST_DSN, the test is skipped unless that server has TLS and
// FENCEPROXY_TEST_CA names its CA.
func SharedTLS(t testing.TB) *dbserver.Server {
	t.Helper()
	s := withTLS.get(t, dbserver.Options{TLS: true})
	if s.Certs == nil {
		t.Skip("the server of " + EnvDSN + " has no TLS, or FENCEPROXY_TEST_CA does not name its CA")
	}
	return s
}

// SharedGalera returns the test binary's 3-node MariaDB Galera cluster on
// loopback, started on first use; node 3 keeps a binary log of everything
// the cluster commits, in commit order. It is skipped (or, with
// FENCEPROXY_REQUIRE_SERVER=1, fails) when mariadbd, the Galera provider or
// rsync is not installed. FENCEPROXY_TEST_DSN does not apply: a cluster is
// always started here.
func SharedGalera(t testing.TB) *dbserver.Cluster {
	t.Helper()
	galera.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), galeraStartTimeout)
		defer cancel()
		galera.cluster, galera.err = dbserver.StartGalera(ctx, dbserver.ClusterOptions{Nodes: 3, BinlogNode: 3})
		if galera.err == nil {
			os.Stderr.WriteString("dbtest: galera cluster of 3 nodes started in " + galera.cluster.Startup.Round(10*time.Millisecond).String() + "\n")
		}
	})
	if galera.err != nil {
		Unavailable(t, galera.err)
	}
	return galera.cluster
}

// Main runs the tests, stops the shared servers and exits with the tests'
// status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if galera.cluster != nil {
		if err := galera.cluster.Close(); err != nil {
			os.Stderr.WriteString("dbtest: closing the galera cluster: " + err.Error() + "\n")
		}
	}
	for _, sh := range []*shared{&plain, &withTLS, &tidb} {
		if sh.srv != nil {
			if err := sh.srv.Close(); err != nil {
				os.Stderr.WriteString("dbtest: closing server: " + err.Error() + "\n")
			}
		}
	}
	os.Exit(code)
}

// NewDatabase creates an empty database fp_<random> on s, dropped when the
// test ends, and returns its name.
func NewDatabase(t testing.TB, s *dbserver.Server) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "fp_" + hex.EncodeToString(b)
	root := Open(t, s.RootDSN(""))
	if _, err := root.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("CREATE DATABASE %s: %v", name, err)
	}
	// Registered after Open's cleanup, so it runs before root is closed.
	t.Cleanup(func() {
		if _, err := root.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("DROP DATABASE %s: %v", name, err)
		}
	})
	return name
}

// Open opens dsn with the "mysql" driver, pings it, and closes it when the
// test ends.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("connecting to %s: %v", redact(dsn), err)
	}
	return db
}

// redact hides the password of a DSN for messages.
func redact(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "***"
	}
	return cfg.FormatDSN()
}

// AwaitGalera waits until every node of c has applied what the cluster
// committed so far (a read with wsrep_sync_wait on each): after a CREATE
// DATABASE on one node, another may not have it yet, and a connection
// naming it there fails with "Unknown database".
func AwaitGalera(t testing.TB, c *dbserver.Cluster) {
	t.Helper()
	for i, s := range c.Nodes {
		db := Open(t, s.RootDSN("")+"?wsrep_sync_wait=1")
		var one int
		if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
			t.Fatalf("waiting for galera node %d to catch up: %v", i+1, err)
		}
		db.Close()
	}
}
