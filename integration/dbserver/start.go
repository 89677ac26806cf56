package dbserver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// readyTimeout bounds the wait for a started server to accept connections.
const readyTimeout = 30 * time.Second

// stopTimeout is how long Close waits after SIGTERM before SIGKILL.
const stopTimeout = 10 * time.Second

// Start initializes a fresh datadir in a new temp dir and starts a server on
// a random port of 127.0.0.1. ctx bounds the start only, not the server's
// life: the server runs until Close, or until this process dies (the child
// gets SIGKILL then, so no server outlives a crashed or timed-out test).
func Start(ctx context.Context, opts Options) (srv *Server, err error) {
	binary, err := Find()
	if err != nil {
		return nil, err
	}
	info, err := inspectBinary(binary)
	if err != nil {
		return nil, err
	}
	dir, err := makeDir()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Flavor: info.flavor, errorLog: filepath.Join(dir, "error.log")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	datadir := filepath.Join(dir, "data")
	if err := initialize(ctx, binary, info, datadir, dir); err != nil {
		return nil, err
	}
	if opts.TLS {
		if s.Certs, err = WriteCerts(filepath.Join(dir, "certs")); err != nil {
			return nil, fmt.Errorf("dbserver: certificates: %w", err)
		}
	}
	if err := s.launch(ctx, binary, info, datadir); err != nil {
		return nil, err
	}
	if err := s.setupAccounts(ctx, info); err != nil {
		return nil, fmt.Errorf("dbserver: setting up accounts: %w\nerror log:\n%s", err, s.ErrorLog())
	}
	if s.Certs != nil {
		s.TLSName = "fp-dbserver-" + s.Addr
		if err := mysql.RegisterTLSConfig(s.TLSName, s.Certs.ClientTLS()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// makeDir creates the server's temp dir, keeping the socket path under the
// ~108 byte limit of unix socket addresses even when TMPDIR is long.
func makeDir() (string, error) {
	dir, err := os.MkdirTemp("", "fp-dbserver-")
	if err == nil && len(dir) > 80 {
		os.RemoveAll(dir)
		dir, err = os.MkdirTemp("/tmp", "fp-dbserver-")
	}
	if err != nil {
		return "", fmt.Errorf("dbserver: temp dir: %w", err)
	}
	return dir, nil
}

// initialize creates the system tables in datadir, with a passwordless
// root@localhost reachable over the socket.
func initialize(ctx context.Context, binary string, info binaryInfo, datadir, dir string) error {
	var cmd *exec.Cmd
	if info.flavor == FlavorMariaDB {
		installDB, err := findInstallDB(binary)
		if err != nil {
			return err
		}
		args := []string{"--no-defaults", "--basedir=" + filepath.Dir(filepath.Dir(binary)), "--datadir=" + datadir,
			"--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, installDB, args...)
	} else {
		args := []string{"--no-defaults", "--initialize-insecure", "--datadir=" + datadir}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, binary, args...)
	}
	cmd.SysProcAttr = childAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.WriteFile(filepath.Join(dir, "install.log"), out, 0o600)
		return fmt.Errorf("dbserver: %s: %v\n%s", strings.Join(cmd.Args, " "), err, lastLines(string(out), 30))
	}
	return nil
}

// childAttr makes a child die with this process and keeps it out of the
// terminal's process group (a ^C goes to the test binary, which then
// closes its servers in order).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// launch starts the server on a free port and waits until it accepts
// connections on its socket. The port is found by listening on :0 and
// closing, so another process may take it in between: a bind failure is
// retried with a new port.
func (s *Server) launch(ctx context.Context, binary string, info binaryInfo, datadir string) error {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		os.Remove(s.errorLog) // only this attempt's messages count
		err = s.run(ctx, binary, info, datadir, port)
		if err == nil {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			return nil
		}
		log := s.ErrorLog()
		if attempt < attempts && (strings.Contains(log, "Address already in use") || strings.Contains(log, "Bind on TCP/IP port")) {
			continue
		}
		return fmt.Errorf("dbserver: %w\nerror log %s:\n%s", err, s.errorLog, log)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dbserver: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts one server process and waits for readiness; on failure the
// process is gone when it returns.
func (s *Server) run(ctx context.Context, binary string, info binaryInfo, datadir string, port int) error {
	sock := filepath.Join(s.Dir, "sock")
	args := []string{
		"--no-defaults",
		"--datadir=" + datadir,
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--socket=" + sock,
		"--pid-file=" + filepath.Join(s.Dir, "pid"),
		"--log-error=" + s.errorLog,
		"--skip-log-bin",
		"--max-allowed-packet=1G",
		"--local-infile=1",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-buffer-pool-size=128M",
		"--skip-name-resolve",
		"--max-connections=500",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if info.flavor == FlavorMySQL {
		// The X protocol listens on 33060 by default: two servers would clash.
		args = append(args, "--mysqlx=OFF")
		if info.major == 8 && info.minor >= 4 {
			// 8.4 ships mysql_native_password disabled; AppUser needs it.
			args = append(args, "--mysql-native-password=ON")
		}
	}
	if c := s.Certs; c != nil {
		args = append(args, "--ssl-ca="+c.CAFile, "--ssl-cert="+c.ServerCertFile, "--ssl-key="+c.ServerKeyFile)
	}
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = childAttr()
	out, err := os.OpenFile(filepath.Join(s.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", binary, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	// Poll the socket as the still passwordless root.
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", sock
	cfg.Timeout = time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lastErr = db.PingContext(pctx)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("%s exited during start-up (%v)", binary, cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return fmt.Errorf("waiting for the server: %w (last error: %v)", ctx.Err(), lastErr)
		case <-deadline.C:
			s.stop()
			return fmt.Errorf("server not ready after %s: %v", readyTimeout, lastErr)
		case <-tick.C:
		}
	}
}

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
	s.Flavor = FlavorMySQL
	if strings.Contains(strings.ToLower(s.Version), "mariadb") {
		s.Flavor = FlavorMariaDB
	}
	return nil
}

// Close stops the server (SIGTERM, then SIGKILL after stopTimeout) and
// removes Dir. An external server is left alone. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.TLSName != "" {
			mysql.DeregisterTLSConfig(s.TLSName)
		}
		if s.External {
			return
		}
		s.closeErr = s.stop()
		if s.Dir != "" {
			if err := os.RemoveAll(s.Dir); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// stop ends the server process, if any, and waits for it.
func (s *Server) stop() error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd, s.exited = nil, nil }()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	s.cmd.Process.Kill()
	<-s.exited
	return fmt.Errorf("dbserver: server pid %d ignored SIGTERM for %s and was killed", s.cmd.Process.Pid, stopTimeout)
}

func randomHex(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// quote makes a SQL string literal. Only for our own names and passwords:
// it assumes the default sql_mode (backslash escapes on).
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
