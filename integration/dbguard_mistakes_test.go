package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// Attacks on the guard triggers through the proxy, and operator mistakes
// that would turn them off without anyone noticing.

// TestGuardProxyRefusesGuardDDL: an app account with every privilege it
// would need to take a guard off (TRIGGER, ALTER, DROP on the schemas)
// cannot do it through the proxy, by any of the statements that would:
// each is refused, and the guards and the rows stay. The same DROP
// TRIGGER sent directly works, so the account's privileges were enough.
func TestGuardProxyRefusesGuardDDL(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	for _, q := range []string{
		"GRANT TRIGGER, ALTER, DROP, CREATE ON `" + e.app + "`.* TO '" + dbserver.AppUser + "'@'%'",
		"GRANT TRIGGER, ALTER, DROP ON `" + e.fence + "`.* TO '" + dbserver.AppUser + "'@'%'",
	} {
		mustExec(t, e.root, q)
	}
	t.Cleanup(func() {
		e.root.Exec("REVOKE TRIGGER, ALTER, DROP, CREATE ON `" + e.app + "`.* FROM '" + dbserver.AppUser + "'@'%'")
		e.root.Exec("REVOKE TRIGGER, ALTER, DROP ON `" + e.fence + "`.* FROM '" + dbserver.AppUser + "'@'%'")
	})
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "error", "100ms"), guardProxyAccount(t, e)...)
	ctx := context.Background()
	have, err := lease.ReadTriggers(ctx, e.root, e.app, "items")
	if err != nil || len(have) != 3 {
		t.Fatalf("items' triggers: %v %v", have, err)
	}
	guard := have[0].Name
	triggersBefore := triggerNames(t, e)
	before := e.dump(t)
	c := guardSession(t, tp, e, fenceNone)
	attempts := []string{
		"DROP TRIGGER " + guard,
		"DROP TRIGGER IF EXISTS `" + e.app + "`.`" + guard + "`",
		"DROP TRIGGER " + strings.ToUpper(guard),
		"/*!50000 DROP TRIGGER " + guard + " */",
		"BEGIN NOT ATOMIC DROP TRIGGER " + guard + "; END",
		"EXECUTE IMMEDIATE 'DROP TRIGGER " + guard + "'",
		"EXECUTE IMMEDIATE CONCAT('DROP TRIG', 'GER " + guard + "')",
		"PREPARE s FROM 'DROP TRIGGER " + guard + "'",
		// A trigger put before the guard that gives the row the fence it
		// lacks, or one that does the write the guard would refuse.
		"CREATE TRIGGER first_bu BEFORE UPDATE ON items FOR EACH ROW PRECEDES " + guard + " SET @fence_lease = 'x'",
		"CREATE TRIGGER other_bu BEFORE UPDATE ON items FOR EACH ROW SET NEW.v = 'x'",
		"CREATE OR REPLACE TRIGGER " + guard + " BEFORE DELETE ON items FOR EACH ROW SET @x = 1",
		// The table or its lease table altered, dropped, renamed, emptied.
		"ALTER TABLE items ADD COLUMN z INT",
		"ALTER TABLE items RENAME TO items_old",
		"ALTER TABLE `" + e.fence + "`.fenced_job_leases REMOVE PARTITIONING",
		"RENAME TABLE items TO items_old",
		"DROP TABLE items",
		"TRUNCATE TABLE items",
		"TRUNCATE items",
		"DROP TABLE `" + e.fence + "`.fenced_job_leases",
	}
	for _, q := range attempts {
		_, err := c.ExecContext(ctx, q)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number == 0 || me.Number == lease.GuardErrno {
			t.Errorf("through the proxy %s: %v, want refused by the proxy", q, err)
			continue
		}
		if me.Number != 1148 && me.Number != 1064 {
			t.Logf("%s: %d %s", q, me.Number, me.Message)
		}
	}
	if got := triggerNames(t, e); got != triggersBefore {
		t.Fatalf("the attempts changed the triggers:\n%s\nwant\n%s", got, triggersBefore)
	}
	if got := e.dump(t); got != before {
		t.Fatalf("the attempts changed the tables:\n%s", got)
	}
	// The control: directly, the account may.
	direct := e.direct(t, fenceNone)
	if _, err := direct.ExecContext(ctx, "DROP TRIGGER "+guard); err != nil {
		t.Fatalf("the app account could not drop the guard directly either: %v (the test proves nothing)", err)
	}
}

// triggerNames lists every trigger of e's app schema.
func triggerNames(t *testing.T, e *guardEnv) string {
	t.Helper()
	return queryString(t, e.root, "SELECT COALESCE(GROUP_CONCAT(TRIGGER_NAME ORDER BY TRIGGER_NAME), '') FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", e.app)
}

// TestGuardCreatedLaterTable: a protected table declared created_later,
// with database_guard: triggers. The proxy starts while it does not exist
// (nothing to guard, no alert); once a migration creates it directly on
// the server, writes to it through the proxy are refused until init puts
// its guards on, and the metric says so; then writes work and a stale
// direct write gets the guard's error.
func TestGuardCreatedLaterTable(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	yml := guardProxyYAML(e, "error", "100ms") + "  - name: " + e.app + ".later\n    created_later: true\n"
	backend := guardProxyAccount(t, e)

	// Serve's start-up check (proxy.New) and check-config --connect's.
	full := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + s.Addr + "\n  " + strings.Join(backend, "\n  ") + "\n  health_interval: 0s\n" + yml
	cfg, err := policy.Parse("guard.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.CheckDatabaseGuard(cfg, dbtest.Open(t, s.RootDSN(""))); err != nil {
		t.Fatalf("the start-up check refuses a created_later table that does not exist yet: %v", err)
	}
	tp := startProxy(t, s.Addr, yml, backend...)
	ctx := context.Background()
	later := map[string]string{"table": e.app + ".later"}
	awaitRefresh := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := tp.Proxy.WaitCatalog(ctx, tp.Proxy.CatalogChecks()+1); err != nil {
			t.Fatal(err)
		}
	}
	awaitRefresh()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", later); got != 0 {
		t.Fatalf("fenceproxy_database_guard_missing{later} = %v while the table does not exist, want 0 (no alert for it)", got)
	}
	valid := guardSession(t, tp, e, fenceValid)
	if _, err := valid.ExecContext(ctx, "UPDATE items SET v = 'ok' WHERE id = 1"); err != nil {
		t.Fatalf("a guarded table while the created_later one is absent: %v", err)
	}

	// The migration, directly on the server.
	mustExec(t, e.root, "CREATE TABLE later (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)")
	mustExec(t, e.root, "INSERT INTO later VALUES (1, 'one')")
	awaitRefresh()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", later); got != 1 {
		t.Fatalf("fenceproxy_database_guard_missing{later} = %v once the table exists without guards, want 1", got)
	}
	_, err = valid.ExecContext(ctx, "UPDATE later SET v = 'unguarded' WHERE id = 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || !strings.Contains(me.Message, "guard triggers are missing or outdated") || !strings.Contains(me.Message, e.app+".later") {
		t.Fatalf("a write to the created_later table without its guards: %v", err)
	}

	// init, as its output says.
	spec := e.specs[0]
	spec.Table = "later"
	rc, err := e.root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := lease.InstallGuardTriggers(ctx, rc, spec); err != nil {
		t.Fatal(err)
	}
	awaitRefresh()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", later); got != 0 {
		t.Fatalf("fenceproxy_database_guard_missing{later} = %v after init", got)
	}
	if _, err := valid.ExecContext(ctx, "UPDATE later SET v = 'fenced' WHERE id = 1"); err != nil {
		t.Fatalf("a valid write once the guards are on: %v", err)
	}
	_, err = e.direct(t, fenceStale).ExecContext(ctx, "UPDATE later SET v = 'stale' WHERE id = 1")
	guardErr(t, err, lease.StaleToken, e.stale.Owner)
	if got := queryString(t, e.root, "SELECT v FROM later WHERE id = 1"); got != "fenced" {
		t.Fatalf("later.v = %q", got)
	}
}

// TestGuardDroppedWithoutCatalog: with catalog.refresh: 0s (no catalog,
// said knowingly) a guard trigger dropped directly on the server was seen
// only at the next start or reload: meanwhile direct writes to its table
// went unguarded and nothing said so. The health check reads the guards
// again: writes through the proxy are refused, the metric is 1, until the
// guard is back.
func TestGuardDroppedWithoutCatalog(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "0s"), append(guardProxyAccount(t, e), "health_interval: 100ms")...)
	ctx := context.Background()
	if _, ok := tp.Proxy.CatalogState(); ok {
		t.Fatal("the proxy keeps a catalog with catalog.refresh: 0s")
	}
	checked := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// The guards are read after each check is recorded: once the
		// second check from now is recorded, the first one's read of the
		// guards, which began after now, is done.
		if err := tp.Proxy.WaitHealth(ctx, tp.Proxy.HealthChecks()+1); err != nil {
			t.Fatal(err)
		}
	}
	c := guardSession(t, tp, e, fenceValid)
	missing := map[string]string{"table": e.app + ".items"}
	have, err := lease.ReadTriggers(ctx, e.root, e.app, "items")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.root, "DROP TRIGGER "+have[0].Name)
	checked()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", missing); got != 1 {
		t.Fatalf("fenceproxy_database_guard_missing{items} = %v after a guard was dropped, want 1", got)
	}
	_, err = c.ExecContext(ctx, "UPDATE items SET n = n + 1 WHERE id = 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || !strings.Contains(me.Message, "guard triggers are missing or outdated") {
		t.Fatalf("a write to the table without its guard: %v", err)
	}
	rc, err := e.root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := lease.InstallGuardTriggers(ctx, rc, e.specs[0]); err != nil {
		t.Fatal(err)
	}
	checked()
	if got := series(t, tp.Reg, "fenceproxy_database_guard_missing", missing); got != 0 {
		t.Fatalf("fenceproxy_database_guard_missing{items} = %v after init", got)
	}
	if _, err := c.ExecContext(ctx, "UPDATE items SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatalf("a write once the guard is back: %v", err)
	}
}

// TestGuardTriggersMoreDirectAttempts: more stale writes sent directly to
// the database, around the guard: RETURNING forms, IGNORE forms the other
// tests leave out, INSERT DELAYED, LOAD DATA with IGNORE and REPLACE, a
// statement that assigns the fence variables itself while it runs (its
// own token moved up to the current one, the lease name moved to a lease
// the session does hold). Each is refused and changes nothing.
func TestGuardTriggersMoreDirectAttempts(t *testing.T) {
	s := dbtest.Shared(t)
	if s.Flavor != dbserver.FlavorMariaDB {
		t.Skip("RETURNING and INSERT DELAYED are MariaDB's")
	}
	e := newGuardEnv(t, s, lease.InnoDB)
	ctx := context.Background()
	// A lease the stale session does hold, of another name.
	own, err := e.store.Acquire(ctx, "guard:own", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	before := e.dump(t)
	loadData := func(mode string) func(c *sql.Conn) error {
		return func(c *sql.Conn) error {
			name := "guard-more-" + mode
			mysql.RegisterReaderHandler(name, func() io.Reader { return strings.NewReader("1\tloaded\n40\tloaded\n") })
			defer mysql.DeregisterReaderHandler(name)
			_, err := c.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' "+mode+" INTO TABLE items (id, v)")
			return err
		}
	}
	exec := func(q string) func(c *sql.Conn) error {
		return func(c *sql.Conn) error {
			rows, err := c.QueryContext(ctx, q)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			rows.Close()
			return rows.Err()
		}
	}
	attempts := []struct {
		name   string
		kind   fenceKind
		write  func(c *sql.Conn) error
		reason lease.Reason
	}{
		{"DELETE ... RETURNING", fenceStale, exec("DELETE FROM items WHERE id = 1 RETURNING id, v"), lease.StaleToken},
		{"INSERT ... RETURNING", fenceStale, exec("INSERT INTO items (id, v) VALUES (41, 'x') RETURNING id"), lease.StaleToken},
		{"REPLACE ... RETURNING", fenceNone, exec("REPLACE INTO items (id, v) VALUES (1, 'x') RETURNING id"), lease.NoFence},
		{"INSERT ... SELECT ... RETURNING", fenceStale, exec("INSERT INTO items (id, v) SELECT id + 200, v FROM other RETURNING id"), lease.StaleToken},
		{"DELETE IGNORE", fenceStale, exec("DELETE IGNORE FROM items WHERE id = 2"), lease.StaleToken},
		{"multi-table DELETE IGNORE", fenceNone, exec("DELETE IGNORE items FROM items JOIN other USING (id)"), lease.NoFence},
		{"INSERT IGNORE ... ON DUPLICATE KEY UPDATE", fenceStale, exec("INSERT IGNORE INTO items (id, v) VALUES (1, 'x') ON DUPLICATE KEY UPDATE v = 'y'"), lease.StaleToken},
		{"LOAD DATA IGNORE", fenceStale, loadData("IGNORE"), lease.StaleToken},
		{"LOAD DATA REPLACE", fenceNone, loadData("REPLACE"), lease.NoFence},
		{"the token moved up inside the statement", fenceStale,
			exec("UPDATE items SET v = 'x' WHERE id = 1 AND (@fence_token := @fence_token + 1) > 0"), lease.StaleToken},
		// items takes its lease from @fence_lease, so a lease the session
		// holds is a valid fence for it (as through the proxy); the table
		// with a fixed lease is the one it must not reach that way.
		{"the fence set to a lease the session holds inside the statement", fenceNone,
			exec("UPDATE fixed SET v = 'x' WHERE id = 1 AND (@fence_lease := 'guard:own') IS NOT NULL AND (@fence_owner := " +
				fmt.Sprintf("X'%x'", own.Owner) + ") IS NOT NULL AND (@fence_token := " + fmt.Sprint(own.Token) + ") > 0"), lease.StaleToken},
		// Refused by the server itself before any trigger (1616: DELAYED is
		// not supported for InnoDB): reason "".
		{"INSERT DELAYED", fenceStale, exec("INSERT DELAYED INTO items (id, v) VALUES (42, 'x')"), ""},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			c := e.direct(t, a.kind)
			err := a.write(c)
			if a.reason == "" {
				if err == nil {
					t.Fatal("accepted")
				}
				t.Logf("refused by the server: %v", err)
			} else {
				guardErr(t, err, a.reason, e.valid.Owner, e.stale.Owner, e.validFixed.Owner, own.Owner)
			}
			if got := e.dump(t); got != before {
				t.Fatalf("changed the tables:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

// TestGuardTriggersForeignKeyCascade records the limit the documentation
// states: a cascading foreign key changes a guarded table without firing
// its triggers, so a direct DELETE or UPDATE of the parent without any
// fence changes the guarded rows (MariaDB: cascades fire no triggers).
// Through the proxy the catalog fences such parents
// (TestCascadingDeleteFromParent). If a server release starts firing
// triggers on cascades this test fails, and the documentation must change.
func TestGuardTriggersForeignKeyCascade(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	for _, q := range []string{
		"CREATE TABLE parent (id INT PRIMARY KEY)",
		"INSERT INTO parent VALUES (1), (2)",
		"CREATE TABLE child (id INT PRIMARY KEY, parent_id INT NOT NULL, v VARCHAR(20) NOT NULL, " +
			"FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
	} {
		mustExec(t, e.root, q)
	}
	spec := e.specs[0]
	spec.Table = "child"
	rc, err := e.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := lease.InstallGuardTriggers(context.Background(), rc, spec); err != nil {
		t.Fatal(err)
	}
	valid := e.direct(t, fenceValid)
	mustExec(t, valid, "INSERT INTO child VALUES (1, 1, 'a'), (2, 2, 'b')")
	none := e.direct(t, fenceNone)
	_, err = none.ExecContext(context.Background(), "DELETE FROM child WHERE id = 1")
	guardErr(t, err, lease.NoFence)
	mustExec(t, none, "DELETE FROM parent WHERE id = 1")
	mustExec(t, none, "UPDATE parent SET id = 20 WHERE id = 2")
	if got := tableDump(t, e.root, e.app+".child"); got != "2|20|b\n" {
		t.Fatalf("child after the parent's cascades without a fence:\n%s", got)
	}
}
