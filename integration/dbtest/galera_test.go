package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// variable reads one server variable.
func variable(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&v); err != nil {
		t.Fatalf("@@%s: %v", name, err)
	}
	return v.String
}

func TestGaleraNodesFormOneSyncedCluster(t *testing.T) {
	c := dbtest.SharedGalera(t)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	for i, s := range c.Nodes {
		t.Run("node"+strconv.Itoa(i+1), func(t *testing.T) {
			app := dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, ""))
			st, err := dbserver.WsrepStatus(context.Background(), app)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]string{"wsrep_cluster_size": "3", "wsrep_ready": "ON",
				"wsrep_local_state_comment": "Synced", "wsrep_cluster_status": "Primary"} {
				if st[k] != want {
					t.Errorf("%s = %q, want %q", k, st[k], want)
				}
			}
			for name, want := range map[string]string{"wsrep_on": "1", "binlog_format": "ROW", "innodb_autoinc_lock_mode": "2"} {
				if got := variable(t, app, name); got != want {
					t.Errorf("@@%s = %q, want %q", name, got, want)
				}
			}
			wantBinlog := "0"
			if s == c.BinlogNode() {
				wantBinlog = "1"
				if got := variable(t, app, "log_slave_updates"); got != "1" {
					t.Errorf("@@log_slave_updates = %q on the binlog node", got)
				}
			}
			if got := variable(t, app, "log_bin"); got != wantBinlog {
				t.Errorf("@@log_bin = %q, want %q", got, wantBinlog)
			}
			wrong, err := sql.Open("mysql", s.DSN(dbserver.AppUser, "wrong-password", ""))
			if err != nil {
				t.Fatal(err)
			}
			defer wrong.Close()
			wantAccessDenied(t, wrong.Ping())
		})
	}
}

// A row written on one node is on the others once they have applied it
// (wsrep_sync_wait=15 makes reads and writes wait for that: a node may
// not yet have applied a CREATE TABLE committed on another), and two nodes accept
// writes: the cluster is multi-primary, which is what the fence must
// survive.
func TestGaleraReplicatesWritesFromEveryNode(t *testing.T) {
	c := dbtest.SharedGalera(t)
	name := dbtest.NewDatabase(t, c.Nodes[0])
	dbtest.AwaitGalera(t, c)
	dbs := make([]*sql.DB, len(c.Nodes))
	for i, s := range c.Nodes {
		dbs[i] = dbtest.Open(t, s.DSN(dbserver.AppUser, dbserver.AppPassword, name)+"&wsrep_sync_wait=15")
	}
	if _, err := dbs[0].Exec("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, node INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for i, db := range dbs {
		if _, err := db.Exec("INSERT INTO t (node) VALUES (?)", i+1); err != nil {
			t.Fatalf("insert on node %d: %v", i+1, err)
		}
	}
	for i, db := range dbs {
		var n, sum int
		if err := db.QueryRow("SELECT COUNT(*), SUM(node) FROM t").Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if n != 3 || sum != 6 {
			t.Errorf("node %d sees %d rows (sum %d), want the 3 rows of nodes 1, 2, 3", i+1, n, sum)
		}
	}
}

func TestGaleraCloseLeavesNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := dbserver.StartGalera(ctx, dbserver.ClusterOptions{Nodes: 2})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { c.Close() })
	t.Logf("2-node cluster started in %s", c.Startup)
	var pids []int
	for _, s := range c.Nodes {
		text, err := os.ReadFile(s.Dir + "/pid")
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(text)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Dir %s still there: %v", c.Dir, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node pid %d still exists: kill(0) = %v", pid, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
