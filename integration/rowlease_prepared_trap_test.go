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

// A prepared UPDATE or DELETE whose WHERE pins no lease (COM_STMT_PREPARE
// and COM_STMT_EXECUTE, go-sql-driver's way with arguments): the proxy
// prepares the trapped statement beside the client's and executes it in
// its place, the WHERE's values bound twice. A row of another lease the
// WHERE matches is then rejected as in the text protocol (audited,
// counted; ERR 1644, or under zero_rows the client's statement executed,
// which changes the lease's rows only).

type preparedUnpinnedCase struct {
	name     string
	q        string
	args     []any
	other    bool // the WHERE matches a row of another lease
	zeroRows int64
	rows     string // under zero_rows, or when other is false
}

var preparedUnpinnedCases = []preparedUnpinnedCase{
	{name: "update by key of another lease", q: "UPDATE invoice_rows SET amount = ? WHERE id = ?", args: []any{0, 4}, other: true,
		rows: seeded},
	{name: "update by key of the lease", q: "UPDATE invoice_rows SET amount = ? WHERE id = ?", args: []any{0, 2}, zeroRows: 1,
		rows: "1:acme:10 2:acme:0 3:beta:30 4:beta:40"},
	{name: "update spanning leases", q: "UPDATE invoice_rows SET amount = amount + ? WHERE id IN (?, ?)", args: []any{1, 1, 3},
		other: true, zeroRows: 1, rows: "1:acme:11 2:acme:20 3:beta:30 4:beta:40"},
	{name: "update by a string and an int", q: "UPDATE invoice_rows SET amount = amount + 1 WHERE status = ? AND amount > ?",
		args: []any{"open", 15}, other: true, zeroRows: 1, rows: "1:acme:10 2:acme:21 3:beta:30 4:beta:40"},
	{name: "update with a NULL bound", q: "UPDATE invoice_rows SET amount = amount + 1 WHERE id = ? OR ? IS NULL",
		args: []any{1, nil}, other: true, zeroRows: 2, rows: "1:acme:11 2:acme:21 3:beta:30 4:beta:40"},
	{name: "update with a placeholder in SET only", q: "UPDATE invoice_rows SET amount = ? WHERE id = 3", args: []any{5},
		other: true, rows: seeded},
	{name: "update of the lease's rows by a string", q: "UPDATE invoice_rows SET status = ? WHERE amount < ?",
		args: []any{"late", 25}, zeroRows: 2, rows: seeded},
	{name: "delete by key of another lease", q: "DELETE FROM invoice_rows WHERE id = ?", args: []any{4}, other: true, rows: seeded},
	{name: "delete spanning leases", q: "DELETE FROM invoice_rows WHERE id >= ?", args: []any{2}, other: true, zeroRows: 1,
		rows: "1:acme:10 3:beta:30 4:beta:40"},
	{name: "delete by key of the lease", q: "DELETE FROM invoice_rows WHERE id = ?", args: []any{1}, zeroRows: 1,
		rows: "2:acme:20 3:beta:30 4:beta:40"},
	{name: "delete ordered", q: "DELETE FROM invoice_rows WHERE amount > ? ORDER BY id", args: []any{15}, other: true,
		zeroRows: 1, rows: "1:acme:10 3:beta:30 4:beta:40"},
	{name: "delete matching nothing", q: "DELETE FROM invoice_rows WHERE id = ?", args: []any{9}, rows: seeded},
}

// TestRowLeasePreparedUnpinned: each prepared unpinned write under both
// on_stale settings: one that meets another lease's row is audited and
// counted as row_lease_mismatch, changes nothing and gets ERR 1644 under
// error, and changes the lease's rows only under zero_rows (the client
// sees that execution's affected rows); one that meets only the lease's
// rows has its effect and no record.
func TestRowLeasePreparedUnpinned(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t)
				setFence(t, c, acme)
				var tally unpinnedTally
				for _, tc := range preparedUnpinnedCases {
					reseed(t, e)
					n, err := execAffected(c, tc.q, tc.args...)
					tally.check(t, e, onStale, tc.name, tc.other, tc.rows, tc.zeroRows, n, err)
				}
				// The session goes on.
				reseed(t, e)
				mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 7, 1)
			})
		}
	})
}

// TestRowLeasePreparedUnpinnedMatchesDirect: a prepared unpinned write
// that meets only the lease's rows answers as it does directly (affected
// rows, insert id, SHOW WARNINGS) and leaves no record.
func TestRowLeasePreparedUnpinnedMatchesDirect(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "error")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		direct := dbtest0(t, e)
		mustExec(t, e.root, "CREATE TABLE invoice_rows_d LIKE invoice_rows")
		c := e.session(t)
		setFence(t, c, acme)
		cases := []struct {
			q    string
			args []any
		}{
			{"UPDATE %s SET amount = amount + ? WHERE id <= ?", []any{1, 2}},
			{"UPDATE %s SET amount = amount WHERE id IN (?, ?)", []any{1, 2}},
			{"UPDATE IGNORE %s SET amount = ? WHERE id = ?", []any{"x5", 1}},
			{"UPDATE %s SET status = ? WHERE status = ? AND amount < ?", []any{"late", "open", 15}},
			{"UPDATE %s SET amount = ? WHERE id = ? OR ? IS NULL AND id = 2", []any{3, 1, nil}},
			{"DELETE FROM %s WHERE id = ?", []any{2}},
			{"DELETE FROM %s WHERE id = ?", []any{7}},
		}
		for _, tc := range cases {
			qp, qd := strings.ReplaceAll(tc.q, "%s", "invoice_rows"), strings.ReplaceAll(tc.q, "%s", "invoice_rows_d")
			reseed(t, e)
			mustExec(t, e.root, "DELETE FROM invoice_rows_d")
			mustExec(t, e.root, "INSERT INTO invoice_rows_d SELECT * FROM invoice_rows")
			want := strings.ReplaceAll(preparedOutcome(t, direct, qd, tc.args...), "invoice_rows_d", "invoice_rows")
			got := preparedOutcome(t, c, qp, tc.args...)
			if eng == engTiDB {
				// The per-row condition's CONVERT keeps TiDB from caching
				// the plan, with or without the trap (measured: the same
				// warning when the proxy executes the client's statement).
				got = strings.ReplaceAll(got, tidbNoPlanCache, "")
			}
			if got != want {
				t.Errorf("%s %v:\n through the proxy: %s\n directly:          %s", tc.q, tc.args, got, want)
			}
			d := tableDump(t, e.root, "invoice_rows_d")
			if p := tableDump(t, e.root, "invoice_rows"); p != d {
				t.Fatalf("%s: contents differ:\nproxy:\n%s\ndirect:\n%s", tc.q, p, d)
			}
		}
		if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 0 {
			t.Fatalf("%d row_lease_mismatch records for writes of the lease's rows", n)
		}
	})
}

// tidbNoPlanCache is the warning TiDB adds to every execution of a
// prepared statement with the per-row condition.
const tidbNoPlanCache = " warning Warning|1105|skip prepared plan-cache: query has 'convert' is un-cacheable"

// TestRowLeasePreparedUnpinnedWire: on a raw connection, the trapped
// variant's id is no statement of the client's; executions that
// bind no types (new-params-bound 0, read with the last ones bound) carry
// the trap; long data falls back to the client's statement without it;
// after COM_STMT_RESET, for a statement closed and prepared again, and
// after COM_RESET_CONNECTION, the trap is back. Under zero_rows the client's statement executed after a
// trap gets the types it was last bound even when it binds none (the
// trapped variant's executions bound them, not the client's statement's).
func TestRowLeasePreparedUnpinnedWire(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db, DeprecateEOF: true})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				setFence := func() {
					w.mustQuery(t, "SET @fence_lease = '"+acme.Name+"', @fence_owner = '"+acme.Owner+"', @fence_token = "+strconv.FormatUint(acme.Token, 10))
				}
				setFence()
				prepare := func() uint32 {
					t.Helper()
					return wirePrepare(t, w, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 2)
				}
				id := prepare()
				exec := func(pkt []byte) string {
					t.Helper()
					answer, _ := wireExecute(t, w, pkt)
					return answer
				}
				typed := func(amount, row int64) []byte {
					return executePacket(id, 0, []stmtParam{intParam(amount), intParam(row)})
				}
				noTypes := func(amount, row int64) []byte {
					b := executePacket(id, 0, nil)
					b = append(b, 0, 0) // NULL bitmap, new-params-bound flag 0
					b = append(b, intParam(amount).value...)
					return append(b, intParam(row).value...)
				}
				// The trapped variant the proxy prepared next to it (the
				// server counts ids up by one) is no statement of the
				// client's: executing or closing it by id is answered as
				// for an unknown id, and nothing reaches the server.
				if got := exec(executePacket(id+1, 0, []stmtParam{intParam(1), intParam(3), intParam(3)})); got != "1243" {
					t.Fatalf("execution of the trapped variant's id: %s, want 1243", got)
				}
				if err := w.send(stmtCmd(comStmtClose, id+1)); err != nil {
					t.Fatal(err)
				}
				unknown := "1243" // the server's answer for an id it does not know
				if eng == engTiDB {
					unknown = "1105"
				}
				rejected := "1644"
				if onStale == "zero_rows" {
					rejected = "0"
				}
				records := 0
				steps := []struct {
					name  string
					pkt   func() []byte
					want  string
					trap  bool
					after func()
				}{
					{name: "typed, the lease's row", pkt: func() []byte { return typed(11, 1) }, want: "1"},
					{name: "untyped, another lease's row", pkt: func() []byte { return noTypes(12, 3) }, want: rejected, trap: true},
					{name: "untyped, the lease's row", pkt: func() []byte { return noTypes(13, 2) }, want: "1"},
					{name: "untyped after a trap, another lease's row", pkt: func() []byte { return noTypes(14, 4) }, want: rejected, trap: true},
					{name: "untyped, the lease's row again", pkt: func() []byte { return noTypes(15, 1) }, want: "1",
						after: func() {
							// Long data for amount: the trap cannot repeat
							// it, and the execution is refused.
							if err := w.send(append(stmtCmd(comStmtSendLongData, id, 0, 0), "16"...)); err != nil {
								t.Fatal(err)
							}
						}},
					{name: "long data, another lease's row: refused", pkt: func() []byte {
						return executePacket(id, 0, []stmtParam{longDataParam(), intParam(3)})
					}, want: "1148", after: func() {
						if err := w.send(stmtCmd(comStmtReset, id)); err != nil {
							t.Fatal(err)
						}
						if r, err := w.readOne(); err != nil || r.err() != nil {
							t.Fatalf("reset: %v %v", err, r.err())
						}
					}},
					{name: "after reset, another lease's row", pkt: func() []byte { return typed(17, 3) }, want: rejected, trap: true,
						after: func() {
							if err := w.send(stmtCmd(comStmtClose, id)); err != nil {
								t.Fatal(err)
							}
							id = prepare()
						}},
					{name: "prepared again, another lease's row", pkt: func() []byte { return typed(18, 4) }, want: rejected, trap: true},
					{name: "prepared again, the lease's row", pkt: func() []byte { return noTypes(19, 2) }, want: "1",
						after: func() {
							// A session reset drops both statements.
							if r, err := w.resetConnection(); err != nil || r.err() != nil {
								t.Fatalf("reset connection: %v %v", err, r.err())
							}
							setFence()
						}},
					{name: "after a session reset, the old id", pkt: func() []byte { return typed(20, 3) }, want: unknown,
						after: func() { id = prepare() }},
					{name: "after a session reset, prepared again, another lease's row", pkt: func() []byte { return typed(21, 4) },
						want: rejected, trap: true},
				}
				for _, s := range steps {
					if got := exec(s.pkt()); got != s.want {
						t.Fatalf("%s: %s, want %s", s.name, got, s.want)
					}
					if s.trap {
						records++
					}
					if got := countReason(e.auditRecords(t), audit.RowLeaseMismatch); got != records {
						t.Fatalf("%s: %d row_lease_mismatch records, want %d", s.name, got, records)
					}
					if s.after != nil {
						s.after()
					}
				}
				if got, want := e.invoiceRows(t), "1:acme:15 2:acme:19 3:beta:30 4:beta:40"; got != want {
					t.Fatalf("rows: %s, want %s", got, want)
				}
			})
		}
	})
}

// TestRowLeasePreparedUnpinnedStmtLimit: the trapped variant counts
// against the server's max_prepared_stmt_count. When the server refuses
// it, the client's statement (which it prepared) is refused at every
// execution, saying why, with a refusal record and no row changed:
// without the trap it would skip a row of another lease unaudited.
// Prepared again under a higher limit it has the trap.
func TestRowLeasePreparedUnpinnedStmtLimit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "error")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		old := queryString(t, e.root, "SELECT @@GLOBAL.max_prepared_stmt_count")
		t.Cleanup(func() { mustExec(t, e.root, "SET GLOBAL max_prepared_stmt_count = "+old) })
		// Room for the client's statement only: a direct session holds
		// every statement the server allows but one.
		mustExec(t, e.root, "SET GLOBAL max_prepared_stmt_count = 64")
		direct := dbtest0(t, e)
		var held []*sql.Stmt
		for {
			st, err := direct.PrepareContext(context.Background(), "SELECT 1")
			if err != nil {
				var me *mysql.MySQLError
				if !errors.As(err, &me) || me.Number != 1461 || len(held) == 0 {
					t.Fatalf("filling the server's prepared statements: %v after %d", err, len(held))
				}
				break
			}
			held = append(held, st)
		}
		// COM_STMT_CLOSE has no reply: a ping on the same connection
		// waits until the server has freed the statement, before the
		// client's prepare arrives on another connection.
		held[0].Close()
		if err := direct.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		const q = "UPDATE invoice_rows SET amount = ? WHERE id = ?"
		for _, row := range []int{3, 1} {
			var me *mysql.MySQLError
			if _, err := execAffected(c, q, 0, row); !errors.As(err, &me) || me.Number != 1148 ||
				!strings.Contains(me.Message, "max_prepared_stmt_count") {
				t.Fatalf("at the limit, row %d: %v, want ERR 1148 naming max_prepared_stmt_count", row, err)
			}
		}
		recs := e.auditRecords(t)
		if got := countReason(recs, audit.RowLeaseMismatch); got != 0 {
			t.Fatalf("at the limit: %d row_lease_mismatch records, want 0", got)
		}
		if got := countReason(recs, audit.Refused); got != 2 {
			t.Fatalf("at the limit: %d refused records, want 2", got)
		}
		for _, st := range held[1:] {
			st.Close()
		}
		if err := direct.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		var me *mysql.MySQLError
		if _, err := execAffected(c, q, 0, 3); !errors.As(err, &me) || me.Number != 1644 {
			t.Fatalf("under the default limit, another lease's row: %v, want ERR 1644", err)
		}
		if got := e.invoiceRows(t); got != seeded {
			t.Fatalf("rows %s, want %s", got, seeded)
		}
	})
}

// TestRowLeasePreparedUnpinnedInTransaction: in the client's transaction
// a prepared write that meets another lease's row is undone alone (under
// error; under zero_rows it changes the lease's rows), and the
// transaction goes on: its earlier write commits.
func TestRowLeasePreparedUnpinnedInTransaction(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := rowLeaseEnv(t, eng, onStale)
				acme := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t)
				setFence(t, c, acme)
				mustExec(t, c, "START TRANSACTION")
				mustAffect(t, c, 1, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 11, 1)
				_, err := c.ExecContext(context.Background(), "UPDATE invoice_rows SET amount = amount + ? WHERE id >= ?", 100, 2)
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
				mustExec(t, c, "COMMIT")
				if got := e.invoiceRows(t); got != want {
					t.Fatalf("rows %s, want %s", got, want)
				}
				if n := countReason(e.auditRecords(t), audit.RowLeaseMismatch); n != 1 {
					t.Fatalf("%d row_lease_mismatch records, want 1", n)
				}
			})
		}
	})
}

// TestRowLeasePreparedUnpinnedStaleTypes: executions of the trapped
// variant bind their types to it, so the server's types for the client's
// statement fall behind the client's. An execution that binds none and
// that the proxy does not read (larger than it reads) is refused rather
// than sent: the server would read its values with other types. After a
// reload into shadow mode the statement is refused as any whose fence the
// reload changed ("prepare it again"). MariaDB.
func TestRowLeasePreparedUnpinnedStaleTypes(t *testing.T) {
	e := rowLeaseEnv(t, engMariaDB, "zero_rows")
	acme := e.acquire(t, "invoice:acme", time.Minute)
	w, err := dialWire(e.proxy.Addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db, DeprecateEOF: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.mustQuery(t, "SET @fence_lease = '"+acme.Name+"', @fence_owner = '"+acme.Owner+"', @fence_token = "+strconv.FormatUint(acme.Token, 10))
	id := wirePrepare(t, w, "UPDATE invoice_rows SET amount = ? WHERE id = ?", 2)
	exec := func(pkt []byte) string {
		t.Helper()
		answer, msg := wireExecute(t, w, pkt)
		if msg != "" {
			return answer + " " + msg
		}
		return answer
	}
	untyped := func(pad int) []byte {
		b := executePacket(id, 0, nil)
		b = append(b, 0, 0) // NULL bitmap, new-params-bound flag 0
		b = append(b, intParam(12).value...)
		b = append(b, intParam(2).value...)
		return append(b, make([]byte, pad)...) // bytes past the values, which the server ignores
	}
	// The first execution binds BIGINT types and runs as the trapped
	// variant: the server holds no types for the client's statement.
	if got := exec(executePacket(id, 0, []stmtParam{intParam(11), intParam(1)})); got != "1" {
		t.Fatalf("typed execution: %s", got)
	}
	// Larger than the proxy reads (16 MiB and more): refused.
	if got := exec(untyped(17 << 20)); !strings.HasPrefix(got, "1148 ") || !strings.Contains(got, "larger than fenceproxy reads") {
		t.Fatalf("a large untyped execution after the trapped variant's: %s, want the proxy's refusal", got)
	}
	// Read by the proxy, no types: the client's last types go with it.
	if got := exec(untyped(0)); got != "1" {
		t.Fatalf("untyped execution: %s", got)
	}
	if rows, want := e.invoiceRows(t), "1:acme:11 2:acme:12 3:beta:30 4:beta:40"; rows != want {
		t.Fatalf("rows %s, want %s", rows, want)
	}
	e.proxy.reload(t, "fencing:\n  on_stale: zero_rows\n  mode: shadow\n"+
		"tables:\n  - name: "+e.db+".reconciliation_runs\n    lease: admin:reconciliation\n  - name: "+e.db+".invoices\n"+
		"  - name: "+e.db+".invoice_rows\n    lease: \"invoice:{customer_id}\"\n  - name: "+e.db+".loose_rows\n    lease: \"loose:{customer_id}\"\n"+
		"audit:\n  file: "+e.audits+"\n")
	checkTemplates(t, e)
	if got := exec(untyped(0)); !strings.HasPrefix(got, "1148 ") || !strings.Contains(got, "prepare it again") {
		t.Fatalf("untyped execution after a reload into shadow mode: %s, want the proxy's refusal", got)
	}
	if rows, want := e.invoiceRows(t), "1:acme:11 2:acme:12 3:beta:30 4:beta:40"; rows != want {
		t.Fatalf("rows %s, want %s", rows, want)
	}
}

// wirePrepare prepares text on w and returns the statement id; the server
// must count params parameters.
func wirePrepare(t *testing.T, w *wireConn, text string, params int) uint32 {
	t.Helper()
	if err := w.send(append([]byte{comStmtPrepare}, text...)); err != nil {
		t.Fatal(err)
	}
	r, id, n, err := w.readPrepare()
	if err != nil || r.err() != nil || n != params {
		t.Fatalf("prepare: %v %v (%d params, want %d)", err, r.err(), n, params)
	}
	return id
}

// wireExecute sends an execution packet on w and returns its answer: the
// affected rows of its OK, or the code of its ERR and the ERR's message.
func wireExecute(t *testing.T, w *wireConn, pkt []byte) (answer, msg string) {
	t.Helper()
	if err := w.send(pkt); err != nil {
		t.Fatal(err)
	}
	r, err := w.readResults(false)
	if err != nil {
		t.Fatal(err)
	}
	if we := r.err(); we != nil {
		return strconv.Itoa(int(we.Code)), we.Msg
	}
	return strconv.FormatUint(okAffectedRows(r.last()), 10), ""
}
