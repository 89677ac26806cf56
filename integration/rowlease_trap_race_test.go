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

// TestRowLeaseTrapConcurrentChange: another transaction holds beta's
// rows locked while the unpinned write of a worker holding invoice:acme
// runs, and commits once that write waits for it. The server may read
// those rows before it waits (MariaDB's UPDATE under READ COMMITTED reads
// the last committed version; TiDB reads before it locks, at both
// levels), and the trap fired on them. Measured before the confirming
// read: where beta's rows leave the WHERE, the write was rejected in 6 of
// the 12 engine, isolation and write combinations (MariaDB and Galera
// UPDATE under READ COMMITTED, TiDB all four), where directly it changes
// acme's 2 rows. Now:
//   - beta's rows leave the WHERE (closed): the write has its direct
//     effect (acme's 2 rows), with no record, under both on_stale
//     settings, in autocommit and in the client's transaction, and as a
//     prepared statement, with and without a placeholder in its WHERE
//     (the proxy prepares the read and binds the execution's value);
//   - beta's rows still match: the trap stands after the wait, a
//     row_lease_mismatch rejection (1644 under error), as text and
//     prepared with a placeholder.
func TestRowLeaseTrapConcurrentChange(t *testing.T) {
	type race struct {
		name     string
		change   string // beta's transaction
		leaves   bool   // beta's rows no longer match the write's WHERE
		onStale  string
		inTx     bool // the write runs in the client's transaction
		prepared bool
		param    bool // prepared, its WHERE's value a placeholder
	}
	const closeBeta = "UPDATE invoice_rows SET status = 'closed' WHERE customer_id = 'beta'"
	races := []race{
		{name: "leaves", change: closeBeta, leaves: true, onStale: "error"},
		{name: "leaves, zero_rows", change: closeBeta, leaves: true, onStale: "zero_rows"},
		{name: "leaves, in a transaction", change: closeBeta, leaves: true, onStale: "error", inTx: true},
		{name: "leaves, prepared", change: closeBeta, leaves: true, onStale: "error", prepared: true},
		{name: "leaves, prepared with a placeholder", change: closeBeta, leaves: true, onStale: "error", prepared: true, param: true},
		{name: "stays", change: "UPDATE invoice_rows SET amount = amount + 5 WHERE customer_id = 'beta'", onStale: "error"},
		{name: "stays, prepared with a placeholder", change: "UPDATE invoice_rows SET amount = amount + 5 WHERE customer_id = 'beta'",
			onStale: "error", prepared: true, param: true},
	}
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("the account deployment runs them")
		}
		for _, iso := range []string{"READ COMMITTED", "REPEATABLE READ"} {
			for _, write := range []string{"UPDATE invoice_rows SET amount = amount + 1", "DELETE FROM invoice_rows"} {
				for _, r := range races {
					t.Run(iso+"/"+strings.Fields(write)[0]+"/"+r.name, func(t *testing.T) {
						e := rowLeaseEnv(t, eng, r.onStale)
						acme := e.acquire(t, "invoice:acme", time.Minute)
						c := e.session(t)
						setFence(t, c, acme)
						mustExec(t, c, "SET SESSION TRANSACTION ISOLATION LEVEL "+iso)
						before := e.invoiceRows(t)
						beta := dbtest0(t, e)
						mustExec(t, beta, "START TRANSACTION")
						mustExec(t, beta, r.change)
						if r.inTx {
							mustExec(t, c, "START TRANSACTION")
						}
						q := write + " WHERE status = 'open'"
						var args []any
						if r.param {
							q, args = write+" WHERE status = ?", []any{"open"}
						}
						done := make(chan error, 1)
						var n int64
						go func() {
							var res sql.Result
							var err error
							if r.prepared {
								var st *sql.Stmt
								if st, err = c.PrepareContext(context.Background(), q); err == nil {
									res, err = st.Exec(args...)
									st.Close()
								}
							} else {
								res, err = c.ExecContext(context.Background(), q)
							}
							if err == nil {
								n, _ = res.RowsAffected()
							}
							done <- err
						}()
						// beta commits once the write waits for its locks.
						committed := false
						var err error
					wait:
						for {
							select {
							case err = <-done:
								break wait
							case <-time.After(10 * time.Millisecond):
								if !committed && lockWaits(t, e, eng) > 0 {
									mustExec(t, beta, "COMMIT")
									committed = true
								}
							}
						}
						if !committed {
							t.Fatalf("%s: answered (%d rows, %v) without waiting for beta's transaction", q, n, err)
						}
						if r.inTx {
							mustExec(t, c, "COMMIT")
						}
						mismatch := countReason(e.auditRecords(t), audit.RowLeaseMismatch)
						if !r.leaves {
							var me *mysql.MySQLError
							if !errors.As(err, &me) || me.Number != 1644 || mismatch != 1 {
								t.Fatalf("%s: %v and %d records, want ERR 1644 and 1 row_lease_mismatch record", q, err, mismatch)
							}
							if got, want := e.invoiceRows(t), strings.ReplaceAll(strings.ReplaceAll(before, "beta:30", "beta:35"), "beta:40", "beta:45"); got != want {
								t.Fatalf("rows %s, want %s", got, want)
							}
							return
						}
						if err != nil || n != 2 || mismatch != 0 {
							t.Fatalf("%s: %d rows, %v, %d row_lease_mismatch records; want 2 rows and no record", q, n, err, mismatch)
						}
						want := "1:acme:11 2:acme:21 3:beta:30 4:beta:40"
						if strings.HasPrefix(write, "DELETE") {
							want = "3:beta:30 4:beta:40"
						}
						if got := e.invoiceRows(t); got != want {
							t.Fatalf("rows %s, want %s", got, want)
						}
					})
				}
			}
		}
	})
}

// lockWaits is the number of transactions waiting for a lock on e's
// server.
func lockWaits(t *testing.T, e *fencedEnv, eng string) int {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
	if eng == engTiDB {
		q = "SELECT COUNT(*) FROM information_schema.DATA_LOCK_WAITS"
	}
	var n int
	if err := e.root.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
