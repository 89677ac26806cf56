// Package dbserver starts disposable MariaDB/MySQL servers (fresh datadir,
// random port, known accounts, optional TLS) for fenceproxy's tests and its
// demo, or wraps an existing server given by a DSN.
//
// It does not import "testing": the demo binary uses it too. Test code uses
// the integration/dbtest helpers on top of it.
package dbserver

import (
	"crypto/tls"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The application account every server gets, authenticated with
// mysql_native_password and granted ALL ON *.* (it is a disposable server).
const (
	AppUser     = "fp_app"
	AppPassword = "fp-app-Pw1"
)

// Server flavors.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// ErrUnsupported is returned (wrapped) by CreateUser for an auth plugin the
// server cannot provide. Tests skip on it.
var ErrUnsupported = errors.New("not supported by this server")

// Options says how to start a server.
type Options struct {
	// TLS: generate a CA and server certificate and start the server with
	// them. require_secure_transport stays off: plain clients still work.
	TLS bool
	// Binlog: write a row-format binary log (server id 1), for replication
	// clients. Off by default: the binary log slows every write.
	Binlog bool
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

	rootCfg  *mysql.Config // admin account over TCP
	cmd      *exec.Cmd     // nil when External
	exited   chan struct{} // closed when cmd has been waited for
	errorLog string        // path of the server's error log
	binlog   bool          // Options.Binlog

	// How run starts the process: the --user to pass ("" none), options
	// after the common ones, root's socket password when the datadir
	// already has one (a Galera node copied from a seed), and how long to
	// wait for the socket (0: readyTimeout).
	user           string
	extraArgs      []string
	socketPassword string
	readyTimeout   time.Duration

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
	if s.errorLog == "" {
		return ""
	}
	return tail(s.errorLog, 40)
}

// tail returns at most the last n lines (and 8 KiB) of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no error log: " + err.Error() + ")"
	}
	const maxBytes = 8 << 10
	if len(data) > maxBytes {
		data = data[len(data)-maxBytes:]
	}
	end := len(data)
	for end > 0 && data[end-1] == '\n' {
		end--
	}
	lines := 0
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			lines++
			if lines == n {
				return string(data[i+1 : end])
			}
		}
	}
	return string(data[:end])
}
