package integration

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Schema-aware fencing against the real server: writes that reach the
// protected table jobs through a view, a trigger, a cascading foreign key
// or a routine are fenced or refused through the proxy.

type catalogEnv struct {
	db    string
	root  *sql.DB
	proxy *testProxy
	store *lease.Store
	audit string
	user  string // the proxy's account
}

func newCatalogEnv(t *testing.T) *catalogEnv {
	t.Helper()
	s := dbtest.Shared(t)
	db, root := newLeaseDB(t, s)
	for _, q := range []string{
		"CREATE TABLE parent (id INT PRIMARY KEY)",
		"CREATE TABLE jobs (id INT AUTO_INCREMENT PRIMARY KEY, n INT NOT NULL DEFAULT 0, pid INT NULL, " +
			"CONSTRAINT fk_parent FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE)",
		"CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, x INT NOT NULL)",
		"CREATE TRIGGER orders_ai AFTER INSERT ON orders FOR EACH ROW INSERT INTO jobs (n) VALUES (NEW.x)",
		"CREATE VIEW v_jobs AS SELECT id, n, pid FROM jobs",
		"CREATE PROCEDURE touch() BEGIN UPDATE jobs SET n = n + 1; END",
		"CREATE FUNCTION bump() RETURNS INT BEGIN UPDATE jobs SET n = n + 1; RETURN 1; END",
		"INSERT INTO parent VALUES (1), (2)",
		"INSERT INTO jobs (n, pid) VALUES (10, 1), (20, 2)",
	} {
		mustExec(t, root, q)
	}
	user := "fpcat_" + db[len(db)-8:]
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'cat-Pw1'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO '" + user + "'@'%'",
		"GRANT INSERT, UPDATE ON `" + db + "`.fenced_job_leases TO '" + user + "'@'%'",
	} {
		mustExec(t, root, q)
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	t.Setenv("FP_TEST_CATALOG_PW", "cat-Pw1")
	auditFile := t.TempDir() + "/audit.jsonl"
	tp := startProxy(t, s.Addr, "tables:\n  - name: "+db+".jobs\naudit:\n  file: "+auditFile+"\n",
		"user: "+user, "password_env: FP_TEST_CATALOG_PW")
	store, err := lease.NewStore(root, db+".fenced_job_leases")
	if err != nil {
		t.Fatal(err)
	}
	return &catalogEnv{db: db, root: root, proxy: tp, store: store, audit: auditFile, user: user}
}

func (e *catalogEnv) session(t *testing.T, valid bool) *sql.Conn {
	t.Helper()
	c, err := appDB(t, e.proxy, e.db).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	name := "job:" + t.Name()
	l, err := e.store.Acquire(context.Background(), name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !valid {
		l.Token++ // a token the lease never had: stale
	}
	setFence(t, c, l)
	return c
}

func (e *catalogEnv) dump(t *testing.T) string {
	t.Helper()
	return tableDump(t, e.root, "jobs") + "--\n" + tableDump(t, e.root, "orders") + "--\n" + tableDump(t, e.root, "parent")
}

func (e *catalogEnv) audits(t *testing.T) int {
	t.Helper()
	fe := &fencedEnv{audits: e.audit}
	return len(fe.auditRecords(t))
}

// await waits for a catalog refresh after which ok holds.
func (e *catalogEnv) await(t *testing.T, what string, ok func(*catalog.Closure) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		n := e.proxy.Proxy.CatalogChecks()
		st, on := e.proxy.Proxy.CatalogState()
		if !on {
			t.Fatal("the proxy keeps no catalog")
		}
		if st.Snapshot != nil && st.Err == nil &&
			ok(catalog.Close(st.Snapshot, rewrite.ProtectedFor(e.proxy.Policy))) {
			return
		}
		if err := e.proxy.Proxy.WaitCatalog(ctx, n); err != nil {
			t.Fatalf("waiting for the catalog to show %s: %v", what, err)
		}
	}
}

func TestCatalogFencing(t *testing.T) {
	e := newCatalogEnv(t)
	ctx := context.Background()

	// Each write reaches jobs only through the catalog's objects.
	writes := []struct {
		name  string
		stmt  string
		check func(t *testing.T, r sql.Result)
	}{
		{"update through a view", "UPDATE v_jobs SET n = n + 1 WHERE id = 1", affected(1)},
		{"delete through a view", "DELETE FROM v_jobs WHERE id = 2", affected(1)},
		{"insert through a view", "INSERT INTO v_jobs (n) VALUES (30)", insertID(3)},
		{"insert into a trigger table", "INSERT INTO orders (x) VALUES (40)", insertID(1)},
		{"delete of a cascading parent", "DELETE FROM parent WHERE id = 1", affected(1)},
	}
	for _, w := range writes {
		t.Run(w.name+": stale", func(t *testing.T) {
			c := e.session(t, false)
			before, n := e.dump(t), e.audits(t)
			r, err := c.ExecContext(ctx, w.stmt)
			if err != nil {
				t.Fatalf("%s: %v", w.stmt, err)
			}
			if k, _ := r.RowsAffected(); k != 0 {
				t.Errorf("stale write affected %d rows", k)
			}
			if after := e.dump(t); after != before {
				t.Errorf("stale write changed the tables:\nbefore\n%s\nafter\n%s", before, after)
			}
			if got := e.audits(t); got != n+1 {
				t.Errorf("%d new audit records, want 1", got-n)
			}
		})
		t.Run(w.name+": valid", func(t *testing.T) {
			c := e.session(t, true)
			r, err := c.ExecContext(ctx, w.stmt)
			if err != nil {
				t.Fatalf("%s: %v", w.stmt, err)
			}
			w.check(t, r)
		})
	}
	t.Run("the valid writes had their effects", func(t *testing.T) {
		// id 1 (pid 1) went with its parent; id 2 through the view; 3 and
		// 4 were inserted through the view and by the trigger.
		if got, want := tableDump(t, e.root, "jobs"), "3|30|NULL\n4|40|NULL\n"; got != want {
			t.Errorf("jobs:\n%s\nwant\n%s", got, want)
		}
	})

	for _, q := range []string{"CALL touch()", "SELECT bump()", "SET @x = bump()", "DO bump()", "SELECT 1 FROM jobs WHERE n = bump()"} {
		t.Run("refused: "+q, func(t *testing.T) {
			c := e.session(t, true)
			before := e.dump(t)
			_, err := c.ExecContext(ctx, q)
			if err == nil || !strings.Contains(err.Error(), e.db+".jobs") || !(strings.Contains(err.Error(), ".touch") || strings.Contains(err.Error(), ".bump")) {
				t.Fatalf("%s: err %v, want a refusal naming the routine and the table", q, err)
			}
			if after := e.dump(t); after != before {
				t.Errorf("refused statement changed the tables")
			}
		})
	}

	t.Run("created directly on the server", func(t *testing.T) {
		mustExec(t, e.root, "CREATE TABLE late (id INT PRIMARY KEY)")
		mustExec(t, e.root, "CREATE TRIGGER late_bd BEFORE DELETE ON late FOR EACH ROW DELETE FROM jobs")
		mustExec(t, e.root, "INSERT INTO late VALUES (1)")
		e.await(t, "the trigger on late", func(c *catalog.Closure) bool { return c.Table(e.db, "late") != nil })
		c := e.session(t, false)
		before := e.dump(t)
		if r := mustExec(t, c, "DELETE FROM late"); rowsAffected(r) != 0 {
			t.Errorf("stale delete affected %d rows", rowsAffected(r))
		}
		if after := e.dump(t); after != before || queryString(t, e.root, "SELECT COUNT(*) FROM late") != "1" {
			t.Errorf("stale delete from late changed something")
		}
	})

	t.Run("created through the proxy", func(t *testing.T) {
		c := e.session(t, false)
		// DDL that names the protected table or a catalog object stays
		// refused: between it and the catalog's refresh, writes through
		// the new object would go unfenced.
		for _, q := range []string{
			"CREATE VIEW v_more AS SELECT * FROM v_jobs",
			"CREATE TRIGGER notes_ai AFTER INSERT ON orders FOR EACH ROW UPDATE jobs SET n = 0",
			"CREATE PROCEDURE again() BEGIN CALL touch(); END",
		} {
			if _, err := c.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "fenceproxy refused") {
				t.Errorf("%s: err %v, want a refusal", q, err)
			}
		}
		// A cascade into a cascading parent names neither: allowed, and
		// fenced from the statement after it on.
		mustExec(t, c, "CREATE TABLE grand (id INT PRIMARY KEY)")
		mustExec(t, c, "INSERT INTO grand VALUES (2)")
		mustExec(t, c, "ALTER TABLE parent ADD COLUMN gid INT NULL, ADD CONSTRAINT fk_grand FOREIGN KEY (gid) REFERENCES grand (id) ON DELETE CASCADE")
		mustExec(t, e.root, "UPDATE parent SET gid = 2 WHERE id = 2")
		mustExec(t, e.root, "INSERT INTO jobs (n, pid) VALUES (50, 2)")
		before := e.dump(t)
		if r := mustExec(t, c, "DELETE FROM grand WHERE id = 2"); rowsAffected(r) != 0 {
			t.Errorf("stale delete affected %d rows", rowsAffected(r))
		}
		if after := e.dump(t); after != before {
			t.Errorf("stale delete from grand cascaded:\nbefore\n%s\nafter\n%s", before, after)
		}
	})
}

// TestCatalogUnreadable: when the catalog cannot be read, writes to
// objects the last good catalog did not know are refused; the others are
// still decided with it.
func TestCatalogUnreadable(t *testing.T) {
	e := newCatalogEnv(t)
	ctx := context.Background()
	mustExec(t, e.root, "REVOKE TRIGGER ON *.* FROM '"+e.user+"'@'%'")
	mustExec(t, e.root, "CREATE TABLE newer (id INT PRIMARY KEY)")
	mustExec(t, e.root, "CREATE TRIGGER newer_ai AFTER INSERT ON newer FOR EACH ROW DELETE FROM jobs")
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		n := e.proxy.Proxy.CatalogChecks()
		if st, _ := e.proxy.Proxy.CatalogState(); st.Err != nil {
			break
		}
		if err := e.proxy.Proxy.WaitCatalog(deadline, n); err != nil {
			t.Fatalf("waiting for the catalog to fail: %v", err)
		}
	}
	c := e.session(t, true)
	before := e.dump(t)
	if _, err := c.ExecContext(ctx, "INSERT INTO newer VALUES (1)"); err == nil || !strings.Contains(err.Error(), "schema catalog") {
		t.Errorf("write to a table created while the catalog is unreadable: err %v, want a refusal", err)
	}
	if after := e.dump(t); after != before {
		t.Errorf("the refused write changed jobs")
	}
	if r := mustExec(t, c, "INSERT INTO orders (x) VALUES (5)"); rowsAffected(r) != 1 {
		t.Errorf("valid write to a known trigger table affected %d rows", rowsAffected(r))
	}
}

func affected(n int64) func(*testing.T, sql.Result) {
	return func(t *testing.T, r sql.Result) {
		t.Helper()
		if k, _ := r.RowsAffected(); k != n {
			t.Errorf("affected %d rows, want %d", k, n)
		}
	}
}

func insertID(id int64) func(*testing.T, sql.Result) {
	return func(t *testing.T, r sql.Result) {
		t.Helper()
		if k, _ := r.RowsAffected(); k != 1 {
			t.Errorf("affected %d rows, want 1", k)
		}
		if got, _ := r.LastInsertId(); got != id {
			t.Errorf("insert id %d, want %d (the stale attempt must not use AUTO_INCREMENT values)", got, id)
		}
	}
}
