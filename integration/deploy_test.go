package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// awaitCatalog waits, in the account deployment, for a catalog refresh
// after which ok holds for the closure of the env's protected tables.
func (e *fencedEnv) awaitCatalog(t *testing.T, what string, ok func(*catalog.Closure) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := e.proxy.Proxy
	for {
		n := p.CatalogChecks()
		st, on := p.CatalogState()
		if !on {
			t.Fatal("the proxy keeps no catalog")
		}
		if st.Snapshot != nil && st.Err == nil && ok(catalog.Close(st.Snapshot, rewrite.ProtectedFor(e.proxy.Policy))) {
			// The state is stored before the proxy has rebuilt its
			// rewriter with it; the next refresh runs after that, on the
			// same goroutine.
			if err := p.WaitCatalog(ctx, p.CatalogChecks()); err != nil {
				t.Fatalf("waiting for the refresh after the one that showed %s: %v", what, err)
			}
			return
		}
		if err := p.WaitCatalog(ctx, n); err != nil {
			t.Fatalf("waiting for the catalog to show %s: %v (last state: %v)", what, err, st.Err)
		}
	}
}

// TestCascadingDeleteFromParent: a parent table whose foreign key cascades
// into a protected table. With the proxy's account the catalog knows the
// cascade: a DELETE from the parent under a valid fence deletes (and
// cascades), under a stale one it changes nothing and is audited. On TiDB
// the catalog could not be read with the account at all (no mysql.func),
// and this valid DELETE was refused.
func TestCascadingDeleteFromParent(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, tables: []string{"order_lines"}})
		for _, q := range []string{
			"CREATE TABLE orders_head (id INT PRIMARY KEY)",
			"CREATE TABLE order_lines (id INT PRIMARY KEY, head INT, CONSTRAINT fk_head FOREIGN KEY (head) REFERENCES orders_head (id) ON DELETE CASCADE)",
			"INSERT INTO orders_head VALUES (1), (2)",
			"INSERT INTO order_lines VALUES (10, 1), (20, 2)",
		} {
			mustExec(t, e.root, q)
		}
		e.sync(t)
		account := withAccount(t)
		if account {
			e.awaitCatalog(t, "the cascade from orders_head", func(c *catalog.Closure) bool {
				return c.Table(e.db, "orders_head") != nil
			})
		}
		c := e.session(t)
		l := e.acquire(t, "lines:"+eng, time.Minute)
		setFence(t, c, l)
		ctx := context.Background()
		res, err := c.ExecContext(ctx, "DELETE FROM orders_head WHERE id = 1")
		if err != nil {
			t.Fatalf("a valid cascading DELETE from the parent: %v", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("a valid cascading DELETE affected %d rows, want 1", n)
		}
		e.sync(t)
		if got := tableDump(t, e.root, "order_lines"); strings.Contains(got, "10") {
			t.Fatalf("the cascade did not delete the child row:\n%s", got)
		}
		if !account {
			return // no catalog: the cascade is not fenced (catalog.refresh: 0s)
		}
		stale := l
		stale.Token++
		setFence(t, c, stale)
		res, err = c.ExecContext(ctx, "DELETE FROM orders_head WHERE id = 2")
		if err != nil {
			t.Fatalf("a stale cascading DELETE (on_stale zero_rows): %v", err)
		}
		if n, _ := res.RowsAffected(); n != 0 {
			t.Fatalf("a stale cascading DELETE affected %d rows", n)
		}
		e.sync(t)
		if got := tableDump(t, e.root, "order_lines"); !strings.Contains(got, "20") {
			t.Fatalf("a stale DELETE of the parent cascaded into the protected table:\n%s", got)
		}
		if recs := e.auditRecords(t); len(recs) == 0 || recs[len(recs)-1].Reason != "stale_token" {
			t.Fatalf("the stale cascading DELETE was not audited as stale_token: %+v", recs)
		}
	})
}

// TestCreatedLaterTableIsFencedOnceItAppears: a table declared
// created_later that a migration creates directly on the server after the
// proxy started is fenced from then on: by name at once, and through a
// view on it from the catalog refresh that sees the view.
func TestCreatedLaterTableIsFencedOnceItAppears(t *testing.T) {
	e := newFencedEnv(t, envOptions{createdLater: []string{"invoices_2027"}, account: true})
	ctx := context.Background()
	valid := e.session(t)
	l := e.acquire(t, "inv2027", time.Minute)
	setFence(t, valid, l)
	stale := e.session(t)
	old := l
	old.Token--
	setFence(t, stale, old)

	// Through the proxy, DDL that creates a protected table is refused (it
	// cannot be fenced): the migration runs on the server.
	if _, err := valid.ExecContext(ctx, "CREATE TABLE invoices_2027 (id INT PRIMARY KEY, amount INT NOT NULL)"); err == nil {
		t.Fatal("CREATE TABLE of a protected table passed through the proxy")
	}
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS invoices_2027 (id INT PRIMARY KEY, amount INT NOT NULL)",
		"INSERT INTO invoices_2027 VALUES (1, 10)",
		"CREATE VIEW v_2027 AS SELECT id, amount FROM invoices_2027",
	} {
		mustExec(t, e.root, q)
	}
	// By name, at once: no catalog refresh needed.
	for _, q := range []string{
		"UPDATE invoices_2027 SET amount = 99 WHERE id = 1",
		"DELETE FROM invoices_2027 WHERE id = 1",
		"INSERT INTO invoices_2027 VALUES (2, 20)",
	} {
		res, err := stale.ExecContext(ctx, q)
		if err != nil {
			t.Fatalf("stale %s: %v", q, err)
		}
		if n, _ := res.RowsAffected(); n != 0 {
			t.Fatalf("stale %s affected %d rows", q, n)
		}
	}
	e.awaitCatalog(t, "the view on invoices_2027", func(c *catalog.Closure) bool { return c.Table(e.db, "v_2027") != nil })
	res, err := stale.ExecContext(ctx, "UPDATE v_2027 SET amount = 98 WHERE id = 1")
	if err != nil {
		t.Fatalf("stale UPDATE through the view: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("stale UPDATE through the view affected %d rows", n)
	}
	if got := tableDump(t, e.root, "invoices_2027"); got != "1|10\n" {
		t.Fatalf("a stale write changed the created-later table:\n%s", got)
	}
	res, err = valid.ExecContext(ctx, "UPDATE v_2027 SET amount = 11 WHERE id = 1")
	if err != nil {
		t.Fatalf("valid UPDATE through the view: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("valid UPDATE through the view affected %d rows, want 1", n)
	}
	if n := len(e.auditRecords(t)); n != 5 {
		t.Errorf("%d audit records, want 5 (the refused CREATE TABLE, one per stale write)", n)
	}
}
