package integration

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestMariadbClientSeesBackendLoss: the backend is killed (SIGKILL, as a
// crash) under a client of the real mariadb command-line client
// (libmariadb), in the middle of a query and while the client sits idle
// inside a transaction. The client must show the proxy's own error, code
// and message, not "ERROR 2027 (HY000): Received malformed packet", which
// is what libmariadb makes of any client-range (2xxx) code a server sends.
func TestMariadbClientSeesBackendLoss(t *testing.T) {
	bin, err := exec.LookPath("mariadb")
	if err != nil {
		t.Fatalf("the mariadb client is not installed (scripts/test.sh installs it): %v", err)
	}
	want := regexp.MustCompile(`ERROR 1053 \(08S01\) at line \d+: fenceproxy: lost connection to the backend \(.*\); the session is closed`)

	start := func(t *testing.T) (*dbserver.Server, *testProxy) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := dbserver.Start(ctx, dbserver.Options{})
		if err != nil {
			dbtest.Unavailable(t, err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv, startProxy(t, srv.Addr, "")
	}
	client := func(t *testing.T, addr string, args ...string) *exec.Cmd {
		host, port, _ := net.SplitHostPort(addr)
		return exec.Command(bin, append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port,
			"-u", dbserver.AppUser, "-p" + dbserver.AppPassword, "--connect-timeout=10"}, args...)...)
	}
	check := func(t *testing.T, stderr string) {
		t.Helper()
		if strings.Contains(stderr, "2027") || !want.MatchString(stderr) {
			t.Fatalf("the mariadb client printed %q, want %s", stderr, want)
		}
	}

	t.Run("mid-query", func(t *testing.T) {
		srv, tp := start(t)
		root := dbtest.Open(t, srv.RootDSN(""))
		cmd := client(t, tp.Addr, "-e", "SELECT SLEEP(60)")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		eventually(t, 30*time.Second, "SELECT SLEEP(60) running on the server", func() bool {
			var n int
			root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(60)'").Scan(&n)
			return n == 1
		})
		root.Close()
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("the mariadb client exited 0 although its query's backend was killed")
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("the mariadb client did not return after the backend was killed")
		}
		check(t, stderr.String())
	})

	t.Run("idle in a transaction", func(t *testing.T) {
		srv, tp := start(t)
		cmd := client(t, tp.Addr, "--batch", "--skip-column-names", "--unbuffered")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		io.WriteString(stdin, "BEGIN;\nSELECT 'in-transaction', @@in_transaction;\n")
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "in-transaction\t1" {
			t.Fatalf("the client's transaction did not start: %q %v (stderr %q)", lines.Text(), lines.Err(), stderr.String())
		}
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(stdin, "SELECT 'after';\n")
		stdin.Close()
		io.Copy(io.Discard, stdout)
		if err := cmd.Wait(); err == nil {
			t.Fatal("the mariadb client exited 0 although its backend was killed inside its transaction")
		}
		check(t, stderr.String())
	})
}
