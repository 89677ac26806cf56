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

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Prepared INSERTs (COM_STMT_PREPARE + COM_STMT_EXECUTE, go-sql-driver's
// default for statements with arguments) whose template columns are
// placeholders: the proxy computes the rows' lease from the values each
// execution binds.

// typedRowTable's lease is "typed:{n}:{u}:{v}:{ch}": one template column
// of each type the proxy reads (INT, BIGINT UNSIGNED, VARCHAR, CHAR), and
// an AUTO_INCREMENT key, so that insert ids show.
const typedRowTable = "CREATE TABLE %s (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, n INT NOT NULL, " +
	"u BIGINT UNSIGNED NOT NULL, v VARCHAR(12) COLLATE utf8mb4_bin NOT NULL, ch CHAR(8) COLLATE utf8mb4_bin NOT NULL, " +
	"note TEXT, amount INT NOT NULL)"

const typedInsert = "INSERT INTO %s (n, u, v, ch, note, amount) VALUES (?, ?, ?, ?, ?, ?)"

func preparedRowEnv(t *testing.T, eng, onStale string) *fencedEnv {
	t.Helper()
	e := newFencedEnv(t, envOptions{engine: eng, account: true, onStale: onStale,
		tables: []string{"invoice_rows", "typed_rows", "bare_rows"},
		leases: map[string]string{"invoice_rows": "invoice:{customer_id}", "typed_rows": "typed:{n}:{u}:{v}:{ch}", "bare_rows": "{code}"}})
	mustExec(t, e.root, rowLeaseTable)
	mustExec(t, e.root, strings.ReplaceAll(typedRowTable, "%s", "typed_rows"))
	mustExec(t, e.root, strings.ReplaceAll(typedRowTable, "%s", "typed_rows_d"))
	mustExec(t, e.root, "CREATE TABLE bare_rows (id INT PRIMARY KEY, code VARCHAR(20) COLLATE utf8mb4_bin NOT NULL)")
	mustExec(t, e.root, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (1, 'acme', 10), (3, 'beta', 30)")
	checkTemplates(t, e)
	return e
}

// preparedOutcome runs q with args as a prepared statement and describes
// what the client sees: error, or affected rows, insert id and SHOW
// WARNINGS.
func preparedOutcome(t *testing.T, c *sql.Conn, q string, args ...any) string {
	t.Helper()
	r, err := c.ExecContext(context.Background(), q, args...)
	if err != nil {
		return "error " + err.Error()
	}
	n, _ := r.RowsAffected()
	id, _ := r.LastInsertId()
	out := "affected " + strconv.FormatInt(n, 10) + " id " + strconv.FormatInt(id, 10)
	for _, row := range runQueryConn(c, "SHOW WARNINGS").Rows {
		out += " warning " + strings.Join(row, "|")
	}
	return out
}

// TestRowLeasePreparedInsert: a prepared INSERT binding the template
// columns writes under the lease its bound values name: under that lease
// as directly (affected rows, insert id, warnings, rows), under another
// it is a row_lease_mismatch rejection, audited; a statement re-executed
// with another lease's values is rejected at that execution; values the
// proxy cannot read exactly are refused.
func TestRowLeasePreparedInsert(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := preparedRowEnv(t, eng, "")
		const max64 = uint64(1<<64 - 1)
		typed := e.acquire(t, "typed:-7:"+strconv.FormatUint(max64, 10)+":x-1:ab", time.Minute)
		e.acquire(t, "invoice:beta", time.Minute) // beta's lease is held by its own worker
		acme := e.acquire(t, "invoice:acme", time.Minute)
		direct := dbtest0(t, e)
		c := e.session(t)

		// Every type, under the lease the values name: the CHAR value's
		// trailing spaces are not stored, so not in the lease.
		setFence(t, c, typed)
		for _, args := range [][]any{
			{int64(-7), max64, "x-1", "ab  ", "first", 1},
			{"-7", strconv.FormatUint(max64, 10), "x-1", "ab", nil, 2}, // strings into the integer columns
		} {
			want := preparedOutcome(t, direct, strings.ReplaceAll(typedInsert, "%s", "typed_rows_d"), args...)
			got := preparedOutcome(t, c, strings.ReplaceAll(typedInsert, "%s", "typed_rows"), args...)
			if got != want || !strings.HasPrefix(got, "affected 1 id ") {
				t.Fatalf("%v:\n through the proxy: %s\n directly:          %s", args, got, want)
			}
		}
		if p, d := tableDump(t, e.root, "typed_rows"), tableDump(t, e.root, "typed_rows_d"); p != d {
			t.Fatalf("contents differ:\nproxy:\n%s\ndirect:\n%s", p, d)
		}
		// Values the proxy cannot read exactly, or that name no lease.
		ins := strings.ReplaceAll(typedInsert, "%s", "typed_rows")
		for _, r := range []struct {
			what string
			args []any
		}{
			{"is NULL", []any{nil, max64, "x-1", "ab", nil, 3}},
			{"of type DOUBLE", []any{-7.0, max64, "x-1", "ab", nil, 3}},
			{"out of the column's range", []any{int64(1) << 40, max64, "x-1", "ab", nil, 3}},
			{"plain decimal form", []any{"-07", max64, "x-1", "ab", nil, 3}},
			{"longer than the column", []any{-7, max64, "x-1-x-1-x-1-x", "ab", nil, 3}},
			{"not printable ASCII", []any{-7, max64, "x-\u00e91", "ab", nil, 3}},
		} {
			mustRefuse(t, c, r.what, ins, r.args...)
		}

		setFence(t, c, acme)
		inv := "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?)"
		mustAffect(t, c, 1, inv, 5, "acme", 50)
		// Another lease's row: rejected, audited.
		mustAffect(t, c, 0, inv, 6, "beta", 60)
		mustAffect(t, c, 0, inv, 6, "ACME", 60)
		// Several rows: one lease, or refused.
		mustAffect(t, c, 2, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?), (?, ?, ?)", 7, "acme", 70, 8, "acme", 80)
		mustRefuse(t, c, "several leases", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?), (?, ?, ?)",
			9, "acme", 90, 9, "beta", 90)
		mustRefuse(t, c, "several leases", "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, 'acme', 90), (?, ?, ?)",
			9, "beta", 90)
		// One prepared statement, executed with acme's values, then beta's,
		// then acme's again: each execution is guarded under its own.
		st, err := c.PrepareContext(context.Background(), inv)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct {
			id   int
			cust string
			want int64
		}{{10, "acme", 1}, {11, "beta", 0}, {12, "acme", 1}} {
			r, err := st.Exec(x.id, x.cust, 1)
			if err != nil {
				t.Fatalf("execution with %s: %v", x.cust, err)
			}
			if n, _ := r.RowsAffected(); n != x.want {
				t.Fatalf("execution with %s: %d rows, want %d", x.cust, n, x.want)
			}
		}
		st.Close()
		// Long data (go-sql-driver sends an argument of at least
		// maxAllowedPacket/(params+1) bytes with COM_STMT_SEND_LONG_DATA):
		// refused, for a template column and for any other.
		long := e.session(t, "maxAllowedPacket=1024")
		setFence(t, long, acme)
		mustRefuse(t, long, "long data", inv, 13, strings.Repeat("a", 300), 1)
		mustRefuse(t, long, "long data", "INSERT INTO invoice_rows (id, customer_id, amount, status) VALUES (?, ?, ?, ?)",
			13, "acme", 1, strings.Repeat("z", 300))
		mustAffect(t, long, 1, inv, 13, "acme", 1)
		// A template of a column alone: an empty value names no lease
		// (with no row lease the guard would accept any valid fence).
		mustRefuse(t, c, "would be empty", "INSERT INTO bare_rows (id, code) VALUES (1, '')")
		mustRefuse(t, c, "would be empty", "INSERT INTO bare_rows (id, code) VALUES (?, ?)", 1, "  ")
		if n := queryString(t, e.root, "SELECT COUNT(*) FROM bare_rows"); n != "0" {
			t.Fatalf("bare_rows has %s rows", n)
		}

		if got, want := e.invoiceRows(t), "1:acme:10 3:beta:30 5:acme:50 7:acme:70 8:acme:80 10:acme:1 12:acme:1 13:acme:1"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
		recs := e.auditRecords(t)
		if n := countReason(recs, audit.RowLeaseMismatch); n != 3 {
			t.Fatalf("%d row_lease_mismatch records, want 3", n)
		}
		for _, r := range recs {
			if r.Reason == audit.RowLeaseMismatch && (r.Lease != "invoice:acme" || r.Table != e.db+".invoice_rows") {
				t.Fatalf("record %+v: want lease invoice:acme on invoice_rows", r)
			}
		}
	})
}

// TestRowLeasePreparedOnStaleError: with on_stale: error a prepared
// INSERT of another lease's row gets ERR 1644; SQL PREPARE with a
// placeholder in a template column is refused (EXECUTE ... USING binds
// user variables, which the proxy does not read).
func TestRowLeasePreparedOnStaleError(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := preparedRowEnv(t, eng, "error")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		inv := "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?)"
		_, err := c.ExecContext(context.Background(), inv, 5, "beta", 50)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease") {
			t.Fatalf("prepared INSERT of beta's row under acme: %v, want ERR 1644 saying the rows belong to another lease", err)
		}
		mustAffect(t, c, 1, inv, 5, "acme", 50)
		mustRefuse(t, c, "EXECUTE ... USING binds user variables",
			"PREPARE s FROM 'INSERT INTO invoice_rows (id, customer_id, amount) VALUES (9, ?, 0)'")
		if got, want := e.invoiceRows(t), "1:acme:10 3:beta:30 5:acme:50"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
	})
}

// TestRowLeasePreparedWire: on a raw connection through the proxy, an
// execution that sends no parameter types (the new-params-bound flag 0)
// is read with the types of the last execution the server received, as
// the server reads it; long data sent for the statement refuses its
// executions until COM_STMT_RESET drops it.
func TestRowLeasePreparedWire(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := preparedRowEnv(t, eng, "")
		e.acquire(t, "invoice:beta", time.Minute)
		acme := e.acquire(t, "invoice:acme", time.Minute)
		w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db, DeprecateEOF: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		w.mustQuery(t, "SET @fence_lease = '"+acme.Name+"', @fence_owner = '"+acme.Owner+"', @fence_token = "+strconv.FormatUint(acme.Token, 10))
		if err := w.send(append([]byte{comStmtPrepare}, "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?)"...)); err != nil {
			t.Fatal(err)
		}
		r, id, params, err := w.readPrepare()
		if err != nil || r.err() != nil || params != 3 {
			t.Fatalf("prepare: %v %v (%d params)", err, r.err(), params)
		}
		exec := func(pkt []byte) wireResponse {
			t.Helper()
			if err := w.send(pkt); err != nil {
				t.Fatal(err)
			}
			r, err := w.readResults(false)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		affected := func(r wireResponse) string {
			if we := r.err(); we != nil {
				return we.Error()
			}
			return strconv.FormatUint(okAffectedRows(r.last()), 10)
		}
		// Types sent: acme's row.
		if got := affected(exec(executePacket(id, 0, []stmtParam{intParam(21), strParam("acme"), intParam(1)}))); got != "1" {
			t.Fatalf("execution with types: %s, want 1 row", got)
		}
		// No types: the server reads these values with the types above.
		noTypes := func(row int64, cust string) []byte {
			b := executePacket(id, 0, nil)
			b = append(b, 0, 0) // NULL bitmap, new-params-bound flag 0
			b = append(b, intParam(row).value...)
			b = append(b, strParam(cust).value...)
			return append(b, intParam(2).value...)
		}
		if got := affected(exec(noTypes(22, "beta"))); got != "0" {
			t.Fatalf("execution without types, beta's row: %s, want 0 rows", got)
		}
		if got := affected(exec(noTypes(23, "acme"))); got != "1" {
			t.Fatalf("execution without types, acme's row: %s, want 1 row", got)
		}
		// Long data for amount (not a template column): refused until reset.
		if err := w.send(append(stmtCmd(comStmtSendLongData, id, 2, 0), "5"...)); err != nil {
			t.Fatal(err)
		}
		if got := affected(exec(executePacket(id, 0, []stmtParam{intParam(24), strParam("acme"), longDataParam()}))); !strings.Contains(got, "long data") {
			t.Fatalf("execution after long data: %s, want refused for long data", got)
		}
		if err := w.send(stmtCmd(comStmtReset, id)); err != nil {
			t.Fatal(err)
		}
		if r, err := w.readOne(); err != nil || r.err() != nil {
			t.Fatalf("reset: %v %v", err, r.err())
		}
		if got := affected(exec(executePacket(id, 0, []stmtParam{intParam(25), strParam("acme"), intParam(3)}))); got != "1" {
			t.Fatalf("execution after reset: %s, want 1 row", got)
		}
		if got, want := e.invoiceRows(t), "1:acme:10 3:beta:30 21:acme:1 23:acme:2 25:acme:3"; got != want {
			t.Fatalf("rows: %s, want %s", got, want)
		}
	})
}

// TestRowLeasePreparedPinned: a prepared UPDATE or DELETE whose WHERE pins
// the template columns to placeholders is aimed at the lease its bound
// values name: aimed at another lease's rows it is a row_lease_mismatch
// rejection (audited; ERR 1644 under on_stale: error), as with literals.
// A template column bound to NULL matches no row, and the execution runs
// as sent (0 rows, no rejection); one bound to a value whose lease the
// proxy cannot compute (a DOUBLE, which the server compares as a number,
// '3' and '3.0' alike) is refused, saying so: its rows would be skipped
// unaudited.
func TestRowLeasePreparedPinned(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"", "error"} {
			e := preparedRowEnv(t, eng, onStale)
			e.acquire(t, "invoice:beta", time.Minute)
			acme := e.acquire(t, "invoice:acme", time.Minute)
			c := e.session(t)
			setFence(t, c, acme)
			upd := "UPDATE invoice_rows SET amount = ? WHERE customer_id = ? AND id = ?"
			del := "DELETE FROM invoice_rows WHERE id = ? AND customer_id = ?"
			mustAffect(t, c, 1, upd, 11, "acme", 1)
			mustAffect(t, c, 0, upd, 11, nil, 1) // no lease: 0 rows, not a rejection
			var me *mysql.MySQLError
			if _, err := c.ExecContext(context.Background(), upd, 11, 3.0, 3); !errors.As(err, &me) || me.Number != 1148 ||
				!strings.Contains(me.Message, "DOUBLE") {
				t.Fatalf("a DOUBLE bound to customer_id: %v, want ERR 1148 naming the type", err)
			}
			for _, w := range []struct {
				q    string
				args []any
			}{{upd, []any{99, "beta", 3}}, {del, []any{3, "beta"}}} {
				_, err := c.ExecContext(context.Background(), w.q, w.args...)
				var me *mysql.MySQLError
				switch {
				case onStale == "error" && (!errors.As(err, &me) || me.Number != 1644 || !strings.Contains(me.Message, "another lease")):
					t.Fatalf("%s %v under acme: %v, want ERR 1644 saying the rows belong to another lease", w.q, w.args, err)
				case onStale == "" && err != nil:
					t.Fatalf("%s %v under acme: %v, want 0 rows", w.q, w.args, err)
				}
			}
			if got, want := e.invoiceRows(t), "1:acme:11 3:beta:30"; got != want {
				t.Fatalf("on_stale %q: rows %s, want %s", onStale, got, want)
			}
			if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 2 {
				t.Fatalf("on_stale %q: %d row_lease_mismatch records, want 2", onStale, n)
			}
		}
	})
}

// TestRowLeasePreparedShadow: in shadow mode a prepared INSERT of another
// lease's row is relayed as it came and audited as the rejection it would
// be (outcome shadow); one whose lease cannot be computed is relayed and
// audited as the refusal it would be.
func TestRowLeasePreparedShadow(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true, mode: "shadow",
			tables: []string{"invoice_rows"}, leases: map[string]string{"invoice_rows": "invoice:{customer_id}"}})
		mustExec(t, e.root, rowLeaseTable)
		checkTemplates(t, e)
		e.acquire(t, "invoice:beta", time.Minute)
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		inv := "INSERT INTO invoice_rows (id, customer_id, amount) VALUES (?, ?, ?)"
		mustAffect(t, c, 1, inv, 1, "acme", 1)
		mustAffect(t, c, 1, inv, 2, "beta", 2)
		mustAffect(t, c, 1, inv, 3, "beta", 3.0) // a DOUBLE outside the template is fine
		if _, err := c.ExecContext(context.Background(), inv, 4, []byte("be\tta"), 4); err != nil {
			t.Fatalf("shadow mode relays what it would refuse: %v", err)
		}
		var mismatch, refused int
		for _, r := range e.auditRecords(t) {
			switch {
			case r.Reason == audit.RowLeaseMismatch && r.Outcome == "shadow":
				mismatch++
			case r.Reason == audit.Refused && r.Outcome == "shadow":
				refused++
			}
		}
		if mismatch != 2 || refused != 1 {
			t.Fatalf("%d row_lease_mismatch and %d refused shadow records, want 2 and 1", mismatch, refused)
		}
		if got, want := e.invoiceRows(t), "1:acme:1 2:beta:2 3:beta:3 4:be\tta:4"; got != want {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})
}
