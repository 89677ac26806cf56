package integration

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// galeraEnv is a fencedEnv whose proxy is in front of node 1 of the shared
// cluster (backend.engine left at auto: the proxy must learn it is Galera),
// with admin connections to node 1 and node 2 that wait for the cluster's
// earlier commits before each statement (wsrep_sync_wait=15).
type galeraEnv struct {
	*fencedEnv
	c          *dbserver.Cluster
	node1      *sql.DB
	node2      *sql.DB
	fenceCount func() int
}

func newGaleraEnv(t *testing.T) *galeraEnv {
	t.Helper()
	c := dbtest.SharedGalera(t)
	// The full deployment (the proxy's own account, the catalog on), as
	// the documentation gives it: forEachEngine's bare runs cover the rest.
	e := newFencedEnv(t, envOptions{server: c.Nodes[0], account: true})
	dbtest.AwaitGalera(t, c)
	g := &galeraEnv{fencedEnv: e, c: c,
		node1: dbtest.Open(t, withParam(c.Nodes[0].RootDSN(e.db), "wsrep_sync_wait=15")),
		node2: dbtest.Open(t, withParam(c.Nodes[1].RootDSN(e.db), "wsrep_sync_wait=15")),
	}
	g.fenceCount = func() int {
		t.Helper()
		var n sql.NullInt64
		if err := g.node1.QueryRow("SELECT SUM(fence_writes) FROM fenced_job_leases").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return int(n.Int64)
	}
	return g
}

// takeOver moves lease name to the next token on node 2, as a worker there
// acquiring it would, and waits until node 1 has applied it.
func (g *galeraEnv) takeOver(t *testing.T, name string) {
	t.Helper()
	mustExec(t, g.node2, "UPDATE fenced_job_leases SET fence_token = fence_token + 1 WHERE lease_name = ?", name)
	queryString(t, g.node1, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ?", name)
}

// Every kind of write through the proxy on a Galera node: with a valid
// fence it has exactly the server's affected rows and bumps the lease
// row's write counter once (the Galera guard ran); after a takeover on
// another node it changes nothing and is audited as stale.
func TestGaleraProxyFencesEveryWrite(t *testing.T) {
	g := newGaleraEnv(t)
	mustExec(t, g.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1), (2, 'acme', '2026-02', 2)")
	l := g.acquire(t, "invoice:acme", time.Hour)
	a := g.session(t)
	setFence(t, a, l)
	writes := []struct {
		name string
		q    string
		want int64
	}{
		{"update", "UPDATE invoices SET amount = amount + 1 WHERE id = 1", 1},
		{"update changing nothing", "UPDATE invoices SET amount = amount WHERE id = 1", 0},
		{"update order limit", "UPDATE invoices SET amount = amount + 1 ORDER BY id DESC LIMIT 1", 1},
		{"insert", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-03', 3)", 1},
		{"insert on duplicate key update", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-03', 4) ON DUPLICATE KEY UPDATE amount = VALUES(amount)", 2},
		{"replace", "REPLACE INTO invoices (id, customer, period, amount) VALUES (2, 'acme', '2026-02', 5)", 2},
		{"multi-table update", "UPDATE invoices i JOIN notes n ON n.id = 1 SET i.amount = 9 WHERE i.id = 1", 0},
		{"delete", "DELETE FROM invoices WHERE id = 1", 1},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			before := g.fenceCount()
			if got := rowsAffected(mustExec(t, a, w.q)); got != w.want {
				t.Errorf("%d rows affected, want %d (what the server says of it)", got, w.want)
			}
			if n := g.fenceCount(); n != before+1 {
				t.Errorf("fence_writes went from %d to %d: the Galera guard did not run once", before, n)
			}
		})
	}
	t.Run("transaction", func(t *testing.T) {
		mustExec(t, a, "START TRANSACTION")
		mustExec(t, a, "UPDATE invoices SET amount = 20 WHERE id = 2")
		mustExec(t, a, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-04', 4)")
		mustExec(t, a, "COMMIT")
		if got := queryString(t, g.node2, "SELECT CONCAT(amount) FROM invoices WHERE id = 2"); got != "20.00" {
			t.Errorf("node 2 sees amount %s after the commit", got)
		}
	})

	g.takeOver(t, l.Name)
	dump := tableDump(t, g.node1, "invoices")
	for _, w := range writes {
		t.Run("stale "+w.name, func(t *testing.T) {
			if got := rowsAffected(mustExec(t, a, w.q)); got != 0 {
				t.Errorf("stale write: %d rows affected", got)
			}
		})
	}
	mustExec(t, a, "START TRANSACTION")
	if got := rowsAffected(mustExec(t, a, "UPDATE invoices SET amount = 30 WHERE id = 2")); got != 0 {
		t.Errorf("stale write in a transaction: %d rows affected", got)
	}
	mustExec(t, a, "COMMIT")
	if after := tableDump(t, g.node2, "invoices"); after != dump {
		t.Errorf("stale writes changed the table:\nbefore\n%s\nafter\n%s", dump, after)
	}
	eventually(t, 10*time.Second, "an audit record per stale write", func() bool {
		n := 0
		for _, r := range g.auditRecords(t) {
			if r.Reason == audit.StaleToken && r.Table == g.db+".invoices" && r.CurrentToken != nil && *r.CurrentToken == l.Token+1 {
				n++
			}
		}
		return n == len(writes)+1
	})
}

// A transaction through the proxy on node 1 holds a guarded write when a
// takeover commits on node 2: certification rolls the transaction back,
// and its COMMIT must fail with the engine's own 1213, audited as a
// conflict and counted, never report success.
func TestGaleraProxyCommitConflictIsTheEnginesError(t *testing.T) {
	g := newGaleraEnv(t)
	mustExec(t, g.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
	l := g.acquire(t, "invoice:acme", time.Hour)
	for _, iso := range []string{"READ-COMMITTED", "REPEATABLE-READ"} {
		t.Run(iso, func(t *testing.T) {
			a := g.session(t, "tx_isolation=%27"+iso+"%27")
			setFence(t, a, l)
			mustExec(t, a, "START TRANSACTION")
			if got := rowsAffected(mustExec(t, a, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")); got != 1 {
				t.Fatalf("fenced write before the takeover: %d rows", got)
			}
			before := tableDump(t, g.node1, "invoices")
			g.takeOver(t, l.Name)
			_, err := a.ExecContext(context.Background(), "COMMIT")
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1213 {
				t.Fatalf("COMMIT after the takeover on node 2: %v, want the server's error 1213", err)
			}
			if after := tableDump(t, g.node2, "invoices"); after != before {
				t.Errorf("the conflicting transaction changed the table:\n%s\nwas\n%s", after, before)
			}
			l.Token++ // the takeover's; the session keeps presenting the old one
		})
	}
	eventually(t, 10*time.Second, "two conflict audit records", func() bool {
		n := 0
		for _, r := range g.auditRecords(t) {
			if r.Reason == audit.Conflict && r.Table == g.db+".invoices" {
				n++
			}
		}
		return n == 2
	})
	if got := testutilCounter(t, g.proxy.Reg, "fenceproxy_stale_writes_rejected_total"); got != 2 {
		t.Errorf("fenceproxy_stale_writes_rejected_total = %v, want the 2 conflicts", got)
	}
}

// A lease table from before the write counter: on Galera the proxy cannot
// fence, and says to run fenceproxy init.
func TestGaleraProxyNeedsTheWriteCounter(t *testing.T) {
	g := newGaleraEnv(t)
	mustExec(t, g.root, "ALTER TABLE fenced_job_leases DROP COLUMN fence_writes")
	l := g.acquire(t, "invoice:acme", time.Hour)
	a := g.session(t)
	setFence(t, a, l)
	for _, q := range []string{
		"UPDATE invoices SET amount = 1 WHERE id = 1",
		"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-03', 3)",
		"DELETE FROM invoices",
	} {
		_, err := a.ExecContext(context.Background(), q)
		if err == nil || !strings.Contains(err.Error(), "fenceproxy init") || !strings.Contains(err.Error(), "fence_writes") {
			t.Errorf("%s without fence_writes: %v, want an error that says to run fenceproxy init", q, err)
		}
	}
	if n := queryString(t, g.node1, "SELECT COUNT(*) FROM invoices"); n != "0" {
		t.Errorf("%s rows written", n)
	}
}

// BenchmarkConnectEngine measures a new connection through the proxy (TCP,
// handshake, password authentication, first ping) with the engine learned
// at connect (auto: one SHOW VARIABLES) and given in the config (mariadb):
// go test -run '^$' -bench ConnectEngine -benchtime 2000x ./integration/.
func BenchmarkConnectEngine(b *testing.B) {
	s := dbtest.Shared(b)
	for _, engine := range []string{"auto", "mariadb"} {
		b.Run(engine, func(b *testing.B) {
			tp := startProxy(b, s.Addr, "", "engine: "+engine)
			cfg, err := mysql.ParseDSN(tp.DSN(dbserver.AppUser, dbserver.AppPassword, ""))
			if err != nil {
				b.Fatal(err)
			}
			connector, err := mysql.NewConnector(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := connector.Connect(ctx)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// ownerHash is what an audit record shows of an owner token: the first 16
// hex digits of its SHA-256.
func ownerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:])[:16]
}

// checkConflictRecord holds the audit record of a conflict against what
// the session presented (DESIGN.md's audit fields).
func checkConflictRecord(t *testing.T, r audit.Record, leaseName, table, owner string, token uint64, schema string) {
	t.Helper()
	if r.Reason != audit.Conflict || r.Lease != leaseName || r.Table != table || r.Outcome != "error" ||
		r.PresentedOwner != ownerHash(owner) || r.PresentedToken == nil || *r.PresentedToken != token ||
		r.Mode != "enforce" || r.User != dbserver.AppUser || r.Schema != schema || r.Digest == "" || r.Time.IsZero() ||
		strings.Contains(r.Digest, "owner") || strings.Contains(r.PresentedOwner, owner) {
		t.Errorf("conflict record %+v, want lease %q, table %s, owner %s, token %d, outcome error", r, leaseName, table, ownerHash(owner), token)
	}
}

// A takeover on node 2 brute-force aborts the open transaction of a
// fenced write on node 1: whichever statement of the client comes next
// (its COMMIT, another fenced write, an unfenced read) gets the engine's
// 1213 on a connection that stays usable, nothing of the transaction
// commits, and one record audits the conflict with the lease's name,
// whether it comes from @fence_lease or from the policy.
func TestGaleraProxyConflictAudit(t *testing.T) {
	g := newGaleraEnv(t)
	mustExec(t, g.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
	mustExec(t, g.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'new')")
	cases := []struct {
		name, lease, table, write, next string
	}{
		{"lease from @fence_lease, COMMIT", "invoice:commit", "invoices", "UPDATE invoices SET amount = amount + 1 WHERE id = 1", "COMMIT"},
		{"lease from @fence_lease, next fenced write", "invoice:next", "invoices", "UPDATE invoices SET amount = amount + 1 WHERE id = 1",
			"INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-09', 9)"},
		{"lease from @fence_lease, unfenced statement", "invoice:unfenced", "invoices", "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-08', 8)",
			"UPDATE notes SET body = 'x' WHERE id = 1"},
		{"fixed lease, COMMIT", "admin:reconciliation", "reconciliation_runs", "UPDATE reconciliation_runs SET status = 'running' WHERE id = 1", "COMMIT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := g.acquire(t, tc.lease, time.Hour)
			a := g.session(t)
			setFence(t, a, l)
			before := tableDump(t, g.node1, tc.table)
			records := len(g.auditRecords(t))
			mustExec(t, a, "START TRANSACTION")
			if got := rowsAffected(mustExec(t, a, tc.write)); got != 1 {
				t.Fatalf("fenced write before the takeover: %d rows", got)
			}
			g.takeOver(t, l.Name)
			_, err := a.ExecContext(context.Background(), tc.next)
			if errCode(err) != 1213 {
				t.Fatalf("%s after the takeover on node 2: %v, want the server's error 1213", tc.next, err)
			}
			if _, err := a.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Fatalf("the connection after the 1213: %v", err)
			}
			if after := tableDump(t, g.node2, tc.table); after != before {
				t.Errorf("the conflicting transaction changed %s:\n%s\nwas\n%s", tc.table, after, before)
			}
			var recs []audit.Record
			eventually(t, 10*time.Second, "the conflict's audit record", func() bool {
				recs = g.auditRecords(t)[records:]
				return len(recs) > 0
			})
			if len(recs) != 1 {
				t.Fatalf("%d audit records for one conflict: %+v", len(recs), recs)
			}
			checkConflictRecord(t, recs[0], l.Name, g.db+"."+tc.table, l.Owner, l.Token, g.db)
		})
	}
}

// guardRunning reports whether a Galera guard (the write-counter UPDATE)
// of the app account is executing on db's server.
func guardRunning(t *testing.T, db *sql.DB) bool {
	t.Helper()
	return queryString(t, db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE 'UPDATE %fenced_job_leases%fence_writes%'", dbserver.AppUser) != "0"
}

// A fenced write on Galera whose guard waits for the lease row (another
// open fenced transaction of the lease on the same node holds its lock)
// never hangs through the proxy: when the server gives up
// (innodb_lock_wait_timeout) the client gets the server's 1205 on a
// connection that stays usable and nothing is written; a shutdown
// (SIGTERM) force-closes such a write at its deadline instead of waiting
// for the server; and when its backend connection dies (KILL CONNECTION
// on the node) the client gets a MySQL error (1053, 08S01) at once.
func TestGaleraProxyBlockedWrite(t *testing.T) {
	cases := []struct {
		name     string
		lockWait int  // the blocked session's innodb_lock_wait_timeout, s
		shutdown bool // shut the proxy down while the write waits
		kill     bool // kill the write's backend connection while it waits
	}{
		{"lock wait timeout reaches the client", 1, false, false},
		{"shutdown force-closes the waiting write", 120, true, false},
		{"a killed backend connection reaches the client", 120, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGaleraEnv(t)
			l := g.acquire(t, "invoice:blocked", time.Hour)
			// The lease row's lock is held by a session of node 1's own,
			// not through the proxy: Shutdown force-closes every proxied
			// connection, and a holder among them would release the lock
			// in the moment between its close and the write's, letting
			// the write's guard finish and the proxy send the write
			// itself, which the server then runs from its socket buffer
			// (seen under load: "the blocked write left 1 rows"). A
			// client that disconnects from the server directly while its
			// statement runs gets that too; what this test checks is
			// that the proxy answers the waiting client and sends
			// nothing more for it.
			holder, herr := g.node1.Conn(context.Background())
			if herr != nil {
				t.Fatal(herr)
			}
			defer holder.Close()
			mustExec(t, holder, "START TRANSACTION")
			var locked string
			if herr := holder.QueryRowContext(context.Background(), "SELECT lease_name FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE", l.Name).Scan(&locked); herr != nil {
				t.Fatal(herr)
			}
			a := g.session(t)
			setFence(t, a, l)
			mustExec(t, a, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", tc.lockWait))
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := a.ExecContext(context.Background(), "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-02', 2)")
				done <- err
			}()
			if tc.shutdown || tc.kill {
				// The holder's guard has ended: a guard running now is the
				// blocked write's, waiting for the lease row.
				eventually(t, 20*time.Second, "the write's guard to wait for the lease row", func() bool { return guardRunning(t, g.node1) })
			}
			if tc.kill {
				id := queryString(t, g.node1, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE 'UPDATE %fenced_job_leases%fence_writes%'", dbserver.AppUser)
				mustExec(t, g.node1, "KILL CONNECTION "+id)
			}
			if tc.shutdown {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				if err := g.proxy.Proxy.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "force-closed") {
					t.Errorf("Shutdown with a write waiting: %v, want a report of force-closed connections", err)
				}
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("the blocked write got no answer in 60 s")
			}
			took := time.Since(start)
			switch {
			case !tc.shutdown && !tc.kill && errCode(err) != 1205:
				t.Fatalf("blocked write: %v, want the server's 1205", err)
			case (tc.shutdown || tc.kill) && err == nil:
				t.Fatalf("blocked write completed although its connection ended")
			case !tc.shutdown && !tc.kill && took > 5*time.Second+time.Duration(tc.lockWait)*time.Second, (tc.shutdown || tc.kill) && took > 10*time.Second:
				t.Errorf("the blocked write took %v to be answered", took)
			}
			if tc.kill {
				t.Logf("the blocked write after its backend connection was killed: %v", err)
			}
			if !tc.shutdown && !tc.kill {
				if _, err := a.ExecContext(context.Background(), "DO 1"); err != nil {
					t.Errorf("the connection after the 1205: %v", err)
				}
			}
			mustExec(t, holder, "ROLLBACK")
			if tc.shutdown || tc.kill {
				// The write's backend session ends once its guard gets
				// the lock and cannot answer.
				eventually(t, 20*time.Second, "the write's guard to end", func() bool { return !guardRunning(t, g.node1) })
			}
			if n := queryString(t, g.node2, "SELECT COUNT(*) FROM invoices WHERE period = '2026-02'"); n != "0" {
				t.Errorf("the blocked write left %s rows", n)
			}
		})
	}
}
