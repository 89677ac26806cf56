package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestBypassAttempts sends, from a session without a valid fence, every
// trick we know for getting a write into a protected table, and requires
// that each one either errors (refused, or rejected by the server) or
// changes nothing. The rewriter's unit tests check the same statements'
// rewrites; this checks what the database actually did.
func TestBypassAttempts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'globex', '2026-10', 20)")
		mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'done')")
		mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'n')")
		db := e.db
		attempts := []string{
			"UPDATE invoices SET amount = 0",
			"update INVOICES set amount = 0",
			"UPDATE `invoices` SET amount = 0",
			"UPDATE `" + db + "`.`invoices` SET amount = 0",
			"UPDATE " + db + " . invoices SET amount = 0",
			"UPDATE /* comment */ invoices /* more */ SET amount = 0 -- trailing",
			"UPDATE invoices SET amount = 0 # hash comment",
			"UPDATE /*+ NO_RANGE_OPTIMIZATION(invoices) */ invoices SET amount = 0",
			"/*!UPDATE*/ invoices SET amount = 0",
			"/*!50000 UPDATE invoices SET amount = 0 */",
			"/*M!100000 UPDATE invoices SET amount = 0 */",
			"UPDATE invoices SET amount = 0 /*!99999 WHERE id = 1 */",
			"UPDATE invoices SET amount = 0 WHERE id = 1 /*!50000 OR 1 = 1 */",
			"UPDATE invoices i SET i.amount = 0",
			"UPDATE notes n, invoices i SET i.amount = 0 WHERE n.id = 1",
			"UPDATE notes n JOIN invoices i ON i.id = n.id SET i.amount = 0, n.body = 'x'",
			"UPDATE invoices SET amount = 0 ORDER BY id LIMIT 1",
			"UPDATE IGNORE invoices SET amount = 0",
			"DELETE FROM invoices",
			"DELETE QUICK IGNORE FROM invoices WHERE id > 0 ORDER BY id LIMIT 5",
			"DELETE i FROM invoices i JOIN notes n ON n.id = i.id",
			"DELETE notes, invoices FROM notes JOIN invoices ON notes.id = invoices.id",
			"DELETE FROM invoices USING invoices JOIN notes",
			"INSERT INTO invoices (customer, period, amount) VALUES ('x', '2026-11', 1)",
			"INSERT INTO invoices SET customer = 'x', period = '2026-11', amount = 1",
			"INSERT INTO invoices (customer, period, amount) SELECT 'x', '2026-11', 1",
			"INSERT INTO invoices (customer, period, amount) SELECT body, '2026-11', COUNT(*) FROM notes",
			"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 99) ON DUPLICATE KEY UPDATE amount = 99",
			"REPLACE INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 0)",
			"INSERT INTO reconciliation_runs (id, status) VALUES (2, 'x')",
			"UPDATE reconciliation_runs SET status = 'hijacked'",
			"UPDATE notes SET body = 'y'; UPDATE invoices SET amount = 0",
			"SELECT 1; DELETE FROM invoices",
			"PREPARE s FROM 'UPDATE invoices SET amount = 0'; EXECUTE s",
			"SET @q = 'UPDATE invoices SET amount = 0'; PREPARE s2 FROM @q; EXECUTE s2",
			"PREPARE s3 FROM 'UPDATE inv' 'oices SET amount = 0'; EXECUTE s3",
			"EXECUTE IMMEDIATE 'DELETE FROM invoices'",
			"EXECUTE IMMEDIATE CONCAT('DELETE FROM ', 'invoices')",
			"SET timestamp = 1; UPDATE invoices SET amount = 0",
			"SET STATEMENT timestamp = 1 FOR UPDATE invoices SET amount = 0",
			"SET time_zone = '+14:00'; UPDATE invoices SET amount = 0",
			"WITH x AS (SELECT 1 AS id) UPDATE invoices SET amount = 0 WHERE id IN (SELECT id FROM x)",
			"UPDATE invoices SET amount = 0 WHERE id IN (WITH x AS (SELECT 1) SELECT * FROM x)",
			"TRUNCATE invoices",
			"TRUNCATE TABLE " + db + ".invoices",
			"DROP TABLE invoices",
			"ALTER TABLE invoices ADD COLUMN x INT",
			"RENAME TABLE invoices TO invoices_old",
			"CREATE TABLE invoices_x LIKE invoices; RENAME TABLE invoices_x TO invoices",
			"CREATE TRIGGER tr BEFORE INSERT ON notes FOR EACH ROW DELETE FROM invoices",
			"CREATE VIEW v AS SELECT * FROM invoices",
			"HANDLER invoices OPEN",
			"LOAD DATA INFILE '/dev/null' INTO TABLE invoices",
			"CREATE TEMPORARY TABLE invoices (id INT)",
			"DROP DATABASE " + db,
			"ANALYZE UPDATE invoices SET amount = 0",
			"EXPLAIN ANALYZE UPDATE invoices SET amount = 0",
			"SELECT fence_acquire('x', 10), 1",
			"UPDATE invoices SET amount = 0 WHERE customer = \"acme\"",
			"UPDATE invoices SET amount = 0 WHERE customer = 'a\\'; UPDATE invoices SET amount = 0; -- '",
		}
		want := tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs")
		for _, q := range attempts {
			t.Run(q, func(t *testing.T) {
				c := e.session(t, "multiStatements=true")
				// A stale fence: the lease exists but belongs to someone else.
				mustExec(t, c, "SET @fence_lease = 'invoice:acme', @fence_owner = 'me', @fence_token = 1")
				_, err := c.ExecContext(context.Background(), q)
				got := tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs")
				if got != want {
					t.Fatalf("%q (err %v) changed a protected table:\nwant %s\ngot  %s", q, err, want, got)
				}
				tables := queryString(t, e.root, "SELECT GROUP_CONCAT(table_name ORDER BY table_name) FROM information_schema.tables WHERE table_schema = ?", db)
				if !strings.Contains(tables, "invoices") || strings.Contains(tables, "invoices_old") {
					t.Fatalf("%q changed the schema: %s", q, tables)
				}
			})
		}
		// Reads and unprotected writes still work in the same session kinds.
		c := e.session(t, "multiStatements=true")
		mustExec(t, c, "UPDATE notes SET body = 'fine'; SELECT * FROM invoices")
		if got := queryString(t, e.root, "SELECT body FROM notes WHERE id = 1"); got != "fine" {
			t.Fatalf("unprotected write: %s", got)
		}
	})
}

// TestShadowMode relays writes unchanged and audits the ones that a fence
// would have rejected.
func TestShadowMode(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, mode: "shadow"})
		c := e.session(t)
		r := mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 10)")
		if rowsAffected(r) != 1 {
			t.Fatal("shadow mode must relay the write unchanged")
		}
		recs := e.auditRecords(t)
		if len(recs) != 1 || recs[0].Reason != "no_fence" || recs[0].Mode != "shadow" || recs[0].Outcome != "shadow" {
			t.Fatalf("shadow audit: %+v", recs)
		}
		l := e.acquire(t, "invoice:acme", time.Minute)
		setFence(t, c, l)
		mustExec(t, c, "UPDATE invoices SET amount = 11")
		if got := len(e.auditRecords(t)); got != 1 {
			t.Fatalf("a write under a valid fence was audited in shadow mode")
		}
	})
}

// TestPreparedStatementsAreFenced: the fence is part of the prepared text
// and is evaluated at every execution.
func TestPreparedStatementsAreFenced(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		c := e.session(t)
		l := e.acquire(t, "invoice:acme", time.Minute)
		setFence(t, c, l)
		ins, err := c.PrepareContext(ctx, "INSERT INTO invoices (customer, period, amount, token) VALUES (?, ?, ?, @fence_token)")
		if err != nil {
			t.Fatal(err)
		}
		defer ins.Close()
		upd, err := c.PrepareContext(ctx, "UPDATE invoices SET amount = ? WHERE customer = ? AND period = ?")
		if err != nil {
			t.Fatal(err)
		}
		defer upd.Close()
		r, err := ins.ExecContext(ctx, "acme", "2026-10", 10)
		if err != nil || rowsAffected(r) != 1 {
			t.Fatalf("valid prepared insert: %v", err)
		}
		id, _ := r.LastInsertId()
		if id == 0 {
			t.Fatal("LAST_INSERT_ID lost")
		}
		if r, err := upd.ExecContext(ctx, 11, "acme", "2026-10"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("valid prepared update: %v", err)
		}
		e.expire(t, l.Name)
		e.acquire(t, l.Name, time.Minute)
		if r, err := upd.ExecContext(ctx, 12, "acme", "2026-10"); err != nil || rowsAffected(r) != 0 {
			t.Fatalf("stale prepared update: %v, %d rows", err, rowsAffected(r))
		}
		if r, err := ins.ExecContext(ctx, "acme", "2026-11", 1); err != nil || rowsAffected(r) != 0 {
			t.Fatalf("stale prepared insert: %v", err)
		}
		if got := queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(period, '=', amount)) FROM invoices"); got != "2026-10=11.00" {
			t.Fatalf("invoices: %s", got)
		}
		if n := len(e.auditRecords(t)); n != 2 {
			t.Fatalf("want 2 audit records, got %d", n)
		}
	})
}

// TestSQLLevelPrepare: PREPARE ... FROM 'text' is fenced; EXECUTE of it is
// classified like the statement itself.
func TestSQLLevelPrepare(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, onStale: "error"})
		c := e.session(t)
		l := e.acquire(t, "invoice:acme", time.Minute)
		setFence(t, c, l)
		mustExec(t, c, "PREPARE ins FROM 'INSERT INTO invoices (customer, period, amount) VALUES (?, ''2026-10'', ?)'")
		mustExec(t, c, "SET @c = 'acme', @a = 5")
		if r := mustExec(t, c, "EXECUTE ins USING @c, @a"); rowsAffected(r) != 1 {
			t.Fatal("valid EXECUTE changed nothing")
		}
		e.expire(t, l.Name)
		mustExec(t, c, "SET @c = 'globex'")
		_, err := c.ExecContext(context.Background(), "EXECUTE ins USING @c, @a")
		if err == nil || !strings.Contains(err.Error(), "1644") {
			t.Fatalf("stale EXECUTE under on_stale: error: %v", err)
		}
		if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices"); got != "1" {
			t.Fatalf("invoices: %s rows", got)
		}
		_, err = c.ExecContext(context.Background(), "PREPARE s FROM @c")
		if err == nil || !strings.Contains(err.Error(), "fenceproxy refused") {
			t.Fatalf("PREPARE from a variable must be refused: %v", err)
		}
	})
}
