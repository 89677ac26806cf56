package integration

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// The proxy-level differential test: each statement runs directly and
// through the proxy (valid fence) from the same table contents, in strict
// and non-strict sql_mode, autocommit and inside a transaction, in the text
// and the binary protocol, and everything a client can see must be the
// same: error, affected rows, insert id, SHOW WARNINGS, LAST_INSERT_ID(),
// the contents of every table it may write, AUTO_INCREMENT; ROW_COUNT() too
// inside a transaction (after an autocommit write the proxy's COMMIT resets
// it: documented). On Galera and TiDB every protected write, UPDATE and
// DELETE too, goes to the server verbatim after a guard statement; on
// MariaDB UPDATE and DELETE carry their fence in the statement.

// diffCase is one statement of the differential test; with args it runs
// only in the binary protocol.
type diffCase struct {
	name, sql string
	args      []any
}

// writeOutcome is everything a client can see of a write and what it left.
type writeOutcome struct {
	err, affected, insertID, warnings, warningCount, lastID, rowCount, rows, autoInc string
}

func (o writeOutcome) String() string {
	return fmt.Sprintf("err=%s affected=%s insert_id=%s last_insert_id=%s row_count=%s auto_increment=%s\nwarnings (%s): %s\nrows:\n%s",
		o.err, o.affected, o.insertID, o.lastID, o.rowCount, o.autoInc, o.warningCount, o.warnings, o.rows)
}

// diffSeed is the table contents every run starts from.
var diffSeed = []string{
	"INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'globex', '2026-10', 20), (3, 'acme', '2026-11', 30)",
	"INSERT INTO notes (id, body) VALUES (1, 'n'), (2, 'm')",
}

// differentialRun runs cases on eng. With bothProtocols a case without
// args runs in the binary protocol too (prepared without parameters). With
// truncate each run starts from TRUNCATE TABLE (AUTO_INCREMENT back to its
// start, for INSERTs); without, from DELETE and the seed's explicit ids,
// which leave AUTO_INCREMENT where the first seed put it and cost no DDL
// (slow on Galera, which replicates it in total order, and on TiDB).
func differentialRun(t *testing.T, eng string, cases []diffCase, bothProtocols, truncate bool) {
	t.Helper()
	e := newFencedEnv(t, envOptions{engine: eng})
	l := e.acquire(t, "invoice:acme", 10*time.Minute)
	ctx := context.Background()
	run := func(t *testing.T, c *sql.Conn, tc diffCase, binary bool, mode string, txn bool) writeOutcome {
		t.Helper()
		reset := []string{"DELETE FROM invoices", "DELETE FROM notes"}
		if truncate {
			reset = []string{"TRUNCATE TABLE invoices", "TRUNCATE TABLE notes"}
		}
		for _, s := range append(reset, diffSeed...) {
			mustExec(t, e.root, s)
		}
		mustExec(t, c, "SET SESSION sql_mode = '"+mode+"'")
		mustExec(t, c, "SELECT LAST_INSERT_ID(0)")
		if txn {
			mustExec(t, c, "BEGIN")
		}
		var o writeOutcome
		var r sql.Result
		var err error
		if binary {
			var st *sql.Stmt
			if st, err = c.PrepareContext(ctx, tc.sql); err == nil {
				r, err = st.ExecContext(ctx, tc.args...)
				st.Close()
			}
		} else {
			r, err = c.ExecContext(ctx, tc.sql)
		}
		o.err = fmt.Sprint(errCode(err))
		if err == nil {
			n, _ := r.RowsAffected()
			id, _ := r.LastInsertId()
			o.affected, o.insertID = fmt.Sprint(n), fmt.Sprint(id)
		}
		o.warnings = connRows(t, c, "SHOW WARNINGS")
		o.warningCount = connRows(t, c, "SHOW COUNT(*) WARNINGS")
		if txn {
			o.rowCount = connRows(t, c, "SELECT ROW_COUNT()")
			mustExec(t, c, "COMMIT")
		}
		o.lastID = connRows(t, c, "SELECT LAST_INSERT_ID()")
		o.rows = tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "notes")
		o.autoInc = queryString(t, e.root, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'invoices'")
		return o
	}
	// Every run gets sessions of its own (idle connections are closed, not
	// pooled): on TiDB a prepared UPDATE whose transaction was committed
	// before SHOW WARNINGS makes the same statement prepared again in the
	// session's next transaction show no warnings (measured directly,
	// without the proxy), so one run would leak into the next.
	directDB := dbtest.Open(t, e.rootDSN)
	proxiedDB := appDB(t, e.proxy, e.db)
	for _, db := range []*sql.DB{directDB, proxiedDB} {
		db.SetMaxIdleConns(0)
	}
	session := func(t *testing.T, db *sql.DB) *sql.Conn {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if db == proxiedDB {
			setFence(t, c, l)
		}
		return c
	}
	for _, tc := range cases {
		protocols := []bool{false}
		switch {
		case tc.args != nil:
			protocols = []bool{true}
		case bothProtocols:
			protocols = []bool{false, true}
		}
		for _, binary := range protocols {
			for _, mode := range []string{"STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION", ""} {
				for _, txn := range []bool{false, true} {
					proto := "text"
					if binary {
						proto = "binary"
					}
					name := fmt.Sprintf("%s/%s/sql_mode=%q/txn=%v", tc.name, proto, mode, txn)
					t.Run(name, func(t *testing.T) {
						want := run(t, session(t, directDB), tc, binary, mode, txn)
						got := run(t, session(t, proxiedDB), tc, binary, mode, txn)
						if got != want {
							t.Fatalf("through the proxy:\n%s\ndirect:\n%s", got, want)
						}
					})
				}
			}
		}
	}
	if n := len(e.auditRecords(t)); n != 0 {
		t.Fatalf("%d audit records for writes with a valid fence", n)
	}
}

// TestFencedWritesMatchDirect is the differential test of UPDATE and
// DELETE, single and multi-table, on every engine.
func TestFencedWritesMatchDirect(t *testing.T) {
	cases := []diffCase{
		{"UPDATE", "UPDATE invoices SET amount = amount + 1 WHERE customer = 'acme'", nil},
		{"UPDATE matching nothing", "UPDATE invoices SET amount = 1 WHERE id = 99", nil},
		{"UPDATE that matches but changes nothing", "UPDATE invoices SET amount = 10 WHERE id = 1", nil},
		{"UPDATE ORDER BY LIMIT", "UPDATE invoices SET amount = amount * 2 ORDER BY id DESC LIMIT 2", nil},
		{"UPDATE with subqueries", "UPDATE invoices SET amount = (SELECT COUNT(*) FROM notes) WHERE id IN (SELECT id FROM notes WHERE body = 'm')", nil},
		{"UPDATE setting LAST_INSERT_ID(expr)", "UPDATE invoices SET amount = LAST_INSERT_ID(amount + 5) WHERE id = 1", nil},
		{"UPDATE to a duplicate key", "UPDATE invoices SET customer = 'acme' WHERE id = 2", nil},
		{"UPDATE IGNORE to a duplicate key", "UPDATE IGNORE invoices SET customer = 'acme', amount = amount + 1", nil},
		{"UPDATE truncating a string", "UPDATE invoices SET period = 'far too long for CHAR(7)' WHERE id = 1", nil},
		{"UPDATE with a bad number", "UPDATE invoices SET amount = 'abc' WHERE id <= 2", nil},
		{"UPDATE of NOT NULL to NULL", "UPDATE invoices SET amount = NULL WHERE id = 1", nil},
		{"UPDATE IGNORE of NOT NULL to NULL", "UPDATE IGNORE invoices SET amount = NULL WHERE id = 1", nil},
		{"UPDATE out of range", "UPDATE invoices SET amount = 1e20 WHERE id = 3", nil},
		{"multi-table UPDATE writing both tables", "UPDATE invoices i JOIN notes n ON n.id = i.id SET i.amount = i.amount + 1, n.body = CONCAT(n.body, '!')", nil},
		{"multi-table UPDATE, comma join", "UPDATE notes n, invoices i SET i.amount = 0 WHERE n.id = 2 AND i.id = n.id", nil},
		{"DELETE", "DELETE FROM invoices WHERE customer = 'acme'", nil},
		{"DELETE of nothing", "DELETE FROM invoices WHERE id = 99", nil},
		{"DELETE ORDER BY LIMIT", "DELETE FROM invoices ORDER BY amount DESC LIMIT 1", nil},
		{"DELETE IGNORE", "DELETE IGNORE FROM invoices WHERE id > 1", nil},
		{"DELETE with a subquery", "DELETE FROM invoices WHERE id IN (SELECT id FROM notes)", nil},
		{"multi-table DELETE of one table", "DELETE i FROM invoices i JOIN notes n ON n.id = i.id WHERE n.body = 'n'", nil},
		{"multi-table DELETE of both tables", "DELETE invoices, notes FROM invoices JOIN notes ON notes.id = invoices.id", nil},
		{"DELETE ... USING", "DELETE FROM invoices USING invoices JOIN notes ON notes.id = invoices.id WHERE notes.body = 'm'", nil},
		{"binary protocol UPDATE", "UPDATE invoices SET amount = ? WHERE customer = ?", []any{7, "acme"}},
		{"binary protocol UPDATE truncating", "UPDATE invoices SET period = ? WHERE id = ?", []any{"far too long", 1}},
		{"binary protocol DELETE", "DELETE FROM invoices WHERE id = ? OR customer = ?", []any{2, "nobody"}},
	}
	forEachEngine(t, func(t *testing.T, eng string) {
		differentialRun(t, eng, cases, true, false)
	})
}
