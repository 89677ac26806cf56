package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// auditEnv is a fencedEnv whose proxy has its own account (backend.user),
// allowed only what the audit table and the lease functions need.
type auditEnv struct {
	*fencedEnv
	proxyUser string
}

func newAuditEnv(t *testing.T, auditKeys string) *auditEnv {
	t.Helper()
	s := dbtest.Shared(t)
	var b [4]byte
	rand.Read(b[:])
	user := "fp_audit_" + hex.EncodeToString(b[:])
	const pw = "audit-Pw-1"
	env := "FP_TEST_AUDIT_PW_" + strings.ToUpper(hex.EncodeToString(b[:]))
	t.Setenv(env, pw)
	root := dbtest.Open(t, s.RootDSN(""))
	mustExec(t, root, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+pw+"'")
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	e := newFencedEnv(t, envOptions{audit: auditKeys, backend: []string{"user: " + user, "password_env: " + env}})
	for _, q := range []string{
		"GRANT SELECT, INSERT, DELETE ON `" + e.db + "`.fenced_audit TO '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON `" + e.db + "`.fenced_job_leases TO '" + user + "'@'%'",
	} {
		mustExec(t, root, q)
	}
	return &auditEnv{fencedEnv: e, proxyUser: user}
}

// staleSession is an app session (sending program_name) whose lease was
// taken over: its writes to invoices are stale.
func (e *auditEnv) staleSession(t *testing.T, name string) (*sql.Conn, uint32, lease.Lease) {
	t.Helper()
	c := e.session(t, "connectionAttributes=program_name:invoicer")
	l := e.acquire(t, name, time.Minute)
	setFence(t, c, l)
	mustExec(t, e.root, "UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'new-owner' WHERE lease_name = ?", name)
	var id uint32
	if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return c, id, l
}

// staleWrite makes one stale insert and checks that it was rejected.
func staleWrite(t *testing.T, c *sql.Conn, customer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-11', 1)", customer)
	if err != nil {
		t.Fatalf("stale write: %v", err)
	}
	if n, _ := r.RowsAffected(); n != 0 {
		t.Fatalf("stale write affected %d rows", n)
	}
}

// auditRow is what the tests read back from fenced_audit.
type auditRow struct {
	reason, mode, lease, table, owner, client, user, schema, digest, outcome string
	instance, clientHost, program                                            string
	presented, current, connID                                               uint64
	backendConnID                                                            uint32
}

func (e *auditEnv) tableRows(t *testing.T, where string, args ...any) []auditRow {
	t.Helper()
	rows, err := e.root.Query(`SELECT reason, mode, COALESCE(lease, ''), table_name, COALESCE(presented_owner, ''), client, user,
		schema_name, COALESCE(digest, ''), outcome, instance, client_host, program_name,
		COALESCE(presented_token, 0), COALESCE(current_token, 0), conn_id, backend_conn_id
		FROM fenced_audit WHERE `+where+` ORDER BY id`, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.reason, &r.mode, &r.lease, &r.table, &r.owner, &r.client, &r.user, &r.schema, &r.digest,
			&r.outcome, &r.instance, &r.clientHost, &r.program, &r.presented, &r.current, &r.connID, &r.backendConnID); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *auditEnv) countRows(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.root.QueryRow("SELECT COUNT(*) FROM fenced_audit WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitBlockedInsert waits until the audit writer's INSERT is waiting for
// the table lock another session holds.
func (e *auditEnv) awaitBlockedInsert(t *testing.T) {
	t.Helper()
	eventually(t, 5*time.Second, "the audit INSERT to wait for the table lock", func() bool {
		var n int
		err := e.root.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND STATE LIKE 'Waiting for table%lock' AND INFO LIKE 'INSERT INTO%fenced_audit%'`,
			e.proxyUser).Scan(&n)
		return err == nil && n == 1
	})
}

// lockAudit takes a write lock on the audit table in a session of its own;
// the returned function releases it.
func (e *auditEnv) lockAudit(t *testing.T) func() {
	t.Helper()
	lc, err := e.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, lc, "LOCK TABLES fenced_audit WRITE")
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			mustExec(t, lc, "UNLOCK TABLES")
			lc.Close()
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// TestAuditTableGetsEveryRecord: a rejected stale write and a refusal reach
// fenced_audit within 2 seconds, with every field of the file's record and
// where the statement came from; the file record matches.
func TestAuditTableGetsEveryRecord(t *testing.T) {
	e := newAuditEnv(t, "")
	c, backendID, l := e.staleSession(t, "invoice:acme")
	start := time.Now()
	staleWrite(t, c, "acme")
	if _, err := c.ExecContext(context.Background(), "TRUNCATE TABLE invoices"); err == nil {
		t.Fatal("TRUNCATE of a protected table was not refused")
	}
	eventually(t, 2*time.Second, "two rows in fenced_audit", func() bool { return e.countRows(t, "1") == 2 })
	t.Logf("both records in fenced_audit %v after the stale write began", time.Since(start).Round(time.Millisecond))
	rows := e.tableRows(t, "1")
	file := e.auditRecords(t)
	if len(file) != 2 {
		t.Fatalf("audit file has %d records, want 2", len(file))
	}
	stale, refused := rows[0], rows[1]
	wantTable := e.db + ".invoices"
	if stale.reason != audit.StaleToken || stale.mode != "enforce" || stale.lease != "invoice:acme" || stale.table != wantTable ||
		stale.outcome != "zero_rows" || stale.presented != 1 || stale.current != 2 || stale.user != dbserver.AppUser || stale.schema != e.db ||
		!strings.Contains(stale.digest, "into `invoices`") || strings.Contains(stale.digest, "acme") {
		t.Errorf("stale write row: %+v", stale)
	}
	if stale.instance != e.proxy.Proxy.Instance() || stale.instance == "" || stale.connID == 0 || stale.backendConnID != backendID ||
		stale.clientHost != "127.0.0.1" || stale.program != "invoicer" || !strings.HasPrefix(stale.client, "127.0.0.1:") {
		t.Errorf("stale write row's origin: %+v (backend connection id %d, instance %q)", stale, backendID, e.proxy.Proxy.Instance())
	}
	if refused.reason != audit.Refused || refused.outcome != "refused" || refused.table != wantTable || refused.connID != stale.connID {
		t.Errorf("refusal row: %+v", refused)
	}
	f := file[0]
	if f.Reason != stale.reason || f.Lease != stale.lease || f.Digest != stale.digest || f.PresentedOwner != stale.owner ||
		f.ConnID != stale.connID || f.BackendConnID != stale.backendConnID || f.Program != stale.program || f.Instance != stale.instance {
		t.Errorf("file record %+v differs from the table row %+v", f, stale)
	}
	// No secret: the owner token appears nowhere, only its short hash.
	var dump string
	if err := e.root.QueryRow("SELECT GROUP_CONCAT(CONCAT_WS('|', presented_owner, digest, detail, client, program_name)) FROM fenced_audit").Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if stale.owner == "" || strings.Contains(dump, l.Owner) || len(stale.owner) > 16 {
		t.Errorf("presented_owner %q; the owner token must not appear in %q", stale.owner, dump)
	}
	if w := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_table_written_total"); w != 2 {
		t.Errorf("written_total = %v, want 2", w)
	}
}

// TestAuditTableNeverBlocksTheClient: with fenced_audit locked by another
// session, the client's rejected write returns while the proxy's INSERT of
// its record is still waiting for the lock; after UNLOCK the record
// arrives.
func TestAuditTableNeverBlocksTheClient(t *testing.T) {
	e := newAuditEnv(t, "")
	c, _, _ := e.staleSession(t, "invoice:locked")
	unlock := e.lockAudit(t)
	staleWrite(t, c, "first")
	e.awaitBlockedInsert(t)
	// The writer is stuck; the client is not.
	staleWrite(t, c, "second")
	if n := len(e.auditRecords(t)); n != 2 {
		t.Fatalf("audit file has %d records while the table is locked, want 2", n)
	}
	if w := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_table_written_total"); w != 0 {
		t.Fatalf("written_total = %v while the table is locked", w)
	}
	unlock()
	eventually(t, 2*time.Second, "both records in fenced_audit after UNLOCK", func() bool { return e.countRows(t, "reason = 'stale_token'") == 2 })
	if d := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_table_dropped_total"); d != 0 {
		t.Errorf("dropped_total = %v, want 0", d)
	}
}

// TestAuditTableFullQueueDrops: with the writer stuck on a locked table and
// a queue of one, further records are dropped from the table (counted) and
// still reach the file.
func TestAuditTableFullQueueDrops(t *testing.T) {
	e := newAuditEnv(t, "  queue_size: 1\n")
	c, _, _ := e.staleSession(t, "invoice:full")
	unlock := e.lockAudit(t)
	staleWrite(t, c, "w0") // taken by the writer, which then waits for the lock
	e.awaitBlockedInsert(t)
	const more = 5
	for i := 0; i < more; i++ {
		staleWrite(t, c, fmt.Sprintf("w%d", i+1)) // the first fills the queue, the rest are dropped
	}
	if d := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_table_dropped_total"); d != more-1 {
		t.Fatalf("dropped_total = %v, want %d", d, more-1)
	}
	if n := len(e.auditRecords(t)); n != more+1 {
		t.Fatalf("audit file has %d records, want all %d", n, more+1)
	}
	unlock()
	eventually(t, 2*time.Second, "the two records not dropped in fenced_audit", func() bool { return e.countRows(t, "1") == 2 })
	if errs := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_write_errors_total"); errs != 0 {
		t.Errorf("write_errors_total = %v: a full queue is not a write error", errs)
	}
}

// TestAuditTableWriteFailure: with fenced_audit dropped, the records still
// reach the file, and the error and dropped counters say the table missed
// them.
func TestAuditTableWriteFailure(t *testing.T) {
	e := newAuditEnv(t, "")
	c, _, _ := e.staleSession(t, "invoice:gone")
	mustExec(t, e.root, "DROP TABLE fenced_audit")
	staleWrite(t, c, "x")
	staleWrite(t, c, "y")
	eventually(t, 5*time.Second, "write_errors_total = 2", func() bool {
		return testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_write_errors_total") == 2
	})
	if d := testutilCounter(t, e.proxy.Reg, "fenceproxy_audit_table_dropped_total"); d != 2 {
		t.Errorf("dropped_total = %v, want 2", d)
	}
	if recs := e.auditRecords(t); len(recs) != 2 || recs[0].Reason != audit.StaleToken {
		t.Fatalf("audit file: %+v", recs)
	}
	// init recreates the table; the next record goes there again.
	if err := lease.CreateSchema(context.Background(), e.root, e.db+".fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.root, "GRANT SELECT, INSERT, DELETE ON `"+e.db+"`.fenced_audit TO '"+e.proxyUser+"'@'%'")
	staleWrite(t, c, "z")
	eventually(t, 2*time.Second, "the next record in the recreated table", func() bool { return e.countRows(t, "1") == 1 })
}

// TestAuditTableRetention: rows older than audit.retention are deleted, in
// batches of 1000, and newer ones kept.
func TestAuditTableRetention(t *testing.T) {
	e := newAuditEnv(t, "  retention: 1h\n")
	mustExec(t, e.root, `INSERT INTO fenced_audit (time, reason, mode, table_name)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
		SELECT NOW(6) - INTERVAL 2 HOUR, 'stale_token', 'enforce', 'old' FROM n AS a, n AS b`)
	mustExec(t, e.root, "INSERT INTO fenced_audit (time, reason, mode, table_name) VALUES (NOW(6) - INTERVAL 30 MINUTE, 'expired', 'enforce', 'recent')")
	deleted := e.proxy.Proxy.AuditTable().Sweep(context.Background())
	if deleted != 2500 {
		t.Errorf("Sweep deleted %d rows, want 2500", deleted)
	}
	if old, recent := e.countRows(t, "table_name = 'old'"), e.countRows(t, "table_name = 'recent'"); old != 0 || recent != 1 {
		t.Fatalf("after retention: %d old rows (want 0), %d recent (want 1)", old, recent)
	}
}

// TestAuditTableRetentionRunsOnItsOwn: the proxy sweeps periodically (a
// tenth of the retention, at least every second) without being asked.
func TestAuditTableRetentionRunsOnItsOwn(t *testing.T) {
	e := newAuditEnv(t, "  retention: 5s\n")
	mustExec(t, e.root, "INSERT INTO fenced_audit (time, reason, mode, table_name) VALUES (NOW(6) - INTERVAL 1 HOUR, 'expired', 'enforce', 'old'), (NOW(6) + INTERVAL 1 HOUR, 'expired', 'enforce', 'future')")
	eventually(t, 10*time.Second, "the old row deleted by the periodic sweep", func() bool { return e.countRows(t, "table_name = 'old'") == 0 })
	if n := e.countRows(t, "table_name = 'future'"); n != 1 {
		t.Fatalf("the newer row was deleted too")
	}
}

// TestAuditTableWithoutProxyAccount: without backend.user the table is not
// written (the file is), and nothing is counted as an error.
func TestAuditTableWithoutProxyAccount(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	c := e.session(t)
	if _, err := c.ExecContext(context.Background(), "TRUNCATE TABLE invoices"); err == nil {
		t.Fatal("TRUNCATE was not refused")
	}
	if e.proxy.Proxy.AuditTable() != nil {
		t.Fatal("an audit table writer without backend.user")
	}
	if n := len(e.auditRecords(t)); n != 1 {
		t.Fatalf("audit file has %d records", n)
	}
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM fenced_audit"); got != "0" {
		t.Fatalf("fenced_audit has %s rows without backend.user", got)
	}
}
