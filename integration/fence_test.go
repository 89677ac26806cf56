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

// TestReconciliationStory is the seed story: worker A holds
// admin:reconciliation at token 7, pauses past its expiry, worker B takes
// over at token 8 and completes the run, and A's late completion changes
// nothing, is audited, and leaves B's result intact.
func TestReconciliationStory(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := newFencedEnv(t, envOptions{engine: eng, onStale: onStale})
				ctx := context.Background()
				const name = "admin:reconciliation"
				e.setToken(t, name, 6)

				a := e.session(t)
				la := e.acquire(t, name, time.Minute)
				if la.Token != 7 {
					t.Fatalf("A got token %d, want 7", la.Token)
				}
				setFence(t, a, la)
				mustExec(t, a, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'running')")

				e.expire(t, name) // A pauses: GC, a slow API, a frozen VM

				b := e.session(t)
				lb := e.acquire(t, name, time.Minute)
				if lb.Token != 8 {
					t.Fatalf("B got token %d, want 8", lb.Token)
				}
				setFence(t, b, lb)
				r := mustExec(t, b, "UPDATE reconciliation_runs SET status = 'done', result = 'B: 1200 rows matched', token = @fence_token WHERE id = 1")
				if n, _ := r.RowsAffected(); n != 1 {
					t.Fatalf("B's completion changed %d rows", n)
				}

				// A wakes up and completes its (stale) run.
				res, err := a.ExecContext(ctx, "UPDATE reconciliation_runs SET status = 'done', result = 'A: stale totals', token = @fence_token WHERE id = 1")
				switch onStale {
				case "zero_rows":
					if err != nil {
						t.Fatalf("A's late write: %v", err)
					}
					if n, _ := res.RowsAffected(); n != 0 {
						t.Fatalf("A's late write changed %d rows, want 0", n)
					}
				case "error":
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1644 || string(me.SQLState[:]) != "45000" ||
						!strings.Contains(me.Message, name) || !strings.Contains(me.Message, e.db+".reconciliation_runs") {
						t.Fatalf("A's late write: want ERR 1644 (45000) naming lease and table, got %v", err)
					}
				}
				if got := queryString(t, e.root, "SELECT CONCAT(status, '/', result, '/', token) FROM reconciliation_runs WHERE id = 1"); got != "done/B: 1200 rows matched/8" {
					t.Fatalf("B's result was overwritten: %s", got)
				}

				recs := e.auditRecords(t)
				if len(recs) != 1 {
					t.Fatalf("want 1 audit record, got %d: %+v", len(recs), recs)
				}
				rec := recs[0]
				if rec.Reason != audit.StaleToken || rec.Lease != name || rec.Table != e.db+".reconciliation_runs" ||
					rec.PresentedToken == nil || *rec.PresentedToken != 7 || rec.CurrentToken == nil || *rec.CurrentToken != 8 ||
					rec.Mode != "enforce" || rec.User == "" || rec.Schema != e.db || rec.PresentedOwner == "" {
					t.Fatalf("audit record: %+v", rec)
				}
				if strings.Contains(rec.PresentedOwner, la.Owner) || len(rec.PresentedOwner) > 16 {
					t.Fatalf("audit record carries the owner token: %q", rec.PresentedOwner)
				}
				if strings.Contains(rec.Digest, "stale totals") || !strings.Contains(strings.ToLower(rec.Digest), "update") {
					t.Fatalf("audit digest must keep the statement's shape without literals: %q", rec.Digest)
				}
				if n := testutilCounter(t, e.proxy.Reg, "fenceproxy_stale_writes_rejected_total"); n != 1 {
					t.Fatalf("fenceproxy_stale_writes_rejected_total = %v, want 1", n)
				}
			})
		}
	})
}

// TestRejectionReasons checks the classification of a 0-row fenced write.
func TestRejectionReasons(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 10)")
		update := "UPDATE invoices SET amount = amount + 1 WHERE customer = 'acme'"

		// UPDATE is checked after it changed 0 rows; INSERT by its guard first.
		for _, w := range []struct{ name, q string }{
			{"update", update},
			{"insert", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-11', 1)"},
		} {
			t.Run(w.name+": no_fence", func(t *testing.T) {
				c := e.session(t)
				expectRejected(t, e, c, w.q, audit.NoFence)
			})
			t.Run(w.name+": lease_missing", func(t *testing.T) {
				c := e.session(t)
				mustExec(t, c, "SET @fence_lease = 'never-acquired', @fence_owner = 'x', @fence_token = 1")
				expectRejected(t, e, c, w.q, audit.LeaseMissing)
			})
			t.Run(w.name+": expired", func(t *testing.T) {
				c := e.session(t)
				l := e.acquire(t, "invoice:acme:expired"+w.name, 300*time.Millisecond)
				setFence(t, c, l)
				e.awaitExpired(t, l.Name)
				expectRejected(t, e, c, w.q, audit.Expired)
			})
			t.Run(w.name+": owner_mismatch", func(t *testing.T) {
				c := e.session(t)
				l := e.acquire(t, "invoice:acme:owner"+w.name, time.Minute)
				l.Owner = "OWNER-" + strings.ToUpper(l.Owner) // binary compare: case and padding matter
				setFence(t, c, l)
				expectRejected(t, e, c, w.q, audit.OwnerMismatch)
			})
			t.Run(w.name+": stale_token", func(t *testing.T) {
				c := e.session(t)
				l := e.acquire(t, "invoice:acme:stale"+w.name, 300*time.Millisecond)
				setFence(t, c, l)
				e.awaitExpired(t, l.Name)
				e.acquire(t, l.Name, time.Minute)
				expectRejected(t, e, c, w.q, audit.StaleToken)
			})
		}
		t.Run("valid fence, nothing matched: not a rejection", func(t *testing.T) {
			c := e.session(t)
			l := e.acquire(t, "invoice:acme:valid", time.Minute)
			setFence(t, c, l)
			before := len(e.auditRecords(t))
			r, err := c.ExecContext(ctx, "UPDATE invoices SET amount = 1 WHERE customer = 'nobody'")
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := r.RowsAffected(); n != 0 {
				t.Fatalf("changed %d rows", n)
			}
			if got := len(e.auditRecords(t)); got != before {
				t.Fatalf("a write under a valid fence was audited as rejected")
			}
			r = mustExec(t, c, update)
			if n, _ := r.RowsAffected(); n != 1 {
				t.Fatalf("valid fenced write changed %d rows, want 1", n)
			}
		})
	})
}

// expectRejected runs q on c and requires 0 changed rows, an unchanged
// invoices table, and a new audit record with reason.
func expectRejected(t *testing.T, e *fencedEnv, c *sql.Conn, q, reason string) {
	t.Helper()
	before := tableDump(t, e.root, "invoices")
	n := len(e.auditRecords(t))
	r, err := c.ExecContext(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if k, _ := r.RowsAffected(); k != 0 {
		t.Fatalf("stale write changed %d rows", k)
	}
	if after := tableDump(t, e.root, "invoices"); after != before {
		t.Fatalf("stale write changed the table:\nbefore %s\nafter %s", before, after)
	}
	recs := e.auditRecords(t)
	if len(recs) != n+1 {
		t.Fatalf("want one new audit record, have %d new", len(recs)-n)
	}
	if got := recs[len(recs)-1].Reason; got != reason {
		t.Fatalf("audit reason %q, want %q (%+v)", got, reason, recs[len(recs)-1])
	}
}

// TestUnknownSQLModeIsLearned: sql_mode set from an expression is unknown to
// the proxy; a statement whose reading depends on it makes the proxy ask the
// session, then fence it as the server reads it.
func TestUnknownSQLModeIsLearned(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
		c := e.session(t)
		mustExec(t, c, "SET SESSION sql_mode = (SELECT CONCAT(@@sql_mode, ',ANSI_QUOTES'))")
		l := e.acquire(t, "invoice:acme", time.Minute)
		setFence(t, c, l)
		// Under ANSI_QUOTES "invoices" is the table, "amount" a column.
		if r := mustExec(t, c, `UPDATE "invoices" SET "amount" = 11 WHERE id = 1`); rowsAffected(r) != 1 {
			t.Fatal("fenced write under a valid lease changed nothing")
		}
		mustExec(t, c, "SET @fence_token = @fence_token + 100")
		if r := mustExec(t, c, `UPDATE "invoices" SET "amount" = 12 WHERE id = 1`); rowsAffected(r) != 0 {
			t.Fatal("stale write under ANSI_QUOTES got through")
		}
		if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1"); got != "11.00" {
			t.Fatalf("amount %s", got)
		}
	})
}

// TestRejectedWriteLeavesRowCountZero: the proxy's lease check after a
// 0-row fenced write must not show through ROW_COUNT().
func TestRejectedWriteLeavesRowCountZero(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		c := e.session(t)
		mustExec(t, c, "UPDATE invoices SET amount = 1") // no fence context: rejected
		if got := queryStringConn(t, c, "SELECT ROW_COUNT()"); got != "0" {
			t.Fatalf("ROW_COUNT() after a rejected write = %s, want 0", got)
		}
		if n := len(e.auditRecords(t)); n != 1 {
			t.Fatalf("%d audit records", n)
		}
	})
}

func queryStringConn(t *testing.T, c *sql.Conn, q string) string {
	t.Helper()
	var s sql.NullString
	if err := c.QueryRowContext(context.Background(), q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s.String
}

// TestReloadProtectsPreparedStatements: a reload that protects a table must
// not let statements prepared before it write that table unfenced.
func TestReloadProtectsPreparedStatements(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'n')")
		c := e.session(t)
		stmt, err := c.PrepareContext(ctx, "UPDATE notes SET body = ? WHERE id = 1")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		read, err := c.PrepareContext(ctx, "SELECT body FROM notes WHERE id = ?")
		if err != nil {
			t.Fatal(err)
		}
		defer read.Close()
		mustExec(t, c, "PREPARE s FROM 'UPDATE notes SET body = ''sql-level'' WHERE id = 1'")
		if r, err := stmt.ExecContext(ctx, "before"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("unprotected write before the reload: %v", err)
		}

		// A reload that changes nothing about fencing leaves them alone.
		audit := "audit:\n  file: " + e.audits + "\n"
		base := "tables:\n  - name: " + e.db + ".reconciliation_runs\n    lease: admin:reconciliation\n  - name: " + e.db + ".invoices\n"
		e.proxy.reload(t, "log_level: debug\n"+audit+base)
		if r, err := stmt.ExecContext(ctx, "same policy"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("write after a reload that does not touch fencing: %v", err)
		}

		// Now notes is protected.
		e.proxy.reload(t, audit+base+"  - name: "+e.db+".notes\n")
		if eng == engMariaDB {
			if _, err := stmt.ExecContext(ctx, "stale prepare"); err == nil || !strings.Contains(err.Error(), "prepare it again") {
				t.Fatalf("execute of an unfenced statement after notes became protected: %v", err)
			}
		} else {
			// Every protected write goes verbatim after a guard here, so the
			// statement the server holds is the one to guard: no fence, no
			// write.
			if r, err := stmt.ExecContext(ctx, "stale prepare"); err != nil || rowsAffected(r) != 0 {
				t.Fatalf("execute of a statement prepared before notes became protected, without a fence: %v, %d rows", err, rowsAffected(r))
			}
		}
		if _, err := c.ExecContext(ctx, "EXECUTE s"); err == nil || !strings.Contains(err.Error(), "run PREPARE s again") {
			t.Fatalf("EXECUTE of an unfenced SQL-level statement: %v", err)
		}
		var body string
		if err := read.QueryRowContext(ctx, 1).Scan(&body); err != nil || body != "same policy" {
			t.Fatalf("a prepared read must keep working: %q %v", body, err)
		}
		// Prepared again, it is fenced: no fence context, no write.
		again, err := c.PrepareContext(ctx, "UPDATE notes SET body = ? WHERE id = 1")
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		if r, err := again.ExecContext(ctx, "unfenced"); err != nil || rowsAffected(r) != 0 {
			t.Fatalf("re-prepared statement without a fence: %v, %d rows", err, rowsAffected(r))
		}
		if got := queryString(t, e.root, "SELECT body FROM notes WHERE id = 1"); got != "same policy" {
			t.Fatalf("notes.body = %q", got)
		}
	})
}
