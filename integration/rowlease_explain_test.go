package integration

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRowLeaseExplain: the per-row check adds no lookup of its own: the
// lease row is read once, by primary key, as for every fence, and the
// written table is read by the statement's own key. Measured with EXPLAIN
// through the proxy (the fence goes into an EXPLAINed write too; on
// Galera and TiDB the fence is the guard's own primary-key read).
func TestRowLeaseExplain(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("once per engine")
		}
		e := rowLeaseEnv(t, eng, "")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		for _, q := range []string{
			"EXPLAIN UPDATE invoice_rows SET amount = 1 WHERE customer_id = 'acme' AND id = 1",
			"EXPLAIN UPDATE invoice_rows SET amount = 1 WHERE id = 1",
			"EXPLAIN DELETE FROM invoice_rows WHERE customer_id = 'acme'",
		} {
			o := runQueryConn(c, q)
			if o.Err != "" {
				t.Fatalf("%s: %s", q, o.Err)
			}
			var lines []string
			for _, r := range o.Rows {
				lines = append(lines, strings.Join(r, " | "))
			}
			t.Logf("%s %s:\n%s", eng, q, strings.Join(lines, "\n"))
			plan := strings.Join(lines, "\n")
			switch eng {
			case engMariaDB:
				// The fence's subquery reads fence_l by PRIMARY, once.
				if !strings.Contains(plan, "fence_l") || !strings.Contains(plan, "PRIMARY") {
					t.Errorf("%s: the lease row is not read by primary key:\n%s", q, plan)
				}
			}
			if strings.Contains(q, "customer_id = 'acme' AND id = 1") && !strings.Contains(strings.ToLower(plan), "primary") &&
				!strings.Contains(plan, "Point_Get") && !strings.Contains(plan, "Batch_Point_Get") {
				t.Errorf("%s: the written row is not read by its key:\n%s", q, plan)
			}
		}
	})
}

// TestRowLeaseCost measures single-row autocommit UPDATEs through the
// proxy on a table with the session's lease and on a table with a lease
// template (200 each, p50), for docs/leases.md.
func TestRowLeaseCost(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		if !withAccount(t) {
			t.Skip("once per engine")
		}
		e := rowLeaseEnv(t, eng, "")
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2024-01', 1)")
		acme := e.acquire(t, "invoice:acme", time.Minute)
		c := e.session(t)
		setFence(t, c, acme)
		p50 := func(q string) time.Duration {
			var ds []time.Duration
			for i := 0; i < 200; i++ {
				start := time.Now()
				if _, err := c.ExecContext(context.Background(), q, i); err != nil {
					t.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		session := p50("UPDATE invoices SET amount = ? WHERE id = 1")
		row := p50("UPDATE invoice_rows SET amount = ? WHERE customer_id = 'acme' AND id = 1")
		t.Logf("%s: p50 single-row UPDATE, session lease %v, lease template %v", eng, session, row)
		// The UPDATE of one row in the text protocol, with the lease
		// pinned in its WHERE (the plain per-row condition) and unpinned
		// (the row-lease trap), interleaved so that both see the same
		// load.
		var pinned, trapped []time.Duration
		for i := 0; i < 200; i++ {
			for j, q := range []string{"UPDATE invoice_rows SET amount = amount + 1 WHERE customer_id = 'acme' AND id = 1",
				"UPDATE invoice_rows SET amount = amount + 1 WHERE id = 1"} {
				start := time.Now()
				mustAffect(t, c, 1, q)
				if j == 0 {
					pinned = append(pinned, time.Since(start))
				} else {
					trapped = append(trapped, time.Since(start))
				}
			}
		}
		med := func(ds []time.Duration) time.Duration {
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		t.Logf("%s: p50 single-row text UPDATE, pinned (plain condition) %v, unpinned (with the trap) %v", eng, med(pinned), med(trapped))
		// The same as a server-side prepared statement: go-sql-driver's
		// Exec with an argument (prepare, execute, close: the proxy
		// prepares the trapped variant too), and one statement prepared
		// once and executed 200 times (the executions alone).
		const plainQ, trapQ = "UPDATE invoice_rows SET amount = amount + 1 WHERE customer_id = 'acme' AND id = ?",
			"UPDATE invoice_rows SET amount = amount + 1 WHERE id = ?"
		pinned, trapped = nil, nil
		for i := 0; i < 200; i++ {
			for j, q := range []string{plainQ, trapQ} {
				start := time.Now()
				mustAffect(t, c, 1, q, 1)
				if j == 0 {
					pinned = append(pinned, time.Since(start))
				} else {
					trapped = append(trapped, time.Since(start))
				}
			}
		}
		t.Logf("%s: p50 single-row prepared UPDATE (prepare, execute, close), pinned %v, unpinned (with the trap) %v",
			eng, med(pinned), med(trapped))
		var stmts [2]*sql.Stmt
		for j, q := range []string{plainQ, trapQ} {
			st, err := c.PrepareContext(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			stmts[j] = st
		}
		pinned, trapped = nil, nil
		for i := 0; i < 200; i++ {
			for j, st := range stmts {
				start := time.Now()
				if _, err := st.Exec(1); err != nil {
					t.Fatal(err)
				}
				if j == 0 {
					pinned = append(pinned, time.Since(start))
				} else {
					trapped = append(trapped, time.Since(start))
				}
			}
		}
		t.Logf("%s: p50 single-row prepared UPDATE (execution only), pinned %v, unpinned (with the trap) %v",
			eng, med(pinned), med(trapped))
	})
}
