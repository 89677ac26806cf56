package dbserver

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

// Start initializes a fresh datadir in a new temp dir and starts a server on
// a random port of 127.0.0.1. ctx bounds the start only, not the server's
// life: the server runs until Close, or until this process dies (the child
// gets SIGKILL then, so no server outlives a crashed or timed-out test).
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	if err := checkTier(); err != nil {
		return nil, err
	}
	var certs *Certs
	mopts := mysqld.Options{Binlog: opts.Binlog}
	if opts.TLS {
		mopts.Prepare = func(dir string) ([]string, error) {
			var err error
			if certs, err = WriteCerts(filepath.Join(dir, "certs")); err != nil {
				return nil, fmt.Errorf("certificates: %w", err)
			}
			return []string{"--ssl-ca=" + certs.CAFile, "--ssl-cert=" + certs.ServerCertFile, "--ssl-key=" + certs.ServerKeyFile}, nil
		}
	}
	if len(opts.Args) > 0 {
		prepare := mopts.Prepare
		mopts.Prepare = func(dir string) ([]string, error) {
			var args []string
			if prepare != nil {
				var err error
				if args, err = prepare(dir); err != nil {
					return nil, err
				}
			}
			return append(args, opts.Args...), nil
		}
	}
	ms, err := mysqld.Start(ctx, mopts)
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: ms.Addr, Flavor: ms.Flavor, Version: ms.Version, Dir: ms.Dir, Certs: certs, rootCfg: ms.Root, proc: ms.Proc}
	if s.Certs != nil {
		s.TLSName = "fp-dbserver-" + s.Addr
		if err := mysql.RegisterTLSConfig(s.TLSName, s.Certs.ClientTLS()); err != nil {
			s.TLSName = ""
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// detectVersion fills Version and Flavor from the running server.
func (s *Server) detectVersion(ctx context.Context, db *sql.DB) error {
	var err error
	s.Version, s.Flavor, err = mysqld.ServerVersion(ctx, db)
	return err
}

// CreateUser (re)creates user@'%' with password, authenticated by plugin, and
// grants it ALL ON *.*. Plugins: "mysql_native_password", "ed25519"
// (MariaDB; the plugin is installed if needed) and "caching_sha2_password"
// (MySQL, TiDB). One the server cannot provide gives an error wrapping
// ErrUnsupported.
func (s *Server) CreateUser(ctx context.Context, user, password, plugin string) error {
	db, err := s.openRoot()
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // INSTALL SONAME and CREATE USER in one session
	return mysqld.CreateUser(ctx, db, s.Flavor, user, password, plugin)
}
