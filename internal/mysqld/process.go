package mysqld

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

// readyTimeout bounds the wait for a started server to accept connections,
// unless Process.ReadyTimeout says otherwise.
const readyTimeout = 30 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
const stopTimeout = 10 * time.Second

// Process is one server process and the directory it runs in. The fields
// before Addr say how Launch starts it; set them before.
type Process struct {
	Dir     string // holds the socket, pid file, tmp dir and stdout.log
	LogFile string // the server's error log
	User    string // --user to pass ("" none)
	Binlog  bool   // a row-format binary log in Dir (server id 1)
	// Args are options after the common ones (a Galera node's wsrep
	// settings, TLS files).
	Args []string
	// SocketPassword is root@localhost's password when the datadir already
	// has one (a Galera node copied from a seed); "" for a fresh datadir.
	SocketPassword string
	// ReadyTimeout bounds the wait for the socket (0: 30 s).
	ReadyTimeout time.Duration

	Addr string // 127.0.0.1:port, set by Launch

	// What Launch started, for Restart.
	bin     Binary
	datadir string
	port    int

	cmd    *exec.Cmd     // nil when not running
	exited chan struct{} // closed when cmd has been waited for
}

// Pid is the process id while the process runs, else 0.
func (p *Process) Pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Socket is the path of the server's unix socket.
func (p *Process) Socket() string { return filepath.Join(p.Dir, "sock") }

// Launch starts the server of datadir on a free port and waits until it
// accepts connections on its socket. The port is found by listening on :0
// and closing, so another process may take it in between: a bind failure
// is retried with a new port.
func (p *Process) Launch(ctx context.Context, bin Binary, datadir string) error {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		os.Remove(p.LogFile) // only this attempt's messages count
		err = p.run(ctx, bin, datadir, port)
		if err == nil {
			p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			p.bin, p.datadir, p.port = bin, datadir, port
			return nil
		}
		log := p.LogTail(40)
		if attempt < attempts && (strings.Contains(log, "Address already in use") || strings.Contains(log, "Bind on TCP/IP port")) {
			continue
		}
		return fmt.Errorf("mysqld: %w\nerror log %s:\n%s", err, p.LogFile, log)
	}
}

// Restart stops the server Launch started (SIGTERM: the server's own
// shutdown, which ends its clients' sessions) and starts it again with the
// same datadir on the same port, as clients see a server restart. The
// socket login needs SocketPassword once the accounts are set up.
func (p *Process) Restart(ctx context.Context) error {
	if p.datadir == "" {
		return fmt.Errorf("mysqld: Restart of a server Launch did not start")
	}
	if err := p.Stop(); err != nil {
		return err
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		os.Remove(p.LogFile)
		err := p.run(ctx, p.bin, p.datadir, p.port)
		if err == nil {
			return nil
		}
		log := p.LogTail(40)
		if attempt < attempts && (strings.Contains(log, "Address already in use") || strings.Contains(log, "Bind on TCP/IP port")) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond): // the port's old sockets to go
			}
			continue
		}
		return fmt.Errorf("mysqld: restart: %w\nerror log %s:\n%s", err, p.LogFile, log)
	}
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqld: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts one server process and waits for readiness; on failure the
// process is gone when it returns.
func (p *Process) run(ctx context.Context, bin Binary, datadir string, port int) error {
	tmp, err := PrivateTmp(p.Dir)
	if err != nil {
		return err
	}
	args := []string{
		"--no-defaults", // must come first
		"--tmpdir=" + tmp,
		"--datadir=" + datadir,
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--socket=" + p.Socket(),
		"--pid-file=" + filepath.Join(p.Dir, "pid"),
		"--log-error=" + p.LogFile,
		"--max-allowed-packet=1G",
		"--local-infile=1",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-buffer-pool-size=128M",
		"--skip-name-resolve",
		"--max-connections=500",
	}
	if p.Binlog {
		args = append(args, "--log-bin="+filepath.Join(p.Dir, "binlog"), "--server-id=1", "--binlog-format=ROW")
	} else {
		args = append(args, "--skip-log-bin")
	}
	if p.User != "" {
		args = append(args, "--user="+p.User)
	}
	if bin.Flavor == FlavorMySQL {
		// The X protocol listens on 33060 by default: two servers would clash.
		args = append(args, "--mysqlx=OFF")
		if bin.Major == 8 && bin.Minor >= 4 {
			// 8.4 ships mysql_native_password disabled; AppUser needs it.
			args = append(args, "--mysql-native-password=ON")
		}
	}
	args = append(args, p.Args...)
	if err := p.Start(exec.Command(bin.Path, args...)); err != nil {
		return err
	}

	// Poll the socket as the still passwordless root.
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", p.Socket()
	cfg.Passwd = p.SocketPassword
	cfg.Timeout = time.Second
	wait := readyTimeout
	if p.ReadyTimeout > 0 {
		wait = p.ReadyTimeout
	}
	return p.AwaitLogin(ctx, cfg, wait, 50*time.Millisecond, "the server")
}

// Start starts cmd as the process, its output appended to stdout.log in
// Dir, and notes when it exits (any server: tidb-server too).
func (p *Process) Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = ChildAttr()
	out, err := os.OpenFile(filepath.Join(p.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
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
	p.cmd, p.exited = cmd, exited
	return nil
}

// AwaitLogin pings cfg until it logs in; it fails when the process (just
// started) exits, ctx ends or wait passes, and then the process is gone.
func (p *Process) AwaitLogin(ctx context.Context, cfg *mysql.Config, wait, every time.Duration, what string) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		p.Stop()
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	cmd, exited := p.cmd, p.exited
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
			p.cmd, p.exited = nil, nil
			return fmt.Errorf("%s exited during start-up (%v)", cmd.Path, cmd.ProcessState)
		case <-ctx.Done():
			p.Stop()
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), lastErr)
		case <-deadline.C:
			p.Stop()
			return fmt.Errorf("%s not ready after %s: %v", what, wait, lastErr)
		case <-tick.C:
		}
	}
}

// Stop ends the process, if any, and waits for it: SIGTERM, then SIGKILL
// after stopTimeout (an error then).
func (p *Process) Stop() error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd, p.exited = nil, nil }()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("mysqld: server pid %d ignored SIGTERM for %s and was killed", p.cmd.Process.Pid, stopTimeout)
}

// LogTail returns the last n lines of the error log, for failure messages.
func (p *Process) LogTail(n int) string { return Tail(p.LogFile, n) }

// Tail returns at most the last n lines (and 8 KiB) of a file.
func Tail(path string, n int) string {
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
