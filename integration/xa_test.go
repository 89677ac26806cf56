package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"testing"
	"time"
)

// XA: a branch's locks and XA PREPARE, measured directly on each engine,
// and the proxy's refusal of protected writes inside XA branches, tried
// through the proxy with a stale fence (the attack and variants).

// xaLockShapes are the ways a fence can lock the lease row: the guard's
// share lock, the in-statement fences' share locks, and the exclusive
// shapes that could survive XA PREPARE.
var xaLockShapes = []struct{ name, sql string }{
	{"guard: SELECT ... LOCK IN SHARE MODE", "SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'xa:job' LOCK IN SHARE MODE"},
	{"multi-table UPDATE JOIN", "UPDATE notes JOIN fenced_job_leases l ON l.lease_name = 'xa:job' SET notes.body = 'joined' WHERE notes.id = 1"},
	{"INSERT ... SELECT ... LOCK IN SHARE MODE", "INSERT INTO notes (body) SELECT 'selected' FROM fenced_job_leases WHERE lease_name = 'xa:job' LOCK IN SHARE MODE"},
	{"SELECT ... FOR UPDATE", "SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'xa:job' FOR UPDATE"},
	{"UPDATE of the lease row (Galera's guard)", "UPDATE fenced_job_leases SET fence_writes = fence_writes + 1 WHERE lease_name = 'xa:job'"},
}

// TestXAPrepareLocks measures, for each lock shape, whether a takeover of
// the lease waits for a prepared XA branch that locked the lease row.
func TestXAPrepareLocks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'x')")
		e.acquire(t, "xa:job", time.Minute)
		ctx := context.Background()
		for i, sh := range xaLockShapes {
			t.Run(sh.name, func(t *testing.T) {
				a, err := e.root.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				xid := fmt.Sprintf("'xa-locks-%d'", i)
				if _, err := a.ExecContext(ctx, "XA START "+xid); err != nil {
					t.Logf("XA START: %v", err)
					if eng == engTiDB || eng == engGalera {
						return // measured: TiDB has no XA (syntax error), Galera refuses it (1235)
					}
					t.Fatal(err)
				}
				// A branch that writes, as one carrying a fenced write does
				// (a read-only branch keeps its share locks past XA PREPARE).
				for _, q := range []string{sh.sql, "INSERT INTO notes (body) VALUES ('branch')"} {
					if _, err := a.ExecContext(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				mustExec(t, a, "XA END "+xid)
				mustExec(t, a, "XA PREPARE "+xid)
				defer a.ExecContext(ctx, "XA ROLLBACK "+xid)
				b, err := e.root.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				mustExec(t, b, "SET SESSION innodb_lock_wait_timeout = 1")
				start := time.Now()
				_, err = b.ExecContext(ctx, "UPDATE fenced_job_leases SET fence_token = fence_token WHERE lease_name = 'xa:job'")
				t.Logf("%s: a takeover after XA PREPARE: %v after %v", sh.name, err, time.Since(start).Round(time.Millisecond))
				waited := errNumber(err) == 1205
				exclusive := strings.Contains(sh.name, "FOR UPDATE") || strings.Contains(sh.name, "UPDATE of the lease row")
				if waited != exclusive {
					t.Errorf("the takeover waited: %v; measured on MariaDB 10.11: only exclusive locks survive XA PREPARE", waited)
				}
			})
		}
	})
}

// TestXAWritesRefused: through the proxy with the catalog on, no write to
// a protected table runs inside an XA branch, whichever way the branch or
// the write is started; a stale fence lands nothing, whatever follows
// (a takeover, XA COMMIT, XA COMMIT ONE PHASE, a disconnect and XA COMMIT
// from another session). Writes to other tables in XA branches still work.
func TestXAWritesRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		notOn(t, eng, "TiDB has no XA (XA START is a syntax error)", engTiDB)
		notOn(t, eng, "Galera refuses XA START (1235, measured in TestXAPrepareLocks)", engGalera)
		e := newFencedEnv(t, envOptions{engine: eng, account: true})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'old'), (2, 'old')")
		// The attack: the fence holds when the write runs in the
		// branch; after XA PREPARE the lease is taken over (the share
		// lock is gone), and XA COMMIT lands the write after the takeover.
		// fenced opens a session holding both leases; takeover takes them.
		var leaseName string
		fenced := func(t *testing.T, params ...string) *sql.Conn {
			s := e.session(t, params...)
			// Both tables' writes are fenced under it: reconciliation_runs
			// has it as its fixed lease, invoices takes @fence_lease.
			leaseName = "admin:reconciliation"
			mustExec(t, e.root, "UPDATE fenced_job_leases SET leased_until = SYSDATE(3) WHERE lease_name = ?", leaseName)
			setFence(t, s, e.acquire(t, leaseName, time.Minute))
			return s
		}
		takeover := func(t *testing.T) error {
			o, err := e.other.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			mustExec(t, o, "SET SESSION innodb_lock_wait_timeout = 2")
			_, err = o.ExecContext(ctx, "UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'taker', leased_until = SYSDATE(3) WHERE lease_name = ?", leaseName)
			return err
		}
		// prepareCommit ends branch xid: XA END, XA PREPARE, the takeover,
		// XA COMMIT.
		prepareCommit := func(t *testing.T, s *sql.Conn, xid string) []error {
			errs := xaRun(ctx, s, "XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
			errs = append(errs, takeover(t))
			return append(errs, xaRun(ctx, s, "XA COMMIT '"+xid+"'")...)
		}
		const runsUpdate = "UPDATE reconciliation_runs SET status = LEFT(CONCAT(status, '+'), 20) WHERE id = 1"
		attempts := []struct {
			name   string
			params []string
			run    func(t *testing.T, s *sql.Conn) []error
		}{
			{"guarded INSERT, XA PREPARE, takeover, XA COMMIT", nil, func(t *testing.T, s *sql.Conn) []error {
				errs := xaRun(ctx, s, "XA START 'a1'", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-01', 1)")
				return append(errs, prepareCommit(t, s, "a1")...)
			}},
			{"fenced UPDATE (in-statement fence), XA PREPARE, takeover, XA COMMIT", nil, func(t *testing.T, s *sql.Conn) []error {
				return append(xaRun(ctx, s, "XA BEGIN 'a2'", runsUpdate), prepareCommit(t, s, "a2")...)
			}},
			{"fenced UPDATE, XA COMMIT ONE PHASE", nil, func(t *testing.T, s *sql.Conn) []error {
				return xaRun(ctx, s, "XA START 'a3'", runsUpdate, "XA END 'a3'", "XA COMMIT 'a3' ONE PHASE")
			}},
			{"DELETE, XA PREPARE, disconnect, takeover, XA RECOVER and XA COMMIT from another session", nil, func(t *testing.T, s *sql.Conn) []error {
				errs := xaRun(ctx, s, "XA START 'a4'", "DELETE FROM reconciliation_runs WHERE id = 2", "XA END 'a4'", "XA PREPARE 'a4'")
				s.Raw(func(any) error { return driver.ErrBadConn }) // drop the session
				s.Close()
				errs = append(errs, takeover(t))
				o := e.session(t)
				return append(errs, xaRun(ctx, o, "XA RECOVER", "XA COMMIT 'a4'")...)
			}},
			{"EXECUTE of a prepared INSERT", nil, func(t *testing.T, s *sql.Conn) []error {
				errs := xaRun(ctx, s, "PREPARE p FROM 'INSERT INTO invoices (customer, period, amount) VALUES (''acme'', ''2026-02'', 1)'",
					"XA START 'a5'", "EXECUTE p")
				return append(errs, prepareCommit(t, s, "a5")...)
			}},
			{"COM_STMT_EXECUTE of a prepared INSERT", []string{"interpolateParams=false"}, func(t *testing.T, s *sql.Conn) []error {
				errs := xaRun(ctx, s, "XA START 'a6'")
				_, err := s.ExecContext(ctx, "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-03', 1)", "acme")
				return append(append(errs, err), prepareCommit(t, s, "a6")...)
			}},
			{"XA START and the write in one packet", []string{"multiStatements=true"}, func(t *testing.T, s *sql.Conn) []error {
				return append(xaRun(ctx, s, "XA START 'a7'; "+runsUpdate), prepareCommit(t, s, "a7")...)
			}},
			{"XA START inside a compound statement", nil, func(t *testing.T, s *sql.Conn) []error {
				return append(xaRun(ctx, s, "BEGIN NOT ATOMIC XA START 'a8'; "+runsUpdate+"; END"), prepareCommit(t, s, "a8")...)
			}},
			{"XA START through EXECUTE IMMEDIATE", nil, func(t *testing.T, s *sql.Conn) []error {
				return append(xaRun(ctx, s, "EXECUTE IMMEDIATE 'XA START ''a9'''", runsUpdate), prepareCommit(t, s, "a9")...)
			}},
			{"XA START through PREPARE and EXECUTE", nil, func(t *testing.T, s *sql.Conn) []error {
				errs := xaRun(ctx, s, "PREPARE x FROM 'XA START ''a10'''", "EXECUTE x",
					"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-04', 1)")
				return append(errs, prepareCommit(t, s, "a10")...)
			}},
			{"XA START as a prepared statement (COM_STMT_PREPARE)", []string{"interpolateParams=false"}, func(t *testing.T, s *sql.Conn) []error {
				var errs []error
				if st, err := s.PrepareContext(ctx, "XA START 'a11'"); err != nil {
					errs = append(errs, err)
				} else {
					_, err := st.ExecContext(ctx)
					errs = append(errs, err)
					st.Close()
				}
				return append(append(errs, xaRun(ctx, s, runsUpdate)...), prepareCommit(t, s, "a11")...)
			}},
			{"write to a table whose trigger writes a protected table", nil, func(t *testing.T, s *sql.Conn) []error {
				return append(xaRun(ctx, s, "XA START 'a12'", "INSERT INTO notes_trg (body) VALUES ('x')"), prepareCommit(t, s, "a12")...)
			}},
		}
		mustExec(t, e.root, "CREATE TABLE notes_trg (id INT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(10))")
		mustExec(t, e.root, "CREATE TRIGGER notes_trg_ai AFTER INSERT ON notes_trg FOR EACH ROW "+
			"INSERT INTO invoices (customer, period, amount) VALUES ('trigger', '2026-05', 1)")
		waitCatalogHas(t, e, "notes_trg")
		landed := 0
		for _, a := range attempts {
			t.Run(a.name, func(t *testing.T) {
				before := tableDump(t, e.root, "invoices") + tableDump(t, e.root, "reconciliation_runs")
				s := fenced(t, a.params...)
				errs := a.run(t, s)
				t.Logf("answers: %v", errs)
				e.sync(t)
				if got := tableDump(t, e.root, "invoices") + tableDump(t, e.root, "reconciliation_runs"); got != before {
					landed++
					t.Errorf("a write to a protected table ran in an XA branch (committed after the takeover):\n%s\nwant\n%s", got, before)
				}
				cleanupXA(t, e)
			})
		}
		t.Logf("%d XA attempts, %d landed a write", len(attempts), landed)

		// Valid work in XA branches: unprotected tables only.
		s := e.session(t)
		for _, q := range []string{"XA START 'ok'", "INSERT INTO notes (body) VALUES ('xa ok')", "XA END 'ok'"} {
			mustExec(t, s, q)
		}
		if _, err := s.ExecContext(ctx, "XA PREPARE 'ok'"); err == nil {
			mustExec(t, s, "XA COMMIT 'ok'")
		} else {
			t.Logf("XA PREPARE: %v", err)
			mustExec(t, s, "XA ROLLBACK 'ok'")
			mustExec(t, s, "XA START 'ok2'")
			mustExec(t, s, "INSERT INTO notes (body) VALUES ('xa ok')")
			mustExec(t, s, "XA END 'ok2'")
			mustExec(t, s, "XA COMMIT 'ok2' ONE PHASE")
		}
		if n := queryString(t, e.root, "SELECT COUNT(*) FROM notes WHERE body = 'xa ok'"); n != "1" {
			t.Errorf("the XA branch's write to an unprotected table: %s rows", n)
		}
		// After the branch, protected writes are fenced again, not refused.
		l := e.acquire(t, "invoice:valid", time.Minute)
		setFence(t, s, l)
		if r := mustExec(t, s, "INSERT INTO invoices (customer, period, amount) VALUES ('valid', '2026-06', 1)"); rowsAffected(r) != 1 {
			t.Error("a valid fenced write after the XA branch did not land")
		}
	})
}

// xaRun runs statements on s and returns each one's error (nil included).
func xaRun(ctx context.Context, s *sql.Conn, qs ...string) []error {
	var errs []error
	for _, q := range qs {
		_, err := s.ExecContext(ctx, q)
		errs = append(errs, err)
	}
	return errs
}

// cleanupXA rolls back every prepared branch left on the server.
func cleanupXA(t *testing.T, e *fencedEnv) {
	t.Helper()
	o := runQuery(e.root, "XA RECOVER")
	for _, r := range o.Rows {
		if len(r) == 4 {
			e.root.Exec("XA ROLLBACK '" + strings.ReplaceAll(r[3], "'", "''") + "'")
		}
	}
}

// waitCatalogHas waits until the proxy's catalog has read table name of
// the env's database.
func waitCatalogHas(t *testing.T, e *fencedEnv, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "the catalog to read "+name, func() bool {
		st, on := e.proxy.Proxy.CatalogState()
		if !on || st.Snapshot == nil {
			return false
		}
		for _, tb := range st.Snapshot.Tables {
			if tb.Schema == e.db && tb.Name == name {
				for _, tr := range st.Snapshot.Triggers {
					if tr.Schema == e.db && tr.Table == name {
						return true
					}
				}
			}
		}
		return false
	})
}
