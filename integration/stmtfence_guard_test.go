package integration

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Statement fences with guard triggers (fencing.database_guard: triggers):
// the triggers check a write that carries its own fence against the
// statement fence variables the proxy sets right before it and clears right
// after it, on MariaDB and on a Galera node.

// guardEngines are the engines with triggers the guard tests run on.
func guardEngines(t *testing.T) []struct {
	name string
	srv  func(t *testing.T) *dbserver.Server
	eng  lease.Engine
} {
	return []struct {
		name string
		srv  func(t *testing.T) *dbserver.Server
		eng  lease.Engine
	}{
		{"mariadb", func(t *testing.T) *dbserver.Server { return dbtest.Shared(t) }, lease.InnoDB},
		{"galera", func(t *testing.T) *dbserver.Server { return dbtest.SharedGalera(t).Nodes[0] }, lease.Galera},
	}
}

// stmtVarsCleared fails t unless c's statement fence variables are NULL.
func stmtVarsCleared(t *testing.T, c *sql.Conn, after string) {
	t.Helper()
	var n int
	q := "SELECT (@" + lease.StmtVarLease + " IS NULL) + (@" + lease.StmtVarOwnerSum + " IS NULL) + (@" + lease.StmtVarToken + " IS NULL)"
	if err := c.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("after %s the statement fence variables are still set (%d of 3 NULL)", after, n)
	}
}

func TestStmtFenceUnderGuardTriggers(t *testing.T) {
	for _, eng := range guardEngines(t) {
		t.Run(eng.name, func(t *testing.T) {
			s := eng.srv(t)
			e := newGuardEnv(t, s, eng.eng)
			tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "2s"), guardProxyAccount(t, e)...)
			ctx := context.Background()
			var readLog func() string
			if eng.eng == lease.InnoDB {
				logFile := filepath.Join(t.TempDir(), "general.log")
				mustExec(t, e.root, "SET GLOBAL general_log_file = ?", logFile)
				mustExec(t, e.root, "SET GLOBAL log_output = 'FILE'")
				mustExec(t, e.root, "SET GLOBAL general_log = ON")
				t.Cleanup(func() { e.root.Exec("SET GLOBAL general_log = OFF") })
				readLog = func() string {
					mustExec(t, e.root, "SET GLOBAL general_log = OFF")
					b, err := os.ReadFile(logFile)
					if err != nil {
						t.Fatal(err)
					}
					return string(b)
				}
			}

			// A pooled connection with no session fence: every write carries
			// its own, valid one; the triggers let each through.
			c := guardSession(t, tp, e, fenceNone)
			valid := []struct {
				name, sql string
				l         lease.Lease
				args      []any
			}{
				{"UPDATE", "UPDATE items SET v = 'c-upd' WHERE id = 1", e.valid, nil},
				{"INSERT", "INSERT INTO items (id, v) VALUES (40, 'c-ins')", e.valid, nil},
				{"INSERT ... ON DUPLICATE KEY UPDATE", "INSERT INTO items (id, v) VALUES (40, 'x') ON DUPLICATE KEY UPDATE v = 'c-odku'", e.valid, nil},
				{"REPLACE", "REPLACE INTO items (id, v) VALUES (41, 'c-repl')", e.valid, nil},
				{"DELETE", "DELETE FROM items WHERE id = 3", e.valid, nil},
				{"UPDATE fixed lease", "UPDATE fixed SET v = 'c-fixed' WHERE id = 1", e.validFixed, nil},
				{"prepared UPDATE", "UPDATE items SET v = ? WHERE id = ?", e.valid, []any{"c-prep", 2}},
			}
			for _, w := range valid {
				res, err := c.ExecContext(ctx, withComment(t, w.sql, w.l), w.args...)
				if err != nil {
					t.Fatalf("%s with a valid statement fence: %v", w.name, err)
				}
				if n, _ := res.RowsAffected(); n == 0 {
					t.Fatalf("%s with a valid statement fence changed nothing", w.name)
				}
				stmtVarsCleared(t, c, w.name)
			}
			want := "1:c-upd:0,2:c-prep:0,40:c-odku:0,41:c-repl:0"
			if got := queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', v, ':', n) ORDER BY id) FROM items"); got != want {
				t.Fatalf("items = %s, want %s", got, want)
			}
			if recs := tp.Audit.Recent(10); len(recs) != 0 {
				t.Fatalf("valid statement fences were audited: %+v", recs)
			}

			// The next write without a comment uses the session's fence
			// (none here): the proxy rejects it, and nothing of the last
			// statement's fence is left for the triggers.
			before := e.dump(t)
			if res, err := c.ExecContext(ctx, "UPDATE items SET v = 'leak' WHERE id = 1"); err != nil {
				t.Fatalf("write without a fence: %v", err)
			} else if n, _ := res.RowsAffected(); n != 0 {
				t.Fatalf("a write without a fence after statement-fenced ones changed %d rows", n)
			}

			// A stale comment loses, over no session fence and over a valid
			// session fence alike; a valid comment wins over a stale session.
			validSession := guardSession(t, tp, e, fenceValid)
			staleSession := guardSession(t, tp, e, fenceStale)
			for _, w := range []struct {
				name string
				c    *sql.Conn
				sql  string
			}{
				{"stale comment, no session fence", c, withComment(t, "UPDATE items SET v = 'stale' WHERE id = 1", e.stale)},
				{"stale comment, valid session", validSession, withComment(t, "UPDATE items SET v = 'stale' WHERE id = 1", e.stale)},
				{"stale comment INSERT", validSession, withComment(t, "INSERT INTO items (id, v) VALUES (60, 'stale')", e.stale)},
				{"stale comment DELETE", validSession, withComment(t, "DELETE FROM items WHERE id = 1", e.stale)},
				{"stale comment on the fixed lease", validSession, withComment(t, "UPDATE fixed SET v = 'stale'", e.staleFixed)},
			} {
				res, err := w.c.ExecContext(ctx, w.sql)
				if err != nil {
					t.Fatalf("%s: %v, want 0 rows", w.name, err)
				}
				if n, _ := res.RowsAffected(); n != 0 {
					t.Fatalf("%s: %d rows", w.name, n)
				}
				stmtVarsCleared(t, w.c, w.name)
			}
			if got := e.dump(t); got != before {
				t.Fatalf("stale statement fences changed the tables:\n%s", got)
			}
			if _, err := staleSession.ExecContext(ctx, withComment(t, "UPDATE items SET n = n + 1 WHERE id = 1", e.valid)); err != nil {
				t.Fatalf("valid comment over a stale session: %v", err)
			}
			if got := queryString(t, e.root, "SELECT n FROM items WHERE id = 1"); got != "1" {
				t.Fatalf("valid comment over a stale session: n = %s", got)
			}
			got := reasons(tp.Audit.Recent(100))
			if got[audit.DatabaseGuard] != 0 || got[audit.StaleToken] != 5 || got[audit.NoFence] != 1 {
				t.Fatalf("audit reasons %v: want 5 stale_token and 1 no_fence by the proxy's fence, none by a trigger", got)
			}

			// Warnings of the write stay for SHOW WARNINGS; ROW_COUNT() is the
			// clearing SET's 0. (A write that changes a row: after one of 0
			// rows the proxy's lease check replaces the warnings.)
			mustExec(t, c, "SET SESSION sql_mode = ''")
			if _, err := c.ExecContext(ctx, withComment(t, "UPDATE items SET n = '5x' WHERE id = 2", e.valid)); err != nil {
				t.Fatal(err)
			}
			if rc := queryStringConn(t, c, "SELECT ROW_COUNT()"); rc != "0" {
				t.Fatalf("ROW_COUNT() = %s, want 0 (the clearing SET's)", rc)
			}
			if w := queryStringConn(t, c, "SHOW COUNT(*) WARNINGS"); w != "1" {
				t.Fatalf("SHOW COUNT(*) WARNINGS after a statement-fenced write with a warning = %s, want 1", w)
			}

			// Several statements in one query with a statement fence: refused
			// (the variables would hold for all of them).
			multi := appDB(t, tp, e.app, "multiStatements=true")
			_, err := multi.ExecContext(ctx, withComment(t, "UPDATE items SET v = 'multi' WHERE id = 1", e.valid)+"; SELECT 1")
			var me *mysql.MySQLError
			if !errors.As(err, &me) || !strings.Contains(me.Message, "the only statement of its query") {
				t.Fatalf("multi-statement query with a statement fence: %v", err)
			}

			// Directly, without the proxy: the triggers' statement branch
			// checks owner, token and expiry as the session branch does.
			for _, k := range []struct {
				name   string
				p      lease.Presented
				reason lease.Reason
			}{
				{"stale token", lease.Presented{Lease: "guard:items", Owner: e.stale.Owner, Token: e.stale.Token}, lease.StaleToken},
				{"another owner", lease.Presented{Lease: "guard:items", Owner: e.stale.Owner, Token: e.valid.Token}, lease.OwnerMismatch},
				{"no such lease", lease.Presented{Lease: "guard:none", Owner: e.valid.Owner, Token: e.valid.Token}, lease.LeaseMissing},
			} {
				d := e.direct(t, fenceValid)
				mustExec(t, d, lease.StmtFenceSetSQL(k.p))
				_, err := d.ExecContext(ctx, "UPDATE items SET v = 'direct' WHERE id = 1")
				guardErr(t, err, k.reason, e.stale.Owner, e.valid.Owner)
			}
			d := e.direct(t, fenceStale)
			mustExec(t, d, lease.StmtFenceSetSQL(lease.Presented{Lease: "guard:items", Owner: e.valid.Owner, Token: e.valid.Token}))
			if _, err := d.ExecContext(ctx, "UPDATE items SET n = n + 1 WHERE id = 1"); err != nil {
				t.Fatalf("direct write under valid statement fence variables: %v", err)
			}

			if readLog != nil {
				text := readLog()
				if !strings.Contains(text, lease.StmtVarOwnerSum) {
					t.Fatalf("the general log shows no statement fence variables: the test did not see the proxy's SET")
				}
				// The test's own SETs of the session fence (@fence_owner, as a
				// hex literal) are the app's; every other line is checked.
				var rest []string
				for _, line := range strings.Split(text, "\n") {
					if !strings.Contains(line, "@fence_owner") {
						rest = append(rest, line)
					}
				}
				checkNoFence(t, "the general log", strings.Join(rest, "\n"), e.valid)
				checkNoFence(t, "the general log", strings.Join(rest, "\n"), e.stale)
			}
		})
	}
}

// A write the proxy does not see reach a protected table (through a view,
// without the catalog) gets no statement fence variables: the triggers
// check the session's fence, and refuse it without one.
func TestStmtFenceUnderGuardTriggersUnseenWrite(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	mustExec(t, e.root, "CREATE VIEW v_items AS SELECT id, v FROM items")
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "0s"), guardProxyAccount(t, e)...)
	before := e.dump(t)
	c := guardSession(t, tp, e, fenceNone)
	_, err := c.ExecContext(context.Background(), withComment(t, "UPDATE v_items SET v = 'through a view' WHERE id = 1", e.valid))
	guardErr(t, err, lease.NoFence, e.valid.Owner)
	if got := e.dump(t); got != before {
		t.Fatalf("the write through the view changed the tables:\n%s", got)
	}
	stmtVarsCleared(t, c, "a write through a view")
}

// Attempts to make a stale write land through the triggers' statement
// branch, through the proxy. Each keeps the tables as they were.
func TestStmtFenceUnderGuardTriggersAttacks(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	mustExec(t, e.root, "CREATE VIEW v_items AS SELECT id, v FROM items")
	mustExec(t, e.root, "CREATE VIEW v_fixed AS SELECT id, v FROM fixed")
	// Without the catalog the proxy does not know the views: what reaches
	// the tables through them is the triggers' alone to judge.
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "0s"), guardProxyAccount(t, e)...)
	ctx := context.Background()
	staleVars := lease.StmtFenceSetSQL(lease.Presented{Lease: "guard:items", Owner: e.stale.Owner, Token: e.stale.Token})
	before := e.dump(t)

	// 1. The app sets the statement variables itself, to its stale fence,
	// and writes where the proxy does not look.
	c := guardSession(t, tp, e, fenceStale)
	mustExec(t, c, staleVars)
	_, err := c.ExecContext(ctx, "UPDATE v_items SET v = 'attack 1' WHERE id = 1")
	guardErr(t, err, lease.StaleToken, e.stale.Owner)

	// 2. A valid statement fence for one write, then an unseen write in
	// the same session: the variables were cleared in between, so the
	// triggers read the session's (stale) fence.
	if _, err := c.ExecContext(ctx, withComment(t, "UPDATE items SET n = n + 1 WHERE id = 2", e.valid)); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExecContext(ctx, "UPDATE v_items SET v = 'attack 2' WHERE id = 1")
	guardErr(t, err, lease.StaleToken, e.stale.Owner, e.valid.Owner)

	// 3. The same after a statement-fenced write that failed (duplicate
	// key): cleared all the same.
	_, err = c.ExecContext(ctx, withComment(t, "INSERT INTO items (id, v) VALUES (1, 'dup')", e.valid))
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("duplicate INSERT: %v", err)
	}
	stmtVarsCleared(t, c, "a failed statement-fenced write")
	_, err = c.ExecContext(ctx, "DELETE FROM v_items WHERE id = 1")
	guardErr(t, err, lease.StaleToken, e.stale.Owner, e.valid.Owner)

	// 4. Valid statement variables of items' lease on the fixed lease's
	// table: the triggers check the fixed lease.
	mustExec(t, c, lease.StmtFenceSetSQL(lease.Presented{Lease: "guard:items", Owner: e.valid.Owner, Token: e.valid.Token}))
	_, err = c.ExecContext(ctx, "UPDATE v_fixed SET v = 'attack 4'")
	guardErr(t, err, lease.OwnerMismatch, e.valid.Owner)
	mustExec(t, c, lease.StmtFenceClearSQL)

	// 5. A stale comment on the write through the view.
	_, err = c.ExecContext(ctx, withComment(t, "UPDATE v_items SET v = 'attack 5' WHERE id = 1", e.stale))
	guardErr(t, err, lease.StaleToken, e.stale.Owner)

	// 6. A valid comment inside a compound statement that writes through
	// the view: refused by the proxy (a fence key outside the write's own
	// comment), so nothing is sent.
	_, err = c.ExecContext(ctx, "BEGIN NOT ATOMIC UPDATE v_items SET v = 'attack 6' WHERE id = 1 /*"+
		strings.Trim(lease.FenceComment(e.valid), "/*")+"*/; END")
	if !errors.As(err, &me) || me.Number == lease.GuardErrno {
		t.Fatalf("compound statement with a fence comment: %v, want the proxy's refusal", err)
	}

	// 7. A stale session and a stale comment in one multi-statement query,
	// the second statement through the view.
	multi := appDB(t, tp, e.app, "multiStatements=true")
	_, err = multi.ExecContext(ctx, e.setSQL(fenceStale)+"; "+withComment(t, "UPDATE v_items SET v = 'attack 7' WHERE id = 1", e.stale))
	if err == nil {
		t.Fatal("attack 7 succeeded")
	}

	want := strings.Replace(before, "2|two|0", "2|two|1", 1)
	if got := e.dump(t); got != want {
		t.Fatalf("the attacks changed the tables:\n%s\nwant\n%s", got, want)
	}
}

// BenchmarkStmtFenceCostUnderTriggers measures on MariaDB, with guard
// triggers, what a statement's own fence costs against the session's: one
// autocommit single-row UPDATE at a time on one connection through the
// proxy, with the session's fence and then with the same fence in a
// comment (the proxy's SET before and after it). It reports the p50 and
// p99 of each (docs/statement-fences.md); every UPDATE must change its row.
//
//	FENCEPROXY_REQUIRE_SERVER=1 go test -run XXX -bench StmtFenceCostUnderTriggers -benchtime 2000x ./integration/
func BenchmarkStmtFenceCostUnderTriggers(b *testing.B) {
	s := dbtest.Shared(b)
	e := newGuardEnv(b, s, lease.InnoDB)
	tp := startProxy(b, s.Addr, guardProxyYAML(e, "zero_rows", "2s"), guardProxyAccount(b, e)...)
	ctx := context.Background()
	c, err := appDB(b, tp, e.app).Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	mustExec(b, c, e.setSQL(fenceValid))
	run := func(b *testing.B, q string) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			r, err := c.ExecContext(ctx, q)
			d := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := r.RowsAffected(); n != 1 {
				b.Fatalf("%d rows changed, want 1", n)
			}
			lat = append(lat, d)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	const q = "UPDATE items SET n = n + 1 WHERE id = 1"
	b.Run("session", func(b *testing.B) { run(b, q) })
	comment, err := lease.WithFenceComment(q, e.valid)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("comment", func(b *testing.B) { run(b, comment) })
}
