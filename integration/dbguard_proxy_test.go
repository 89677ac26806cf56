package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// The proxy with fencing.database_guard: triggers: its own fenced writes
// never trip a guard, a guard's error coming back is audited and counted,
// it refuses to start without the guards and refuses writes to a table
// that lost them.

// guardProxyAccount creates the proxy's own account for e (catalog
// privileges, the lease and audit tables) and returns its backend YAML.
func guardProxyAccount(t testing.TB, e *guardEnv) []string {
	t.Helper()
	user := "fpg_" + e.app[len(e.app)-8:]
	root := dbtest.Open(t, e.srv.RootDSN(""))
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'guard-Pw1'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO '" + user + "'@'%'",
		"GRANT INSERT, UPDATE ON `" + e.fence + "`.fenced_job_leases TO '" + user + "'@'%'",
		"GRANT INSERT, DELETE ON `" + e.fence + "`.fenced_audit TO '" + user + "'@'%'",
	} {
		mustExec(t, root, q)
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	t.Setenv("FP_TEST_GUARD_PW", "guard-Pw1")
	return []string{"user: " + user, "password_env: FP_TEST_GUARD_PW"}
}

// guardProxyYAML is the proxy's config for e.
func guardProxyYAML(e *guardEnv, onStale, refresh string) string {
	return "fencing:\n  lease_table: " + e.fence + ".fenced_job_leases\n  on_stale: " + onStale + "\n  database_guard: triggers\n" +
		"catalog:\n  refresh: " + refresh + "\n" +
		"tables:\n  - name: " + e.app + ".items\n  - name: " + e.app + ".fixed\n    lease: guard:fixed\n"
}

// guardSession is one app connection through tp with fence context k.
func guardSession(t *testing.T, tp *testProxy, e *guardEnv, k fenceKind) *sql.Conn {
	t.Helper()
	c, err := appDB(t, tp, e.app).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mustExec(t, c, e.setSQL(k))
	return c
}

func reasons(recs []audit.Record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[r.Reason]++
	}
	return out
}

func TestGuardProxyFencedWritesDoNotTripTheGuard(t *testing.T) {
	s := dbtest.Shared(t)
	for _, onStale := range []string{policy.OnStaleZeroRows, policy.OnStaleError} {
		t.Run(onStale, func(t *testing.T) {
			e := newGuardEnv(t, s, lease.InnoDB)
			tp := startProxy(t, s.Addr, guardProxyYAML(e, onStale, "2s"), guardProxyAccount(t, e)...)
			ctx := context.Background()
			valid := guardSession(t, tp, e, fenceValid)
			for _, q := range []string{
				"UPDATE items SET v = 'p-upd' WHERE id = 1",
				"INSERT INTO items (id, v) VALUES (50, 'p-ins')",
				"INSERT INTO items (id, v) VALUES (50, 'x') ON DUPLICATE KEY UPDATE v = 'p-odku'",
				"REPLACE INTO items (id, v) VALUES (51, 'p-repl')",
				"UPDATE items JOIN other ON other.id = items.id SET items.n = items.n + 1",
				"DELETE FROM items WHERE id = 3",
			} {
				if _, err := valid.ExecContext(ctx, q); err != nil {
					t.Fatalf("valid fence through the proxy: %s: %v", q, err)
				}
			}
			if _, err := valid.ExecContext(ctx, "UPDATE items SET v = ? WHERE id = ?", "p-bin", 2); err != nil {
				t.Fatalf("valid prepared write: %v", err)
			}
			if got := queryString(t, e.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', v, ':', n) ORDER BY id) FROM items"); got != "1:p-upd:1,2:p-bin:1,50:p-odku:0,51:p-repl:0" {
				t.Fatalf("items = %s", got)
			}
			before := e.dump(t)
			for _, k := range []fenceKind{fenceStale, fenceNone} {
				c := guardSession(t, tp, e, k)
				for _, q := range []string{"UPDATE items SET v = 'stale' WHERE id = 1", "DELETE FROM items WHERE id = 1",
					"INSERT INTO items (id, v) VALUES (60, 'stale')", "REPLACE INTO items (id, v) VALUES (1, 'stale')",
					"UPDATE fixed SET v = 'stale'"} {
					res, err := c.ExecContext(ctx, q)
					var me *mysql.MySQLError
					switch {
					case onStale == policy.OnStaleError:
						if !errors.As(err, &me) || me.Number != 1644 {
							t.Fatalf("%s fence, %s: %v, want the proxy's ERR 1644", k, q, err)
						}
					case err != nil:
						t.Fatalf("%s fence, %s: %v, want 0 rows", k, q, err)
					default:
						if n, _ := res.RowsAffected(); n != 0 {
							t.Fatalf("%s fence, %s: %d rows", k, q, n)
						}
					}
				}
			}
			if got := e.dump(t); got != before {
				t.Fatalf("stale writes through the proxy changed the tables:\n%s", got)
			}
			got := reasons(tp.Audit.Recent(100))
			if got[audit.DatabaseGuard] != 0 || got[audit.StaleToken]+got[audit.NoFence] != 10 {
				t.Fatalf("audit reasons %v: want 10 rejections by the proxy's fence and none by a guard trigger", got)
			}
			if n := series(t, tp.Reg, "fenceproxy_database_guard_missing", nil); n != 0 {
				t.Fatalf("fenceproxy_database_guard_missing sums to %v", n)
			}
		})
	}
}

// TestGuardProxyAuditsTheTriggersError: without the catalog the proxy does
// not know a view over a protected table and forwards a write through it
// unfenced; the guard trigger refuses it, and the proxy audits and counts
// the error it relays, whatever on_stale says.
func TestGuardProxyAuditsTheTriggersError(t *testing.T) {
	s := dbtest.Shared(t)
	for _, onStale := range []string{policy.OnStaleZeroRows, policy.OnStaleError} {
		t.Run(onStale, func(t *testing.T) {
			e := newGuardEnv(t, s, lease.InnoDB)
			mustExec(t, e.root, "CREATE VIEW v_items AS SELECT id, v FROM items")
			tp := startProxy(t, s.Addr, guardProxyYAML(e, onStale, "0s"), guardProxyAccount(t, e)...)
			before := e.dump(t)
			c := guardSession(t, tp, e, fenceStale)
			_, err := c.ExecContext(context.Background(), "UPDATE v_items SET v = 'through a view' WHERE id = 1")
			guardErr(t, err, lease.StaleToken, e.stale.Owner)
			prep, err := c.PrepareContext(context.Background(), "UPDATE v_items SET v = ? WHERE id = 1")
			if err != nil {
				t.Fatal(err)
			}
			_, err = prep.Exec("prepared, through a view")
			prep.Close()
			guardErr(t, err, lease.StaleToken, e.stale.Owner)
			if got := e.dump(t); got != before {
				t.Fatalf("the write through the view changed the tables:\n%s", got)
			}
			recs := tp.Audit.Recent(10)
			if len(recs) != 2 {
				t.Fatalf("%d audit records, want 2: %+v", len(recs), recs)
			}
			for _, r := range recs {
				if r.Reason != audit.DatabaseGuard || r.Table != e.app+".items" || r.Lease != "guard:items" || r.Outcome != "error" ||
					!strings.Contains(r.Detail, "stale_token") || !strings.Contains(r.Detail, "forwarded unchanged") || r.User != dbserver.AppUser {
					t.Fatalf("audit record %+v", r)
				}
			}
			if n := series(t, tp.Reg, "fenceproxy_stale_writes_rejected_total",
				map[string]string{"table": e.app + ".items", "lease": "guard:items", "reason": audit.DatabaseGuard}); n != 2 {
				t.Fatalf("stale_writes_rejected_total{reason=database_guard} = %v, want 2", n)
			}

			// A client's own SIGNAL of the same number is recorded, but
			// names no table of its choosing in the metric.
			_, err = c.ExecContext(context.Background(), "BEGIN NOT ATOMIC SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, "+
				"MESSAGE_TEXT = 'fenceproxy database_guard: write to evil.x refused (stale_token) under lease ''evil'''; END")
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != lease.GuardErrno {
				t.Fatalf("forged SIGNAL: %v", err)
			}
			if n := series(t, tp.Reg, "fenceproxy_stale_writes_rejected_total", map[string]string{"table": "evil.x"}); n != 0 {
				t.Fatalf("a forged message made a metric label: %v", n)
			}
			if n := series(t, tp.Reg, "fenceproxy_stale_writes_rejected_total", map[string]string{"table": "_unknown"}); n != 1 {
				t.Fatalf("the forged message was not counted as _unknown: %v", n)
			}
		})
	}
}

// TestGuardProxyRefusesToStartWithoutTriggers: serve's start-up check (in
// proxy.New) names each table without its current guards, and init.
func TestGuardProxyRefusesToStartWithoutTriggers(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	backend := guardProxyAccount(t, e)
	yml := func() string {
		return "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + s.Addr + "\n  " + strings.Join(backend, "\n  ") + "\n" +
			guardProxyYAML(e, "zero_rows", "0s")
	}
	start := func() error {
		cfg, err := policy.Parse("guard.yaml", []byte(yml()))
		if err != nil {
			t.Fatal(err)
		}
		p, err := proxy.New(cfg, cfg.Policy(1), proxy.Options{})
		if err == nil {
			p.Shutdown(context.Background())
		}
		return err
	}
	if err := start(); err != nil {
		t.Fatalf("with every guard in place: %v", err)
	}
	c, _ := e.root.Conn(context.Background())
	defer c.Close()
	have, err := lease.ReadTriggers(context.Background(), c, e.app, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, "DROP TRIGGER "+have[0].Name)
	err = start()
	if err == nil || !strings.Contains(err.Error(), e.app+".fixed ("+have[0].Event+": missing)") ||
		!strings.Contains(err.Error(), "fenceproxy init --config guard.yaml") || strings.Contains(err.Error(), ".items") {
		t.Fatalf("start with a guard dropped: %v", err)
	}
	// An outdated guard: another exempt list than the config's.
	spec := e.specs[1]
	spec.Exempt = []lease.Account{{User: "someone"}}
	if _, err := lease.InstallGuardTriggers(context.Background(), c, spec); err != nil {
		t.Fatal(err)
	}
	if err = start(); err == nil || !strings.Contains(err.Error(), "outdated") {
		t.Fatalf("start with outdated guards: %v", err)
	}
	if _, err := lease.InstallGuardTriggers(context.Background(), c, e.specs[1]); err != nil {
		t.Fatal(err)
	}
	// The lease table without its partition.
	mustExec(t, c, "ALTER TABLE "+e.fence+".fenced_job_leases REMOVE PARTITIONING")
	if err = start(); err == nil || !strings.Contains(err.Error(), "is not partitioned") {
		t.Fatalf("start with an unpartitioned lease table: %v", err)
	}
}

// TestGuardProxyRefusesWritesToAnUnguardedTable: a guard trigger dropped
// directly on the server is seen at the next catalog refresh; writes to
// its table through the proxy (also of a statement prepared before) are
// refused, the metric says which table, and both recover once init puts
// the guards back. Other tables are not affected.
func TestGuardProxyRefusesWritesToAnUnguardedTable(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "100ms"), guardProxyAccount(t, e)...)
	ctx := context.Background()
	c := guardSession(t, tp, e, fenceValid)
	prep, err := c.PrepareContext(ctx, "UPDATE items SET n = n + 1 WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Close()
	if _, err := prep.Exec(1); err != nil {
		t.Fatal(err)
	}
	refresh := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n := tp.Proxy.CatalogChecks()
		if err := tp.Proxy.WaitCatalog(ctx, n+1); err != nil {
			t.Fatal(err)
		}
	}
	have, err := lease.ReadTriggers(ctx, e.root, e.app, "items")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.root, "DROP TRIGGER "+have[0].Name) // BEFORE DELETE: ordered by timing, event
	refresh()
	missing := map[string]string{"table": e.app + ".items"}
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", missing); got != 1 {
		t.Fatalf("fenceproxy_database_guard_missing{table=items} = %v, want 1", got)
	}
	for name, write := range map[string]func() error{
		"text":     func() error { _, err := c.ExecContext(ctx, "UPDATE items SET n = n + 1 WHERE id = 1"); return err },
		"insert":   func() error { _, err := c.ExecContext(ctx, "INSERT INTO items (v) VALUES ('x')"); return err },
		"prepared": func() error { _, err := prep.Exec(1); return err },
	} {
		err := write()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || !strings.Contains(me.Message, "guard triggers are missing or outdated") ||
			!strings.Contains(me.Message, e.app+".items") || !strings.Contains(me.Message, "fenceproxy init") {
			t.Fatalf("%s write to an unguarded table: %v", name, err)
		}
	}
	fixed := guardSession(t, tp, e, fenceNone)
	mustExec(t, fixed, lease.SetVarsSQL(guardVars, e.validFixed))
	if _, err := fixed.ExecContext(ctx, "UPDATE fixed SET v = 'still guarded' WHERE id = 1"); err != nil {
		t.Fatalf("a table whose guards are in place: %v", err)
	}
	if n := queryString(t, e.root, "SELECT n FROM items WHERE id = 1"); n != "1" {
		t.Fatalf("items.n = %s after refused writes", n)
	}

	rc, _ := e.root.Conn(ctx)
	defer rc.Close()
	if _, err := lease.InstallGuardTriggers(ctx, rc, e.specs[0]); err != nil {
		t.Fatal(err)
	}
	refresh()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", missing); got != 0 {
		t.Fatalf("fenceproxy_database_guard_missing{table=items} = %v after init", got)
	}
	if _, err := prep.Exec(1); err != nil {
		t.Fatalf("the prepared write after the guards came back: %v", err)
	}
	if n := queryString(t, e.root, "SELECT n FROM items WHERE id = 1"); n != "2" {
		t.Fatalf("items.n = %s", n)
	}
}
