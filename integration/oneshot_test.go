package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The proxy's own statements must not change what the session means. A
// one-shot transaction characteristic (SET TRANSACTION without GLOBAL or
// SESSION) applies to the session's next transaction; the server forgets
// it when a transaction ends, or after an autocommit statement that used
// a transactional engine. An autocommit write the server refuses before it
// opens a table (1792 in a READ ONLY transaction) leaves it pending.
// The proxy wraps an autocommit guarded write in a transaction of its own,
// whose START TRANSACTION takes the characteristic: before, the second of
// two autocommit INSERTs after SET TRANSACTION READ ONLY inserted through
// the proxy, where directly each one fails with 1792.
//
// Each sequence runs directly and through the proxy (catalog on, a valid
// fence), and every statement must get the same answer both ways.
// (ROW_COUNT() after a guarded autocommit write is the proxy's COMMIT's or
// ROLLBACK's 0, as docs/fencing.md lists: not compared.)
func TestOneShotTransactionCharacteristics(t *testing.T) {
	type step struct {
		q string
		// read: a query whose first value is compared
		read bool
		// engines: where the step runs (nil: every engine). On Galera
		// the guard is an UPDATE of the lease row, which the READ ONLY
		// transaction refuses (1792, the client's answer), and the
		// guard's locking read that went with it leaves
		// @@warning_count and @@error_count 0 (docs/sessions.md).
		engines []string
		// args: run with COM_STMT_PREPARE and COM_STMT_EXECUTE
		args []any
	}
	seqs := []struct {
		name    string
		engines []string
		steps   []step
	}{{
		name: "read only, two inserts",
		steps: []step{
			{q: "SET TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ro1', '2026-01', 1)"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ro2', '2026-01', 1)"},
			{q: "SELECT CONCAT_WS(',', @@warning_count, @@error_count)", read: true, engines: []string{engMariaDB, engTiDB}},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ro3', '2026-01', 1)"},
			{q: "SELECT COUNT(*) FROM invoices", read: true},
		},
	}, {
		name: "read only, a read of a transactional table, then an insert",
		steps: []step{
			{q: "SET TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('rr1', '2026-01', 1)"},
			{q: "SELECT COUNT(*) FROM notes", read: true},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('rr2', '2026-01', 1)"},
			{q: "SELECT COUNT(*) FROM invoices WHERE customer LIKE 'rr%'", read: true},
		},
	}, {
		name: "read only with an isolation level, then a transaction of the client's",
		steps: []step{
			{q: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ri1', '2026-01', 1)"},
			{q: "START TRANSACTION"},
			{q: "INSERT INTO notes (body) VALUES ('ri')"},
			{q: "ROLLBACK"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ri2', '2026-01', 1)"},
		},
	}, {
		name: "read only, then an update and a delete",
		steps: []step{
			{q: "SET TRANSACTION READ ONLY"},
			{q: "UPDATE invoices SET amount = 2 WHERE customer = 'seed'"},
			{q: "DELETE FROM invoices WHERE customer = 'seed'"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ru1', '2026-01', 1)"},
			{q: "SELECT COUNT(*) FROM invoices WHERE customer = 'seed' AND amount = 1", read: true},
		},
	}, {
		name: "read only, an insert that fails on a duplicate key",
		steps: []step{
			{q: "SET TRANSACTION READ WRITE"},
			{q: "SET TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('seed', '2026-01', 1)"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('rd1', '2026-01', 1)"},
		},
	}, {
		name: "read write after read only",
		steps: []step{
			{q: "SET TRANSACTION READ ONLY"},
			{q: "SET TRANSACTION READ WRITE"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('rw1', '2026-01', 1)"},
			{q: "SELECT COUNT(*) FROM invoices WHERE customer = 'rw1'", read: true},
		},
	}, {
		name: "read only under autocommit=0",
		steps: []step{
			{q: "SET autocommit = 0"},
			{q: "SET TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ra1', '2026-01', 1)"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ra2', '2026-01', 1)"},
			{q: "COMMIT"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('ra3', '2026-01', 1)"},
			{q: "COMMIT"},
			{q: "SET autocommit = 1"},
			{q: "SELECT COUNT(*) FROM invoices WHERE customer LIKE 'ra%'", read: true},
		},
	}, {
		name: "read only, prepared inserts (binary protocol)",
		steps: []step{
			{q: "SET TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-01', 1)", args: []any{"rp1"}},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-01', 1)", args: []any{"rp2"}},
			{q: "REPLACE INTO invoices (customer, period, amount) VALUES (?, '2026-01', 1)", args: []any{"rp3"}},
			{q: "SELECT COUNT(*) FROM invoices", read: true},
		},
	}, {
		name: "read only, inserts through PREPARE and EXECUTE",
		steps: []step{
			{q: "PREPARE ins FROM 'INSERT INTO invoices (customer, period, amount) VALUES (''rs'', ''2026-02'', 1)'"},
			{q: "SET TRANSACTION READ ONLY"},
			{q: "EXECUTE ins"},
			{q: "EXECUTE ins"},
			{q: "EXECUTE IMMEDIATE 'INSERT INTO invoices (customer, period, amount) VALUES (''ri'', ''2026-03'', 1)'", engines: []string{engMariaDB, engGalera}},
			{q: "DEALLOCATE PREPARE ins"},
			{q: "SELECT COUNT(*) FROM invoices", read: true},
		},
	}, {
		name: "session read only",
		steps: []step{
			{q: "SET SESSION TRANSACTION READ ONLY"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('sr1', '2026-01', 1)"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('sr2', '2026-01', 1)"},
			{q: "SET SESSION TRANSACTION READ WRITE"},
			{q: "INSERT INTO invoices (customer, period, amount) VALUES ('sr3', '2026-01', 1)"},
		},
	}}
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true})
		l := e.acquire(t, "oneshot", time.Minute)
		for _, sq := range seqs {
			t.Run(sq.name, func(t *testing.T) {
				if sq.engines != nil && !containsString(sq.engines, eng) {
					t.Skipf("only on %v", sq.engines)
				}
				run := func(c *sql.Conn, token uint64) []string {
					ctx := context.Background()
					mustExec(t, e.root, "DELETE FROM invoices")
					mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('seed', '2026-01', 1, ?)", l.Token)
					e.sync(t)
					mustExec(t, c, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, token)
					var out []string
					for _, st := range sq.steps {
						if st.engines != nil && !containsString(st.engines, eng) {
							continue
						}
						if st.read {
							var v string
							err := c.QueryRowContext(ctx, st.q).Scan(&v)
							out = append(out, fmt.Sprintf("%s -> %s %v", st.q, v, answerOf(err)))
							continue
						}
						r, err := c.ExecContext(ctx, st.q, st.args...)
						n := int64(-1)
						if err == nil {
							n, _ = r.RowsAffected()
						}
						out = append(out, fmt.Sprintf("%s -> %d %v", st.q, n, answerOf(err)))
					}
					c.ExecContext(ctx, "ROLLBACK")
					c.ExecContext(ctx, "SET SESSION TRANSACTION READ WRITE")
					return out
				}
				dc, err := directDB(t, e.srv, e.db).Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer dc.Close()
				direct := run(dc, l.Token)
				proxied := run(e.session(t), l.Token)
				for i := range direct {
					t.Logf("direct:  %s", direct[i])
					if direct[i] != proxied[i] {
						t.Errorf("through the proxy: %s", proxied[i])
					}
				}
				// A stale fence: the sequence changes no protected row.
				var want string
				c := e.session(t)
				stale := run(c, l.Token-1)
				e.sync(t)
				want = "seed 1.00"
				if got := queryString(t, e.root, "SELECT COALESCE(GROUP_CONCAT(CONCAT(customer, ' ', amount) ORDER BY id), '') FROM invoices"); got != want {
					t.Errorf("with a stale fence the protected table holds %q, want %q (answers %q)", got, want, stale)
				}
			})
		}
	})
}

// answerOf is "ok" or "ERR n".
func answerOf(err error) string {
	if err == nil {
		return "ok"
	}
	if n := errNumber(err); n != 0 {
		return fmt.Sprintf("ERR %d", n)
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
