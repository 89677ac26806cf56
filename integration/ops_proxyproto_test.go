package integration

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// startHAProxy runs Debian's haproxy in TCP mode with one frontend per
// server line (each "send-proxy" or "send-proxy-v2" towards target,
// connecting from 127.0.0.1) and returns the frontends' addresses.
func startHAProxy(t *testing.T, target string, serverOpts ...string) []string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv(dbtest.EnvRequire) == "1" {
			t.Fatal("haproxy is not installed")
		}
		t.Skip("haproxy is not installed")
	}
	var cfg strings.Builder
	cfg.WriteString("global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n")
	var fronts []string
	for i, opt := range serverOpts {
		addr := closedPort(t)
		fronts = append(fronts, addr)
		fmt.Fprintf(&cfg, "frontend f%d\n  bind %s\n  default_backend b%d\nbackend b%d\n  server p %s %s source 127.0.0.1\n", i, addr, i, i, target, opt)
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, f := range fronts {
		eventually(t, 10*time.Second, "haproxy to listen on "+f, func() bool {
			c, err := net.DialTimeout("tcp", f, time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
	}
	return fronts
}

// dialFrom registers a go-sql-driver network that connects from the
// loopback address src (any 127.x.y.z is this host's), so that the
// client's address differs from the load balancer's.
func dialFrom(t *testing.T, src string) string {
	t.Helper()
	name := "from-" + strings.ReplaceAll(src, ".", "-")
	mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		return d.DialContext(ctx, "tcp", addr)
	})
	return name
}

// TestProxyProtocolThroughHAProxy: behind haproxy (send-proxy and
// send-proxy-v2, connecting from 127.0.0.1, the one trusted address), a
// client connecting from 127.0.0.2 is 127.0.0.2 in /connections, in the
// audit record of its stale write and in the log; the load balancer is
// proxied_by. A connection from the trusted address without a header is
// refused with an ERR, as is a malformed header; a header from an
// untrusted address is refused, and that address's plain clients work.
func TestProxyProtocolThroughHAProxy(t *testing.T) {
	s := dbtest.Shared(t)
	o := newOpsDB(t, s)
	var logs syncBuffer
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg, err := policy.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+s.Addr+"\n"+
		o.tablesYAML()+"catalog:\n  refresh: 0s\ntimeouts:\n  handshake: 2s\nproxy_protocol:\n  trusted_cidrs: [127.0.0.1]\n"+
		"audit:\n  file: "+auditFile+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxyConfigOpts(t, cfg, proxy.Options{Logger: logging.New(&logs, logging.FormatJSON, slog.LevelDebug)})
	fronts := startHAProxy(t, tp.Addr, "send-proxy", "send-proxy-v2")
	from2 := dialFrom(t, "127.0.0.2")

	for i, front := range fronts {
		version := []string{"v1", "v2"}[i]
		t.Run(version, func(t *testing.T) {
			db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@"+from2+"("+front+")/"+o.db)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			c, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var connID uint32
			if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&connID); err != nil {
				t.Fatal(err)
			}
			var info proxy.ConnInfo
			for _, ci := range tp.Proxy.Connections() {
				if ci.BackendConnID == connID {
					info = ci
				}
			}
			if !strings.HasPrefix(info.Client, "127.0.0.2:") || !strings.HasPrefix(info.ProxiedBy, "127.0.0.1:") {
				t.Fatalf("/connections: client %q proxied_by %q, want 127.0.0.2:* by 127.0.0.1:*", info.Client, info.ProxiedBy)
			}
			// A stale write: its audit record names the client.
			l, err := o.store.Acquire(context.Background(), "proxied:"+version, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			setFence(t, c, l)
			mustExec(t, o.root, "UPDATE fenced_job_leases SET fence_token = fence_token + 1 WHERE lease_name = ?", l.Name)
			mustExec(t, c, "UPDATE invoices SET amount = 2 WHERE id = 1")
			var rec audit.Record
			for _, r := range tp.Audit.Recent(0) {
				if r.Lease == l.Name {
					rec = r
				}
			}
			if rec.Client != info.Client || rec.ClientHost != "127.0.0.2" {
				t.Errorf("audit record client %q host %q, want %q", rec.Client, rec.ClientHost, info.Client)
			}
			// The audit file has the same.
			var inFile audit.Record
			eventually(t, 10*time.Second, "the record in the audit file", func() bool {
				for _, r := range auditFileRecords(t, auditFile) {
					if r.Lease == l.Name {
						inFile = r
						return true
					}
				}
				return false
			})
			if inFile.Client != info.Client || inFile.ClientHost != "127.0.0.2" {
				t.Errorf("audit file record client %q host %q, want %q", inFile.Client, inFile.ClientHost, info.Client)
			}
			if !strings.Contains(logs.String(), `"client":"`+info.Client+`"`) {
				t.Errorf("no log line with client %s", info.Client)
			}
		})
	}

	rejected := func() float64 {
		return series(t, tp.Reg, "fenceproxy_connections_rejected_total", map[string]string{"reason": "proxy_protocol"})
	}
	// From the trusted address without a header: refused after the
	// handshake timeout, with an ERR that says why.
	t.Run("trusted without a header", func(t *testing.T) {
		before := rejected()
		err := connectErr(dbserver.AppUser + ":" + dbserver.AppPassword + "@tcp(" + tp.Addr + ")/")
		if err == nil || !strings.Contains(err.Error(), "must start with a PROXY protocol header") {
			t.Fatalf("direct connection from the load balancer's address: %v", err)
		}
		if rejected() != before+1 {
			t.Errorf("connections_rejected_total{reason=proxy_protocol} %v, want %v", rejected(), before+1)
		}
	})
	t.Run("trusted with a malformed header", func(t *testing.T) {
		for _, hdr := range []string{"PROXY TCP4 10.0.0.1 10.0.0.2 1\r\n", "PROXY TCP4 " + strings.Repeat("9", 200), "\r\n\r\n\x00\r\nQUIT\n\x21\x12\x00\x0c" + strings.Repeat("\x01", 12)} {
			before := rejected()
			got := rawExchange(t, "127.0.0.1", tp.Addr, hdr)
			if !strings.Contains(got, "malformed PROXY protocol header") {
				t.Errorf("header %q: got %q", hdr, got)
			}
			if rejected() != before+1 {
				t.Errorf("header %q not counted", hdr)
			}
		}
	})
	// A client behind a trusted balancer cannot add a header of its own:
	// in the same read as the balancer's it is data before the greeting,
	// after it a stray header at the handshake; refused either way.
	t.Run("a second header behind the trusted one", func(t *testing.T) {
		for _, split := range []bool{false, true} {
			before := rejected()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", tp.Addr)
			if err != nil {
				t.Fatal(err)
			}
			first, second := "PROXY TCP4 192.0.2.10 127.0.0.1 5555 6033\r\n", "PROXY TCP4 6.6.6.6 127.0.0.1 1234 6033\r\n"
			if split {
				c.Write([]byte(first))
				// The proxy reads the first header and sends its greeting
				// before the second arrives.
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Read(make([]byte, 4)); err != nil {
					t.Fatalf("no greeting after a valid header: %v", err)
				}
				c.Write([]byte(second))
			} else {
				c.Write([]byte(first + second))
			}
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			b, _ := io.ReadAll(c)
			c.Close()
			if !strings.Contains(string(b), "PROXY protocol header") {
				t.Errorf("split %v: got %q", split, b)
			}
			if rejected() != before+1 {
				t.Errorf("split %v: not counted", split)
			}
			for _, ci := range tp.Proxy.Connections() {
				if strings.HasPrefix(ci.Client, "6.6.6.6") {
					t.Errorf("a client's own header named it: %+v", ci)
				}
			}
		}
	})
	t.Run("untrusted with a header", func(t *testing.T) {
		before := rejected()
		got := rawExchange(t, "127.0.0.3", tp.Addr, "PROXY TCP4 6.6.6.6 127.0.0.1 1234 6033\r\n")
		if !strings.Contains(got, "PROXY protocol header from 127.0.0.3:") || !strings.Contains(got, "does not include") {
			t.Errorf("untrusted PROXY header: got %q", got)
		}
		if rejected() != before+1 {
			t.Errorf("not counted")
		}
		for _, ci := range tp.Proxy.Connections() {
			if strings.HasPrefix(ci.Client, "6.6.6.6") {
				t.Errorf("an untrusted header named a client: %+v", ci)
			}
		}
		// The same address without a header is an ordinary client.
		db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@"+dialFrom(t, "127.0.0.3")+"("+tp.Addr+")/")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Ping(); err != nil {
			t.Fatalf("a plain client from an untrusted address: %v", err)
		}
	})
}

// rawExchange connects from src to addr, sends data at once, and returns
// everything the proxy sends until it closes the connection.
func rawExchange(t *testing.T, src, addr, data string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection stayed open after %q; got %q", data, b)
	}
	return string(b)
}

// TestUnixSocketListener: listen_socket serves the MySQL protocol on a
// Unix socket with listen_socket_mode; a connection's client is its peer
// process (pid and uid); the socket file goes away at shutdown. Run with
// the binary, so serve's wiring is what is tested.
func TestUnixSocketListener(t *testing.T) {
	s := dbtest.Shared(t)
	bin := buildFenceproxy(t)
	sock := filepath.Join(t.TempDir(), "mysql.sock")
	token := "sock-Token-1"
	t.Setenv("FP_TEST_SOCK_TOKEN", token)
	sp := startServe(t, bin, func(listen, admin string) string {
		return "listen: \"\"\nlisten_socket: " + sock + "\nlisten_socket_mode: \"0600\"\nadmin: " + admin +
			"\nadmin_auth: {token_env: FP_TEST_SOCK_TOKEN}\nbackend:\n  address: " + s.Addr + "\n"
	})
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", st.Mode())
	}
	db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@unix("+sock+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := c.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 over the socket: %v", err)
	}
	code, body := adminDo(t, "GET", "http://"+sp.admin+"/connections", token)
	want := fmt.Sprintf(`"client":"unix:pid=%d,uid=%d"`, os.Getpid(), os.Getuid())
	if code != 200 || !strings.Contains(body, want) {
		t.Errorf("/connections: %d %s, want %s", code, body, want)
	}
	c.Close()
	db.Close()
	sp.stop(t)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file is left after shutdown: %v", err)
	}
}
