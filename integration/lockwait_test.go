package integration

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// TestLeaseCheckLockWait: the lease check after a 0-row fenced write waits
// for a lock on the lease row that another session (a takeover) took after
// the write, and gets 1205 (lock wait timeout). The write, autocommit,
// matched no row with a fence that held, and held its share lock on the
// lease row while it ran; GET_LOCK on a third session keeps it running
// until the takeover's FOR UPDATE is queued behind that lock, so the
// takeover gets the row exactly between the write and the check. The
// record must name the lease (here from @fence_lease) and say what the
// engine answered; the client gets the write's own 0 rows (zero_rows) or
// the 1205 (error), and keeps its connection.
func TestLeaseCheckLockWait(t *testing.T) {
	for _, onStale := range []string{"zero_rows", "error"} {
		t.Run(onStale, func(t *testing.T) {
			e := newFencedEnv(t, envOptions{onStale: onStale})
			ctx := context.Background()
			const ln = "invoice:acme"
			mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 0, 0)")
			l := e.forceLease(t, ln)
			a := e.session(t)
			setFence(t, a, l)
			mustExec(t, a, "SET SESSION innodb_lock_wait_timeout = 1")
			gate := directConn(t, e)
			gateName := e.db + ":gate"
			mustQueryOne(t, gate, "SELECT GET_LOCK(?, 0)", gateName)
			holder := directConn(t, e)
			mustExec(t, holder, "BEGIN")
			t.Cleanup(func() { holder.ExecContext(context.Background(), "ROLLBACK") })
			audits := len(e.auditRecords(t))

			// GET_LOCK(...) = 2 is never true: the row matches the fence but
			// not the WHERE, so the write changes nothing.
			write := make(chan error, 1)
			var affected int64 = -1
			go func() {
				r, err := a.ExecContext(ctx, "UPDATE invoices SET amount = 1 WHERE customer = 'acme' AND period = '2026-10' AND GET_LOCK(?, 30) = 2", gateName)
				if err == nil {
					affected, _ = r.RowsAffected()
				}
				write <- err
			}()
			eventually(t, 10*time.Second, "the write to wait for the gate", func() bool {
				return queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.processlist WHERE state = 'User lock' AND info LIKE 'UPDATE invoices%'") == "1"
			})
			took := make(chan error, 1)
			go func() {
				_, err := holder.ExecContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE", ln)
				took <- err
			}()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("trx: %s", tableDump(t, e.root, "information_schema.innodb_trx"))
					t.Logf("processlist: %s", tableDump(t, e.root, "information_schema.processlist"))
				}
			})
			eventually(t, 10*time.Second, "the takeover to wait for the write's share lock", func() bool {
				// information_schema.innodb_trx does not always list a
				// transaction whose first statement waits (measured);
				// the server's count of current row lock waits does.
				return queryString(t, e.root, "SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'INNODB_ROW_LOCK_CURRENT_WAITS'") == "1" &&
					queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE 'SELECT fence_token FROM fenced_job_leases%FOR UPDATE'") == "1"
			})
			mustQueryOne(t, gate, "SELECT RELEASE_LOCK(?)", gateName)
			if err := <-took; err != nil {
				t.Fatalf("takeover's lock: %v", err)
			}
			err := <-write
			switch {
			case onStale == "error" && errCode(err) != 1205:
				t.Fatalf("write: %v (%d rows), want the lease check's 1205", err, affected)
			case onStale == "zero_rows" && (err != nil || affected != 0):
				t.Fatalf("write: %v (%d rows), want its own 0 rows", err, affected)
			}
			var one int
			if err := a.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("the session after the lock wait: %v", err)
			}
			recs := e.auditRecords(t)[audits:]
			if len(recs) != 1 {
				t.Fatalf("%d audit records, want 1: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.Reason != audit.Conflict || r.Lease != ln || r.Table != e.db+".invoices" || r.Outcome != onStale ||
				r.PresentedToken == nil || *r.PresentedToken != l.Token || r.PresentedOwner == "" {
				t.Fatalf("audit record %+v, want reason %s, lease %s, outcome %s, the presented token %d and owner", r, audit.Conflict, ln, onStale, l.Token)
			}
			if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE period = '2026-10'"); got != "0.00" {
				t.Fatalf("amount %s: the write changed the row", got)
			}
		})
	}
}

// directConn is one admin connection straight to the proxy's backend.
func directConn(t *testing.T, e *fencedEnv) *sql.Conn {
	t.Helper()
	c, err := e.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mustQueryOne runs a query on c that must return "1".
func mustQueryOne(t *testing.T, c *sql.Conn, q string, args ...any) {
	t.Helper()
	var s string
	if err := c.QueryRowContext(context.Background(), q, args...).Scan(&s); err != nil || s != "1" {
		t.Fatalf("%s: %q, %v", q, s, err)
	}
}

// TestGuardLockWait: on Galera and TiDB every fenced write is guarded: the
// proxy's guard reads (TiDB) or bumps (Galera) the lease row in a
// transaction before the write goes out. When another session on the
// writer's node holds the lease row FOR UPDATE, the guard waits and times
// out with 1205: the client gets the 1205, the write is never sent, the
// connection stays open, and nothing is audited (the guard decided
// nothing; no lease_missing). A lock held on another Galera node does not
// block the guard: row locks are local to a node.
func TestGuardLockWait(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "writes carry their fence in their text; TestLeaseCheckLockWait", engMariaDB)
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := newFencedEnv(t, envOptions{engine: eng, onStale: onStale})
				ctx := context.Background()
				const ln = "invoice:acme"
				mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 0, 0)")
				l := e.forceLease(t, ln)
				a := e.session(t)
				setFence(t, a, l)
				mustExec(t, a, "SET SESSION innodb_lock_wait_timeout = 1")
				holder := directConn(t, e)
				mustExec(t, holder, "BEGIN")
				var tok string
				if err := holder.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE", ln).Scan(&tok); err != nil {
					t.Fatal(err)
				}
				audits := len(e.auditRecords(t))
				before := tableDump(t, e.root, "invoices")
				for _, q := range []string{
					"UPDATE invoices SET amount = 1 WHERE customer = 'acme' AND period = '2026-10'",
					"UPDATE invoices SET amount = 1 WHERE id = 999",
					"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-11', 1)",
				} {
					start := time.Now()
					_, err := a.ExecContext(ctx, q)
					if errCode(err) != 1205 {
						t.Fatalf("%s with the lease row locked: %v after %v, want 1205", q, err, time.Since(start))
					}
					t.Logf("%s: 1205 after %v", q, time.Since(start).Round(time.Millisecond))
					var one int
					if err := a.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
						t.Fatalf("the session after the lock wait: %v", err)
					}
				}
				mustExec(t, holder, "ROLLBACK")
				if after := tableDump(t, e.root, "invoices"); after != before {
					t.Fatalf("writes that got 1205 changed the table:\n%s\nwas\n%s", after, before)
				}
				if recs := e.auditRecords(t)[audits:]; len(recs) != 0 {
					t.Fatalf("audit records %+v, want none", recs)
				}
				// The lease holds: with the lock gone the write goes through.
				if r := mustExec(t, a, "UPDATE invoices SET amount = 2 WHERE customer = 'acme' AND period = '2026-10'"); rowsAffected(r) != 1 {
					t.Fatal("valid fenced write after the lock wait changed nothing")
				}
			})
		}
	})
}
