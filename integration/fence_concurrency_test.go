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
// (UPDATE with its in-statement fence, guarded INSERT) in an open
// transaction and a takeover, at every isolation level, with a snapshot
// taken before the takeover (except under SERIALIZABLE, where that read
// locks the lease row).
func TestStaleWritesInsideTransactions(t *testing.T) {
	// The client chooses the isolation level: the fence must hold at each.
	for _, iso := range []string{"READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"} {
		t.Run(iso, func(t *testing.T) {
			e := newFencedEnv(t, envOptions{})
			installEventLog(t, e)
			ctx := context.Background()
			const name = "invoice:acme"
			mustExec(t, e.root, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 0, 0)")

			// UPDATE carries the fence in its text; INSERT goes out verbatim
			// after the proxy's guard (a locking read of the lease row).
			for _, w := range []struct{ name, q string }{
				{"update", "UPDATE invoices SET amount = %d, token = @fence_token WHERE customer = 'acme'"},
				{"insert odku", "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', %d, @fence_token) " +
					"ON DUPLICATE KEY UPDATE amount = VALUES(amount), token = VALUES(token)"},
				{"insert", "INSERT INTO invoices (customer, period, amount, token) VALUES (CONCAT('c', UUID_SHORT()), '2026-10', %d, @fence_token)"},
			} {
				t.Run(w.name+": write first: the takeover waits for the writer's commit", func(t *testing.T) {
					a := e.session(t)
					if w.name != "update" {
						e.awaitExpired(t, name) // the previous form's takeover
					}
					// Long enough that A's write comes before its expiry on a
					// loaded machine; the takeover then waits for that expiry.
					la := e.acquire(t, name, 1500*time.Millisecond)
					setFence(t, a, la)
					mustExec(t, a, "SET TRANSACTION ISOLATION LEVEL "+iso)
					mustExec(t, a, "BEGIN")
					if r := mustExec(t, a, fmt.Sprintf(w.q, 1)); rowsAffected(r) == 0 {
						t.Fatal("valid fenced write changed nothing")
					}
					e.awaitExpired(t, name)
					takeover := make(chan error, 1)
					go func() {
						_, err := e.store.Acquire(ctx, name, time.Second)
						takeover <- err
					}()
					// The takeover must block on A's share lock: wait until the
					// server is executing its UPDATE, and check it has not
					// finished. (With triggers on the table the wait does not
					// show as LOCK WAIT in innodb_trx, so look at the
					// processlist.)
					eventually(t, 5*time.Second, "the takeover's UPDATE to be running", func() bool {
						select {
						case err := <-takeover:
							t.Fatalf("takeover finished while the fenced transaction was open: %v", err)
						default:
						}
						return queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.processlist "+
							"WHERE command = 'Query' AND info LIKE 'UPDATE %fenced_job_leases%'") != "0"
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
				})
				t.Run(w.name+": takeover first: the old snapshot does not leak into the write", func(t *testing.T) {
					a := e.session(t)
					e.awaitExpired(t, name)
					la := e.acquire(t, name, 1500*time.Millisecond)
					setFence(t, a, la)
					mustExec(t, a, "SET TRANSACTION ISOLATION LEVEL "+iso)
					mustExec(t, a, "BEGIN")
					// Take a snapshot that still shows A's lease as current.
					// (SERIALIZABLE reads lock: the takeover would wait
					// for A, which is the write-first case.)
					if iso != "SERIALIZABLE" {
						var tok uint64
						if err := a.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", la.Name).Scan(&tok); err != nil || tok != la.Token {
							t.Fatalf("snapshot read: %d %v", tok, err)
						}
					}
					e.awaitExpired(t, la.Name)
					if _, err := e.store.Acquire(ctx, la.Name, time.Second); err != nil {
						t.Fatal(err)
					}
					if r := mustExec(t, a, fmt.Sprintf(w.q, 2)); rowsAffected(r) != 0 {
						t.Fatal("stale write inside a transaction changed a row")
					}
					mustExec(t, a, "COMMIT")
				})
			}
			checkEventLog(t, e)
		})
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
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var rejected, committed atomic.Int64
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
	t.Logf("%d takeovers, %d committed fenced writes, %d writes rejected as stale", takeovers, writes, rejected.Load())
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
