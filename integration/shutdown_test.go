package integration

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// sleepRunning tells whether the server thread id is running SELECT SLEEP.
func sleepRunning(t *testing.T, root *sql.DB, id uint32) bool {
	t.Helper()
	var n int
	root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT SLEEP%'", id).Scan(&n)
	return n == 1
}

// TestGracefulShutdown: Shutdown closes an idle connection at once, lets a
// query in flight finish and then closes its connection, lets an open
// transaction run further statements and closes it after COMMIT, refuses
// new connections, and returns nil when all that ended before the deadline.
func TestGracefulShutdown(t *testing.T) {
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	mustExec(t, root, "CREATE TABLE t (id INT PRIMARY KEY)")
	tp := startProxy(t, s.Addr, "")
	idle := appWire(t, tp.Addr, db)
	busy := appWire(t, tp.Addr, db)
	tx := appWire(t, tp.Addr, db)
	tx.mustQuery(t, "BEGIN")
	tx.mustQuery(t, "INSERT INTO t VALUES (1)")
	if err := busy.send(append([]byte{comQuery}, "SELECT SLEEP(2)"...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "SELECT SLEEP(2) running", func() bool { return sleepRunning(t, root, busy.connID) })

	shutdownErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdownErr <- tp.Proxy.Shutdown(ctx)
	}()

	// The idle connection is closed at once, while the query still runs.
	if r, err := idle.readClosed(); err != nil || !r.Closed || len(r.Packets) != 0 {
		t.Fatalf("idle connection: %v %v", r, err)
	}
	if !sleepRunning(t, root, busy.connID) {
		t.Errorf("the idle connection was closed only after the query in flight ended")
	}
	eventually(t, 5*time.Second, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", tp.Addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})

	// The query in flight completes, then its connection is closed.
	r, err := busy.readResults(false)
	if err != nil || r.err() != nil {
		t.Fatalf("query in flight: %v %v", r, err)
	}
	if rows := busy.textRows(r); len(rows) != 1 || rows[0][0] != "0" {
		t.Fatalf("SELECT SLEEP(2) returned %v", rows)
	}
	if r, err := busy.readClosed(); err != nil || !r.Closed {
		t.Fatalf("busy connection not closed after its query: %v %v", r, err)
	}

	// The transaction goes on until COMMIT, then its connection is closed.
	tx.mustQuery(t, "INSERT INTO t VALUES (2)")
	if rows := tx.textRows(tx.mustQuery(t, "SELECT COUNT(*) FROM t")); rows[0][0] != "2" {
		t.Fatalf("in the transaction: %v rows", rows)
	}
	select {
	case err := <-shutdownErr:
		t.Fatalf("Shutdown returned (%v) with a transaction open", err)
	default:
	}
	tx.mustQuery(t, "COMMIT")
	if r, err := tx.readClosed(); err != nil || !r.Closed {
		t.Fatalf("connection not closed after COMMIT: %v %v", r, err)
	}
	select {
	case err := <-shutdownErr:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after every connection ended")
	}
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("committed rows: %d, %v", n, err)
	}
}

// TestShutdownDeadline: what is still open at the deadline (a transaction
// left open, a long query) is force-closed; Shutdown says so; the server
// threads go away and the transaction is rolled back.
func TestShutdownDeadline(t *testing.T) {
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	mustExec(t, root, "CREATE TABLE t (id INT PRIMARY KEY)")
	tp := startProxy(t, s.Addr, "")
	tx := appWire(t, tp.Addr, db)
	busy := appWire(t, tp.Addr, db)
	tx.mustQuery(t, "BEGIN")
	tx.mustQuery(t, "INSERT INTO t VALUES (1)")
	if err := busy.send(append([]byte{comQuery}, "SELECT SLEEP(30)"...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "SELECT SLEEP(30) running", func() bool { return sleepRunning(t, root, busy.connID) })

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := tp.Proxy.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "force-closed 2") {
		t.Fatalf("Shutdown: %v, want a report of 2 force-closed connections", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %v with a 500ms deadline", d)
	}
	if r, err := tx.readClosed(); err != nil || !r.Closed {
		t.Fatalf("transaction connection: %v %v", r, err)
	}
	if r, err := busy.readResults(false); err == nil {
		t.Fatalf("the force-closed query completed: %v", r)
	}
	for _, id := range []uint32{tx.connID, busy.connID} {
		eventually(t, 10*time.Second, fmt.Sprintf("server thread %d to end", id), func() bool { return !processExists(t, root, id) })
	}
	var n int
	if err := root.QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the force-closed transaction left %d rows (%v)", n, err)
	}
}

// TestBinarySIGTERM runs the real fenceproxy binary: on SIGTERM it stops
// accepting, lets the query in flight finish, closes the connections and
// exits 0.
func TestBinarySIGTERM(t *testing.T) {
	s := dbtest.Shared(t)
	root := dbtest.Open(t, s.RootDSN(""))
	bin := buildFenceproxy(t)
	fp := startBinary(t, bin, s.Addr, "timeouts:\n  shutdown: 20s\n")
	// The admin endpoint listens once the MySQL listener does: await it.
	eventually(t, 10*time.Second, "the admin endpoint", func() bool {
		resp, err := http.Get("http://" + fp.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if code, body := httpGet(t, "http://"+fp.admin+"/readyz"); code != 200 {
		t.Fatalf("admin /readyz: %d %q", code, body)
	}
	idle := appWire(t, fp.addr, "")
	busy := appWire(t, fp.addr, "")
	if err := busy.send(append([]byte{comQuery}, "SELECT SLEEP(1)"...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "SELECT SLEEP(1) running", func() bool { return sleepRunning(t, root, busy.connID) })
	if err := fp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r, err := idle.readClosed(); err != nil || !r.Closed {
		t.Fatalf("idle connection: %v %v", r, err)
	}
	r, err := busy.readResults(false)
	if err != nil || r.err() != nil {
		t.Fatalf("query in flight during SIGTERM: %v %v", r, err)
	}
	if r, err := busy.readClosed(); err != nil || !r.Closed {
		t.Fatalf("busy connection not closed: %v %v", r, err)
	}
	select {
	case <-fp.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("fenceproxy did not exit after SIGTERM; stderr:\n%s", fp.stderr())
	}
	if code := fp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, fp.stderr())
	}
	if out := fp.stderr(); !strings.Contains(out, "shutting down") || !strings.Contains(out, "fenceproxy stopped") {
		t.Errorf("no shutdown messages in the log:\n%s", out)
	}
}

// buildFenceproxy builds cmd/fenceproxy into the test's temp dir.
func buildFenceproxy(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "fenceproxy")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/fenceproxy/fenceproxy/cmd/fenceproxy")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fenceproxyProcess is the binary running `serve --config`.
type fenceproxyProcess struct {
	cmd    *exec.Cmd
	addr   string // MySQL listener
	admin  string // admin HTTP listener
	exited chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

func (p *fenceproxyProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *fenceproxyProcess) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startBinary runs bin with a config for backend plus extra YAML, waits
// until it accepts connections, and kills it at the end of the test if it
// is still running.
func startBinary(t *testing.T, bin, backend, extra string) *fenceproxyProcess {
	t.Helper()
	p := &fenceproxyProcess{addr: closedPort(t), admin: closedPort(t), exited: make(chan struct{})}
	cfg := fmt.Sprintf("listen: %s\nadmin: %s\nlog_level: debug\nbackend:\n  address: %s\n%s", p.addr, p.admin, backend, extra)
	path := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "serve", "--config", path)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	eventually(t, 20*time.Second, "fenceproxy to listen", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("fenceproxy exited: %v\n%s", p.cmd.ProcessState, p.stderr())
		default:
		}
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return p
}

// TestBinaryDrainDelay: on SIGTERM /readyz answers 503 at once and the
// metric says draining, while for timeouts.drain_delay new clients are
// still accepted and served; then the proxy drains and exits 0.
func TestBinaryDrainDelay(t *testing.T) {
	s := dbtest.Shared(t)
	bin := buildFenceproxy(t)
	fp := startBinary(t, bin, s.Addr, "timeouts:\n  shutdown: 20s\n  drain_delay: 6s\n")
	eventually(t, 10*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get("http://" + fp.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	held := appWire(t, fp.addr, "")
	if err := fp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The readiness answer does not wait for the next backend check.
	eventually(t, time.Second, "/readyz to answer 503 after SIGTERM", func() bool {
		code, body := httpGet(t, "http://"+fp.admin+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "draining")
	})
	if _, body := httpGet(t, "http://"+fp.admin+"/metrics"); !strings.Contains(body, "\nfenceproxy_draining 1\n") {
		t.Errorf("/metrics during the drain delay lacks fenceproxy_draining 1")
	}
	// Still accepting and serving, old and new connections alike.
	fresh := appWire(t, fp.addr, "")
	for name, c := range map[string]*wireConn{"new": fresh, "open": held} {
		if r, err := c.query("SELECT 1"); err != nil || r.err() != nil {
			t.Fatalf("%s connection during the drain delay: %v %v", name, r, err)
		}
	}
	select {
	case <-fp.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("fenceproxy did not exit after the drain delay; stderr:\n%s", fp.stderr())
	}
	if code := fp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, fp.stderr())
	}
	if out := fp.stderr(); !strings.Contains(out, "draining: /readyz answers 503") {
		t.Errorf("no drain message in the log:\n%s", out)
	}
}
