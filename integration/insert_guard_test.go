package integration

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Guarded INSERT / REPLACE (issue 8): the statement reaches the server
// exactly as written, after a guard that reads the lease row with a lock in
// the same transaction.

// TestIssue8StaleInsertBypasses: each stale write that the old
// INSERT ... SELECT ... WHERE <fence> shape let through (an aggregate makes
// the SELECT return a row whatever its WHERE says) leaves the database
// unchanged and is audited once.
func TestIssue8StaleInsertBypasses(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
		mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'done')")
		mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'n'), (2, 'm')")
		inv := e.acquire(t, "invoice:acme", time.Minute)
		rec := e.acquire(t, "admin:reconciliation", time.Minute)
		cases := []struct {
			name, lease, sql string
			args             []any
		}{
			{"aggregate in VALUES", "inv", "INSERT INTO invoices (customer, period, amount) VALUES ('x', '2026-11', 7 + COUNT(*))", nil},
			{"aggregate in SET", "inv", "INSERT INTO invoices SET customer = 'x', period = '2026-11', amount = COUNT(*)", nil},
			{"REPLACE on a fixed-lease table", "rec", "REPLACE INTO reconciliation_runs (id, status, result) VALUES (1, 'hacked', 7 + COUNT(*))", nil},
			{"ON DUPLICATE KEY UPDATE of an existing row", "rec", "INSERT INTO reconciliation_runs (id, status) VALUES (1, CONCAT('r', LEFT(COUNT(*), 0))) ON DUPLICATE KEY UPDATE status = 'pwned'", nil},
			{"binary protocol", "inv", "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-11', COUNT(*) + ?)", []any{"x", 7}},
			{"outer aggregate in a subquery of the select list", "inv", "INSERT INTO invoices (customer, period, amount) SELECT 'x', '2026-11', (SELECT COUNT(n.id)) FROM notes n", nil},
			{"outer aggregate in ORDER BY", "inv", "INSERT INTO invoices (customer, period, amount) SELECT 'y', '2026-11', 1 FROM notes n ORDER BY (SELECT COUNT(n.id)) LIMIT 1", nil},
			{"outer aggregate in HAVING", "inv", "INSERT INTO invoices (customer, period, amount) SELECT 'z', '2026-11', 1 FROM notes n HAVING (SELECT COUNT(n.id)) >= 0", nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				for _, txn := range []bool{false, true} {
					c := e.session(t)
					l := inv
					if tc.lease == "rec" {
						l = rec
					}
					stale := l
					stale.Token--
					setFence(t, c, stale)
					before := tableDump(t, e.root, "invoices") + tableDump(t, e.root, "reconciliation_runs")
					audits := len(e.auditRecords(t))
					if txn {
						mustExec(t, c, "BEGIN")
					}
					derr := directRolledBack(t, e, tc.sql, tc.args)
					r, err := c.ExecContext(context.Background(), tc.sql, tc.args...)
					wantAudit := 1
					switch {
					case err != nil && len(tc.args) > 0 && errCode(err) == errCode(derr):
						// The server refuses to prepare it, as it does directly:
						// nothing ran, so nothing was rejected.
						wantAudit = 0
					case err != nil:
						t.Fatalf("txn=%v: %v", txn, err)
					default:
						if n, _ := r.RowsAffected(); n != 0 {
							t.Fatalf("txn=%v: stale write affected %d rows", txn, n)
						}
					}
					if txn {
						mustExec(t, c, "COMMIT")
					}
					if after := tableDump(t, e.root, "invoices") + tableDump(t, e.root, "reconciliation_runs"); after != before {
						t.Fatalf("txn=%v: the stale write changed the database:\n%s\n->\n%s", txn, before, after)
					}
					recs := e.auditRecords(t)
					if len(recs) != audits+wantAudit || wantAudit == 1 && recs[len(recs)-1].Reason != audit.StaleToken {
						t.Fatalf("txn=%v: want %d stale_token audit records, got %d: %+v", txn, wantAudit, len(recs)-audits, recs[audits:])
					}
					// A valid fence gets the server's own verdict, as direct.
					setFence(t, c, l)
					derr = directRolledBack(t, e, tc.sql, tc.args)
					_, perr := c.ExecContext(context.Background(), tc.sql, tc.args...)
					if errCode(perr) != errCode(derr) {
						t.Fatalf("txn=%v: valid fence: proxy %v, direct %v", txn, perr, derr)
					}
				}
			})
		}
	})
}

// directRolledBack runs a statement directly inside a transaction that it
// rolls back: the server's verdict on it, leaving nothing behind.
func directRolledBack(t *testing.T, e *fencedEnv, q string, args []any) error {
	t.Helper()
	c, err := e.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "BEGIN")
	_, err = c.ExecContext(context.Background(), q, args...)
	mustExec(t, c, "ROLLBACK")
	return err
}

func errCode(err error) int {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return int(me.Number)
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestGuardedInsertsMatchDirect is the proxy-level differential test of
// INSERT and REPLACE (differentialRun), on every engine; the binary
// protocol by the cases with placeholders.
func TestGuardedInsertsMatchDirect(t *testing.T) {
	cases := []diffCase{
		{"NULL into NOT NULL, single row", "INSERT INTO invoices (customer, period, amount) VALUES ('a', '2026-11', NULL)", nil},
		{"NULL into NOT NULL, multi-row", "INSERT INTO invoices (customer, period, amount) VALUES ('a', '2026-11', NULL), ('b', '2026-11', 1)", nil},
		{"aggregate in VALUES", "INSERT INTO invoices (customer, period, amount) VALUES ('x', '2026-11', 7 + COUNT(*))", nil},
		{"window function in VALUES", "INSERT INTO invoices (customer, period, amount) VALUES ('x', '2026-11', ROW_NUMBER() OVER ())", nil},
		{"ODKU updates an existing row", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 5) ON DUPLICATE KEY UPDATE amount = amount + 1", nil},
		{"ODKU with LAST_INSERT_ID(id)", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 5) ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), amount = 7", nil},
		{"ODKU inserts", "INSERT INTO invoices (customer, period, amount) VALUES ('new', '2026-10', 5) ON DUPLICATE KEY UPDATE amount = 1", nil},
		{"multi-row ODKU with duplicates", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 1), ('n1', '2026-10', 2), ('globex', '2026-10', 3) ON DUPLICATE KEY UPDATE amount = VALUES(amount)", nil},
		{"multi-row INSERT IGNORE with a duplicate", "INSERT IGNORE INTO invoices (customer, period, amount) VALUES ('b', '2026-10', 1), ('acme', '2026-10', 2), ('c', '2026-10', 3)", nil},
		{"INSERT IGNORE of a bad value", "INSERT IGNORE INTO invoices (customer, period, amount) VALUES ('b', '2026-10', 'abc')", nil},
		{"duplicate key", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 1)", nil},
		{"REPLACE of an existing row", "REPLACE INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 99)", nil},
		{"VALUES ()", "INSERT INTO invoices () VALUES ()", nil},
		{"DEFAULT without a column list", "INSERT INTO invoices VALUES (DEFAULT, 'd', '2026-11', 3, DEFAULT)", nil},
		{"mixed value types in one column", "INSERT INTO invoices (customer, period, amount) VALUES ('m1', '2026-11', 1), ('m2', '2026-11', '2.5'), ('m3', '2026-11', 0.1e1)", nil},
		{"value reading an earlier column", "INSERT INTO invoices (customer, period, amount) VALUES ('r', '2026-11', LENGTH(customer))", nil},
		{"INSERT ... SELECT with an aggregate", "INSERT INTO invoices (customer, period, amount) SELECT 'agg', '2026-12', COUNT(*) FROM notes", nil},
		{"INSERT ... SELECT of nothing", "INSERT INTO invoices (customer, period, amount) SELECT 'none', '2026-12', 1 FROM notes WHERE id < 0", nil},
		{"binary protocol", "INSERT INTO invoices (customer, period, amount) VALUES (?, ?, ?)", []any{"p", "2026-11", 4}},
		{"binary protocol, NULL into NOT NULL", "INSERT INTO invoices (customer, period, amount) VALUES (?, ?, ?)", []any{"p", "2026-11", nil}},
		{"binary protocol, aggregate", "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-11', COUNT(*) + ?)", []any{"x", 7}},
	}
	forEachEngine(t, func(t *testing.T, eng string) {
		differentialRun(t, eng, cases, false, true)
	})
}

// connRows runs a query on one connection and returns its rows as text.
func connRows(t *testing.T, c *sql.Conn, q string) string {
	t.Helper()
	rows, err := c.QueryContext(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteByte('|')
			}
			if v.Valid {
				b.WriteString(v.String)
			} else {
				b.WriteString("NULL")
			}
		}
		b.WriteByte(';')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGuardErrors: a guard that cannot run answers the write with its
// error, and nothing of the write is sent.
func TestGuardErrors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		l := e.acquire(t, "invoice:acme", time.Minute)
		ctx := context.Background()
		t.Run("lock wait timeout", func(t *testing.T) {
			// Another session holds the lease row exclusively (as a takeover in
			// progress would).
			holder, err := e.root.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			mustExec(t, holder, "BEGIN")
			mustExec(t, holder, "SELECT * FROM fenced_job_leases WHERE lease_name = 'invoice:acme' FOR UPDATE")
			c := e.session(t)
			setFence(t, c, l)
			mustExec(t, c, "SET SESSION innodb_lock_wait_timeout = 1")
			_, err = c.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES ('w', '2026-11', 1)")
			if errCode(err) != 1205 {
				t.Fatalf("want ERROR 1205, got %v", err)
			}
			mustExec(t, holder, "ROLLBACK")
			if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer = 'w'"); n != "0" {
				t.Fatalf("%s rows written", n)
			}
			// The connection is usable, outside a transaction, and the next
			// write goes through.
			if r := mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('w', '2026-11', 1)"); rowsAffected(r) != 1 {
				t.Fatal("write after the timeout changed nothing")
			}
		})
		t.Run("lease table missing", func(t *testing.T) {
			c := e.session(t)
			setFence(t, c, l)
			mustExec(t, e.root, "RENAME TABLE fenced_job_leases TO fenced_job_leases_away")
			defer mustExec(t, e.root, "RENAME TABLE fenced_job_leases_away TO fenced_job_leases")
			_, err := c.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES ('m', '2026-11', 1)")
			if errCode(err) != 1146 || !strings.Contains(err.Error(), "run fenceproxy init") {
				t.Fatalf("want ERROR 1146 saying to run fenceproxy init, got %v", err)
			}
		})
	})
}

// TestGuardedInsertStatusFlags: an autocommit INSERT, which the proxy runs
// inside START TRANSACTION ... COMMIT, leaves the session outside a
// transaction, and the client is told so.
func TestGuardedInsertStatusFlags(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		l := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, l)
		mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('s', '2026-11', 1)")
		// (TiDB has no @@in_transaction: the visibility check below stands
		// for it there.)
		if eng != engTiDB {
			if got := connRows(t, c, "SELECT @@in_transaction"); got != "0;" {
				t.Fatalf("@@in_transaction after an autocommit INSERT = %s", got)
			}
		}
		// Visible to another session at once: it was committed.
		if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer = 's'"); n != "1" {
			t.Fatalf("%s rows visible", n)
		}
		// A failed guarded write in a transaction keeps the transaction.
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('t', '2026-11', 1)")
		if _, err := c.ExecContext(context.Background(), "INSERT INTO invoices (customer, period, amount) VALUES ('t', '2026-11', 1)"); errCode(err) != 1062 {
			t.Fatalf("want a duplicate key error, got %v", err)
		}
		mustExec(t, c, "ROLLBACK")
		if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer = 't'"); n != "0" {
			t.Fatalf("%s rows after ROLLBACK", n)
		}
	})
}

// TestGuardedWritesInPacketsAndDynamicSQL: a guarded write inside a
// multi-statement packet, prepared with SQL-level PREPARE, run by EXECUTE
// IMMEDIATE, or with RETURNING, is guarded like a plain one: it lands with
// a valid fence, and with a stale one changes nothing and is audited.
func TestGuardedWritesInPacketsAndDynamicSQL(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := newFencedEnv(t, envOptions{engine: eng, onStale: onStale})
				l := e.acquire(t, "invoice:acme", 10*time.Minute)
				stale := l
				stale.Token--
				ctx := context.Background()
				n := 0
				for _, tc := range []struct {
					name string
					sql  func(c string) string
					rows int // rows written with a valid fence
				}{
					{"multi-statement packet", func(c string) string {
						return "INSERT INTO invoices (customer, period, amount) VALUES ('" + c + "a', '2026-11', 1); " +
							"SELECT 1; INSERT INTO invoices (customer, period, amount) VALUES ('" + c + "b', '2026-11', COUNT(*) + 1)"
					}, 1},
					{"PREPARE and EXECUTE", func(c string) string {
						return "PREPARE s FROM 'INSERT INTO invoices (customer, period, amount) VALUES (''" + c + "'', ''2026-11'', 1)'; EXECUTE s"
					}, 1},
					{"EXECUTE IMMEDIATE", func(c string) string {
						return "EXECUTE IMMEDIATE 'INSERT INTO invoices (customer, period, amount) VALUES (''" + c + "'', ''2026-11'', 1)'"
					}, 1},
					{"RETURNING", func(c string) string {
						return "INSERT INTO invoices (customer, period, amount) VALUES ('" + c + "', '2026-11', 1) RETURNING id"
					}, 1},
				} {
					t.Run(tc.name, func(t *testing.T) {
						if tc.name == "EXECUTE IMMEDIATE" || tc.name == "RETURNING" {
							notOn(t, eng, "TiDB has no "+tc.name, engTiDB)
						}
						n++
						cust := fmt.Sprintf("c%d", n)
						count := func() string {
							return queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer LIKE ?", cust+"%")
						}
						c := e.session(t, "multiStatements=true")
						setFence(t, c, stale)
						audits := len(e.auditRecords(t))
						runAll(ctx, c, tc.sql(cust))
						if got := count(); got != "0" {
							t.Fatalf("stale fence: %s rows written", got)
						}
						if len(e.auditRecords(t)) <= audits {
							t.Fatal("stale fence: no audit record")
						}
						setFence(t, c, l)
						runAll(ctx, c, tc.sql(cust))
						if got := count(); got != fmt.Sprint(tc.rows) {
							t.Fatalf("valid fence: %s rows written, want %d", got, tc.rows)
						}
					})
				}
			})
		}
	})
}

// runAll runs a (multi-statement) text and reads every result, ignoring
// errors: the caller checks what the database holds afterwards.
func runAll(ctx context.Context, c *sql.Conn, q string) {
	rows, err := c.QueryContext(ctx, q)
	if err != nil {
		return
	}
	defer rows.Close()
	for {
		for rows.Next() {
		}
		if !rows.NextResultSet() {
			return
		}
	}
}

// TestGuardedReturningWireMatchesDirect: a guarded autocommit INSERT ...
// RETURNING, alone and in the middle of a multi-statement packet (which the
// proxy runs one statement at a time, inside a transaction of its own for
// the INSERT), reaches a raw client as the server's own answer would, byte
// for byte: no IN_TRANS from the proxy's transaction in the metadata EOF,
// and SERVER_MORE_RESULTS_EXISTS in every status of the packet's results
// but the last one (measured on MariaDB: 0x0a in the first result set's
// metadata EOF and terminator).
func TestGuardedReturningWireMatchesDirect(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	l := e.acquire(t, "invoice:wire", time.Minute)
	setVars := fmt.Sprintf("SET @fence_lease = '%s', @fence_owner = '%s', @fence_token = %d", l.Name, l.Owner, l.Token)
	for _, deprecateEOF := range []bool{false, true} {
		t.Run(fmt.Sprintf("deprecate_eof=%v", deprecateEOF), func(t *testing.T) {
			insert := func(customer string) string {
				return "INSERT INTO invoices (customer, period, amount) VALUES ('" + customer + "', '2026-11', 1) RETURNING period, amount"
			}
			steps := func(prefix string) []string {
				return []string{
					setVars,
					insert(prefix + "-alone"),
					"SELECT 1; " + insert(prefix+"-packet") + "; SELECT 2",
					"SELECT @@in_transaction",
				}
			}
			run := func(addr, prefix string) []wireResponse {
				t.Helper()
				w, err := dialWire(addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: e.db,
					DeprecateEOF: deprecateEOF, MultiStatements: true})
				if err != nil {
					t.Fatalf("connect %s: %v", addr, err)
				}
				defer w.Close()
				var out []wireResponse
				for _, q := range steps(prefix) {
					out = append(out, w.mustQuery(t, q))
				}
				return out
			}
			tag := fmt.Sprint(deprecateEOF)
			direct := run(e.srv.Addr, "d"+tag)
			proxied := run(e.proxy.Addr, "p"+tag)
			for i, q := range steps("") {
				if !responsesEqual(direct[i], proxied[i]) {
					t.Errorf("%s: responses differ\ndirect:\n%sproxy:\n%s", q, direct[i], proxied[i])
				}
			}
			if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer LIKE ?", "p"+tag+"-%"); n != "2" {
				t.Errorf("%s rows written through the proxy, want 2", n)
			}
			if !deprecateEOF {
				// The case the comparison is about: the direct answer's
				// metadata EOF of the INSERT alone says autocommit only.
				if p := direct[1].Packets[3].Payload; !bytes.Equal(p, []byte{0xfe, 0, 0, 2, 0}) {
					t.Errorf("direct metadata EOF %x, want fe00000200", p)
				}
			}
		})
	}
}
