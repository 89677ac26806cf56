package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Attacks that try to silence the row-lease trap: make the server read
// the trap's EXP overflow as a warning (EXP then NULL, the row skipped)
// or otherwise skip a row of another lease that an unpinned WHERE
// matches, with no record. Each case is statements on one session of a
// worker holding invoice:acme; the last one's WHERE matches beta's row 3
// or 4. It must be refused (ERR 1148), rejected (ERR 1644) or recorded as
// row_lease_mismatch, and beta's rows must not change.
var trapSilenceAttacks = []struct {
	name   string
	stmts  []string
	skipOn []string
}{
	{"update ignore", []string{"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"delete ignore", []string{"DELETE IGNORE FROM invoice_rows WHERE id >= 2"}, nil},
	{"update ignore, sql_mode empty", []string{"SET SESSION sql_mode = ''", "UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"delete ignore, sql_mode empty", []string{"SET SESSION sql_mode = ''", "DELETE IGNORE FROM invoice_rows WHERE id >= 2"}, nil},
	{"update, sql_mode empty", []string{"SET SESSION sql_mode = ''", "UPDATE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"update ignore, sql_mode ALLOW_INVALID_DATES", []string{"SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
		"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"set statement sql_mode for update ignore", []string{"SET STATEMENT sql_mode = '' FOR UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"},
		[]string{engTiDB}},
	{"update ignore, ordered without limit", []string{"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1 ORDER BY id DESC"}, nil},
	{"update ignore, limit", []string{"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1 LIMIT 3"}, nil},
	{"update ignore, in a transaction", []string{"START TRANSACTION", "UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"update ignore, autocommit off", []string{"SET autocommit = 0", "UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, nil},
	{"update, the WHERE a string compared as a number", []string{"SET SESSION sql_mode = ''",
		"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE customer_id = 0 OR id >= 1"}, nil},
	{"update, tidb_enable_noop_functions", []string{"SET tidb_enable_noop_functions = 1", "UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"},
		[]string{engMariaDB, engGalera}},
	{"update, optimistic transaction", []string{"SET tidb_txn_mode = 'optimistic'", "BEGIN",
		"UPDATE IGNORE invoice_rows SET amount = amount + 1 WHERE id >= 1"}, []string{engMariaDB, engGalera}},
}

func TestRowLeaseTrapSilenceAttacks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "zero_rows")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		for _, a := range trapSilenceAttacks {
			t.Run(a.name, func(t *testing.T) {
				notOn(t, eng, "syntax", a.skipOn...)
				reseed(t, e)
				mismatches := countReason(e.auditRecords(t), audit.RowLeaseMismatch)
				c := e.session(t)
				setFence(t, c, acme)
				ctx := context.Background()
				var err error
				var n int64
				for i, q := range a.stmts {
					r, qerr := c.ExecContext(ctx, q)
					if i < len(a.stmts)-1 {
						if qerr != nil {
							t.Fatalf("%s: %v", q, qerr)
						}
						continue
					}
					err = qerr
					if err == nil {
						n, _ = r.RowsAffected()
					}
				}
				if a.stmts[0] == "START TRANSACTION" || a.stmts[0] == "SET autocommit = 0" || strings.Contains(strings.Join(a.stmts, ";"), "BEGIN") {
					if _, cerr := c.ExecContext(ctx, "COMMIT"); cerr != nil {
						t.Logf("COMMIT: %v", cerr)
					}
				}
				got := e.invoiceRows(t)
				if !strings.Contains(got, "3:beta:30") || !strings.Contains(got, "4:beta:40") {
					t.Fatalf("ROWS OF ANOTHER LEASE CHANGED: %s", got)
				}
				recorded := countReason(e.auditRecords(t), audit.RowLeaseMismatch) > mismatches
				var me *mysql.MySQLError
				last := a.stmts[len(a.stmts)-1]
				switch {
				case errors.As(err, &me) && (me.Number == 1148 || me.Number == 1644):
					t.Logf("%s: %v", last, err)
				case err != nil:
					t.Logf("%s: %v (rows %s)", last, err, got)
				case !recorded:
					t.Fatalf("%s: it met beta's rows and ran (%d rows, now %s) with no refusal and no row_lease_mismatch record", last, n, got)
				default:
					t.Logf("%s: %d rows, recorded; rows %s", last, n, got)
				}
			})
		}
	})
}
