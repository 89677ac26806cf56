package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Issue 8: the fence cannot be moved by the statement it guards, lease rows
// cannot be locked by clients, and fenced writes work under LOCK TABLES.

// takeover makes l stale the way a second worker's acquire does: a new
// owner and the next fence token, committed (on Galera on node 2).
func (e *fencedEnv) takeover(t *testing.T, l lease.Lease) {
	t.Helper()
	if err := e.takeoverErr(context.Background(), l.Name); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
}

// takeoverErr is takeover without the test (for a goroutine), and without
// waiting for the proxy's backend to apply it.
func (e *fencedEnv) takeoverErr(ctx context.Context, name string) error {
	_, err := e.other.ExecContext(ctx, "UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'worker-B', "+
		"leased_until = SYSDATE(3) + INTERVAL 1 HOUR WHERE lease_name = ?", name)
	return err
}

// forceLease gives lease name to a new owner at the next token for an
// hour, whoever holds it (on Galera on node 2), as an acquire after its
// expiry would, without waiting for the expiry.
func (e *fencedEnv) forceLease(t *testing.T, name string) lease.Lease {
	t.Helper()
	l := lease.Lease{Name: name, Owner: lease.NewOwner()}
	mustExec(t, e.other, "INSERT INTO fenced_job_leases (lease_name, owner_token, fence_token, leased_until) VALUES (?, ?, 1, SYSDATE(3) + INTERVAL 1 HOUR) "+
		"ON DUPLICATE KEY UPDATE owner_token = VALUES(owner_token), fence_token = fence_token + 1, leased_until = VALUES(leased_until)", name, l.Owner)
	if err := e.other.QueryRow("SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", name).Scan(&l.Token); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	return l
}

// expectRefusal requires that err is the proxy's refusal (ERR 1148) and
// that its message says each of the given words.
func expectRefusal(t *testing.T, err error, words ...string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1148 {
		t.Fatalf("want fenceproxy's refusal (ERR 1148), got %v", err)
	}
	for _, w := range words {
		if !strings.Contains(me.Message, w) {
			t.Fatalf("refusal does not say %q: %s", w, me.Message)
		}
	}
}

// TestFenceVariableAssignmentRefused is item 4 of issue 8: a stale session
// that assigns the fence variables from the lease row inside its write.
// Directly the statement would pass its own fence; through the proxy it is
// refused in every protocol, and setting the variables in a statement of
// their own still works.
func TestFenceVariableAssignmentRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
		l := e.acquire(t, "invoice:acme", time.Minute)
		e.takeover(t, l)
		steal := "UPDATE invoices SET amount = 0 WHERE id = 1 AND " +
			"(@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) AND " +
			"(@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) IS NOT NULL"

		// The in-statement shape (MariaDB's; on Galera refused by
		// certification only later), run directly: the assignment happens
		// before the fence reads the variables, so the stale write lands.
		// (In a transaction rolled back: this only shows why the refusal
		// matters.) On TiDB the proxy's guard reads the variables in a
		// statement of its own, and TiDB has no LOCK IN SHARE MODE; with FOR
		// UPDATE the repro was measured not to land there (0 rows).
		if eng != engTiDB {
			direct, err := e.root.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			mustExec(t, direct, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token)
			mustExec(t, direct, "BEGIN")
			fenced := steal + " AND EXISTS (SELECT 1 FROM fenced_job_leases AS fence_l WHERE fence_l.lease_name = @fence_lease " +
				"AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) " +
				"LOCK IN SHARE MODE)"
			if n := rowsAffected(mustExec(t, direct, fenced)); n != 1 {
				t.Fatalf("the repro no longer lands directly (%d rows): the refusal is untested", n)
			}
			mustExec(t, direct, "ROLLBACK")
		}

		want := tableDump(t, e.root, "invoices")
		for _, q := range []string{
			steal,
			"UPDATE invoices SET amount = 0 WHERE id = 1 AND (@FENCE_TOKEN := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) AND (@`fence_owner` := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) IS NOT NULL",
			"UPDATE invoices SET amount = 0 WHERE id = 1 AND (@'fence_t\\oken' := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) AND (@\"fence_owner\" := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) IS NOT NULL",
			"UPDATE invoices SET amount = 0 WHERE id = 1 AND @fence_token /*!:= (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme') */",
			"SELECT 1; " + steal,
			"PREPARE s FROM '" + strings.ReplaceAll(steal, "'", "''") + "'",
			"EXECUTE IMMEDIATE '" + strings.ReplaceAll(steal, "'", "''") + "'",
			"DELETE FROM invoices WHERE (@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) AND (@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) IS NOT NULL",
			"INSERT INTO invoices (customer, period, amount) SELECT 'x', '2026-12', (@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')) + LENGTH(@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme'))",
		} {
			t.Run(q, func(t *testing.T) {
				c := e.session(t, "multiStatements=true")
				setFence(t, c, l)
				_, err := c.ExecContext(ctx, q)
				expectRefusal(t, err, "assigns the fence variable", "in a statement of their own")
				if got := tableDump(t, e.root, "invoices"); got != want {
					t.Fatalf("changed the table:\nwant %s\ngot  %s", want, got)
				}
			})
		}
		t.Run("binary protocol", func(t *testing.T) {
			c := e.session(t)
			setFence(t, c, l)
			_, err := c.PrepareContext(ctx, "UPDATE invoices SET amount = ? WHERE id = 1 AND "+
				"(@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?)) AND "+
				"(@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = ?)) IS NOT NULL")
			expectRefusal(t, err, "assigns the fence variable")
		})
		t.Run("valid: variables set in their own statement", func(t *testing.T) {
			c := e.session(t, "multiStatements=true")
			setFence(t, c, l)
			// Stale: nothing changes.
			if n := rowsAffected(mustExec(t, c, "UPDATE invoices SET amount = 1 WHERE id = 1")); n != 0 {
				t.Fatalf("stale write changed %d rows", n)
			}
			// The new holder's values, set the way the contract says.
			cur, err := e.store.Get(ctx, l.Name)
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, c, "SET @fence_owner = 'worker-B'")
			mustExec(t, c, "SET @fence_token = ?", cur.Token)
			if n := rowsAffected(mustExec(t, c, "UPDATE invoices SET amount = (@n := 2) WHERE id = 1")); n != 1 {
				t.Fatalf("valid write changed %d rows, want 1", n)
			}
		})
	})
}

// TestLeaseRowLocksRefused is item 10 of issue 8: a session that locks a
// lease row through the proxy. The first subtest shows, directly, what such
// a lock does to the holder's fenced write through the proxy.
func TestLeaseRowLocksRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
		l := e.acquire(t, "invoice:acme", time.Minute)
		holder := e.session(t)
		setFence(t, holder, l)

		t.Run("a direct FOR UPDATE stalls the holder", func(t *testing.T) {
			d, err := e.root.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			mustExec(t, d, "BEGIN")
			var tok uint64
			if err := d.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE", l.Name).Scan(&tok); err != nil {
				t.Fatal(err)
			}
			mustExec(t, holder, "SET SESSION innodb_lock_wait_timeout = 1")
			_, err = holder.ExecContext(ctx, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1205 {
				t.Fatalf("want a lock wait timeout (1205) while the lease row is locked, got %v", err)
			}
			mustExec(t, d, "ROLLBACK")
		})

		want := tableDump(t, e.root, "notes")
		for _, q := range []string{
			"SELECT * FROM fenced_job_leases FOR UPDATE",
			"SELECT * FROM fenced_job_leases WHERE lease_name = 'invoice:acme' FOR UPDATE NOWAIT",
			"SELECT * FROM fenced_job_leases FOR UPDATE SKIP LOCKED",
			"SELECT * FROM `" + e.db + "`.`FENCED_JOB_LEASES` LOCK IN SHARE MODE",
			"select 1 from fenced_job_leases lock in share mode nowait",
			"SELECT * FROM notes WHERE id IN (SELECT fence_token FROM fenced_job_leases FOR UPDATE)",
			"SELECT * FROM fenced_job_leases /*!FOR UPDATE*/",
			"INSERT INTO notes (body) SELECT lease_name FROM fenced_job_leases",
			"UPDATE notes JOIN fenced_job_leases l ON l.lease_name = 'invoice:acme' SET notes.body = l.lease_name",
			"DELETE FROM notes WHERE id IN (SELECT fence_token FROM fenced_job_leases)",
			"CREATE TABLE lease_copy AS SELECT * FROM fenced_job_leases",
			"SET @t = (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'invoice:acme')",
			"LOCK TABLES fenced_job_leases READ",
			"LOCK TABLES invoices WRITE, fenced_job_leases AS fence_l READ",
			"FLUSH TABLES fenced_job_leases WITH READ LOCK",
		} {
			t.Run(q, func(t *testing.T) {
				c := e.session(t)
				if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
				_, err := c.ExecContext(ctx, q)
				if eng == engGalera && strings.HasPrefix(q, "LOCK TABLES invoices") {
					// Refused first for locking a protected table on Galera.
					expectRefusal(t, err, e.db+".invoices", "LOCK TABLES")
				} else {
					expectRefusal(t, err, e.db+".fenced_job_leases")
				}
				// Nothing of it reached the server: the holder's write does not
				// wait (it completes within the lock wait timeout of 1 s).
				if n := rowsAffected(mustExec(t, holder, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")); n != 1 {
					t.Fatalf("holder's fenced write changed %d rows", n)
				}
				if got := tableDump(t, e.root, "notes"); got != want {
					t.Fatalf("notes changed: %s", got)
				}
				mustExec(t, c, "ROLLBACK")
			})
		}
		t.Run("binary protocol", func(t *testing.T) {
			c := e.session(t)
			_, err := c.PrepareContext(ctx, "SELECT * FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE")
			expectRefusal(t, err, "locks rows of a lease table")
		})

		t.Run("plain select stays allowed and does not block", func(t *testing.T) {
			c := e.session(t)
			mustExec(t, c, "BEGIN")
			var name string
			var token uint64
			if err := c.QueryRowContext(ctx, "SELECT lease_name, fence_token FROM fenced_job_leases WHERE lease_name = ?", l.Name).Scan(&name, &token); err != nil {
				t.Fatal(err)
			}
			if token != l.Token {
				t.Fatalf("read token %d, want %d", token, l.Token)
			}
			for _, q := range []string{"SHOW CREATE TABLE fenced_job_leases", "DESCRIBE fenced_job_leases", "EXPLAIN SELECT * FROM fenced_job_leases"} {
				rows, err := c.QueryContext(ctx, q)
				if err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				rows.Close()
			}
			// The reader's transaction stays open; the holder's fenced write
			// completes (a lock would make it fail after the 1 s lock wait
			// timeout set above).
			done := make(chan error, 1)
			go func() {
				r, err := holder.ExecContext(ctx, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")
				if err == nil && rowsAffected(r) != 1 {
					err = errors.New("fenced write changed no row")
				}
				done <- err
			}()
			if err := <-done; err != nil {
				t.Fatalf("holder's fenced write with a plain reader open: %v", err)
			}
			mustExec(t, c, "COMMIT")
		})
	})
}

// TestFencedWritesUnderLockTables is item 9 of issue 8: apps that LOCK
// TABLES their protected tables. The proxy adds the lease table to the lock
// as fence_l READ, so the fence works; while the tables are locked no
// takeover can commit, so the check cannot go stale under the lock.
func TestFencedWritesUnderLockTables(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "LOCK TABLES of a protected table is refused on Galera (its locks are node-local), and a no-op on TiDB", engGalera, engTiDB)
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := newFencedEnv(t, envOptions{engine: eng, onStale: onStale})
				ctx := context.Background()
				mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'acme', '2026-11', 20)")
				mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'new')")
				l := e.acquire(t, "invoice:acme", time.Minute)
				c := e.session(t)
				setFence(t, c, l)

				mustExec(t, c, "LOCK TABLES invoices WRITE, notes READ")
				if n := rowsAffected(mustExec(t, c, "UPDATE invoices SET amount = 11 WHERE id = 1")); n != 1 {
					t.Fatalf("valid UPDATE under LOCK TABLES changed %d rows", n)
				}
				if n := rowsAffected(mustExec(t, c, "DELETE FROM invoices WHERE id = 2")); n != 1 {
					t.Fatalf("valid DELETE under LOCK TABLES changed %d rows", n)
				}
				// The client's own lock set is what it asked for: notes is
				// locked READ, reconciliation_runs not at all.
				if _, err := c.ExecContext(ctx, "UPDATE notes SET body = 'x'"); !isErr(err, 1099) {
					t.Fatalf("write to a READ-locked table: want 1099, got %v", err)
				}
				if _, err := c.ExecContext(ctx, "UPDATE reconciliation_runs SET status = 'x'"); !isErr(err, 1100) {
					t.Fatalf("write to an unlocked table: want 1100, got %v", err)
				}

				// A takeover waits for UNLOCK TABLES (not for a commit): the
				// holder's check cannot go stale while the tables are locked.
				took := make(chan error, 1)
				go func() {
					_, err := e.root.ExecContext(ctx, "UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'worker-B' WHERE lease_name = ?", l.Name)
					took <- err
				}()
				eventually(t, 10*time.Second, "the takeover to wait for the table lock", func() bool {
					return queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE 'UPDATE fenced_job_leases SET fence_token%' AND state LIKE '%lock%'") == "1"
				})
				if n := rowsAffected(mustExec(t, c, "UPDATE invoices SET amount = 12 WHERE id = 1")); n != 1 {
					t.Fatalf("valid UPDATE with a takeover waiting changed %d rows", n)
				}
				mustExec(t, c, "UNLOCK TABLES")
				if err := <-took; err != nil {
					t.Fatal(err)
				}

				// Now stale, under a new LOCK TABLES: nothing changes, and the
				// rejection is classified (the lease check reads fence_l too).
				before := tableDump(t, e.root, "invoices") // not under the lock: it would wait for UNLOCK TABLES
				n := len(e.auditRecords(t))
				mustExec(t, c, "LOCK TABLES invoices WRITE")
				r, err := c.ExecContext(ctx, "UPDATE invoices SET amount = 13 WHERE id = 1")
				switch onStale {
				case "zero_rows":
					if err != nil || rowsAffected(r) != 0 {
						t.Fatalf("stale UPDATE under LOCK TABLES: %v", err)
					}
				case "error":
					if !isErr(err, 1644) {
						t.Fatalf("stale UPDATE under LOCK TABLES: want ERR 1644, got %v", err)
					}
				}
				mustExec(t, c, "UNLOCK TABLES")
				if got := tableDump(t, e.root, "invoices"); got != before {
					t.Fatalf("stale write under LOCK TABLES changed the table:\n%s\n%s", before, got)
				}
				recs := e.auditRecords(t)
				if len(recs) != n+1 || recs[n].Reason != "stale_token" {
					t.Fatalf("want one stale_token audit record, got %+v", recs[n:])
				}

				// autocommit=0 and LOCK TABLES, COMMIT, UNLOCK TABLES, as the
				// manual recommends for InnoDB; the fixed-lease table too.
				b := e.acquire(t, "admin:reconciliation", time.Minute)
				setFence(t, c, b)
				mustExec(t, c, "SET autocommit = 0")
				mustExec(t, c, "LOCK TABLES reconciliation_runs WRITE")
				if n := rowsAffected(mustExec(t, c, "UPDATE reconciliation_runs SET status = 'done' WHERE id = 1")); n != 1 {
					t.Fatalf("valid UPDATE with autocommit=0 under LOCK TABLES changed %d rows", n)
				}
				mustExec(t, c, "COMMIT")
				mustExec(t, c, "UNLOCK TABLES")
				mustExec(t, c, "SET autocommit = 1")
				if got := queryString(t, e.root, "SELECT status FROM reconciliation_runs WHERE id = 1"); got != "done" {
					t.Fatalf("status %s", got)
				}
			})
		}
	})
}

// TestInsertUnderLockTables: INSERT into a locked protected table, and the
// session's locks stay exactly the client's afterwards. INSERTs run after a
// guard statement, in autocommit mode wrapped in START TRANSACTION, which
// would release the table locks (the write to the unlocked table below
// would then succeed): under LOCK TABLES the proxy (tablesLocked) skips
// the wrap, and the READ lock on the lease table keeps guard and write
// atomic.
func TestInsertUnderLockTables(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "LOCK TABLES of a protected table is refused on Galera (its locks are node-local), and a no-op on TiDB", engGalera, engTiDB)
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		l := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, l)
		mustExec(t, c, "LOCK TABLES invoices WRITE")
		if n := rowsAffected(mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 1)")); n != 1 {
			t.Fatalf("valid INSERT under LOCK TABLES inserted %d rows", n)
		}
		if _, err := c.ExecContext(ctx, "INSERT INTO notes (body) VALUES ('x')"); !isErr(err, 1100) {
			t.Fatalf("after the fenced INSERT the session's table locks changed: want 1100 for an unlocked table, got %v", err)
		}
		mustExec(t, c, "SET @fence_token = @fence_token + 1")
		if n := rowsAffected(mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-11', 1)")); n != 0 {
			t.Fatalf("stale INSERT under LOCK TABLES inserted %d rows", n)
		}
		mustExec(t, c, "UNLOCK TABLES")
		if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices"); got != "1" {
			t.Fatalf("%s rows in invoices, want 1", got)
		}
		// BEGIN released the locks: writes to any table work again.
		mustExec(t, c, "LOCK TABLES invoices WRITE")
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "INSERT INTO notes (body) VALUES ('y')")
		mustExec(t, c, "COMMIT")
	})
}

func isErr(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
