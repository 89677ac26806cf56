package dbserver

import (
	"context"
	"database/sql"
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
	tmp, err := privateTmp(s.Dir)
	if err != nil {
		return err
	}
	args := []string{
		"--no-defaults", // must come first
		"--tmpdir=" + tmp,
		"--datadir=" + datadir,
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--socket=" + sock,
		"--pid-file=" + filepath.Join(s.Dir, "pid"),
		"--log-error=" + s.errorLog,
		"--max-allowed-packet=1G",
		"--local-infile=1",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-buffer-pool-size=128M",
		"--skip-name-resolve",
		"--max-connections=500",
	}
	if s.binlog {
		args = append(args, "--log-bin="+filepath.Join(s.Dir, "binlog"), "--server-id=1", "--binlog-format=ROW")
	} else {
		args = append(args, "--skip-log-bin")
	}
	if s.user != "" {
		args = append(args, "--user="+s.user)
	}
	args = append(args, s.extraArgs...)
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
	if err := s.startProcess(cmd); err != nil {
		return err
	}

	// Poll the socket as the still passwordless root.
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", sock
	cfg.Passwd = s.socketPassword
	cfg.Timeout = time.Second
	wait := readyTimeout
	if s.readyTimeout > 0 {
		wait = s.readyTimeout
	}
	return s.awaitLogin(ctx, cfg, wait, 50*time.Millisecond, "the server")
}

// startProcess starts cmd as the server's process, its output appended to
// stdout.log in the server's directory, and notes when it exits.
func (s *Server) startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = childAttr()
	out, err := os.OpenFile(filepath.Join(s.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	return nil
}

// awaitLogin pings cfg until it logs in; it fails when the server process
// (s.cmd, just started) exits, ctx ends or wait passes, and then the
// process is gone.
func (s *Server) awaitLogin(ctx context.Context, cfg *mysql.Config, wait, every time.Duration, what string) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		s.stop()
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	cmd, exited := s.cmd, s.exited
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(every)
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
			return fmt.Errorf("%s exited during start-up (%v)", cmd.Path, cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), lastErr)
		case <-deadline.C:
			s.stop()
			return fmt.Errorf("%s not ready after %s: %v", what, wait, lastErr)
		case <-tick.C:
		}
	}
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
