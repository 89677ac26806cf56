package integration

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// Guard triggers on a 3-node MariaDB Galera cluster: the race of
// galera_race_test.go with writers that send plain statements straight to
// node 1 (no proxy, no fence in the SQL), the guard triggers doing the
// fencing, takeovers on node 2, node 3's binary log for the commit order.

// guardRaceTriggers installs guard triggers built for engine e on the race's
// runs and events (lease table fenced_job_leases of the same schema).
func guardRaceTriggers(t *testing.T, root *sql.DB, schema string, e lease.Engine) {
	t.Helper()
	ctx := context.Background()
	c, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := lease.PartitionForGuards(ctx, c, schema, lease.DefaultTable); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"runs", "events"} {
		spec := lease.TriggerSpec{Schema: schema, Table: table, Engine: e,
			Fence: lease.GuardSpec{Schema: schema, Table: lease.DefaultTable, Vars: guardVars}}
		if _, err := lease.InstallGuardTriggers(ctx, c, spec); err != nil {
			t.Fatal(err)
		}
	}
}

// writeToGuard sends the race's statement as it is: the guard trigger
// fences it. Its refusal (9100) is a rejection, not an error.
func writeToGuard(ctx context.Context, c *sql.Conn, insert, _ bool, id int) (bool, int64, error) {
	q, args := plainUpdate, []any{id}
	if insert {
		q, args = plainInsert, nil
	}
	r, err := c.ExecContext(ctx, q, args...)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == lease.GuardErrno {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	n, _ := r.RowsAffected()
	return n > 0, n, nil
}

// TestGaleraGuardTriggersRace: with the Galera bodies (the guard bumps the
// lease row's write counter under the fence, so certification orders each
// write's transaction against a takeover on another node) no write with
// token t commits after the takeover to t+1. The InnoDB bodies (a share
// lock, local to node 1) are raced too, as the control: they must be seen
// letting stale writes through, or the race no longer shows the hole.
func TestGaleraGuardTriggersRace(t *testing.T) {
	c := dbtest.SharedGalera(t)
	d := galeraRaceDuration(t)
	for _, v := range []struct {
		name   string
		engine lease.Engine
		safe   bool
	}{{"galera bodies", lease.Galera, true}, {"innodb bodies (control)", lease.InnoDB, false}} {
		t.Run(v.name, func(t *testing.T) {
			schema, root := galeraRaceSchema(t, c)
			guardRaceTriggers(t, root, schema, v.engine)
			dbtest.AwaitGalera(t, c)
			from := galeraBinlogPos(t, c)
			d := d
			if !v.safe {
				d = min(d, 10*time.Second)
			}
			began := time.Now()
			counts := runGaleraRace(t, c, c.Nodes[0].DSN(dbserver.AppUser, dbserver.AppPassword, schema),
				fenceShape{name: v.name, safe: v.safe, write: writeToGuard}, d)
			elapsed := time.Since(began)
			order := readCommitOrder(t, c, root, schema, from, 1, counts.taken())
			t.Logf("%s, %s, direct to node 1: clients: %d committed, %d refused by the guard, %d conflicts (1213/1205), %d takeovers (%d retried); "+
				"node 3's binary log: %d row writes, %d with token t after the takeover to t+1 (after %d of %d takeovers); slowest write %s",
				v.name, elapsed.Round(time.Second), counts.committed.Load(), counts.rejected.Load(), counts.conflicts.Load(),
				counts.takeovers.Load(), counts.takeoverRetries.Load(), order.writes, order.stale, order.staleTakeovers, order.takeovers,
				time.Duration(counts.slowestWrite.Load())*time.Microsecond)
			checkTakeoverCount(t, order, counts)
			if order.writes == 0 || order.takeovers == 0 || counts.rejected.Load() == 0 {
				t.Fatalf("no race: %d writes, %d takeovers, %d refusals", order.writes, order.takeovers, counts.rejected.Load())
			}
			switch {
			case v.safe && order.stale > 0:
				t.Errorf("%d writes with token t committed after the takeover to t+1", order.stale)
			case !v.safe && order.stale == 0:
				t.Errorf("the InnoDB bodies let no stale write through in %s: the race no longer shows the hole it checks for", d)
			}
		})
	}
}

// TestGaleraGuardTriggersDirect: the paths of TestGuardTriggersDirectWrites
// that a Galera node takes differently (the guard's write to the lease
// row), sent to node 1, and what node 2's applier does with a guarded
// write: it fires no trigger (a MyISAM table, which Galera does not
// replicate, written by a trigger shows where triggers ran).
func TestGaleraGuardTriggersDirect(t *testing.T) {
	c := dbtest.SharedGalera(t)
	e := newGuardEnv(t, c.Nodes[0], lease.Galera)
	for _, q := range []string{
		"CREATE TABLE fired (node VARCHAR(64)) ENGINE=MyISAM",
		"CREATE TRIGGER items_fired AFTER UPDATE ON items FOR EACH ROW INSERT INTO fired VALUES (@@wsrep_node_name)",
	} {
		mustExec(t, e.root, q)
	}
	dbtest.AwaitGalera(t, c)
	before := e.dump(t)
	for _, k := range fenceKinds {
		for _, p := range guardPaths()[:7] { // UPDATE ... DELETE
			if p.name == "UPDATE fixed lease" {
				continue
			}
			conn := e.direct(t, k)
			err := p.write(t, e, conn, k)
			if k != fenceValid {
				guardErr(t, err, wantReason(k), e.stale.Owner, e.valid.Owner)
				if got := e.dump(t); got != before {
					t.Fatalf("%s, %s fence: the refused write changed the tables:\n%s", p.name, k, got)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s, valid fence: %v", p.name, err)
			}
		}
	}
	if got := queryString(t, e.root, "SELECT v FROM items WHERE id = 1"); got != "odku" {
		t.Fatalf("items.v = %q after the valid writes", got)
	}
	writes := queryString(t, e.root, "SELECT fence_writes FROM "+e.fence+".fenced_job_leases WHERE lease_name = 'guard:items'")
	if writes == "0" {
		t.Fatalf("the valid writes did not bump the lease row's write counter")
	}
	dbtest.AwaitGalera(t, c)
	n2 := dbtest.Open(t, c.Nodes[1].RootDSN(e.app))
	if got := queryString(t, n2, "SELECT v FROM items WHERE id = 1"); got != "odku" {
		t.Fatalf("node 2: items.v = %q", got)
	}
	fired1 := queryString(t, e.root, "SELECT COUNT(*) FROM fired")
	fired2 := queryString(t, n2, "SELECT COUNT(*) FROM fired")
	t.Logf("AFTER UPDATE trigger fired %s times on node 1 (where the writes ran), %s times on node 2 (its applier), fence_writes %s",
		fired1, fired2, writes)
	if fired1 == "0" || fired2 != "0" {
		t.Fatalf("triggers fired %s times on node 1 and %s on node 2: want some on node 1 and none on the applier", fired1, fired2)
	}
}

// TestGaleraProxyRaceWithGuardTriggers is TestGaleraProxyRace with the
// guard triggers installed: the proxy's guard and the triggers both bump
// the lease row's counter in the write's transaction. No stale commit, and
// no write the proxy let through trips a trigger (no database_guard
// record): the lease is the one the proxy's guard just checked, in the
// same transaction.
func TestGaleraProxyRaceWithGuardTriggers(t *testing.T) {
	c := dbtest.SharedGalera(t)
	d := galeraRaceDuration(t)
	schema, root := galeraRaceSchema(t, c)
	guardRaceTriggers(t, root, schema, lease.Galera)
	dbtest.AwaitGalera(t, c)
	rc, err := mysql.ParseDSN(c.Nodes[0].RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FP_TEST_GALERA_PW", rc.Passwd)
	tp := startProxy(t, c.Nodes[0].Addr, "fencing:\n  database_guard: triggers\ntables:\n  - name: "+schema+".runs\n  - name: "+schema+".events\n",
		"user: "+rc.User, "password_env: FP_TEST_GALERA_PW")
	from := galeraBinlogPos(t, c)
	counts := runGaleraRace(t, c, tp.DSN(dbserver.AppUser, dbserver.AppPassword, schema), fenceShape{name: "proxy", safe: true, write: writeVerbatim}, d)
	order := readCommitOrder(t, c, root, schema, from, 1, counts.taken())
	guard := series(t, tp.Reg, "fenceproxy_stale_writes_rejected_total", map[string]string{"reason": "database_guard"})
	t.Logf("through the proxy with guard triggers: clients: %d committed, %d rejected, %d conflicts, %d takeovers; node 3's binary log: %d row writes, "+
		"%d with token t after the takeover to t+1; database_guard records: %v", counts.committed.Load(), counts.rejected.Load(), counts.conflicts.Load(),
		counts.takeovers.Load(), order.writes, order.stale, guard)
	checkTakeoverCount(t, order, counts)
	if order.writes == 0 || order.takeovers == 0 {
		t.Fatalf("no race: %d writes, %d takeovers", order.writes, order.takeovers)
	}
	if order.stale > 0 {
		t.Errorf("%d writes with token t committed after the takeover to t+1", order.stale)
	}
	if guard != 0 {
		t.Errorf("%v writes the proxy fenced tripped a guard trigger", guard)
	}
}
