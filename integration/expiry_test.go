package integration

import (
	"context"
	"testing"
	"time"
)

// A fenced write must not take effect after its lease's expiry by database
// time. The fence is checked when the write starts (the guard before a
// guarded write, the in-statement fence when its row is read); a write
// that then waits for a row lock runs later. Here the wait is made to
// outlast the lease: another transaction holds the row the write needs
// until the database says the lease has expired.

// expiryCase is one write that waits for row id of table (held by an
// uncommitted blocker) under a lease that expires meanwhile.
type expiryCase struct {
	name    string
	block   string // the blocker's statement (inside its transaction)
	write   string // the fenced write, through the proxy
	lease   string // the lease the write is fenced under
	inTx    bool   // the write runs inside the client's transaction
	landed  string // counts the write's rows afterwards (0: it did not land)
	engines []string
}

var expiryCases = []expiryCase{{
	name:   "guarded INSERT (autocommit) waits on a unique key",
	block:  "INSERT INTO invoices (customer, period, amount) VALUES ('blk', '2026-01', 1)",
	write:  "INSERT INTO invoices (customer, period, amount) VALUES ('blk', '2026-01', 2)",
	lease:  "invoice:expiry",
	landed: "SELECT COUNT(*) FROM invoices WHERE amount = 2",
}, {
	name:   "guarded INSERT in a transaction waits on a unique key",
	block:  "INSERT INTO invoices (customer, period, amount) VALUES ('blk', '2026-02', 1)",
	write:  "INSERT INTO invoices (customer, period, amount) VALUES ('blk', '2026-02', 3)",
	lease:  "invoice:expiry",
	inTx:   true,
	landed: "SELECT COUNT(*) FROM invoices WHERE amount = 3",
}, {
	name:   "fenced UPDATE (autocommit) waits on its row",
	block:  "UPDATE reconciliation_runs SET status = 'blk' WHERE id = 1",
	write:  "UPDATE reconciliation_runs SET status = 'late' WHERE id = 1",
	lease:  "admin:reconciliation",
	landed: "SELECT COUNT(*) FROM reconciliation_runs WHERE status = 'late'",
}, {
	name:   "fenced UPDATE in a transaction waits on its row",
	block:  "UPDATE reconciliation_runs SET status = 'blk' WHERE id = 1",
	write:  "UPDATE reconciliation_runs SET status = 'late-tx' WHERE id = 1",
	lease:  "admin:reconciliation",
	inTx:   true,
	landed: "SELECT COUNT(*) FROM reconciliation_runs WHERE status = 'late-tx'",
}, {
	name:   "fenced DELETE (autocommit) waits on its row",
	block:  "UPDATE reconciliation_runs SET status = 'blk' WHERE id = 2",
	write:  "DELETE FROM reconciliation_runs WHERE id = 2",
	lease:  "admin:reconciliation",
	landed: "SELECT 1 - COUNT(*) FROM reconciliation_runs WHERE id = 2",
}}

func TestNoWriteAfterExpiry(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'old'), (2, 'old')")
		landed := 0
		for _, tc := range expiryCases {
			t.Run(tc.name, func(t *testing.T) {
				s := e.session(t)
				mustExec(t, e.root, "UPDATE fenced_job_leases SET leased_until = SYSDATE(3) WHERE lease_name = ?", tc.lease)
				l := e.acquire(t, tc.lease, 1500*time.Millisecond)
				setFence(t, s, l)
				b, err := e.root.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					// Back to the pool without the transaction.
					b.ExecContext(ctx, "ROLLBACK")
					b.Close()
				}()
				mustExec(t, b, "BEGIN")
				mustExec(t, b, tc.block)
				if tc.inTx {
					mustExec(t, s, "BEGIN")
				}
				done := make(chan error, 1)
				var rows int64
				go func() {
					r, err := s.ExecContext(ctx, tc.write)
					if err == nil {
						rows, _ = r.RowsAffected()
					}
					done <- err
				}()
				awaitLockWait(t, e)
				e.awaitExpired(t, tc.lease)
				var at string
				b.QueryRowContext(ctx, "SELECT SYSDATE(3)").Scan(&at)
				mustExec(t, b, "ROLLBACK")
				werr := <-done
				if tc.inTx && werr == nil {
					_, werr = s.ExecContext(ctx, "COMMIT")
				} else if tc.inTx {
					s.ExecContext(ctx, "ROLLBACK")
				}
				e.sync(t)
				n := queryString(t, e.root, tc.landed)
				t.Logf("the blocker let go at %s, after the lease expired; the write: %d rows, %v; landed: %s", at, rows, werr, n)
				if n != "0" {
					landed++
					t.Errorf("the write took effect after its lease expired")
				}
			})
		}
		t.Logf("%d of %d writes took effect after their lease expired", landed, len(expiryCases))
	})
}
