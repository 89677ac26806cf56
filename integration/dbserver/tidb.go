package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/internal/mysqld"
)

// FlavorTiDB is a tidb-server (with its embedded unistore store).
const FlavorTiDB = mysqld.FlavorTiDB

// EnvTiDBServer names a tidb-server binary to use instead of the cached
// build of scripts/tidb-server.sh.
const EnvTiDBServer = "FENCEPROXY_TIDB_SERVER"

// ErrTiDBNotFound is returned (wrapped) by FindTiDB and StartTiDB when no
// tidb-server binary exists. Test helpers skip on it unless a server is
// required.
var ErrTiDBNotFound = errors.New("no tidb-server binary found")

// tidbReadyTimeout is longer than a mariadbd start (30 s): a fresh tidb-server
// bootstraps its system tables before it accepts connections, which takes
// tens of seconds on two busy cores.
const tidbReadyTimeout = 3 * time.Minute

// FindTiDB returns the tidb-server to run: $FENCEPROXY_TIDB_SERVER, else
// tidb-server on PATH, else the newest build cached by scripts/tidb-server.sh.
func FindTiDB() (string, error) {
	if p := os.Getenv(EnvTiDBServer); p != "" {
		if !mysqld.IsExecutable(p) {
			return "", fmt.Errorf("dbserver: %s=%s is not an executable file", EnvTiDBServer, p)
		}
		return p, nil
	}
	if p, err := exec.LookPath("tidb-server"); err == nil {
		return p, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	if cache != "" {
		matches, _ := filepath.Glob(filepath.Join(cache, "fenceproxy", "tidb-server-*", "tidb-server"))
		var newest string
		var newestTime time.Time
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && mysqld.IsExecutable(m) && fi.ModTime().After(newestTime) {
				newest, newestTime = m, fi.ModTime()
			}
		}
		if newest != "" {
			return newest, nil
		}
	}
	return "", fmt.Errorf("%w (looked at $%s, PATH and %s): run scripts/tidb-server.sh, which builds one into that cache (about 10 minutes the first time)",
		ErrTiDBNotFound, EnvTiDBServer, filepath.Join(cache, "fenceproxy", "tidb-server-*"))
}

// StartTiDB starts a tidb-server with an in-memory unistore store on random
// ports of 127.0.0.1 in a new temp dir, with the same accounts as Start:
// root with a random password and AppUser (mysql_native_password), both
// reachable over TCP only (no unix socket). ctx bounds the start only.
func StartTiDB(ctx context.Context) (srv *Server, err error) {
	if err := checkTier(); err != nil {
		return nil, err
	}
	binary, err := FindTiDB()
	if err != nil {
		return nil, err
	}
	dir, err := mysqld.MakeDir("fp-dbserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Flavor: FlavorTiDB, proc: &mysqld.Process{Dir: dir, LogFile: filepath.Join(dir, "tidb.log")}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := mysqld.FreePort()
		if err != nil {
			return nil, err
		}
		status, err := mysqld.FreePort()
		if err != nil {
			return nil, err
		}
		os.Remove(s.proc.LogFile)
		os.Remove(filepath.Join(dir, "stdout.log"))
		err = s.runTiDB(ctx, binary, port, status)
		if err == nil {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			break
		}
		log := s.ErrorLog() + mysqld.Tail(filepath.Join(dir, "stdout.log"), 20)
		if attempt < attempts && strings.Contains(log, "address already in use") {
			continue
		}
		return nil, fmt.Errorf("dbserver: %w\nlog %s:\n%s", err, s.proc.LogFile, log)
	}
	if err := s.setupTiDBAccounts(ctx); err != nil {
		return nil, fmt.Errorf("dbserver: setting up accounts: %w\nlog:\n%s", err, s.ErrorLog())
	}
	return s, nil
}

// runTiDB starts one tidb-server and waits until root can log in over TCP;
// on failure the process is gone when it returns.
func (s *Server) runTiDB(ctx context.Context, binary string, port, status int) error {
	args := []string{
		"-store", "unistore", "-path", "", // in memory: nothing outlives the process
		"-host", "127.0.0.1", "-P", strconv.Itoa(port),
		"-status-host", "127.0.0.1", "-status", strconv.Itoa(status),
		"-socket", "",
		"-temp-dir", filepath.Join(s.Dir, "tmp"),
		"-log-file", s.proc.LogFile,
		"-log-slow-query", filepath.Join(s.Dir, "slow.log"),
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = s.Dir // anything it writes relative to its working directory stays in the temp dir
	if err := s.proc.Start(cmd); err != nil {
		return err
	}

	// A fresh tidb-server has root@'%' without a password.
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg.Timeout = time.Second
	return s.proc.AwaitLogin(ctx, cfg, tidbReadyTimeout, 100*time.Millisecond, "tidb-server")
}

// setupTiDBAccounts gives root@'%' a random password and creates AppUser,
// as the passwordless root over TCP.
func (s *Server) setupTiDBAccounts(ctx context.Context) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", s.Addr
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := s.detectVersion(ctx, db); err != nil {
		return err
	}
	if s.Flavor != FlavorTiDB {
		return fmt.Errorf("the server says it is %q, not TiDB", s.Version)
	}
	if err := mysqld.CreateUser(ctx, db, s.Flavor, AppUser, AppPassword, "mysql_native_password"); err != nil {
		return err
	}
	password := mysqld.RandomHex("fp-root-", 16)
	// Last: it only affects new logins, not this session.
	if _, err := db.ExecContext(ctx, "ALTER USER 'root'@'%' IDENTIFIED BY "+mysqld.Quote(password)); err != nil {
		return fmt.Errorf("ALTER USER root: %w", err)
	}
	s.rootCfg = mysql.NewConfig()
	s.rootCfg.User, s.rootCfg.Passwd = "root", password
	s.rootCfg.Net, s.rootCfg.Addr = "tcp", s.Addr
	return nil
}
