package dbserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

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
	s := &Server{Dir: dir, Flavor: info.flavor, errorLog: filepath.Join(dir, "error.log"), binlog: opts.Binlog, user: defaultUser()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	datadir := filepath.Join(dir, "data")
	if err := initialize(ctx, binary, info, datadir, dir, s.user); err != nil {
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

// defaultUser is the --user a server runs as: root must name itself (mariadbd
// refuses to run as root otherwise); anyone else runs as themselves.
func defaultUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return ""
}

// initialize creates the system tables in datadir, with a passwordless
// root@localhost reachable over the socket. user is the --user to pass
// ("" for none); extra options go to the server that creates the tables.
func initialize(ctx context.Context, binary string, info binaryInfo, datadir, dir, user string, extra ...string) error {
	tmp, err := privateTmp(dir)
	if err != nil {
		return err
	}
	extra = append([]string{"--tmpdir=" + tmp}, extra...)
	var cmd *exec.Cmd
	if info.flavor == FlavorMariaDB {
		installDB, err := findInstallDB(binary)
		if err != nil {
			return err
		}
		args := []string{"--no-defaults", "--basedir=" + filepath.Dir(filepath.Dir(binary)), "--datadir=" + datadir,
			"--auth-root-authentication-method=normal", "--skip-test-db"}
		if user != "" {
			args = append(args, "--user="+user)
		}
		args = append(args, extra...)
		cmd = exec.CommandContext(ctx, installDB, args...)
	} else {
		args := []string{"--no-defaults", "--initialize-insecure", "--datadir=" + datadir}
		if user != "" {
			args = append(args, "--user="+user)
		}
		args = append(args, extra...)
		cmd = exec.CommandContext(ctx, binary, args...)
	}
	cmd.SysProcAttr = childAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.WriteFile(filepath.Join(dir, "install.log"), out, 0o600)
		return fmt.Errorf("dbserver: %s: %v\n%s", strings.Join(cmd.Args, " "), err, lastLines(string(out), 60))
	}
	return nil
}

// privateTmp creates dir/tmp for a server's --tmpdir. A server starting
// up deletes every #sql* file in its tmpdir: with a shared /tmp, that
// removes the temporary tables of another server's mariadb-install-db
// running at the same moment, which then fails ("Unknown table
// 'mysql.tmp_user_nopasswd'").
func privateTmp(dir string) (string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("dbserver: %w", err)
	}
	return tmp, nil
}

// childAttr makes a child die with this process and keeps it out of the
// terminal's process group (a ^C goes to the test binary, which then
// closes its servers in order).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
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
