package integration

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Row-bound leases: invoice_rows' lease is "invoice:{customer_id}", so each
// row is fenced under its own lease. Its unique keys all hold customer_id
// with a binary collation, so REPLACE and ON DUPLICATE KEY UPDATE are
// fenced too; loose_rows' primary key is id alone, so they are refused
// there.

const rowLeaseTable = "CREATE TABLE invoice_rows (id INT NOT NULL, customer_id VARCHAR(20) COLLATE utf8mb4_bin NOT NULL, " +
	"amount INT NOT NULL, status VARCHAR(10) NOT NULL DEFAULT 'open', PRIMARY KEY (customer_id, id))"

const looseRowTable = "CREATE TABLE loose_rows (id INT PRIMARY KEY, customer_id VARCHAR(20) NOT NULL, amount INT NOT NULL)"

// rowLeaseEnv is a fenced env with invoice_rows and loose_rows, seeded
// with acme's rows 1 and 2 and beta's rows 3 and 4, and the template
// columns checked against the backend as serve does at start.
func rowLeaseEnv(t *testing.T, eng, onStale string) *fencedEnv {
	t.Helper()
	e := newFencedEnv(t, envOptions{engine: eng, account: true, onStale: onStale,
		tables: []string{"invoice_rows", "loose_rows"},
		leases: map[string]string{"invoice_rows": "invoice:{customer_id}", "loose_rows": "loose:{customer_id}"}})
	mustExec(t, e.root, rowLeaseTable)
	mustExec(t, e.root, looseRowTable)
	mustExec(t, e.root, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (2, 'acme', 20), (3, 'beta', 30), (4, 'beta', 40)")
	mustExec(t, e.root, "INSERT INTO loose_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (3, 'beta', 30)")
	checkTemplates(t, e)
	return e
}

// checkTemplates runs the start-up check of the protected tables
// (proxy.CheckSchema) on the env's config, as serve does before it
// listens: it reads the template columns' types for the rewriter.
func checkTemplates(t testing.TB, e *fencedEnv) {
	t.Helper()
	db, err := proxy.OpenAdminDB(e.proxy.Config.Backend)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := proxy.CheckSchema(ctx, db, e.proxy.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("schema check: %v", errors.Join(rep.Errors...))
	}
}

// rows returns invoice_rows as "id:customer:amount" lines, read directly.
func (e *fencedEnv) invoiceRows(t testing.TB) string {
	t.Helper()
	e.sync(t)
	rs, err := e.root.Query("SELECT id, customer_id, amount FROM invoice_rows ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var b strings.Builder
	for rs.Next() {
		var id, amount int
		var c string
		if err := rs.Scan(&id, &c, &amount); err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join([]string{strconv.Itoa(id), c, strconv.Itoa(amount)}, ":") + " ")
	}
	return strings.TrimSpace(b.String())
}

// execAffected runs q on c and returns its affected rows, or the error.
func execAffected(c *sql.Conn, q string, args ...any) (int64, error) {
	r, err := c.ExecContext(context.Background(), q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func mustAffect(t *testing.T, c *sql.Conn, want int64, q string, args ...any) {
	t.Helper()
	n, err := execAffected(c, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if n != want {
		t.Fatalf("%s: %d rows affected, want %d", q, n, want)
	}
}

// mustRefuse runs q and wants the proxy's refusal (ERR 1148) mentioning
// what.
func mustRefuse(t *testing.T, c *sql.Conn, what, q string, args ...any) {
	t.Helper()
	_, err := c.ExecContext(context.Background(), q, args...)
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1148 || !strings.Contains(me.Message, what) {
		t.Fatalf("%s: %v, want ERR 1148 saying %q", q, err, what)
	}
}

func countReason(recs []audit.Record, reason string) int {
	n := 0
	for _, r := range recs {
		if r.Reason == reason {
			n++
		}
	}
	return n
}

const seeded = "1:acme:10 2:acme:20 3:beta:30 4:beta:40"

// TestRowLeaseUpdateDelete: UPDATE and DELETE change only the rows of the
// session's lease; multi-row statements spanning several leases change
// the fence lease's rows and leave the others.
func TestRowLeaseUpdateDelete(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)

		// All four rows match the WHERE; only acme's two change.
		mustAffect(t, c, 2, "UPDATE invoice_rows SET amount = amount + 1")
		if got, want := e.invoiceRows(t), "1:acme:11 2:acme:21 3:beta:30 4:beta:40"; got != want {
			t.Fatalf("after UPDATE of all rows: %s, want %s", got, want)
		}
		// beta's row by key: nothing.
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 0 WHERE id = 3")
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 0 WHERE customer_id = 'beta'")
		// Placeholders (COM_STMT_PREPARE / EXECUTE).
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 5, 1)
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 5, 4)
		// ORDER BY with LIMIT: the rows past the limit cannot be checked,
		// so an unpinned one is refused; pinned, it runs.
		var me *mysql.MySQLError
		if _, err := c.ExecContext(context.Background(), "UPDATE invoice_rows SET amount = 7 WHERE id >= 2 ORDER BY id DESC LIMIT 1"); !errors.As(err, &me) ||
			me.Number != 1148 || !strings.Contains(me.Message, "pin the lease") {
			t.Fatalf("unpinned ORDER BY with LIMIT: %v, want ERR 1148 saying to pin the lease", err)
		}
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 7 WHERE customer_id = 'acme' AND id >= 2 ORDER BY id DESC LIMIT 1")
		if got, want := e.invoiceRows(t), "1:acme:5 2:acme:7 3:beta:30 4:beta:40"; got != want {
			t.Fatalf("after keyed UPDATEs: %s, want %s", got, want)
		}
		// DELETE spanning both leases.
		mustAffect(t, c, 1, "DELETE FROM invoice_rows WHERE id IN (1, 3)")
		mustAffect(t, c, 0, "DELETE FROM invoice_rows WHERE customer_id = 'beta'")
		if got, want := e.invoiceRows(t), "2:acme:7 3:beta:30 4:beta:40"; got != want {
			t.Fatalf("after DELETEs: %s, want %s", got, want)
		}
		// In a transaction too.
		if _, err := c.ExecContext(context.Background(), "START TRANSACTION"); err != nil {
			t.Fatal(err)
		}
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 8")
		mustAffect(t, c, 1, "DELETE FROM invoice_rows")
		if _, err := c.ExecContext(context.Background(), "COMMIT"); err != nil {
			t.Fatal(err)
		}
		if got, want := e.invoiceRows(t), "3:beta:30 4:beta:40"; got != want {
			t.Fatalf("after the transaction: %s, want %s", got, want)
		}
	})
}

// TestRowLeaseWrongLease: a worker holding invoice:acme cannot write
// beta's rows, by any write; INSERTs of beta's rows are rejected and
// audited as row_lease_mismatch.
func TestRowLeaseWrongLease(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		e.acquire(t, "invoice:beta", time.Minute) // beta's lease is held by its own worker
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 0 WHERE customer_id = 'beta'")
		mustAffect(t, c, 0, "DELETE FROM invoice_rows WHERE id = 4")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (5, 'beta', 50)")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows SET id = 5, customer_id = 'beta', amount = 50")
		mustAffect(t, c, 0, "REPLACE INTO invoice_rows (id, customer_id, amount) VALUES (3, 'beta', 0)")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (3, 'beta', 0) ON DUPLICATE KEY UPDATE amount = 0")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, 'beta', ?)", 6, 60)
		// Another case of the same name is another lease (utf8mb4_bin).
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (7, 'ACME', 70)")
		if got := e.invoiceRows(t); got != seeded {
			t.Fatalf("beta's rows changed under acme's fence: %s", got)
		}
		// One per INSERT/REPLACE, the UPDATE whose WHERE names beta's
		// customer, and the DELETE of row 4 by its id alone (its trap).
		if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 8 {
			t.Fatalf("%d row_lease_mismatch records, want 8", n)
		}
		for _, r := range e.auditRecords(t) {
			if r.Reason == audit.RowLeaseMismatch && (r.Lease != "invoice:acme" || r.Table != e.db+".invoice_rows") {
				t.Fatalf("record %+v: want lease invoice:acme on invoice_rows", r)
			}
		}
	})
}

// TestRowLeaseOnStaleError: with on_stale: error an INSERT of another
// lease's row gets ERR 1644 and changes nothing.
func TestRowLeaseOnStaleError(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "error")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		_, err := c.ExecContext(context.Background(), "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (5, 'beta', 50)")
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease") {
			t.Fatalf("INSERT of beta's row under acme: %v, want ERR 1644 saying the rows belong to another lease", err)
		}
		for _, q := range []string{
			"UPDATE invoice_rows SET amount = 0 WHERE customer_id = 'beta' AND id = 3",
			"DELETE FROM invoice_rows WHERE customer_id = 'beta'",
		} {
			_, err = c.ExecContext(context.Background(), q)
			if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease") {
				t.Fatalf("%s under acme: %v, want ERR 1644 saying the rows belong to another lease", q, err)
			}
		}
		mustAffect(t, c, 1, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (5, 'acme', 50)")
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 51 WHERE customer_id = 'acme' AND id = 5")
		if got, want := e.invoiceRows(t), "1:acme:10 2:acme:20 3:beta:30 4:beta:40 5:acme:51"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
	})
}

// TestRowLeaseLostAndTookAnother: a job that loses invoice:acme and takes
// invoice:beta cannot finish its stale acme writes, neither with its old
// acme fence nor with the beta fence.
func TestRowLeaseLostAndTookAnother(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme1 := e.acquire(t, "invoice:acme", time.Second)
		c := e.session(t)
		setFence(t, c, acme1)
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 11 WHERE id = 1")
		// The job pauses; its acme lease expires and another worker takes it.
		e.awaitExpired(t, "invoice:acme")
		acme2 := e.acquire(t, "invoice:acme", time.Minute)
		if acme2.Token <= acme1.Token {
			t.Fatalf("takeover token %d <= %d", acme2.Token, acme1.Token)
		}
		// With its stale acme fence.
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 99 WHERE id = 1")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, 'acme', 99)")
		// It takes beta, and tries to finish acme's work with the beta fence.
		beta := e.acquire(t, "invoice:beta", time.Minute)
		setFence(t, c, beta)
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 99 WHERE id = 1")
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = 99 WHERE customer_id = 'acme'")
		mustAffect(t, c, 0, "DELETE FROM invoice_rows WHERE id = 2")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, 'acme', 99)")
		mustAffect(t, c, 0, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (2, 'acme', 99) ON DUPLICATE KEY UPDATE amount = 99")
		mustAffect(t, c, 0, "REPLACE INTO invoice_rows (id, customer_id, amount) VALUES (2, 'acme', 99)")
		// Its beta writes go through (on_stale: zero_rows: the UPDATE of
		// every row meets acme's rows, is audited, and changes beta's).
		mustAffect(t, c, 2, "UPDATE invoice_rows SET amount = amount + 1")
		if got, want := e.invoiceRows(t), "1:acme:11 2:acme:20 3:beta:31 4:beta:41"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
		// Under the beta fence: the 4 pinned or INSERT writes of acme's
		// rows, and the 3 unpinned UPDATEs and DELETE that met them.
		recs := e.auditRecords(t)
		if countReason(recs, audit.StaleToken) == 0 || countReason(recs, audit.RowLeaseMismatch) != 7 {
			t.Fatalf("audit: %d stale_token, %d row_lease_mismatch records; want some and 7", countReason(recs, audit.StaleToken),
				countReason(recs, audit.RowLeaseMismatch))
		}
		// The new acme holder writes acme's rows.
		c2 := e.session(t)
		setFence(t, c2, acme2)
		mustAffect(t, c2, 1, "UPDATE invoice_rows SET amount = 12 WHERE id = 1")
	})
}

// TestRowLeaseRefusedForms: what would move a row to another lease, and
// what the proxy cannot compute a lease for, is refused with an error
// that says so, and changes nothing.
func TestRowLeaseRefusedForms(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		// Moving a row to another key.
		mustRefuse(t, c, "would move rows to another lease", "UPDATE invoice_rows SET customer_id = 'beta' WHERE id = 1")
		mustRefuse(t, c, "would move rows to another lease", "UPDATE invoice_rows SET customer_id = 'acme' WHERE id = 3")
		mustRefuse(t, c, "would move rows to another lease", "UPDATE invoice_rows SET customer_id = ? WHERE id = ?", "beta", 1)
		mustRefuse(t, c, "would move the row to another lease",
			"INSERT INTO invoice_rows (id, customer_id, amount) VALUES (1, 'acme', 0) ON DUPLICATE KEY UPDATE customer_id = 'beta'")
		// Values the proxy cannot compute.
		mustRefuse(t, c, "INSERT ... SELECT", "INSERT INTO invoice_rows (id, customer_id, amount) SELECT 9, customer_id, 0 FROM invoice_rows WHERE id = 3")
		mustRefuse(t, c, "EXECUTE ... USING binds user variables", "PREPARE s FROM 'INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, ?, 0)'")
		mustRefuse(t, c, "expression", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, CONCAT('be', 'ta'), 0)")
		mustRefuse(t, c, "expression", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, status, 0)")
		mustRefuse(t, c, "DEFAULT", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, DEFAULT, 0)")
		mustRefuse(t, c, "not given", "INSERT INTO invoice_rows (id, amount) VALUES (9, 0)")
		mustRefuse(t, c, "column list", "INSERT INTO invoice_rows VALUES (9, 'acme', 0, 'open')")
		mustRefuse(t, c, "several leases", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (8, 'acme', 0), (9, 'beta', 0)")
		mustRefuse(t, c, "longer than the column", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, 'acme-acme-acme-acme-acme', 0)")
		// Multi-table forms.
		mustRefuse(t, c, "single-table UPDATE", "UPDATE invoice_rows i JOIN notes n ON n.id = i.id SET i.amount = 0")
		mustRefuse(t, c, "single-table DELETE", "DELETE i FROM invoice_rows i JOIN notes n ON n.id = i.id")
		// REPLACE and ON DUPLICATE KEY UPDATE where a unique key may hold
		// another lease's row (loose_rows: PRIMARY KEY (id)).
		loose := e.acquire(t, "loose:acme", time.Minute)
		setFence(t, c, loose)
		mustRefuse(t, c, "REPLACE deletes", "REPLACE INTO loose_rows (id, customer_id, amount) VALUES (3, 'acme', 0)")
		mustRefuse(t, c, "ON DUPLICATE KEY UPDATE changes", "INSERT INTO loose_rows (id, customer_id, amount) VALUES (3, 'acme', 0) ON DUPLICATE KEY UPDATE amount = 0")
		mustAffect(t, c, 1, "INSERT INTO loose_rows (id, customer_id, amount) VALUES (5, 'acme', 50)")
		mustAffect(t, c, 0, "INSERT IGNORE INTO loose_rows (id, customer_id, amount) VALUES (3, 'acme', 0)")
		if got := queryString(t, e.root, "SELECT CONCAT(customer_id, ':', amount) FROM loose_rows WHERE id = 3"); got != "beta:30" {
			t.Fatalf("beta's loose row: %s", got)
		}
		if got := e.invoiceRows(t); got != seeded {
			t.Fatalf("rows changed by refused statements: %s", got)
		}
	})
}

// TestRowLeaseMatchesDirect: under a valid fence each write has the
// effect it has directly (affected rows, insert id, warnings, rows) when
// it writes only rows of the fence's lease.
func TestRowLeaseMatchesDirect(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		direct := dbtest0(t, e)
		mustExec(t, e.root, "CREATE TABLE invoice_rows_d LIKE invoice_rows")
		mustExec(t, e.root, "INSERT INTO invoice_rows_d SELECT * FROM invoice_rows")
		c := e.session(t)
		setFence(t, c, acme)
		cases := []string{
			"UPDATE %s SET amount = amount + 1 WHERE customer_id = 'acme'",
			"UPDATE %s SET amount = amount WHERE customer_id = 'acme'",
			"UPDATE %s SET amount = 'x5' WHERE id = 1 AND customer_id = 'acme'",
			"INSERT INTO %s (id, customer_id, amount) VALUES (5, 'acme', 50), (6, 'acme', 60)",
			"INSERT IGNORE INTO %s (id, customer_id, amount) VALUES (5, 'acme', 0), (7, 'acme', 70)",
			"INSERT INTO %s (id, customer_id, amount) VALUES (5, 'acme', 1) ON DUPLICATE KEY UPDATE amount = amount + VALUES(amount)",
			"INSERT INTO %s (id, customer_id, amount) VALUES (8, 'acme', 1) ON DUPLICATE KEY UPDATE amount = amount + 1",
			"REPLACE INTO %s (id, customer_id, amount) VALUES (6, 'acme', 66)",
			"REPLACE INTO %s SET id = 9, customer_id = 'acme', amount = 99",
			"DELETE FROM %s WHERE customer_id = 'acme' AND amount > 60",
			"DELETE FROM %s WHERE customer_id = 'acme' ORDER BY id LIMIT 1",
		}
		for _, q := range cases {
			want := strings.ReplaceAll(rowWriteOutcome(t, direct, strings.ReplaceAll(q, "%s", "invoice_rows_d")), "invoice_rows_d", "invoice_rows")
			got := rowWriteOutcome(t, c, strings.ReplaceAll(q, "%s", "invoice_rows"))
			if eng == engTiDB && strings.Contains(q, "'x5'") {
				// Measured: TiDB words the conversion error of a
				// Point_Get update "INTEGER", of the same Point_Get under
				// the per-row Selection "DOUBLE"; code and state agree.
				got, want = errorCode(got), errorCode(want)
			}
			if got != want {
				t.Errorf("%s:\n through the proxy: %s\n directly:          %s", q, got, want)
			}
		}
		d := tableDump(t, e.root, "invoice_rows_d")
		if p := tableDump(t, e.root, "invoice_rows"); p != d {
			t.Fatalf("contents differ:\nproxy:\n%s\ndirect:\n%s", p, d)
		}
	})
}

// errorCode keeps "error Error NNNN (SSSSS)" of an outcome.
func errorCode(o string) string {
	if i := strings.Index(o, "):"); strings.HasPrefix(o, "error ") && i > 0 {
		return o[:i+1]
	}
	return o
}

// dbtest0 is a direct app session on the env's backend.
func dbtest0(t *testing.T, e *fencedEnv) *sql.Conn {
	t.Helper()
	c, err := directDB(t, e.srv, e.db).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rowWriteOutcome runs a write and describes what the client sees: error, or
// affected rows, insert id and SHOW WARNINGS.
func rowWriteOutcome(t *testing.T, c *sql.Conn, q string) string {
	t.Helper()
	ctx := context.Background()
	r, err := c.ExecContext(ctx, q)
	if err != nil {
		return "error " + err.Error()
	}
	n, _ := r.RowsAffected()
	id, _ := r.LastInsertId()
	out := "affected " + strconv.FormatInt(n, 10) + " id " + strconv.FormatInt(id, 10)
	w := runQueryConn(c, "SHOW WARNINGS")
	for _, row := range w.Rows {
		out += " warning " + strings.Join(row, "|")
	}
	return out
}

// TestRowLeaseSchemaCheck: the start-up check refuses a template whose
// columns are missing, generated, changed ON UPDATE or of a type whose
// stored value the proxy cannot tell from a literal, with the entry's
// position; and it reads whether the unique keys hold the template
// columns compared byte for byte.
func TestRowLeaseSchemaCheck(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("the check runs with the proxy's account")
		}
		e := newFencedEnv(t, envOptions{engine: eng, account: true,
			tables: []string{"t_missing", "t_generated", "t_decimal", "t_zerofill", "t_ci", "t_ok"},
			leases: map[string]string{"t_missing": "m:{nope}", "t_generated": "g:{g}", "t_decimal": "d:{d}",
				"t_zerofill": "z:{z}", "t_ci": "c:{c}", "t_ok": "o:{a}-{b}"}})
		mustExec(t, e.root, "CREATE TABLE t_missing (id INT PRIMARY KEY, c VARCHAR(10))")
		mustExec(t, e.root, "CREATE TABLE t_generated (id INT PRIMARY KEY, c VARCHAR(10), g VARCHAR(20) AS (LOWER(c)) VIRTUAL)")
		mustExec(t, e.root, "CREATE TABLE t_decimal (id INT PRIMARY KEY, d DECIMAL(10,2))")
		mustExec(t, e.root, "CREATE TABLE t_zerofill (id INT PRIMARY KEY, z INT(10) ZEROFILL)")
		mustExec(t, e.root, "CREATE TABLE t_ci (c VARCHAR(10) COLLATE utf8mb4_general_ci NOT NULL, id INT NOT NULL, PRIMARY KEY (c, id))")
		mustExec(t, e.root, "CREATE TABLE t_ok (a CHAR(4) COLLATE utf8mb4_bin NOT NULL, b BIGINT UNSIGNED NOT NULL, id INT NOT NULL, PRIMARY KEY (a, b, id))")
		db, err := proxy.OpenAdminDB(e.proxy.Config.Backend)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rep, err := proxy.CheckSchema(context.Background(), db, e.proxy.Config)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, er := range rep.Errors {
			msgs = append(msgs, er.Error())
		}
		all := strings.Join(msgs, "\n")
		for _, want := range []string{
			`test.yaml:`, `tables[2].lease: "m:{nope}": ` + e.db + `.t_missing has no column nope (its columns: `,
			`tables[3].lease: "g:{g}": column g of ` + e.db + `.t_generated is `,
			`tables[4].lease: "d:{d}": column d of ` + e.db + `.t_decimal is decimal(10,2): a template column must be an integer, CHAR or VARCHAR column`,
			`tables[5].lease: "z:{z}": column z of ` + e.db + `.t_zerofill is int(10) unsigned zerofill: ZEROFILL writes a value with leading zeros`,
		} {
			if eng == engTiDB && strings.Contains(want, "zerofill") {
				// TiDB's information_schema does not say ZEROFILL; what
				// matters is that CONCAT writes the value as inserted.
				mustExec(t, e.root, "INSERT INTO t_zerofill (id, z) VALUES (1, 7)")
				if got := queryString(t, e.root, "SELECT CONCAT('z:', z) FROM t_zerofill"); got != "z:7" {
					t.Errorf("TiDB: CONCAT of a ZEROFILL column says %s and the check let it pass", got)
				}
				continue
			}
			if !strings.Contains(all, want) {
				t.Errorf("schema check errors lack %q:\n%s", want, all)
			}
		}
		if want := 4 - b2i(eng == engTiDB); len(rep.Errors) != want {
			t.Errorf("%d errors, want %d:\n%s", len(rep.Errors), want, all)
		}
		pol := e.proxy.Config.Policy(1)
		ci, _ := pol.Lookup(e.db, "t_ci")
		ok, _ := pol.Lookup(e.db, "t_ok")
		if s := ci.Template.Schema(); s == nil || s.KeysCovered {
			t.Errorf("t_ci (a _ci key): schema %+v, want checked, keys not covering", s)
		}
		s := ok.Template.Schema()
		if s == nil || !s.KeysCovered || len(s.Columns) != 2 || !s.Columns[0].Padded || s.Columns[0].Length != 4 ||
			!s.Columns[1].Unsigned || s.Columns[1].UMax != ^uint64(0) {
			t.Errorf("t_ok: schema %+v", s)
		}
	})
}

// TestRowLeaseMultiStatement: in a multi-statement packet each write is
// fenced per row as on its own.
func TestRowLeaseMultiStatement(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t, "multiStatements=true")
		setFence(t, c, acme)
		if _, err := c.ExecContext(context.Background(), "UPDATE invoice_rows SET amount = amount + 1 WHERE id = 1; "+
			"UPDATE invoice_rows SET amount = amount + 1 WHERE id = 3; DELETE FROM invoice_rows WHERE id = 4; "+
			"INSERT INTO invoice_rows (id, customer_id, amount) VALUES (6, 'beta', 60); "+
			"INSERT INTO invoice_rows (id, customer_id, amount) VALUES (5, 'acme', 50)"); err != nil {
			t.Fatal(err)
		}
		if got, want := e.invoiceRows(t), "1:acme:11 2:acme:20 3:beta:30 4:beta:40 5:acme:50"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
	})
}

// TestRowLeaseWithTrigger: a trigger on the template table that writes
// an unprotected table leaves its writes fenced per row, not refused.
func TestRowLeaseWithTrigger(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "no triggers", engTiDB)
		e := rowLeaseEnv(t, eng, "")
		mustExec(t, e.root, "CREATE TRIGGER invoice_rows_au AFTER UPDATE ON invoice_rows FOR EACH ROW INSERT INTO notes (body) VALUES (NEW.customer_id)")
		checkTemplates(t, e)
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		waitCatalogHas(t, e, "invoice_rows")
		if err := e.proxy.Proxy.WaitCatalog(context.Background(), e.proxy.Proxy.CatalogChecks()); err != nil {
			t.Fatal(err)
		}
		mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = amount + 1 WHERE id = 1")
		mustAffect(t, c, 0, "UPDATE invoice_rows SET amount = amount + 1 WHERE id = 3")
		if got := queryString(t, e.root, "SELECT GROUP_CONCAT(DISTINCT body) FROM notes"); got != "acme" {
			t.Fatalf("notes written by the trigger: %s", got)
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRowLeaseStatementFence: a write that carries its own fence (a fence
// comment) is fenced per row under the comment's lease, not the session's.
func TestRowLeaseStatementFence(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		beta := e.acquire(t, "invoice:beta", time.Minute)
		c := e.session(t)
		setFence(t, c, beta) // the session holds beta; the comments say acme
		mustAffect(t, c, 2, withComment(t, "UPDATE invoice_rows SET amount = amount + 1", acme))
		mustAffect(t, c, 0, withComment(t, "UPDATE invoice_rows SET amount = amount + 1 WHERE id = 3", acme))
		mustAffect(t, c, 0, withComment(t, "DELETE FROM invoice_rows WHERE customer_id = 'beta'", acme))
		mustAffect(t, c, 1, withComment(t, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (5, 'acme', 50)", acme))
		mustAffect(t, c, 0, withComment(t, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (6, 'beta', 60)", acme))
		// Without a comment, the session's beta fence.
		mustAffect(t, c, 2, "UPDATE invoice_rows SET amount = amount + 1")
		if got, want := e.invoiceRows(t), "1:acme:11 2:acme:21 3:beta:31 4:beta:41 5:acme:50"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
		// The DELETE aimed at beta, the INSERT of beta's row, and the three
		// UPDATEs without a pin, each of which met rows of the other lease
		// (its trap): under the comment's lease, twice, then the session's.
		recs := e.auditRecords(t)
		var leases []string
		for _, r := range recs {
			if r.Reason == audit.RowLeaseMismatch {
				leases = append(leases, r.Lease)
			}
		}
		if got, want := strings.Join(leases, " "),
			"invoice:acme invoice:acme invoice:acme invoice:acme invoice:beta"; got != want {
			t.Fatalf("row_lease_mismatch records under %s, want %s", got, want)
		}
	})
}
