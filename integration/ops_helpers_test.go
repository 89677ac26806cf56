package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// opsDB is a database with the lease and audit tables, the env's tables,
// and an account of the proxy's own (backend.user) whose password is in
// the environment variable pwEnv.
type opsDB struct {
	srv          *dbserver.Server
	db           string
	root         *sql.DB
	user, pwEnv  string
	store        *lease.Store
	backendExtra string // the backend keys for the account, indented for YAML
}

func newOpsDB(t *testing.T, s *dbserver.Server) *opsDB {
	t.Helper()
	db, root := newLeaseDB(t, s)
	for _, q := range []string{
		"CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL, period CHAR(7) NOT NULL, amount DECIMAL(10,2) NOT NULL, token BIGINT UNSIGNED, UNIQUE KEY (customer, period))",
		"CREATE TABLE runs (id INT PRIMARY KEY, status VARCHAR(20))",
	} {
		mustExec(t, root, q)
	}
	var b [4]byte
	rand.Read(b[:])
	user := "fp_ops_" + hex.EncodeToString(b[:])
	const pw = "ops-Pw-1"
	env := "FP_TEST_OPS_PW_" + strings.ToUpper(hex.EncodeToString(b[:]))
	t.Setenv(env, pw) // the binary inherits it
	mustExec(t, root, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+pw+"'")
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	for _, q := range []string{
		"GRANT SELECT, INSERT, DELETE ON `" + db + "`.fenced_audit TO '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON `" + db + "`.fenced_job_leases TO '" + user + "'@'%'",
		// The schema catalog's (serve refuses an account that cannot read it).
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO '" + user + "'@'%'",
	} {
		mustExec(t, root, q)
	}
	store, err := lease.NewStore(root, db+".fenced_job_leases")
	if err != nil {
		t.Fatal(err)
	}
	return &opsDB{srv: s, db: db, root: root, user: user, pwEnv: env, store: store,
		backendExtra: "  user: " + user + "\n  password_env: " + env + "\n"}
}

// tablesYAML protects invoices (session lease) and runs (lease "nightly").
func (o *opsDB) tablesYAML() string {
	return "tables:\n  - name: " + o.db + ".invoices\n  - name: " + o.db + ".runs\n    lease: nightly\n"
}

// staleConn is an app session through addr whose lease name was taken
// over: every write it makes to invoices is stale.
func (o *opsDB) staleConn(t *testing.T, addr, name string) *sql.Conn {
	t.Helper()
	db := dbtest.Open(t, dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+addr+")/"+o.db)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := o.store.Acquire(context.Background(), name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	setFence(t, c, l)
	mustExec(t, o.root, "UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'new-owner' WHERE lease_name = ?", name)
	return c
}

// auditRows counts the rows of fenced_audit.
func (o *opsDB) auditRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := o.root.QueryRow("SELECT COUNT(*) FROM fenced_audit").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// serveProc is the binary running serve with a config of the test's.
type serveProc struct {
	*fenceproxyProcess
	path string // the config file
	dir  string
}

// startServe runs bin serve with the config cfg(listen, admin) in a temp
// dir, waits until the MySQL listener accepts, and kills the process at
// the end of the test if it still runs.
func startServe(t *testing.T, bin string, cfg func(listen, admin string) string) *serveProc {
	t.Helper()
	p := &fenceproxyProcess{addr: closedPort(t), admin: closedPort(t), exited: make(chan struct{})}
	dir := t.TempDir()
	path := filepath.Join(dir, "fenceproxy.yaml")
	if err := os.WriteFile(path, []byte(cfg(p.addr, p.admin)), 0o600); err != nil {
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
	eventually(t, 20*time.Second, "fenceproxy to log 'fenceproxy listening'", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("fenceproxy exited: %v\n%s", p.cmd.ProcessState, p.stderr())
		default:
		}
		return strings.Contains(p.stderr(), "fenceproxy listening")
	})
	return &serveProc{fenceproxyProcess: p, path: path, dir: dir}
}

// stop sends SIGTERM and waits for the exit (code 0).
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("fenceproxy did not exit after SIGTERM:\n%s", p.stderr())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.stderr())
	}
}

// hup sends SIGHUP and waits for the reload's log line (the n-th).
func (p *serveProc) hup(t *testing.T, n int) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 20*time.Second, "the reload to be logged", func() bool {
		return strings.Count(p.stderr(), "config reload") >= n
	})
}

// jsonLogLines parses every line of a JSON log, failing the test for any
// line that is not one JSON object.
func jsonLogLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		lines = append(lines, m)
	}
	return lines
}

// syncBuffer is a log destination the test reads while the proxy writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
