package dbserver

import (
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

// FromDSN wraps an existing server, given by a go-sql-driver DSN of an
// account that may create databases and users (FENCEPROXY_TEST_DSN). It
// (re)creates AppUser there. Close leaves the server running.
//
// When the server has TLS enabled and FENCEPROXY_TEST_CA names the PEM file
// of the CA that signed its certificate, Certs (CAFile and CAPool only) and
// TLSName are set.
func FromDSN(dsn string) (*Server, error) {
	if err := checkTier(); err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("dbserver: FENCEPROXY_TEST_DSN: %w", err)
	}
	if cfg.Net != "tcp" {
		return nil, fmt.Errorf("dbserver: FENCEPROXY_TEST_DSN must use tcp(host:port), not %s: the proxy connects over TCP", cfg.Net)
	}
	cfg.DBName = ""
	s := &Server{Addr: cfg.Addr, External: true, rootCfg: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := s.openRoot()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := s.detectVersion(ctx, db); err != nil {
		return nil, fmt.Errorf("dbserver: server at %s: %w", cfg.Addr, err)
	}
	if err := mysqld.CreateUser(ctx, db, s.Flavor, AppUser, AppPassword, "mysql_native_password"); err != nil {
		return nil, err
	}
	var name, haveSSL string
	switch err := db.QueryRowContext(ctx, "SHOW VARIABLES LIKE 'have_ssl'").Scan(&name, &haveSSL); {
	case errors.Is(err, sql.ErrNoRows):
		haveSSL = "YES" // MySQL 8.4 dropped have_ssl: TLS is always built in
	case err != nil:
		return nil, err
	}
	if caFile := os.Getenv("FENCEPROXY_TEST_CA"); caFile != "" && strings.EqualFold(haveSSL, "YES") {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("dbserver: FENCEPROXY_TEST_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dbserver: FENCEPROXY_TEST_CA %s: no PEM certificate", caFile)
		}
		s.Certs = &Certs{CAFile: caFile, CAPool: pool}
		s.TLSName = "fp-dbserver-" + s.Addr
		if err := mysql.RegisterTLSConfig(s.TLSName, s.Certs.ClientTLS()); err != nil {
			return nil, err
		}
	}
	return s, nil
}
