// Package dbserver starts disposable MariaDB/MySQL servers (fresh datadir,
// random port, known accounts, optional TLS), Galera clusters and
// tidb-servers for fenceproxy's tests, or wraps an existing server given by
// a DSN. The server process itself is internal/mysqld's, which the demo
// uses without this package: the shipped binary links nothing of the
// harness.
//
// Test code uses the integration/dbtest helpers on top of it.
package dbserver

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

// The application account every server gets, authenticated with
// mysql_native_password and granted ALL ON *.* (it is a disposable server).
const (
	AppUser     = mysqld.AppUser
	AppPassword = mysqld.AppPassword
)

// Server flavors.
const (
	FlavorMariaDB = mysqld.FlavorMariaDB
	FlavorMySQL   = mysqld.FlavorMySQL
)

// ErrUnsupported is returned (wrapped) by CreateUser for an auth plugin the
// server cannot provide. Tests skip on it.
var ErrUnsupported = mysqld.ErrUnsupported

// Options says how to start a server.
type Options struct {
	// TLS: generate a CA and server certificate and start the server with
	// them. require_secure_transport stays off: plain clients still work.
	TLS bool
	// Binlog: write a row-format binary log (server id 1), for replication
	// clients. Off by default: the binary log slows every write.
	Binlog bool
	// Args: more server options (--name=value), for a test that needs a
	// server configured unlike the shared one.
	Args []string
}

// Server is a running MariaDB/MySQL server.
type Server struct {
	Addr     string // 127.0.0.1:port; clients always use TCP
	Flavor   string // FlavorMariaDB, FlavorMySQL or FlavorTiDB
	Version  string // SELECT VERSION()
	Dir      string // temp dir: datadir, socket, error log, certs ("" when External)
	Certs    *Certs // set when the server has TLS and its CA is known
	External bool   // from FENCEPROXY_TEST_DSN: Close leaves the server alone

	// TLSName is a go-sql-driver TLS config name, registered when Certs is
	// set, that trusts the CA: add "&tls="+TLSName to a DSN.
	TLSName string

	rootCfg *mysql.Config   // admin account over TCP
	proc    *mysqld.Process // the server's process; nil when External

	closeOnce sync.Once
	closeErr  error
}

// RootDSN is a go-sql-driver DSN of an admin account (all privileges, with
// grant option) over TCP, for database db ("" = none).
func (s *Server) RootDSN(db string) string {
	cfg := s.rootCfg.Clone()
	cfg.DBName = db
	return cfg.FormatDSN()
}

// DSN is a go-sql-driver DSN for user over TCP with parseTime=true and
// nothing else, so that callers can append "&param=value".
func (s *Server) DSN(user, password, db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "tcp", s.Addr
	cfg.DBName = db
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// ClientTLS returns a client TLS configuration trusting the server's CA, or
// nil when the server has no known CA.
func (s *Server) ClientTLS() *tls.Config {
	if s.Certs == nil {
		return nil
	}
	return s.Certs.ClientTLS()
}

// openRoot opens the admin account. The caller closes the pool.
func (s *Server) openRoot() (*sql.DB, error) {
	conn, err := mysql.NewConnector(s.rootCfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// ErrorLog returns the last lines of the server's error log, for failure
// messages ("" for an external server).
func (s *Server) ErrorLog() string {
	if s.proc == nil {
		return ""
	}
	return s.proc.LogTail(40)
}

// Close stops the server (SIGTERM, then SIGKILL after a while) and
// removes Dir. An external server is left alone. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.TLSName != "" {
			mysql.DeregisterTLSConfig(s.TLSName)
		}
		if s.External {
			return
		}
		if s.proc != nil {
			s.closeErr = s.proc.Stop()
		}
		if s.Dir != "" {
			if err := os.RemoveAll(s.Dir); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// Restart shuts the server down (SIGTERM: its own clean shutdown, which
// ends every client's session) and starts it again with the same data on
// the same address, as clients see a server restart. ctx bounds the
// start. Not for an external server.
func (s *Server) Restart(ctx context.Context) error {
	if s.proc == nil {
		return fmt.Errorf("dbserver: no server process to restart")
	}
	s.proc.SocketPassword = s.rootCfg.Passwd // set up by SetupAccounts
	return s.proc.Restart(ctx)
}

// Kill ends the server process at once with SIGKILL, as a crash would (no
// shutdown: clients' connections just break), and waits for it. The data
// directory stays until Close.
func (s *Server) Kill() error {
	if s.proc == nil || s.proc.Pid() == 0 {
		return fmt.Errorf("dbserver: no server process to kill")
	}
	if err := syscall.Kill(s.proc.Pid(), syscall.SIGKILL); err != nil {
		return err
	}
	return s.proc.Stop() // now only waits for the process
}
