package integration

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// fencedEnv is a database with the lease table, two protected tables and an
// unprotected one, and a proxy fencing them:
//
//	reconciliation_runs  fixed lease admin:reconciliation
//	invoices             lease from @fence_lease
//	notes                not protected
type fencedEnv struct {
	eng     string // engMariaDB, engGalera or engTiDB
	srv     *dbserver.Server
	db      string
	proxy   *testProxy
	root    *sql.DB // direct to the proxy's backend (Galera: node 1), admin
	rootDSN string  // root's
	other   *sql.DB // direct, where other workers take leases over (Galera: node 2; else root)
	store   *lease.Store
	audits  string // audit file
}

type envOptions struct {
	onStale string            // zero_rows (default) | error
	mode    string            // enforce (default) | shadow
	extra   string            // more YAML (top level)
	tables  []string          // more protected tables (unqualified, in the env's database), created by the test
	leases  map[string]string // the lease: of some of tables (a fixed name or a template)
	audit   string            // more keys of the audit section, each line indented by two spaces
	backend []string          // more backend keys ("user: x")
	server  *dbserver.Server  // default: the engine's (mariadb: dbtest.Shared)
	engine  string            // engMariaDB (default), engGalera or engTiDB
	// createdLater are more protected tables, declared created_later: true,
	// that the test creates (or not) after the proxy started.
	createdLater []string
	// account: the proxy gets its own account (backend.user) with the
	// documented grants, as in a deployment: the catalog is on. forEachEngine's
	// account deployment sets it for every engine test.
	account bool
}

func newFencedEnv(t testing.TB, o envOptions) *fencedEnv {
	t.Helper()
	if o.engine == "" {
		o.engine = engMariaDB
	}
	s := o.server
	var cluster *dbserver.Cluster
	switch {
	case s != nil:
	case o.engine == engGalera:
		cluster = dbtest.SharedGalera(t)
		s = cluster.Nodes[0]
	case o.engine == engTiDB:
		s = dbtest.SharedTiDB(t)
	default:
		s = dbtest.Shared(t)
	}
	db, root := newLeaseDB(t, s)
	stmts := []string{
		"CREATE TABLE reconciliation_runs (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, result VARCHAR(100), token BIGINT UNSIGNED)",
		"CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL, period CHAR(7) NOT NULL, amount DECIMAL(10,2) NOT NULL, token BIGINT UNSIGNED, UNIQUE KEY (customer, period))",
		"CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(100))",
	}
	for _, q := range stmts {
		mustExec(t, root, q)
	}
	if o.onStale == "" {
		o.onStale = "zero_rows"
	}
	if o.mode == "" {
		o.mode = "enforce"
	}
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	yml := "fencing:\n  on_stale: " + o.onStale + "\n  mode: " + o.mode + "\n" +
		"tables:\n  - name: " + db + ".reconciliation_runs\n    lease: admin:reconciliation\n  - name: " + db + ".invoices\n"
	for _, tb := range o.tables {
		yml += "  - name: " + db + "." + tb + "\n"
		if l := o.leases[tb]; l != "" {
			yml += "    lease: \"" + l + "\"\n"
		}
	}
	for _, tb := range o.createdLater {
		yml += "  - name: " + db + "." + tb + "\n    created_later: true\n"
	}
	yml += "audit:\n  file: " + auditFile + "\n" + o.audit + o.extra
	if (o.account || withAccount(t)) && !hasUser(o.backend) {
		o.backend = append(o.backend, proxyAccount(t, s, db)...)
	}
	tp := startProxy(t, s.Addr, yml, o.backend...)
	other, rootDSN := root, s.RootDSN(db)
	if cluster != nil {
		// Every admin read waits for what the cluster committed before it
		// (wsrep_sync_wait), so that a takeover on node 2 is what node 1
		// shows next; the proxy's own sessions get no such help.
		dbtest.AwaitGalera(t, cluster)
		rootDSN = withParam(rootDSN, "wsrep_sync_wait=15")
		root = dbtest.Open(t, rootDSN)
		other = dbtest.Open(t, withParam(cluster.Nodes[1].RootDSN(db), "wsrep_sync_wait=15"))
	}
	store, err := lease.NewStore(other, db+".fenced_job_leases")
	if err != nil {
		t.Fatal(err)
	}
	return &fencedEnv{eng: o.engine, srv: s, db: db, proxy: tp, root: root, rootDSN: rootDSN, other: other, store: store, audits: auditFile}
}

// sync waits until the proxy's backend has applied what was committed
// elsewhere (on Galera: another node) before it returns.
func (e *fencedEnv) sync(t testing.TB) {
	t.Helper()
	if e.other != e.root {
		queryString(t, e.root, "SELECT 1")
	}
}

// session is one app connection through the proxy (a single connection, so
// that session variables and transactions stay on it).
func (e *fencedEnv) session(t testing.TB, params ...string) *sql.Conn {
	t.Helper()
	db := appDB(t, e.proxy, e.db, params...)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// setFence puts lease l into the session's fence variables.
func setFence(t testing.TB, c *sql.Conn, l lease.Lease) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token); err != nil {
		t.Fatal(err)
	}
}

// acquire takes lease name for ttl directly on the database.
func (e *fencedEnv) acquire(t testing.TB, name string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := e.store.Acquire(context.Background(), name, ttl)
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	e.sync(t)
	return l
}

// awaitExpired waits until the database says lease name has expired.
func (e *fencedEnv) awaitExpired(t *testing.T, name string) {
	t.Helper()
	eventually(t, 10*time.Second, "lease "+name+" to expire", func() bool {
		st, err := e.store.Get(context.Background(), name)
		return err == nil && !st.Held
	})
}

// expire ends lease name's term now by database time, as its TTL running
// out would (on Galera on node 2), without a short TTL that a loaded
// machine can outlive before the test's valid writes have run.
func (e *fencedEnv) expire(t *testing.T, name string) {
	t.Helper()
	mustExec(t, e.other, "UPDATE fenced_job_leases SET leased_until = SYSDATE(3) - INTERVAL 1 SECOND WHERE lease_name = ?", name)
	e.sync(t)
	e.awaitExpired(t, name)
}

// setToken forces lease name's row to fence token n (expired), so that the
// next acquire gets n+1.
func (e *fencedEnv) setToken(t *testing.T, name string, n uint64) {
	t.Helper()
	mustExec(t, e.root, "INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES (?, 'nobody', ?, SYSDATE(3) - INTERVAL 1 SECOND) "+
		"ON DUPLICATE KEY UPDATE fence_token = VALUES(fence_token), leased_until = VALUES(leased_until)", name, n)
}

// auditRecords reads the audit file.
func (e *fencedEnv) auditRecords(t *testing.T) []audit.Record {
	t.Helper()
	f, err := os.Open(e.audits)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// queryString runs a one-value query directly.
func queryString(t testing.TB, db *sql.DB, q string, args ...any) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRow(q, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if !s.Valid {
		return "NULL"
	}
	return s.String
}

// tableDump is a table's contents as text, for before/after comparisons.
func tableDump(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	o := runQuery(db, "SELECT * FROM "+table+" ORDER BY 1")
	if o.Err != "" {
		t.Fatalf("dump %s: %s", table, o.Err)
	}
	var b strings.Builder
	for _, r := range o.Rows {
		b.WriteString(strings.Join(r, "|"))
		b.WriteByte('\n')
	}
	return b.String()
}

// newLeaseDB creates a database with the lease and audit tables and returns
// it with an admin connection to it.
func newLeaseDB(t testing.TB, s *dbserver.Server) (string, *sql.DB) {
	t.Helper()
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	if err := lease.CreateSchema(context.Background(), root, db+".fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	return db, root
}

func splitHostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}
