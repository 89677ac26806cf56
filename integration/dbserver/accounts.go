package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// setupAccounts gives root a password for TCP use and creates AppUser,
// working over the socket as the passwordless root@localhost.
func (s *Server) setupAccounts(ctx context.Context, info binaryInfo) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", filepath.Join(s.Dir, "sock")
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)

	password := randomHex("fp-root-", 16)
	pw := quote(password)
	var stmts []string
	for _, host := range []string{"127.0.0.1", "::1"} {
		h := quote(host)
		stmts = append(stmts,
			"CREATE USER IF NOT EXISTS 'root'@"+h+" IDENTIFIED BY "+pw,
			"ALTER USER 'root'@"+h+" IDENTIFIED BY "+pw,
			"GRANT ALL PRIVILEGES ON *.* TO 'root'@"+h+" WITH GRANT OPTION",
		)
	}
	// Last: it only affects new socket logins, not this session.
	stmts = append(stmts, "ALTER USER 'root'@'localhost' IDENTIFIED BY "+pw)
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", strings.Replace(q, pw, "'***'", 1), err)
		}
	}
	if err := s.detectVersion(ctx, db); err != nil {
		return err
	}

	s.rootCfg = mysql.NewConfig()
	s.rootCfg.User, s.rootCfg.Passwd = "root", password
	s.rootCfg.Net, s.rootCfg.Addr = "tcp", s.Addr

	err = createUser(ctx, db, s.Flavor, AppUser, AppPassword, "mysql_native_password")
	if errors.Is(err, ErrUnsupported) && s.Flavor == FlavorMySQL {
		// MySQL 9 removed mysql_native_password.
		err = createUser(ctx, db, s.Flavor, AppUser, AppPassword, "caching_sha2_password")
	}
	return err
}

// detectVersion fills Version and Flavor from the running server.
func (s *Server) detectVersion(ctx context.Context, db *sql.DB) error {
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version); err != nil {
		return fmt.Errorf("SELECT VERSION(): %w", err)
	}
	switch v := strings.ToLower(s.Version); {
	case strings.Contains(v, "-tidb-"):
		s.Flavor = FlavorTiDB
	case strings.Contains(v, "mariadb"):
		s.Flavor = FlavorMariaDB
	default:
		s.Flavor = FlavorMySQL
	}
	return nil
}
