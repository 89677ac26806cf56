package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// A session's TEMPORARY table hides the real table of the same name from
// every statement of that session, schema-qualified names included.
// Measured with two sessions on MariaDB 10.11 and TiDB: after
// CREATE TEMPORARY TABLE db.fenced_job_leases holding a forged lease row,
// the proxy's own fenced UPDATE and INSERT ... SELECT, run in that session,
// read the forged row and wrote (MariaDB: the in-statement fence; TiDB: the
// FOR UPDATE read of the guard); another session still saw the real lease.
// On MariaDB RENAME TABLE and ALTER TABLE ... RENAME of a temporary table
// make one too (ALTER needs the CREATE privilege on the new name, RENAME
// only that of temporary tables), and so do a trigger, a procedure or a
// function that creates one (it stays after the statement). A temporary
// table named like a protected table takes the session's writes: the real
// table is unchanged (a stale fence still writes nothing), but the writes
// are lost to it; the proxy refuses it too.

// shadowCols, shadowRows, shadowSelect: a lease table with a forged row
// for each lease the env's tables use, owned by the stale session.
const (
	shadowCols   = "(lease_name VARCHAR(191) PRIMARY KEY, owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL)"
	shadowRows   = "('invoice:acme', 'me', 1, NOW(3) + INTERVAL 1 HOUR), ('admin:reconciliation', 'me', 1, NOW(3) + INTERVAL 1 HOUR)"
	shadowSelect = "SELECT 'invoice:acme' AS lease_name, _binary'me' AS owner_token, 1 AS fence_token, NOW(3) + INTERVAL 1 HOUR AS leased_until " +
		"UNION ALL SELECT 'admin:reconciliation', _binary'me', 1, NOW(3) + INTERVAL 1 HOUR"
)

// staleWrites are what the stale session tries after each attempt: every
// write kind, on a table with the session's lease and one with a fixed one.
var staleWrites = []string{
	"INSERT INTO invoices (customer, period, amount) VALUES ('evil', '2026-12', 1)",
	"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 99) ON DUPLICATE KEY UPDATE amount = 99",
	"INSERT INTO invoices (customer, period, amount) SELECT 'evil2', '2026-12', 1",
	"REPLACE INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 0)",
	"UPDATE invoices SET amount = 0",
	"UPDATE invoices i JOIN notes n ON n.id = i.id SET i.amount = 0",
	"DELETE FROM invoices WHERE id = 2",
	"UPDATE reconciliation_runs SET status = 'hijacked'",
	"INSERT INTO reconciliation_runs (id, status) VALUES (2, 'x')",
}

// shadowAttempt is one way of making a temporary table: its statements run
// in order on one session; those starting with "!" must be refused by the
// proxy, "?" ones are sent as prepared statements (COM_STMT_PREPARE) with
// one argument, 1. The rest may succeed or fail on the server.
type shadowAttempt struct {
	name    string
	stmts   []string
	engines []string // nil = all
}

func shadowAttempts(db, other string) []shadowAttempt {
	maria := []string{engMariaDB}
	return []shadowAttempt{
		{name: "as select", stmts: []string{"!CREATE TEMPORARY TABLE fenced_job_leases " + shadowSelect}},
		{name: "columns then rows", stmts: []string{"!CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols, "!INSERT INTO fenced_job_leases VALUES " + shadowRows}},
		{name: "like", stmts: []string{"CREATE TABLE lease_copy " + shadowCols, "!CREATE TEMPORARY TABLE fenced_job_leases LIKE lease_copy", "!INSERT INTO fenced_job_leases VALUES " + shadowRows}},
		{name: "like itself", stmts: []string{"!CREATE TEMPORARY TABLE fenced_job_leases LIKE " + db + ".fenced_job_leases", "!INSERT INTO fenced_job_leases VALUES " + shadowRows}},
		{name: "if not exists", stmts: []string{"!CREATE TEMPORARY TABLE IF NOT EXISTS fenced_job_leases " + shadowSelect}, engines: maria},
		{name: "if not exists, columns", stmts: []string{"!CREATE TEMPORARY TABLE IF NOT EXISTS fenced_job_leases " + shadowCols}},
		{name: "or replace", stmts: []string{"!CREATE OR REPLACE TEMPORARY TABLE fenced_job_leases " + shadowSelect}, engines: maria},
		{name: "qualified", stmts: []string{"!CREATE TEMPORARY TABLE " + db + ".fenced_job_leases " + shadowSelect}, engines: maria},
		{name: "quoted qualified", stmts: []string{"!CREATE TEMPORARY TABLE `" + db + "`.`fenced_job_leases` " + shadowCols}},
		{name: "from another schema", stmts: []string{"USE `" + other + "`", "!CREATE TEMPORARY TABLE `" + db + "`.fenced_job_leases " + shadowCols, "USE `" + db + "`"}},
		{name: "upper case", stmts: []string{"!CREATE TEMPORARY TABLE FENCED_JOB_LEASES " + shadowCols}},
		{name: "name in executable comment", stmts: []string{"!CREATE TEMPORARY TABLE /*!fenced_job_leases*/ " + shadowCols}},
		{name: "temporary in executable comment", stmts: []string{"!CREATE /*!TEMPORARY*/ TABLE fenced_job_leases " + shadowCols}},
		{name: "mariadb executable comment", stmts: []string{"!CREATE /*M!100000 TEMPORARY */ TABLE fenced_job_leases " + shadowCols}, engines: maria},
		{name: "engine memory", stmts: []string{"!CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols + " ENGINE=MEMORY"}},
		{name: "ansi quotes", stmts: []string{"SET SESSION sql_mode = 'ANSI_QUOTES'", `!CREATE TEMPORARY TABLE "fenced_job_leases" ` + shadowCols, "SET SESSION sql_mode = DEFAULT"}},
		{name: "after a select, one query", stmts: []string{"!SELECT 1; CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols}},
		{name: "prepare", stmts: []string{"!PREPARE s FROM 'CREATE TEMPORARY TABLE fenced_job_leases " + strings.ReplaceAll(shadowCols, "'", "''") + "'", "EXECUTE s"}},
		{name: "execute immediate", stmts: []string{"!EXECUTE IMMEDIATE 'CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols + "'"}, engines: maria},
		{name: "execute immediate latin1", stmts: []string{"!EXECUTE IMMEDIATE _latin1'CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols + "'"}, engines: maria},
		{name: "binary protocol", stmts: []string{"?CREATE TEMPORARY TABLE fenced_job_leases SELECT 'invoice:acme' AS lease_name, _binary'me' AS owner_token, ? AS fence_token, NOW(3) + INTERVAL 1 HOUR AS leased_until"}, engines: maria},
		{name: "binary protocol, columns", stmts: []string{"?CREATE TEMPORARY TABLE fenced_job_leases (lease_name VARCHAR(191) DEFAULT 'x', n INT DEFAULT ?)"}},
		{name: "sequence", stmts: []string{"!CREATE TEMPORARY SEQUENCE fenced_job_leases"}, engines: maria},
		{name: "compound statement", stmts: []string{"!BEGIN NOT ATOMIC CREATE TEMPORARY TABLE fenced_job_leases " + shadowSelect + "; END"}, engines: maria},
		{name: "latin1 client", stmts: []string{"SET NAMES latin1", "!CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols}},
		{name: "swe7 client", stmts: []string{"SET NAMES swe7", "!CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols}, engines: maria},
		{name: "gbk client", stmts: []string{"SET NAMES gbk", "!CREATE TEMPORARY TABLE fenced_job_leases " + shadowCols}},
		{name: "rename", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!RENAME TABLE tmp_l TO fenced_job_leases"}},
		{name: "rename qualified", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!RENAME TABLE tmp_l TO `" + db + "`.`fenced_job_leases`"}},
		{name: "rename chain", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!RENAME TABLE tmp_l TO tmp_m, tmp_m TO fenced_job_leases"}},
		{name: "rename across schemas", stmts: []string{"USE `" + other + "`", "CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows,
			"!RENAME TABLE tmp_l TO `" + db + "`.fenced_job_leases", "USE `" + db + "`"}},
		{name: "alter rename to", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!ALTER TABLE tmp_l RENAME TO fenced_job_leases"}},
		{name: "alter rename bare", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!ALTER TABLE tmp_l RENAME " + db + ".fenced_job_leases"}},
		{name: "alter rename with other changes", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!ALTER TABLE tmp_l ADD COLUMN z INT, RENAME TO fenced_job_leases"}},
		{name: "alter online rename", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!ALTER ONLINE TABLE tmp_l RENAME TO fenced_job_leases"}, engines: maria},
		{name: "prepared rename", stmts: []string{"CREATE TEMPORARY TABLE tmp_l " + shadowCols, "INSERT INTO tmp_l VALUES " + shadowRows, "!PREPARE r FROM 'RENAME TABLE tmp_l TO fenced_job_leases'", "EXECUTE r"}},
		// The protected tables themselves: the session's writes would go
		// to its own table.
		{name: "protected table", stmts: []string{"!CREATE TEMPORARY TABLE invoices (id INT PRIMARY KEY, customer VARCHAR(40), period CHAR(7), amount DECIMAL(10,2), token BIGINT UNSIGNED)"}},
		{name: "protected table like itself", stmts: []string{"!CREATE TEMPORARY TABLE reconciliation_runs LIKE " + db + ".reconciliation_runs"}},
		{name: "protected table by rename", stmts: []string{"CREATE TEMPORARY TABLE tmp_i LIKE invoices", "!RENAME TABLE tmp_i TO invoices"}},
		{name: "protected table by alter rename", stmts: []string{"CREATE TEMPORARY TABLE tmp_i LIKE invoices", "!ALTER TABLE tmp_i RENAME TO " + db + ".invoices"}},
		// Programs created directly on the server (see createShadowPrograms):
		// the catalog counts every name a CREATE in a body mentions as
		// written, the lease table among them.
		{name: "procedure", stmts: []string{"!CALL mk_shadow()"}, engines: maria},
		{name: "function", stmts: []string{"!SELECT f_shadow()"}, engines: maria},
		{name: "trigger", stmts: []string{"!INSERT INTO shadow_trig (id) VALUES (1)"}, engines: maria},
	}
}

// createShadowPrograms makes, directly on the server, a procedure, a
// function and a trigger that each create a temporary lease table in the
// session that runs them.
func createShadowPrograms(t *testing.T, root *sql.DB) {
	t.Helper()
	for _, q := range []string{
		"CREATE PROCEDURE mk_shadow() CREATE TEMPORARY TABLE fenced_job_leases " + shadowSelect,
		"CREATE FUNCTION f_shadow() RETURNS INT BEGIN CREATE TEMPORARY TABLE fenced_job_leases " + shadowSelect + "; RETURN 1; END",
		"CREATE TABLE shadow_trig (id INT PRIMARY KEY)",
		"CREATE TRIGGER shadow_trig_bi BEFORE INSERT ON shadow_trig FOR EACH ROW CREATE TEMPORARY TABLE fenced_job_leases " + shadowSelect,
	} {
		mustExec(t, root, q)
	}
}

// newShadowEnv is a fenced env whose proxy has its own account and reads
// the catalog (backend.user), with invoices and reconciliation_runs held
// by another owner: the app sessions' fence ('me', token 1) is stale.
func newShadowEnv(t *testing.T, eng string, extraYAML ...string) (*fencedEnv, string) {
	t.Helper()
	var s *dbserver.Server
	if eng == engTiDB {
		s = dbtest.SharedTiDB(t)
	} else {
		s = dbtest.Shared(t)
	}
	var b [4]byte
	rand.Read(b[:])
	user := "fp_shadow_" + hex.EncodeToString(b[:])
	const pw = "shadow-Pw-1"
	env := "FP_TEST_SHADOW_PW_" + strings.ToUpper(hex.EncodeToString(b[:]))
	t.Setenv(env, pw)
	root := dbtest.Open(t, s.RootDSN(""))
	mustExec(t, root, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+pw+"'")
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	mustExec(t, root, "GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO '"+user+"'@'%'")
	e := newFencedEnv(t, envOptions{engine: eng, server: s, backend: []string{"user: " + user, "password_env: " + env},
		extra: strings.Join(extraYAML, "")})
	mustExec(t, root, "GRANT SELECT, INSERT, UPDATE ON `"+e.db+"`.fenced_job_leases TO '"+user+"'@'%'")
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'globex', '2026-10', 20)")
	mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'done')")
	mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'n'), (2, 'm')")
	e.acquire(t, "invoice:acme", time.Hour)
	e.acquire(t, "admin:reconciliation", time.Hour)
	other := dbtest.NewDatabase(t, s)
	return e, other
}

// awaitCatalogKnows waits until the proxy's catalog refuses CALL
// mk_shadow(), so that the program attempts test the catalog, not its
// absence.
func awaitCatalogKnows(t *testing.T, e *fencedEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		n := e.proxy.Proxy.CatalogChecks()
		st, on := e.proxy.Proxy.CatalogState()
		if !on {
			t.Fatal("the proxy keeps no catalog")
		}
		if st.Snapshot != nil && st.Err == nil {
			c := catalog.Close(st.Snapshot, rewrite.ProtectedFor(e.proxy.Policy))
			if c.Routines["p:"+catalogKey(e.db, "mk_shadow")] != nil && c.Routines["f:"+catalogKey(e.db, "f_shadow")] != nil &&
				c.Tables[catalogKey(e.db, "shadow_trig")] != nil {
				return
			}
		}
		if err := e.proxy.Proxy.WaitCatalog(ctx, n); err != nil {
			t.Fatalf("waiting for the catalog to know the shadowing programs: %v", err)
		}
	}
}

// TestTemporaryTableShadowing tries, from a stale session through the
// proxy (catalog on), every way found of making a temporary table named
// like the lease table or a protected table, and then every kind of stale
// write: the making is refused, and nothing changes.
func TestTemporaryTableShadowing(t *testing.T) {
	for _, eng := range []string{engMariaDB, engTiDB} {
		t.Run(eng, func(t *testing.T) {
			e, other := newShadowEnv(t, eng)
			if eng == engMariaDB {
				createShadowPrograms(t, e.root)
				awaitCatalogKnows(t, e)
			}
			dump := func() string {
				return tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs") + "--\n" +
					tableDump(t, e.root, "fenced_job_leases")
			}
			want := dump()
			for _, a := range shadowAttempts(e.db, other) {
				if a.engines != nil && !slices.Contains(a.engines, eng) {
					continue
				}
				t.Run(a.name, func(t *testing.T) {
					ctx := context.Background()
					c := e.session(t, "multiStatements=true")
					mustExec(t, c, "SET @fence_lease = 'invoice:acme', @fence_owner = 'me', @fence_token = 1")
					for _, q := range a.stmts {
						must := q[0] == '!'
						var err error
						if q[0] == '?' {
							must = true
							_, err = c.ExecContext(ctx, q[1:], 1)
						} else {
							_, err = c.ExecContext(ctx, strings.TrimPrefix(q, "!"))
						}
						if must && (err == nil || !strings.Contains(err.Error(), "fenceproxy refused")) {
							t.Errorf("%s: %v, want the proxy's refusal", q, err)
						}
					}
					for _, q := range staleWrites {
						c.ExecContext(ctx, q) // refused, 0 rows or an error: the dump decides
					}
					if got := dump(); got != want {
						t.Fatalf("a stale write landed after %q:\nwant %s\ngot  %s", a.stmts, want, got)
					}
				})
			}
		})
	}
}

// TestTemporaryLeaseTableDefeatsTheFence is the measurement behind the
// refusals, kept so that it is repeated: directly on MariaDB, a session
// that made a temporary table named like the lease table passes the
// proxy's own in-statement fence with a forged lease row, while another
// session's fence still reads the real lease.
func TestTemporaryLeaseTableDefeatsTheFence(t *testing.T) {
	e, _ := newShadowEnv(t, engMariaDB)
	ctx := context.Background()
	srv := rewrite.ParseServerVersion(queryString(t, e.root, "SELECT VERSION()"))
	eng := rewrite.New(e.proxy.Policy, rewrite.Options{})
	sess := &rewrite.Session{Schema: e.db, ANSIQuotes: rewrite.Off, NoBackslashEscapes: rewrite.Off}
	d := eng.Query([]byte("UPDATE invoices SET amount = 0 WHERE id = 1"), srv, sess)
	if d.Action != rewrite.Send || d.SQL == nil {
		t.Fatalf("the fence: %v", d.Action)
	}
	fenced := string(d.SQL)

	direct := directDB(t, e.srv, e.db)
	shadow, err := direct.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer shadow.Close()
	plain, err := direct.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, c := range []*sql.Conn{shadow, plain} {
		mustExec(t, c, "SET @fence_lease = 'invoice:acme', @fence_owner = 'me', @fence_token = 1")
	}
	if n := rowsAffected(mustExec(t, shadow, fenced)); n != 0 {
		t.Fatalf("the stale fence before the temporary table: %d rows", n)
	}
	mustExec(t, shadow, "CREATE TEMPORARY TABLE `"+e.db+"`.fenced_job_leases "+shadowSelect)
	if n := rowsAffected(mustExec(t, plain, fenced)); n != 0 {
		t.Fatalf("another session's stale fence: %d rows", n)
	}
	if n := rowsAffected(mustExec(t, shadow, fenced)); n != 1 {
		t.Fatalf("the stale fence in the session with the temporary table: %d rows, measured 1", n)
	}
}

func catalogKey(schema, name string) string {
	return strings.ToLower(schema) + "." + strings.ToLower(name)
}
