package mysqld

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
)

// MakeDir creates a server's temp dir, keeping the socket path under the
// ~108 byte limit of unix socket addresses even when TMPDIR is long.
func MakeDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err == nil && len(dir) > 80 {
		os.RemoveAll(dir)
		dir, err = os.MkdirTemp("/tmp", prefix)
	}
	if err != nil {
		return "", fmt.Errorf("mysqld: temp dir: %w", err)
	}
	return dir, nil
}

// DefaultUser is the --user a server runs as: root must name itself
// (mariadbd refuses to run as root otherwise); anyone else runs as
// themselves.
func DefaultUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return ""
}

// Initialize creates the system tables in datadir, with a passwordless
// root@localhost reachable over the socket; dir is the server's directory
// (its tmp dir and install.log go there). user is the --user to pass (""
// for none); extra options go to the server that creates the tables.
func Initialize(ctx context.Context, bin Binary, datadir, dir, user string, extra ...string) error {
	tmp, err := PrivateTmp(dir)
	if err != nil {
		return err
	}
	extra = append([]string{"--tmpdir=" + tmp}, extra...)
	var cmd *exec.Cmd
	if bin.Flavor == FlavorMariaDB {
		installDB, err := findInstallDB(bin.Path)
		if err != nil {
			return err
		}
		args := []string{"--no-defaults", "--basedir=" + filepath.Dir(filepath.Dir(bin.Path)), "--datadir=" + datadir,
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
		cmd = exec.CommandContext(ctx, bin.Path, args...)
	}
	cmd.SysProcAttr = ChildAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.WriteFile(filepath.Join(dir, "install.log"), out, 0o600)
		return fmt.Errorf("mysqld: %s: %v\n%s", strings.Join(cmd.Args, " "), err, lastLines(string(out), 60))
	}
	return nil
}

// PrivateTmp creates dir/tmp for a server's --tmpdir. A server starting
// up deletes every #sql* file in its tmpdir: with a shared /tmp, that
// removes the temporary tables of another server's mariadb-install-db
// running at the same moment, which then fails ("Unknown table
// 'mysql.tmp_user_nopasswd'").
func PrivateTmp(dir string) (string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("mysqld: %w", err)
	}
	return tmp, nil
}

// ChildAttr makes a child die with this process and keeps it out of the
// terminal's process group (a ^C goes to this process, which then closes
// its servers in order).
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// RandomHex is prefix and n random bytes in hex (passwords, names).
func RandomHex(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Quote makes a SQL string literal. Only for our own names and passwords:
// it assumes the default sql_mode (backslash escapes on).
func Quote(s string) string {
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
