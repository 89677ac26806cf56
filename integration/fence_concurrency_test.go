package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// The safety property (DESIGN.md): once a takeover with token t+1 has
// committed, no write fenced with token <= t commits afterwards.
//
// To observe commit order, triggers append to one event log inside the
// writing transactions: a takeover logs (takeover, t+1) while holding the
// lease row's X lock, a fenced write logs (write, t) while holding its S
// lock on the same row (taken by the fence). The two locks conflict, so the
// log's id order is the order in which they were granted; a committed write
// event with token t after a committed takeover event with token > t is a
// stale write that got through.

func installEventLog(t *testing.T, e *fencedEnv) {
	t.Helper()
	for _, q := range []string{
		"CREATE TABLE fence_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, kind VARCHAR(10) NOT NULL, lease VARCHAR(191) NOT NULL, token BIGINT UNSIGNED NOT NULL, worker INT NULL)",
		// The triggers are installed directly: through the proxy, triggers on
		// protected tables are refused.
		`CREATE TRIGGER lease_takeover AFTER UPDATE ON fenced_job_leases FOR EACH ROW
		   IF NEW.fence_token <> OLD.fence_token THEN
		     INSERT INTO fence_events (kind, lease, token) VALUES ('takeover', NEW.lease_name, NEW.fence_token);
		   END IF`,
		`CREATE TRIGGER lease_first AFTER INSERT ON fenced_job_leases FOR EACH ROW
		   INSERT INTO fence_events (kind, lease, token) VALUES ('takeover', NEW.lease_name, NEW.fence_token)`,
		`CREATE TRIGGER invoice_update AFTER UPDATE ON invoices FOR EACH ROW
		   INSERT INTO fence_events (kind, lease, token, worker) VALUES ('write', CONCAT('invoice:', NEW.customer), NEW.token, NEW.amount)`,
		`CREATE TRIGGER invoice_insert AFTER INSERT ON invoices FOR EACH ROW
		   INSERT INTO fence_events (kind, lease, token, worker) VALUES ('write', CONCAT('invoice:', NEW.customer), NEW.token, NEW.amount)`,
	} {
		mustExec(t, e.root, q)
	}
}

// checkEventLog fails the test if a write committed with a token older than
// a takeover that committed before it, and returns the number of writes and
// takeovers seen.
func checkEventLog(t *testing.T, e *fencedEnv) (writes, takeovers int) {
	t.Helper()
	rows, err := e.root.Query("SELECT id, kind, lease, token FROM fence_events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	latest := map[string]uint64{} // lease -> highest takeover token committed so far
	for rows.Next() {
		var id, token uint64
		var kind, name string
		if err := rows.Scan(&id, &kind, &name, &token); err != nil {
			t.Fatal(err)
		}
		switch kind {
		case "takeover":
			takeovers++
			if token > latest[name] {
				latest[name] = token
			}
		case "write":
			writes++
			if token < latest[name] {
				t.Errorf("event %d: a write fenced with token %d of %s committed after the takeover to token %d", id, token, name, latest[name])
			}
		}
	}
	return writes, takeovers
}

// TestStaleWritesInsideTransactions plays the two orders of a fenced write
// (UPDATE, guarded INSERT) in an open transaction and a takeover, on every
// engine and at every isolation level the engine has (Galera: the two the
// issue names; TiDB has only READ COMMITTED and REPEATABLE READ, in
// pessimistic and optimistic transactions), with a snapshot taken before
// the takeover (except under SERIALIZABLE, where that read locks the lease
// row). On Galera the takeover runs on node 2, the writer on node 1.
//
// Write first: where the writer's lock on the lease row is seen by the
// takeover (MariaDB, TiDB pessimistic) the takeover waits for the writer's
// commit; where it is not (Galera: row locks are local to a node; TiDB
// optimistic) the takeover commits and the writer's COMMIT must fail with
// the engine's conflict error (1213, 9007), audited as a conflict, its
// write not landed. Takeover first: the stale write changes nothing and is
// audited as stale_token, or (TiDB optimistic, whose guard reads the
// transaction's snapshot) its COMMIT fails with the conflict.
func TestStaleWritesInsideTransactions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		// The client chooses the isolation level: the fence must hold at each.
		levels := []string{"READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"}
		modes := []string{""}
		switch eng {
		case engGalera:
			levels = levels[1:3]
		case engTiDB:
			levels = levels[1:3]
			modes = []string{"PESSIMISTIC", "OPTIMISTIC"}
		}
		for _, mode := range modes {
			for _, iso := range levels {
				name := iso
				if mode != "" {
					name = strings.ToLower(mode) + "/" + iso
				}
				t.Run(name, func(t *testing.T) {
					if mode == "OPTIMISTIC" && iso == "READ COMMITTED" {
						t.Skip("TiDB: READ COMMITTED applies to pessimistic transactions only")
					}
					staleInsideTransactions(t, eng, mode, iso)
				})
			}
		}
	})
}

func staleInsideTransactions(t *testing.T, eng, mode, iso string) {
	e := newFencedEnv(t, envOptions{engine: eng})
	if eng == engMariaDB {
		installEventLog(t, e)
	}
	ctx := context.Background()
	const name = "invoice:acme"
	// Rows d1 and d2 are for the DELETEs.
	mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 0, 0), ('acme', 'd1', 0, 0), ('acme', 'd2', 0, 0)")
	// The writer's lock on the lease row holds a takeover back.
	takeoverWaits := eng == engMariaDB || mode == "PESSIMISTIC"
	conflictCode := map[string]int{engGalera: 1213, engTiDB: 9007}[eng]
	begin := func(t *testing.T, a *sql.Conn) {
		t.Helper()
		mustExec(t, a, "SET TRANSACTION ISOLATION LEVEL "+iso)
		mustExec(t, a, strings.TrimSpace("BEGIN "+mode))
	}
	// newAudits returns the audit records with reason since the first n.
	newAudits := func(t *testing.T, n int, reason string) int {
		t.Helper()
		k := 0
		for _, r := range e.auditRecords(t)[n:] {
			if r.Reason == reason && r.Table == e.db+".invoices" {
				k++
			}
		}
		return k
	}

	// UPDATE carries the fence in its text on MariaDB; everything else goes
	// out verbatim after the proxy's guard.
	for _, w := range []struct{ name, q string }{
		{"update", "UPDATE invoices SET amount = %d, token = @fence_token WHERE customer = 'acme' AND period = '2026-10'"},
		{"insert odku", "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', %d, @fence_token) " +
			"ON DUPLICATE KEY UPDATE amount = VALUES(amount), token = VALUES(token)"},
		{"insert", "INSERT INTO invoices (customer, period, amount, token) VALUES (CONCAT('c', @fence_token), '2026-10', %d, @fence_token)"},
		{"delete", "DELETE FROM invoices WHERE customer = 'acme' AND period = 'd%d'"},
	} {
		t.Run(w.name+": write first", func(t *testing.T) {
			a := e.session(t)
			la := e.forceLease(t, name)
			setFence(t, a, la)
			begin(t, a)
			if r := mustExec(t, a, fmt.Sprintf(w.q, 1)); rowsAffected(r) == 0 {
				t.Fatal("valid fenced write changed nothing")
			}
			takeover := make(chan error, 1)
			go func() { takeover <- e.takeoverErr(ctx, name) }()
			if !takeoverWaits {
				before := tableDump(t, e.root, "invoices")
				audits := len(e.auditRecords(t))
				if err := <-takeover; err != nil {
					t.Fatalf("takeover while the fenced transaction is open: %v", err)
				}
				e.sync(t)
				_, err := a.ExecContext(ctx, "COMMIT")
				if errCode(err) != conflictCode {
					t.Fatalf("COMMIT after the takeover: %v, want the engine's error %d", err, conflictCode)
				}
				if after := tableDump(t, e.root, "invoices"); after != before {
					t.Fatalf("the stale transaction changed the table:\n%s\nwas\n%s", after, before)
				}
				if n := newAudits(t, audits, audit.Conflict); n != 1 {
					t.Fatalf("%d conflict audit records, want 1", n)
				}
				return
			}
			// The takeover must block on A's lock: wait until the server is
			// executing its UPDATE, and check it has not finished.
			eventually(t, 10*time.Second, "the takeover to wait for the writer's lock", func() bool {
				select {
				case err := <-takeover:
					t.Fatalf("takeover finished while the fenced transaction was open: %v", err)
				default:
				}
				// (With triggers on the table the wait does not show as LOCK
				// WAIT in innodb_trx, so look at the processlist.)
				return queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.processlist "+
					"WHERE db = ? AND info LIKE 'UPDATE %fenced_job_leases%'", e.db) != "0"
			})
			select {
			case err := <-takeover:
				t.Fatalf("takeover finished while the fenced transaction was open: %v", err)
			default:
			}
			mustExec(t, a, "COMMIT")
			if err := <-takeover; err != nil {
				t.Fatalf("takeover after commit: %v", err)
			}
			if w.name != "delete" {
				if n := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE amount = 1 AND token = ?", la.Token); n != "1" {
					t.Fatalf("the valid write committed before the takeover is not in the table (%s rows)", n)
				}
			}
		})
		t.Run(w.name+": takeover first: the old snapshot does not leak into the write", func(t *testing.T) {
			a := e.session(t)
			la := e.forceLease(t, name)
			setFence(t, a, la)
			begin(t, a)
			// Take a snapshot that still shows A's lease as current.
			// (SERIALIZABLE reads lock: the takeover would wait for A,
			// which is the write-first case.)
			if iso != "SERIALIZABLE" {
				var tok uint64
				if err := a.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", la.Name).Scan(&tok); err != nil || tok != la.Token {
					t.Fatalf("snapshot read: %d %v", tok, err)
				}
			}
			e.takeover(t, la)
			before := tableDump(t, e.root, "invoices")
			audits := len(e.auditRecords(t))
			r, werr := a.ExecContext(ctx, fmt.Sprintf(w.q, 2))
			if werr != nil {
				t.Fatalf("stale write: %v", werr)
			}
			_, cerr := a.ExecContext(ctx, "COMMIT")
			switch {
			case mode != "OPTIMISTIC":
				if rowsAffected(r) != 0 || cerr != nil {
					t.Fatalf("stale write inside a transaction: %d rows, COMMIT: %v", rowsAffected(r), cerr)
				}
				if n := newAudits(t, audits, audit.StaleToken); n != 1 {
					t.Fatalf("%d stale_token audit records, want 1", n)
				}
			case rowsAffected(r) == 0:
				// The lease row the guard locked was changed since the
				// transaction began, so COMMIT may fail too.
				if cerr != nil && errCode(cerr) != conflictCode {
					t.Fatalf("COMMIT: %v", cerr)
				}
				if n := newAudits(t, audits, audit.StaleToken); n != 1 {
					t.Fatalf("%d stale_token audit records, want 1", n)
				}
			default:
				if errCode(cerr) != conflictCode {
					t.Fatalf("the stale write passed its guard and COMMIT said %v, want the engine's %d", cerr, conflictCode)
				}
				if n := newAudits(t, audits, audit.Conflict); n != 1 {
					t.Fatalf("%d conflict audit records, want 1", n)
				}
			}
			if after := tableDump(t, e.root, "invoices"); after != before {
				t.Fatalf("the stale transaction changed the table:\n%s\nwas\n%s", after, before)
			}
		})
	}
	if eng == engMariaDB {
		checkEventLog(t, e)
	}
}

func rowsAffected(r sql.Result) int64 {
	n, _ := r.RowsAffected()
	return n
}

// TestRandomizedTakeovers runs workers that acquire one lease with a short
// TTL, write inside transactions at random isolation levels with random
// pauses (some longer than the TTL), and take the lease over from each
// other; the event log must show no stale write committed after a takeover.
func TestRandomizedTakeovers(t *testing.T) {
	if testing.Short() {
		t.Skip("randomized concurrency test")
	}
	e := newFencedEnv(t, envOptions{})
	installEventLog(t, e)
	mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 0, 0)")
	const (
		name    = "invoice:acme"
		workers = 6
		ttl     = 150 * time.Millisecond
		runFor  = 6 * time.Second
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var rejected, committed, acquired atomic.Int64
	// The run lasts runFor and then, on loaded cores, until it has
	// exercised the race as much as the check below needs (at most 10
	// times runFor): a fixed time made the counts, not the fencing, fail.
	ctx, cancel := context.WithTimeout(context.Background(), 10*runFor)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(runFor):
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for acquired.Load() < 10 || committed.Load() < 10 || rejected.Load() < 5 {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		cancel()
	}()
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			db := appDB(t, e.proxy, e.db)
			c, err := db.Conn(context.Background())
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			// Deadlocks and lock waits are part of this workload: keep the
			// waits short so the run stays within its time.
			if _, err := c.ExecContext(context.Background(), "SET SESSION innodb_lock_wait_timeout = 2"); err != nil {
				errc <- err
				return
			}
			for ctx.Err() == nil {
				l, err := e.store.Acquire(context.Background(), name, ttl)
				if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrLost) {
					time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				acquired.Add(1)
				if err := workerRound(c, l, w, rng, ttl, &rejected, &committed); err != nil {
					errc <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	writes, takeovers := checkEventLog(t, e)
	t.Logf("%d takeovers, %d committed fenced writes, %d writes rejected as stale in %v", takeovers, writes, rejected.Load(), time.Since(start).Round(time.Millisecond))
	if takeovers < 10 || writes < 10 || rejected.Load() < 5 {
		t.Fatalf("the run did not exercise the race: %d takeovers, %d writes, %d rejected", takeovers, writes, rejected.Load())
	}
}

// workerRound is one worker's turn with a lease: a transaction of a few
// fenced writes with pauses.
func workerRound(c *sql.Conn, l lease.Lease, w int, rng *rand.Rand, ttl time.Duration, rejected, committed *atomic.Int64) error {
	ctx := context.Background()
	pause := func() {
		d := time.Duration(rng.IntN(int(ttl/time.Millisecond)/5)) * time.Millisecond
		if rng.IntN(8) == 0 {
			d += ttl // now and then, sleep through the lease
		}
		time.Sleep(d)
	}
	if _, err := c.ExecContext(ctx, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token); err != nil {
		return err
	}
	if rng.IntN(4) == 0 {
		// An autocommit INSERT: the proxy wraps guard and write in a
		// transaction of its own.
		pause()
		q := fmt.Sprintf("INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', %d, @fence_token) "+
			"ON DUPLICATE KEY UPDATE amount = VALUES(amount), token = VALUES(token)", w)
		r, err := c.ExecContext(ctx, q)
		switch {
		case err != nil && isLockError(err):
			return nil
		case err != nil:
			return err
		case rowsAffected(r) == 0:
			rejected.Add(1)
		default:
			committed.Add(1)
		}
		return nil
	}
	iso := []string{"READ COMMITTED", "REPEATABLE READ"}[rng.IntN(2)]
	if _, err := c.ExecContext(ctx, "SET TRANSACTION ISOLATION LEVEL "+iso); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	if rng.IntN(2) == 0 { // an early snapshot at REPEATABLE READ
		var n int
		if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM fenced_job_leases").Scan(&n); err != nil {
			return err
		}
	}
	for i := 0; i < 1+rng.IntN(3); i++ {
		pause()
		var q string
		switch rng.IntN(3) {
		case 0:
			q = fmt.Sprintf("UPDATE invoices SET amount = %d, token = @fence_token WHERE customer = 'acme'", w)
		case 1:
			q = fmt.Sprintf("INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', %d, @fence_token) ON DUPLICATE KEY UPDATE amount = VALUES(amount), token = VALUES(token)", w)
		default:
			q = fmt.Sprintf("INSERT IGNORE INTO invoices (customer, period, amount, token) VALUES ('acme', 'p%06d', %d, @fence_token)", rng.IntN(1000000), w)
		}
		r, err := c.ExecContext(ctx, q)
		if err != nil {
			if isLockError(err) {
				c.ExecContext(ctx, "ROLLBACK")
				return nil
			}
			return err
		}
		if rowsAffected(r) == 0 {
			rejected.Add(1)
		}
	}
	pause()
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		if isLockError(err) {
			return nil
		}
		return err
	}
	committed.Add(1)
	return nil
}

// isLockError: deadlocks and lock wait timeouts are legitimate outcomes of
// this workload; the transaction is rolled back and nothing commits.
func isLockError(err error) bool {
	return strings.Contains(err.Error(), "Error 1213") || strings.Contains(err.Error(), "Error 1205")
}
