package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// An UPDATE or DELETE whose WHERE pins no lease (rewrite: the row-lease
// trap): a row of another lease that its WHERE matches makes the server
// roll the statement back; the proxy audits it (row_lease_mismatch),
// counts it, and applies on_stale: ERR 1644, or under zero_rows the same
// write without the trap, which changes the rows of the fence's lease
// only. A write that meets only rows of its lease is not touched.

// unpinnedCase is one write by a worker holding invoice:acme, on the
// seeded rows (acme 1 and 2, beta 3 and 4).
type unpinnedCase struct {
	name string
	q    string
	// other: the WHERE matches a row of another lease. limited: it has
	// LIMIT, which TiDB reads in no fixed order: refused there.
	other, limited bool
	// zeroRows: affected rows and contents under on_stale: zero_rows.
	zeroRows int64
	rows     string
}

var unpinnedCases = []unpinnedCase{
	{name: "update by key of another lease", q: "UPDATE invoice_rows SET amount = 0 WHERE id = 4", other: true,
		rows: seeded},
	{name: "update by key of the lease", q: "UPDATE invoice_rows SET amount = 0 WHERE id = 2", zeroRows: 1,
		rows: "1:acme:10 2:acme:0 3:beta:30 4:beta:40"},
	{name: "update spanning leases", q: "UPDATE invoice_rows SET amount = amount + 1 WHERE id IN (1, 3)", other: true, zeroRows: 1,
		rows: "1:acme:11 2:acme:20 3:beta:30 4:beta:40"},
	{name: "update every row", q: "UPDATE invoice_rows SET amount = amount + 1", other: true, zeroRows: 2,
		rows: "1:acme:11 2:acme:21 3:beta:30 4:beta:40"},
	{name: "update by another column, rows of the lease only", q: "UPDATE invoice_rows SET status = 'late' WHERE amount < 25", zeroRows: 2,
		rows: seeded},
	{name: "update by a range spanning leases", q: "UPDATE invoice_rows SET amount = amount * 2 WHERE amount BETWEEN 15 AND 35", other: true,
		zeroRows: 1, rows: "1:acme:10 2:acme:40 3:beta:30 4:beta:40"},
	{name: "update by the other lease's customer under OR", q: "UPDATE invoice_rows SET amount = 0 WHERE customer_id = 'beta' OR id = 1",
		other: true, zeroRows: 1, rows: "1:acme:0 2:acme:20 3:beta:30 4:beta:40"},
	{name: "delete by key of another lease", q: "DELETE FROM invoice_rows WHERE id = 4", other: true, rows: seeded},
	{name: "delete spanning leases", q: "DELETE FROM invoice_rows WHERE id >= 2", other: true, zeroRows: 1,
		rows: "1:acme:10 3:beta:30 4:beta:40"},
	{name: "delete by key of the lease", q: "DELETE FROM invoice_rows WHERE id = 1", zeroRows: 1,
		rows: "2:acme:20 3:beta:30 4:beta:40"},
	{name: "delete every row", q: "DELETE FROM invoice_rows", other: true, zeroRows: 2, rows: "3:beta:30 4:beta:40"},
	{name: "delete matching nothing", q: "DELETE FROM invoice_rows WHERE id = 9", rows: seeded},
	{name: "update ordered, without LIMIT", q: "UPDATE invoice_rows SET amount = amount + 1 WHERE id > 1 ORDER BY id DESC", other: true,
		zeroRows: 1, rows: "1:acme:10 2:acme:21 3:beta:30 4:beta:40"},
	// The primary key (customer_id, id) reads acme's rows first.
	{name: "delete with a LIMIT the lease's rows reach", q: "DELETE FROM invoice_rows WHERE amount > 0 LIMIT 2", limited: true,
		zeroRows: 2, rows: "3:beta:30 4:beta:40"},
	{name: "delete with a LIMIT that reaches another lease's row", q: "DELETE FROM invoice_rows WHERE amount > 0 LIMIT 3",
		other: true, limited: true, zeroRows: 2, rows: "3:beta:30 4:beta:40"},
}

// reseed puts invoice_rows back to the seeded rows.
func reseed(t *testing.T, e *fencedEnv) {
	t.Helper()
	mustExec(t, e.root, "DELETE FROM invoice_rows")
	mustExec(t, e.root, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (2, 'acme', 20), (3, 'beta', 30), (4, 'beta', 40)")
}

// TestRowLeaseUnpinned: each unpinned write, under both on_stale settings:
// a write that meets another lease's row is audited and counted as
// row_lease_mismatch, changes nothing and gets ERR 1644 under error, and
// changes the lease's rows only under zero_rows; one that meets only the
// lease's rows has its effect and no record.
func TestRowLeaseUnpinned(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t)
				setFence(t, c, acme)
				var tally unpinnedTally
				for _, tc := range unpinnedCases {
					reseed(t, e)
					n, err := execAffected(c, tc.q)
					if tc.limited && eng == engTiDB {
						var me *mysql.MySQLError
						if !errors.As(err, &me) || me.Number != 1148 || !strings.Contains(me.Message, "LIMIT") {
							t.Fatalf("%s: %v, want ERR 1148 naming LIMIT", tc.name, err)
						}
						if got := e.invoiceRows(t); got != seeded {
							t.Fatalf("%s: rows %s, want %s", tc.name, got, seeded)
						}
						continue
					}
					tally.check(t, e, onStale, tc.name, tc.other, tc.rows, tc.zeroRows, n, err)
				}
			})
		}
	})
}

// TestRowLeaseUnpinnedInTransaction: in the client's transaction a write
// that meets another lease's row is undone alone (under error; under
// zero_rows it changes the lease's rows), and the transaction goes on:
// its earlier write commits.
func TestRowLeaseUnpinnedInTransaction(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t)
				setFence(t, c, acme)
				ctx := context.Background()
				mustExec(t, c, "START TRANSACTION")
				mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 11 WHERE id = 1")
				_, err := c.ExecContext(ctx, "UPDATE invoice_rows SET amount = amount + 100 WHERE id >= 2")
				want := "1:acme:11 2:acme:120 3:beta:30 4:beta:40"
				if onStale == "error" {
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1644 {
						t.Fatalf("spanning UPDATE in a transaction: %v, want ERR 1644", err)
					}
					want = "1:acme:11 2:acme:20 3:beta:30 4:beta:40"
				} else if err != nil {
					t.Fatal(err)
				}
				if eng != engTiDB { // TiDB has no @@in_transaction; the COMMIT below shows it
					if in := queryStringConn(t, c, "SELECT @@in_transaction"); in != "1" {
						t.Fatalf("@@in_transaction = %s after the rejected write, want 1", in)
					}
				}
				mustExec(t, c, "COMMIT")
				if got := e.invoiceRows(t); got != want {
					t.Fatalf("rows %s, want %s", got, want)
				}
			})
		}
	})
}

// TestRowLeaseUnpinnedMatchesDirect: an unpinned write that meets only
// rows of its lease answers as it does directly: affected rows, insert
// id, SHOW WARNINGS, and on MariaDB (where a write fenced in its text
// keeps them today) ROW_COUNT() and @@warning_count right after it; and
// it leaves no record.
func TestRowLeaseUnpinnedMatchesDirect(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "error")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		direct := dbtest0(t, e)
		mustExec(t, e.root, "CREATE TABLE invoice_rows_d LIKE invoice_rows")
		c := e.session(t)
		setFence(t, c, acme)
		cases := []string{
			"UPDATE %s SET amount = amount + 1 WHERE id <= 2",
			"UPDATE %s SET amount = amount WHERE id IN (1, 2)",
			"UPDATE IGNORE %s SET amount = 'x5' WHERE id = 1",
			"UPDATE %s SET status = 'late' WHERE status = 'open' AND amount < 15",
			"UPDATE %s SET amount = amount + 1 WHERE amount / 0 IS NULL AND id < 3",
			"DELETE FROM %s WHERE id = 2",
			"DELETE FROM %s WHERE id = 7",
		}
		reseedBoth := func() {
			reseed(t, e)
			mustExec(t, e.root, "DELETE FROM invoice_rows_d")
			mustExec(t, e.root, "INSERT INTO invoice_rows_d SELECT * FROM invoice_rows")
		}
		for _, q := range cases {
			qp, qd := strings.ReplaceAll(q, "%s", "invoice_rows"), strings.ReplaceAll(q, "%s", "invoice_rows_d")
			reseedBoth()
			want := strings.ReplaceAll(rowWriteOutcome(t, direct, qd), "invoice_rows_d", "invoice_rows")
			if got := rowWriteOutcome(t, c, qp); got != want {
				t.Errorf("%s:\n through the proxy: %s\n directly:          %s", q, got, want)
			}
			d := tableDump(t, e.root, "invoice_rows_d")
			if p := tableDump(t, e.root, "invoice_rows"); p != d {
				t.Fatalf("%s: contents differ:\nproxy:\n%s\ndirect:\n%s", q, p, d)
			}
			if eng != engMariaDB {
				continue
			}
			reseedBoth()
			want = afterWrite(t, direct, qd)
			if got := afterWrite(t, c, qp); got != want {
				t.Errorf("%s: after it\n through the proxy: %s\n directly:          %s", q, got, want)
			}
		}
		if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 0 {
			t.Fatalf("%d row_lease_mismatch records for writes of the lease's rows", n)
		}
	})
}

// afterWrite runs the write q and reads ROW_COUNT() and @@warning_count
// in the statement right after it. (Not FOUND_ROWS(): the in-statement
// fence's EXISTS subquery sets it to 1, trap or not: measured on MariaDB
// 10.11, 4 directly after a read of 4 rows, 1 after the fenced write.)
func afterWrite(t *testing.T, c *sql.Conn, q string) string {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), q); err != nil {
		return "error " + err.Error()
	}
	o := runQueryConn(c, "SELECT ROW_COUNT(), @@warning_count")
	if o.Err != "" || len(o.Rows) != 1 {
		t.Fatalf("%s: reading after it: %+v", q, o)
	}
	return strings.Join(o.Rows[0], " ")
}

// TestRowLeaseUnpinnedMultiStatement: a packet of several statements with
// a write whose trap fires runs one statement at a time: under zero_rows
// the write is sent again without its trap and the packet goes on; under
// error the packet ends with ERR 1644 where the write stood, and the
// statements after it never run.
func TestRowLeaseUnpinnedMultiStatement(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t, "multiStatements=true")
				setFence(t, c, acme)
				_, err := c.ExecContext(context.Background(), "UPDATE invoice_rows SET amount = amount + 1 WHERE id IN (1, 3); "+
					"UPDATE invoice_rows SET amount = amount + 5 WHERE id = 2")
				want := "1:acme:11 2:acme:25 3:beta:30 4:beta:40"
				if onStale == "error" {
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1644 {
						t.Fatalf("packet: %v, want ERR 1644", err)
					}
					want = seeded
				} else if err != nil {
					t.Fatalf("packet: %v", err)
				}
				if got := e.invoiceRows(t); got != want {
					t.Fatalf("rows %s, want %s", got, want)
				}
				if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 1 {
					t.Fatalf("%d row_lease_mismatch records, want 1", n)
				}
				// The session goes on.
				mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = 7 WHERE id = 1")
			})
		}
	})
}

// TestRowLeaseUnpinnedNotInnoDB: on a MyISAM table a failed statement
// keeps the rows it changed before the error, so the per-row condition
// can carry no trap there: an unpinned write is refused, saying so, and
// changes nothing; with the lease pinned in its WHERE it runs.
func TestRowLeaseUnpinnedNotInnoDB(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "Galera replicates InnoDB tables only, and TiDB has no other engine", engGalera, engTiDB)
		e := newFencedEnv(t, envOptions{engine: eng, account: true, tables: []string{"myisam_rows"},
			leases: map[string]string{"myisam_rows": "invoice:{customer_id}"}})
		mustExec(t, e.root, "CREATE TABLE myisam_rows (id INT NOT NULL, customer_id VARCHAR(20) COLLATE utf8mb4_bin NOT NULL, "+
			"amount INT NOT NULL, PRIMARY KEY (customer_id, id)) ENGINE=MyISAM")
		mustExec(t, e.root, "INSERT INTO myisam_rows VALUES (1, 'acme', 10), (3, 'beta', 30)")
		checkTemplates(t, e)
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		var me *mysql.MySQLError
		if _, err := c.ExecContext(context.Background(), "UPDATE myisam_rows SET amount = amount + 1 WHERE id IN (1, 3)"); !errors.As(err, &me) ||
			me.Number != 1148 || !strings.Contains(me.Message, "not InnoDB") {
			t.Fatalf("unpinned: %v, want ERR 1148 saying the table is not InnoDB", err)
		}
		mustAffect(t, c, 1, "UPDATE myisam_rows SET amount = amount + 1 WHERE customer_id = 'acme' AND id IN (1, 3)")
		if got := queryString(t, e.root, "SELECT GROUP_CONCAT(customer_id, ':', amount ORDER BY id) FROM myisam_rows"); got != "acme:11,beta:30" {
			t.Fatalf("rows %s, want acme:11,beta:30", got)
		}
		if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 0 {
			t.Fatalf("%d row_lease_mismatch records, want none (no trap on MyISAM)", n)
		}
		if n := countReason(e.auditRecords(t), audit.Refused); n != 1 {
			t.Fatalf("%d refused records, want 1", n)
		}
	})
}

// unpinnedTally checks unpinned writes one after another in one session:
// each answer and the table's contents, and the row_lease_mismatch records
// and metric, which add up over the writes.
type unpinnedTally struct {
	records int
	counted float64
}

// check checks one write that answered n, err: other says whether it met
// another lease's row (then ERR 1644 and nothing changed under error, a
// record with the fence's lease and no owner or literal); rows and
// zeroRows are the contents and affected rows under zero_rows.
func (u *unpinnedTally) check(t *testing.T, e *fencedEnv, onStale, name string, other bool, rows string, zeroRows, n int64, err error) {
	t.Helper()
	want := rows
	switch {
	case other && onStale == "error":
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease") {
			t.Fatalf("%s: %v, want ERR 1644 saying the rows belong to another lease", name, err)
		}
		want = seeded
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	case n != zeroRows:
		t.Fatalf("%s: %d rows affected, want %d", name, n, zeroRows)
	}
	if got := e.invoiceRows(t); got != want {
		t.Fatalf("%s: rows %s, want %s", name, got, want)
	}
	if other {
		u.records++
	}
	recs := e.auditRecords(t)
	if got := countReason(recs, audit.RowLeaseMismatch); got != u.records {
		t.Fatalf("%s: %d row_lease_mismatch records, want %d", name, got, u.records)
	}
	if other {
		r := recs[len(recs)-1]
		if r.Reason != audit.RowLeaseMismatch || r.Outcome != onStale || r.Lease != "invoice:acme" ||
			r.Table != e.db+".invoice_rows" || r.PresentedOwner != "" || strings.Contains(r.Digest, "'") ||
			strings.Contains(r.Digest, "beta") {
			t.Fatalf("%s: record %+v: want row_lease_mismatch, outcome %s, lease invoice:acme, no owner, no literal", name, r, onStale)
		}
		u.counted++
	}
	if got := series(t, e.proxy.Reg, "fenceproxy_stale_writes_rejected_total",
		map[string]string{"reason": audit.RowLeaseMismatch}); got != u.counted {
		t.Fatalf("%s: stale_writes_rejected_total{reason=row_lease_mismatch} = %v, want %v", name, got, u.counted)
	}
}

// TestRowLeaseInexactPins: a WHERE that pins the template column to a
// value may still meet rows of other leases: under a _ci collation
// customer_id = 'acme' meets 'ACME', and on a string column customer_id =
// 7 compares as a number and meets '07'. Such a pin counts for nothing:
// the write carries the trap, and the other lease's row is a
// row_lease_mismatch rejection, not a row skipped unseen (text protocol
// and prepared). A prepared pin bound to an integer on a string column is
// refused, saying to bind a string; bound to the string it is exact.
func TestRowLeaseInexactPins(t *testing.T) {
	type write struct {
		q    string
		args []any
		// mismatch: the write meets the other lease's row (ERR 1644 under
		// error; under zero_rows zeroRows rows change); refused: ERR 1148
		// naming refusal.
		mismatch bool
		refusal  string
		zeroRows int64
		after    string // the rows after it under zero_rows
	}
	cases := []struct {
		name, column, lease, seed string
		writes                    []write
	}{
		{"a _ci column", "VARCHAR(20) COLLATE utf8mb4_general_ci", "invoice:acme", "(1, 'acme', 10), (2, 'ACME', 20)", []write{
			{q: "UPDATE pin_rows SET amount = 0 WHERE customer_id = 'acme'", mismatch: true, zeroRows: 1, after: "1:acme:0,2:ACME:20"},
			{q: "UPDATE pin_rows SET amount = ? WHERE customer_id = ?", args: []any{0, "acme"}, mismatch: true, zeroRows: 1,
				after: "1:acme:0,2:ACME:20"},
			{q: "DELETE FROM pin_rows WHERE customer_id = 'acme'", mismatch: true, zeroRows: 1, after: "2:ACME:20"},
		}},
		{"a number for a string column", "VARCHAR(20) COLLATE utf8mb4_bin", "invoice:7", "(1, '7', 10), (2, '07', 20)", []write{
			{q: "UPDATE pin_rows SET amount = 0 WHERE customer_id = 7", mismatch: true, zeroRows: 1, after: "1:7:0,2:07:20"},
			{q: "DELETE FROM pin_rows WHERE customer_id = 7", mismatch: true, zeroRows: 1, after: "2:07:20"},
			{q: "UPDATE pin_rows SET amount = ? WHERE customer_id = ?", args: []any{0, 7}, refusal: "bind it as a string"},
			{q: "UPDATE pin_rows SET amount = ? WHERE customer_id = ?", args: []any{0, "7"}, zeroRows: 1, after: "1:7:0,2:07:20"},
		}},
	}
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, tc := range cases {
			for _, onStale := range []string{"zero_rows", "error"} {
				t.Run(tc.name+"/"+onStale, func(t *testing.T) {
					e := newFencedEnv(t, envOptions{engine: eng, account: true, onStale: onStale, tables: []string{"pin_rows"},
						leases: map[string]string{"pin_rows": "invoice:{customer_id}"}})
					mustExec(t, e.root, "CREATE TABLE pin_rows (id INT PRIMARY KEY, customer_id "+tc.column+" NOT NULL, "+
						"amount INT NOT NULL) ENGINE=InnoDB")
					checkTemplates(t, e)
					l := e.acquire(t, tc.lease, time.Minute)
					c := e.session(t)
					setFence(t, c, l)
					mustExec(t, e.root, "INSERT INTO pin_rows VALUES "+tc.seed)
					seed := queryString(t, e.root, "SELECT GROUP_CONCAT(id, ':', customer_id, ':', amount ORDER BY id) FROM pin_rows")
					records := 0
					for _, w := range tc.writes {
						mustExec(t, e.root, "DELETE FROM pin_rows")
						mustExec(t, e.root, "INSERT INTO pin_rows VALUES "+tc.seed)
						n, err := execAffected(c, w.q, w.args...)
						want := w.after
						var me *mysql.MySQLError
						switch {
						case w.refusal != "":
							if !errors.As(err, &me) || me.Number != 1148 || !strings.Contains(me.Message, w.refusal) {
								t.Fatalf("%s %v: %v, want ERR 1148 saying %q", w.q, w.args, err, w.refusal)
							}
							want = seed
						case w.mismatch && onStale == "error":
							if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease") {
								t.Fatalf("%s %v: %v, want ERR 1644 saying the rows belong to another lease", w.q, w.args, err)
							}
							want = seed
						case err != nil || n != w.zeroRows:
							t.Fatalf("%s %v: %d rows, %v; want %d rows", w.q, w.args, n, err, w.zeroRows)
						}
						e.sync(t)
						if got := queryString(t, e.root, "SELECT GROUP_CONCAT(id, ':', customer_id, ':', amount ORDER BY id) FROM pin_rows"); got != want {
							t.Fatalf("%s %v: rows %s, want %s", w.q, w.args, got, want)
						}
						if w.mismatch {
							records++
						}
						if got := countReason(e.auditRecords(t), audit.RowLeaseMismatch); got != records {
							t.Fatalf("%s %v: %d row_lease_mismatch records, want %d", w.q, w.args, got, records)
						}
					}
				})
			}
		}
	})
}

// TestRowLeasePinAfterCollationChange: a statement prepared while its
// WHERE pinned the template column exactly (utf8mb4_bin) is not run with
// that pin after an ALTER makes the column _ci and a reload reads it: the
// pin would meet 'ACME', another lease. The execution is refused (prepare
// it again), and prepared again it carries the trap.
func TestRowLeasePinAfterCollationChange(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("the account deployment runs it")
		}
		e := newFencedEnv(t, envOptions{engine: eng, account: true, onStale: "error", tables: []string{"pin_rows"},
			leases: map[string]string{"pin_rows": "invoice:{customer_id}"}})
		mustExec(t, e.root, "CREATE TABLE pin_rows (id INT PRIMARY KEY, customer_id VARCHAR(20) COLLATE utf8mb4_bin NOT NULL, "+
			"amount INT NOT NULL) ENGINE=InnoDB")
		mustExec(t, e.root, "INSERT INTO pin_rows VALUES (1, 'acme', 10), (2, 'ACME', 20)")
		yml := "fencing:\n  on_stale: error\naudit:\n  file: " + e.audits + "\ntables:\n  - name: " + e.db +
			".pin_rows\n    lease: \"invoice:{customer_id}\"\n"
		e.proxy.reloadChecked(t, yml)
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		ctx := context.Background()
		const q = "UPDATE pin_rows SET amount = ? WHERE customer_id = ?"
		st, err := c.PrepareContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if r, err := st.ExecContext(ctx, 11, "acme"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("pinned under utf8mb4_bin: %v", err)
		}
		mustExec(t, e.root, "ALTER TABLE pin_rows MODIFY customer_id VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL")
		e.proxy.reloadChecked(t, yml)
		var me *mysql.MySQLError
		if _, err := st.ExecContext(ctx, 12, "acme"); !errors.As(err, &me) || me.Number != 1148 || !strings.Contains(me.Message, "prepare it again") {
			t.Fatalf("the statement prepared before the ALTER: %v, want ERR 1148 saying to prepare it again", err)
		}
		if _, err := execAffected(c, q, 13, "acme"); !errors.As(err, &me) || me.Number != 1644 {
			t.Fatalf("prepared again: %v, want ERR 1644 (the trap meets 'ACME')", err)
		}
		e.sync(t)
		if got := queryString(t, e.root, "SELECT GROUP_CONCAT(id, ':', customer_id, ':', amount ORDER BY id) FROM pin_rows"); got != "1:acme:11,2:ACME:20" {
			t.Fatalf("rows %s, want 1:acme:11,2:ACME:20", got)
		}
	})
}
