package integration

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// TestGuardTriggersOnARowReplica: a replica applying a ROW binary log runs
// no trigger with slave_run_triggers_for_rbr NO (the default) or YES (which
// skips events whose primary ran triggers): guarded writes replicate. With
// ENFORCE it runs the guard for every applied row, its applier has no fence,
// and replication stops with the guard's error. A MyISAM table written by
// an AFTER trigger with @@server_id shows where triggers ran.
func TestGuardTriggersOnARowReplica(t *testing.T) {
	if os.Getenv(dbtest.EnvDSN) != "" {
		t.Skip("needs two servers of its own, which only the harness starts")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := dbserver.Start(ctx, dbserver.Options{Binlog: true})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { primary.Close() })
	replica, err := dbserver.Start(ctx, dbserver.Options{})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { replica.Close() })
	p := dbtest.Open(t, primary.RootDSN(""))
	r := dbtest.Open(t, replica.RootDSN(""))

	var file string
	var pos int64
	var ignore1, ignore2 any
	if err := p.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &ignore1, &ignore2); err != nil {
		t.Fatal(err)
	}
	pc, err := mysql.ParseDSN(primary.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	host, port := splitHostPort(t, primary.Addr)
	for _, q := range []string{
		"SET GLOBAL server_id = 2",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %s, MASTER_USER = '%s', MASTER_PASSWORD = '%s', "+
			"MASTER_LOG_FILE = '%s', MASTER_LOG_POS = %d, MASTER_USE_GTID = no", host, port, pc.User, pc.Passwd, file, pos),
		"START SLAVE",
	} {
		mustExec(t, r, q)
	}
	t.Cleanup(func() { r.Exec("STOP SLAVE") })

	for _, q := range []string{
		"CREATE DATABASE ra",
		"CREATE TABLE ra.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL)",
		"CREATE TABLE ra.fired (server_id INT NOT NULL) ENGINE=MyISAM",
		"CREATE TRIGGER ra.t_ai AFTER INSERT ON ra.t FOR EACH ROW INSERT INTO ra.fired VALUES (@@server_id)",
	} {
		mustExec(t, p, q)
	}
	if err := lease.CreateSchema(ctx, p, "ra."+lease.DefaultTable); err != nil {
		t.Fatal(err)
	}
	pconn, err := p.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close()
	if _, err := lease.PartitionForGuards(ctx, pconn, "ra", lease.DefaultTable); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.InstallGuardTriggers(ctx, pconn, lease.TriggerSpec{Schema: "ra", Table: "t",
		Fence: lease.GuardSpec{Schema: "ra", Table: lease.DefaultTable, Vars: guardVars}}); err != nil {
		t.Fatal(err)
	}
	store, err := lease.NewStore(p, "ra."+lease.DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	l, err := store.Acquire(ctx, "job", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	setFence(t, w, l)
	slave := func() (running string, errno int, msg string) {
		t.Helper()
		rows, err := r.QueryContext(ctx, "SHOW SLAVE STATUS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if !rows.Next() {
			t.Fatal("SHOW SLAVE STATUS: no row")
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			switch c {
			case "Slave_SQL_Running":
				running = vals[i].String
			case "Last_SQL_Errno":
				fmt.Sscan(vals[i].String, &errno)
			case "Last_SQL_Error":
				msg = vals[i].String
			}
		}
		return
	}
	replicated := func(id int) bool {
		var n int
		return r.QueryRow("SELECT COUNT(*) FROM ra.t WHERE id = ?", id).Scan(&n) == nil && n == 1
	}

	for i, mode := range []string{"NO", "YES"} {
		id := i + 1
		mustExec(t, r, "STOP SLAVE")
		mustExec(t, r, "SET GLOBAL slave_run_triggers_for_rbr = "+mode)
		mustExec(t, r, "START SLAVE")
		mustExec(t, w, fmt.Sprintf("INSERT INTO ra.t VALUES (%d, 'valid fence')", id))
		eventually(t, 30*time.Second, "the replica to apply row "+fmt.Sprint(id), func() bool {
			if running, errno, msg := slave(); running != "Yes" {
				t.Fatalf("slave_run_triggers_for_rbr=%s: replication stopped: %d %s", mode, errno, msg)
			}
			return replicated(id)
		})
		// The MyISAM rows are the primary's (logged as rows): none has
		// the replica's server id.
		if n := queryString(t, r, "SELECT COUNT(*) FROM ra.fired WHERE server_id = 2"); n != "0" {
			t.Fatalf("slave_run_triggers_for_rbr=%s: a trigger ran on the replica (%s rows)", mode, n)
		}
	}
	mustExec(t, r, "STOP SLAVE")
	mustExec(t, r, "SET GLOBAL slave_run_triggers_for_rbr = ENFORCE")
	mustExec(t, r, "START SLAVE")
	mustExec(t, w, "INSERT INTO ra.t VALUES (3, 'valid fence')")
	var msg string
	eventually(t, 30*time.Second, "the replica's applier to stop on the guard", func() bool {
		running, errno, m := slave()
		msg = m
		return running == "No" && errno == lease.GuardErrno
	})
	if replicated(3) || !strings.Contains(msg, "refused (no_fence)") {
		t.Fatalf("ENFORCE: row 3 replicated %v; error %q", replicated(3), msg)
	}
	t.Logf("slave_run_triggers_for_rbr=ENFORCE: %s", msg)
}
