// Package mysqld starts one throwaway MariaDB/MySQL server: a fresh datadir
// in a temp dir, a random port of 127.0.0.1, root with a random password
// over TCP and the application account AppUser. It is what `fenceproxy
// demo` needs, and the process layer the test harness
// (integration/dbserver) builds its servers, Galera nodes and tidb-server
// on; it holds nothing else of the harness (no certificates, clusters or
// TiDB), so the shipped binary links only this.
package mysqld

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	FlavorTiDB    = "tidb"
)

// ErrUnsupported is returned (wrapped) by CreateUser for an auth plugin the
// server cannot provide.
var ErrUnsupported = errors.New("not supported by this server")

// Options says how Start starts a server.
type Options struct {
	// Binlog: write a row-format binary log (server id 1), for replication
	// clients. Off by default: the binary log slows every write.
	Binlog bool
	// Prepare, when set, runs once the datadir is initialized, with the
	// server's directory, and returns more server options (the harness
	// writes TLS certificates there and names them).
	Prepare func(dir string) ([]string, error)
}

// Server is a running server that Start made.
type Server struct {
	Addr    string        // 127.0.0.1:port
	Flavor  string        // FlavorMariaDB or FlavorMySQL
	Version string        // SELECT VERSION()
	Dir     string        // temp dir: datadir, socket, error log; removed by Close
	Root    *mysql.Config // root over TCP, with its password
	Proc    *Process
}

// Start initializes a fresh datadir in a new temp dir and starts a server on
// a random port of 127.0.0.1. ctx bounds the start only, not the server's
// life: the server runs until Close, or until this process dies (the child
// gets SIGKILL then, so no server outlives a crashed demo or test).
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	path, err := Find()
	if err != nil {
		return nil, err
	}
	bin, err := Inspect(path)
	if err != nil {
		return nil, err
	}
	dir, err := MakeDir("fp-dbserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Flavor: bin.Flavor}
	s.Proc = &Process{Dir: dir, LogFile: filepath.Join(dir, "error.log"), Binlog: opts.Binlog, User: DefaultUser()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	datadir := filepath.Join(dir, "data")
	if err := Initialize(ctx, bin, datadir, dir, s.Proc.User); err != nil {
		return nil, err
	}
	if opts.Prepare != nil {
		args, err := opts.Prepare(dir)
		if err != nil {
			return nil, fmt.Errorf("mysqld: %w", err)
		}
		s.Proc.Args = append(s.Proc.Args, args...)
	}
	if err := s.Proc.Launch(ctx, bin, datadir); err != nil {
		return nil, err
	}
	s.Addr = s.Proc.Addr
	acc, err := SetupAccounts(ctx, s.Proc)
	if err != nil {
		return nil, fmt.Errorf("mysqld: setting up accounts: %w\nerror log:\n%s", err, s.Proc.LogTail(40))
	}
	s.Root, s.Version, s.Flavor = acc.Root, acc.Version, acc.Flavor
	return s, nil
}

// RootDSN is a go-sql-driver DSN of root (all privileges, with grant
// option) over TCP, for database db ("" = none).
func (s *Server) RootDSN(db string) string {
	cfg := s.Root.Clone()
	cfg.DBName = db
	return cfg.FormatDSN()
}

// Close stops the server (SIGTERM, then SIGKILL after a while) and removes
// Dir.
func (s *Server) Close() error {
	err := s.Proc.Stop()
	if rerr := os.RemoveAll(s.Dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
