package rewrite

// The differential test against a real server (the package itself does no
// I/O; its tests may): every golden case that is sent fenced runs on the
// server twice, unfenced and fenced with a valid lease, each in a
// transaction that is rolled back; both must end the same way (the same
// error number, or success with the same affected rows, warnings,
// LAST_INSERT_ID and table contents), and with a stale token the fenced
// form must change nothing. It uses the integration harness's disposable
// server, or FENCEPROXY_LIVE_DSN (an account that may create databases):
//
//	FENCEPROXY_LIVE_DSN='root@unix(/run/mysqld/mysqld.sock)/' go test -run Live ./rewrite/
//
// It creates and drops the databases fpx_rw_live and fpx_rw_live2.

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/policy"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func liveDSN(t *testing.T) string {
	if dsn := os.Getenv("FENCEPROXY_LIVE_DSN"); dsn != "" {
		return dsn
	}
	return dbtest.Shared(t).RootDSN("")
}

const liveColumns = `id INT PRIMARY KEY AUTO_INCREMENT, paid INT DEFAULT 0, note VARCHAR(50) DEFAULT 'n',
  amount DECIMAL(10,2) DEFAULT 0, customer VARCHAR(20) DEFAULT 'c', created DATETIME DEFAULT CURRENT_TIMESTAMP,
  total DECIMAL(10,2), state VARCHAR(20), a INT, b INT, r INT, n INT, flags INT, run INT, iid INT, seen INT,
  gone INT, ok INT, batch INT, x INT, y INT, z INT, parent INT, rid INT, inv INT, k INT, ` + "`2x` DOUBLE, c DOUBLE, d DOUBLE, `1e1` INT, e INT, f VARCHAR(5)"

func liveSetup(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	for _, q := range []string{
		"DROP DATABASE IF EXISTS fpx_rw_live", "DROP DATABASE IF EXISTS fpx_rw_live2",
		"CREATE DATABASE fpx_rw_live", "CREATE DATABASE fpx_rw_live2",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		db.Exec("DROP DATABASE IF EXISTS fpx_rw_live")
		db.Exec("DROP DATABASE IF EXISTS fpx_rw_live2")
	})
	for _, schema := range []string{"fpx_rw_live", "fpx_rw_live2"} {
		qs := []string{
			"CREATE TABLE " + schema + ".fenced_job_leases (lease_name VARCHAR(191) NOT NULL PRIMARY KEY, " +
				"owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL)",
			"INSERT INTO " + schema + ".fenced_job_leases VALUES ('job', 'owner-A', 7, SYSDATE(3) + INTERVAL 1 HOUR), " +
				"('admin:reconciliation', 'owner-A', 7, SYSDATE(3) + INTERVAL 1 HOUR)",
		}
		for _, tbl := range []string{"invoices", "reconciliation_runs", "ledger", "x", "a", "b", "staging", "items", "c"} {
			qs = append(qs, "CREATE TABLE "+schema+"."+tbl+" ("+liveColumns+")",
				"INSERT INTO "+schema+"."+tbl+" (id, paid, x, y, a, b, iid, ok, batch, inv) VALUES "+
					"(1, 0, 1, 1, 1, 1, 1, 1, 7, 1), (2, 1, 2, 2, 2, 2, 2, 1, 7, 1), (3, 0, 3, 2, 3, 3, 3, 0, 8, 2)")
		}
		for _, q := range qs {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(q, err)
			}
		}
	}
}

func liveMap(s string) string {
	r := strings.NewReplacer("app.", "fpx_rw_live.", "`app`", "`fpx_rw_live`", "APP.", "fpx_rw_live.",
		"billing.", "fpx_rw_live2.", "USE app", "USE fpx_rw_live", "USE other", "USE fpx_rw_live2")
	return r.Replace(s)
}

type outcome struct {
	errNum   uint16
	affected int64
	err      error
	contents string // the protected tables after the statement
}

// liveContents lists every row of the written tables, all columns but the
// clock-dependent one.
const liveContents = `SELECT CONCAT_WS('#',
  (SELECT GROUP_CONCAT(CONCAT_WS(',', id, paid, note, amount, customer, total, state, a, b, n, flags, x, y, k, c, d) ORDER BY id SEPARATOR ';') FROM fpx_rw_live.invoices),
  (SELECT GROUP_CONCAT(CONCAT_WS(',', id, paid, note, state, a, b) ORDER BY id SEPARATOR ';') FROM fpx_rw_live.reconciliation_runs),
  (SELECT GROUP_CONCAT(CONCAT_WS(',', id, amount) ORDER BY id SEPARATOR ';') FROM fpx_rw_live2.ledger))`

func run(ctx context.Context, conn *sql.Conn, q string, prepare bool, fenceToken int, prelude string) outcome {
	if _, err := conn.ExecContext(ctx, "SET @fence_lease = 'job', @fence_owner = 'owner-A', @fence_token = ?", fenceToken); err != nil {
		return outcome{err: err}
	}
	// Auto-increment counters survive a rollback: reset them for each run.
	for _, tbl := range []string{"fpx_rw_live.invoices", "fpx_rw_live.reconciliation_runs"} {
		if _, err := conn.ExecContext(ctx, "ALTER TABLE "+tbl+" AUTO_INCREMENT = 1"); err != nil {
			return outcome{err: err}
		}
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return outcome{err: err}
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	if prelude != "" {
		if _, err := conn.ExecContext(ctx, prelude); err != nil {
			return outcome{err: err}
		}
	}
	var o outcome
	if prepare {
		st, err := conn.PrepareContext(ctx, q)
		if err == nil {
			st.Close()
		}
		o.err = err
	} else {
		res, err := conn.ExecContext(ctx, q)
		o.err = err
		if err == nil {
			o.affected, _ = res.RowsAffected()
		}
		var warnings, lastID int64
		if err := conn.QueryRowContext(ctx, "SELECT @@warning_count, LAST_INSERT_ID()").Scan(&warnings, &lastID); err == nil {
			o.contents = "warnings=" + itoa(int(warnings)) + " last_insert_id=" + itoa(int(lastID)) + " "
		}
		var c sql.NullString
		if err := conn.QueryRowContext(ctx, liveContents).Scan(&c); err == nil {
			o.contents += c.String
		}
	}
	var me *mysql.MySQLError
	if errors.As(o.err, &me) {
		o.errNum = me.Number
	}
	return o
}

func TestLiveGolden(t *testing.T) {
	dsn := liveDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("mysql", dsn+sep+"multiStatements=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after liveSetup's cleanup, which drops the databases
	liveSetup(t, db)
	p, err := policy.NewPolicy(1, policy.Fencing{}, []policy.Table{
		{Name: "fpx_rw_live.invoices"},
		{Name: "fpx_rw_live.reconciliation_runs", Lease: "admin:reconciliation"},
		{Name: "fpx_rw_live2.ledger"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The shape cache is on: each statement is decided twice and the second
	// decision, from its shape's plan where it has one, is the one run.
	e := New(p, Options{CacheEntries: -1, ShapeEntries: 4096})
	files, _ := filepath.Glob("testdata/*.golden")
	ctx := context.Background()
	checked := 0
	for _, path := range files {
		_, cases := parseGolden(t, path)
		for _, c := range cases {
			if c.srv.Flavor != MariaDB || c.sess.UnsafeCharset {
				continue
			}
			in := liveMap(c.in)
			sess := c.sess
			switch sess.Schema {
			case "app":
				sess.Schema = "fpx_rw_live"
			case "other":
				sess.Schema = "fpx_rw_live2"
			}
			var d Decision
			for run := 1; run <= 2; run++ {
				first := d
				if c.prepare {
					d = e.Prepare([]byte(in), c.srv, &sess)
				} else {
					d = e.Query([]byte(in), c.srv, &sess)
				}
				if diff := diffDecisions(d, first); run == 2 && diff != "" {
					t.Errorf("%s %q: the second decision differs:\n%s", filepath.Base(path), c.name, diff)
				}
			}
			if head := strings.ToUpper(strings.TrimSpace(in)); strings.HasPrefix(head, "CREATE ") ||
				strings.HasPrefix(head, "ALTER ") {
				// DDL commits: the comparison's ROLLBACK could not undo the
				// writes after it (integration/statements_test.go runs those).
				continue
			}
			if d.Action != Send || lockTables(d) {
				// LOCK TABLES would make the comparison's own reads fail:
				// integration/locktables_test.go runs it with writes.
				continue
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			use := "USE " + sess.Schema
			if sess.Schema == "" {
				use = "SELECT 1"
			}
			modes := "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'"
			if c.sess.ANSIQuotes == On {
				modes = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,ANSI_QUOTES'"
			}
			if c.sess.NoBackslashEscapes == On {
				modes += "; SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"
			}
			if _, err := conn.ExecContext(ctx, use+"; "+modes); err != nil {
				t.Fatal(err)
			}
			// INSERTs get empty tables, so that they succeed.
			prelude := ""
			if w := strings.ToUpper(strings.TrimSpace(strings.TrimLeft(in, "/*+ !0123456789"))); strings.HasPrefix(w, "INSERT") ||
				strings.HasPrefix(w, "REPLACE") {
				prelude = "DELETE FROM fpx_rw_live.invoices; DELETE FROM fpx_rw_live.reconciliation_runs"
			}
			orig := run(ctx, conn, in, c.prepare, 7, prelude)
			fenced := run(ctx, conn, string(d.SQL), c.prepare, 7, prelude)
			stale := run(ctx, conn, string(d.SQL), c.prepare, 6, prelude)
			conn.Close()
			checked++
			if orig.errNum != fenced.errNum || (orig.err == nil) != (fenced.err == nil) {
				t.Errorf("%s %q:\n  orig:   %v\n  fenced: %v\n  sent: %s", filepath.Base(path), c.name, orig.err, fenced.err, d.SQL)
				continue
			}
			if orig.contents != fenced.contents {
				t.Errorf("%s %q: contents differ\n  unfenced: %s\n  fenced:   %s\n  sent: %s", filepath.Base(path), c.name,
					orig.contents, fenced.contents, d.SQL)
			}
			if orig.affected != fenced.affected {
				t.Errorf("%s %q: affected rows %d unfenced, %d fenced\n  sent: %s", filepath.Base(path), c.name,
					orig.affected, fenced.affected, d.SQL)
			}
			if stale.err == nil && stale.affected != 0 && strings.Count(in, ";") == 0 {
				t.Errorf("%s %q: a stale token still changed %d rows\n  sent: %s", filepath.Base(path), c.name, stale.affected, d.SQL)
			}
			t.Logf("%s %q: ok (err=%v, affected=%d, stale affected=%d)", filepath.Base(path), c.name, orig.errNum, orig.affected, stale.affected)
		}
	}
	t.Logf("%d fenced statements checked on the server", checked)
}

func lockTables(d Decision) bool {
	for _, s := range d.Stmts {
		if s.Locks == LocksTaken {
			return true
		}
	}
	return false
}
