package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Attacks on where the proxy splices the row-lease trap into a statement
// to prepare (rewrite.Trap.Trapped: the LAST occurrence of the plain
// per-row condition in the text the server prepared is replaced by the
// trapped one). The client's statement may end in a comment, which the
// proxy keeps after the spliced condition: a comment that repeats the
// plain condition byte for byte takes the trap, and the trapped variant T
// the proxy executes in the client's place then carries the plain
// condition only: it skips the rows of other leases, with no record.

// plainInvoiceCond is rowLeaseCond for invoice_rows under the session's
// lease variable, as the proxy writes it.
const plainInvoiceCond = "(CONVERT(CONCAT('invoice:', `customer_id`) USING utf8mb4) COLLATE utf8mb4_bin = @fence_lease " +
	"AND CHARSET(@fence_lease) <> 'binary' AND `customer_id` IS NOT NULL)"

var trapSpliceAttacks = []struct {
	name string
	q    string // prepared (COM_STMT_PREPARE), executed with args
	args []any
}{
	{"block comment repeating the plain condition",
		"UPDATE invoice_rows SET amount = amount + ? WHERE id >= 1 /* " + plainInvoiceCond + " */", []any{1}},
	{"dash comment repeating the plain condition",
		"UPDATE invoice_rows SET amount = amount + ? WHERE id >= 1 -- " + plainInvoiceCond, []any{1}},
	{"hash comment repeating the plain condition",
		"UPDATE invoice_rows SET amount = amount + ? WHERE id >= 1 # " + plainInvoiceCond, []any{1}},
	{"delete, block comment repeating the plain condition",
		"DELETE FROM invoice_rows WHERE amount > 0 /* " + plainInvoiceCond + " */", nil},
	{"no WHERE, block comment repeating the plain condition",
		"UPDATE invoice_rows SET amount = amount + ? /* " + plainInvoiceCond + " */", []any{1}},
	{"limit, block comment repeating the plain condition",
		"DELETE FROM invoice_rows WHERE amount > 0 LIMIT 10 /* " + plainInvoiceCond + " */", nil},
	{"WHERE placeholder, block comment repeating the plain condition",
		"UPDATE invoice_rows SET amount = amount + 1 WHERE id >= ? /* " + plainInvoiceCond + " */", []any{1}},
}

// TestRowLeaseTrapSpliceAttacks: each prepared write meets beta's rows 3
// and 4; it must be refused, rejected (ERR 1644) or recorded as
// row_lease_mismatch, and beta's rows must not change.
func TestRowLeaseTrapSpliceAttacks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "zero_rows")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		for _, a := range trapSpliceAttacks {
			t.Run(a.name, func(t *testing.T) {
				reseed(t, e)
				mismatches := countReason(e.auditRecords(t), audit.RowLeaseMismatch)
				c := e.session(t)
				setFence(t, c, acme)
				ctx := context.Background()
				st, err := c.PrepareContext(ctx, a.q)
				var me *mysql.MySQLError
				if err != nil {
					if errors.As(err, &me) && me.Number == 1148 {
						t.Logf("prepare refused: %v", err)
						return
					}
					t.Fatalf("prepare %s: %v", a.q, err)
				}
				defer st.Close()
				r, err := st.ExecContext(ctx, a.args...)
				var n int64
				if err == nil {
					n, _ = r.RowsAffected()
				}
				got := e.invoiceRows(t)
				if got == "" || !contains(got, "3:beta:30") || !contains(got, "4:beta:40") {
					t.Fatalf("%s: ROWS OF ANOTHER LEASE CHANGED: %s", a.q, got)
				}
				recorded := countReason(e.auditRecords(t), audit.RowLeaseMismatch) > mismatches
				switch {
				case errors.As(err, &me) && (me.Number == 1148 || me.Number == 1644):
					t.Logf("%v", err)
				case err != nil:
					t.Fatalf("%s: %v", a.q, err)
				case !recorded:
					t.Fatalf("%s: it met beta's rows 3 and 4 and ran (%d rows, now %s) with no refusal and no row_lease_mismatch "+
						"record: the trap was spliced into the comment", a.q, n, got)
				default:
					t.Logf("%d rows, recorded; rows %s", n, got)
				}
			})
		}
	})
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestRowLeaseTrapUntrapSpliceAttack: the text-protocol counterpart.
// Under zero_rows a fired trap sends the write again with the plain
// condition in place of the LAST occurrence of the trapped one
// (Trap.Untrapped); a trailing comment repeating the trapped condition
// takes that place instead, so the write goes again still trapped: it
// must fire again and be answered as a rejection, never skip beta's rows
// silently.
func TestRowLeaseTrapUntrapSpliceAttack(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := rowLeaseEnv(t, eng, "zero_rows")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		trapped := "(" + plainInvoiceCond + " OR ((id >= 1) AND EXP(72101729 + COALESCE(0 * CHAR_LENGTH(`customer_id`), 0)) < 0))"
		for _, q := range []string{
			"UPDATE invoice_rows SET amount = amount + 1 WHERE id >= 1 /* " + trapped + " */",
			"UPDATE invoice_rows SET amount = amount + 1 WHERE id >= 1 -- " + trapped,
			"UPDATE invoice_rows SET amount = amount + 1 WHERE id >= 1 /* " + plainInvoiceCond + " */",
		} {
			reseed(t, e)
			mismatches := countReason(e.auditRecords(t), audit.RowLeaseMismatch)
			c := e.session(t)
			setFence(t, c, acme)
			n, err := execAffected(c, q)
			got := e.invoiceRows(t)
			if !contains(got, "3:beta:30") || !contains(got, "4:beta:40") {
				t.Fatalf("%s: ROWS OF ANOTHER LEASE CHANGED: %s", q, got)
			}
			var me *mysql.MySQLError
			recorded := countReason(e.auditRecords(t), audit.RowLeaseMismatch) > mismatches
			if !recorded && !(errors.As(err, &me) && me.Number == 1148) {
				t.Fatalf("%s: met beta's rows, %d rows, %v, and no row_lease_mismatch record", q, n, err)
			}
			t.Logf("%s: %d rows, %v, recorded %v", q, n, err, recorded)
		}
	})
}
