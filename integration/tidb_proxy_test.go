package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// tidbProxy is a proxy in front of the shared tidb-server, fencing items
// with the lease from @fence_lease.
type tidbProxy struct {
	*tidbEnv
	tp *testProxy
}

func newTiDBProxy(t testing.TB) *tidbProxy {
	t.Helper()
	e := newTiDBEnv(t)
	yml := "tables:\n  - name: " + e.db + ".items\naudit:\n  file: " + filepath.Join(t.TempDir(), "audit.jsonl") + "\n"
	// The full deployment (the proxy's own account, the catalog on), as
	// the documentation gives it: the engine suite ran without the account
	// alone and missed that TiDB's catalog could not be read with it.
	return &tidbProxy{tidbEnv: e, tp: startProxy(t, e.srv.Addr, yml, proxyAccount(t, e.srv, e.db)...)}
}

// session is one app connection through the proxy with a fence context.
func (p *tidbProxy) session(t *testing.T, lease, owner string, token uint64) *sql.Conn {
	t.Helper()
	c, err := appDB(t, p.tp, p.db).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := setFenceVars(context.Background(), c, lease, owner, token); err != nil {
		t.Fatal(err)
	}
	return c
}

func (p *tidbProxy) audits(reason string) []audit.Record {
	var out []audit.Record
	for _, r := range p.tp.Audit.Recent(1000) {
		if r.Reason == reason {
			out = append(out, r)
		}
	}
	return out
}

func (p *tidbProxy) rejectedMetric(t *testing.T, reason string) float64 {
	t.Helper()
	mfs, err := p.tp.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "fenceproxy_stale_writes_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestTiDBProxyFencesEveryWrite: through the proxy on TiDB, UPDATE, DELETE
// and INSERT with a valid fence change what they change directly, and with
// a stale token change nothing and are audited, in autocommit and in
// pessimistic and optimistic transactions.
func TestTiDBProxyFencesEveryWrite(t *testing.T) {
	p := newTiDBProxy(t)
	ctx := context.Background()
	b := p.conn(t) // takeovers, directly
	for i, mode := range []string{"autocommit", "pessimistic", "optimistic"} {
		t.Run(mode, func(t *testing.T) {
			lname := "w-" + mode
			p.newLease(t, lname, "owner-A")
			base := int64(1000 * (i + 1))
			mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0), (?, 0, 0)", base, base+1)
			a := p.session(t, lname, "owner-A", 1)
			stmts := []struct {
				sql  string
				rows int64
			}{
				{fmt.Sprintf("UPDATE items SET v = v + 1, token = @fence_token WHERE id = %d", base), 1},
				{fmt.Sprintf("DELETE FROM items WHERE id = %d", base+1), 1},
				{fmt.Sprintf("INSERT INTO items (id, v, token) VALUES (%d, 7, @fence_token)", base+2), 1},
			}
			run := func(wantRows func(int64) int64) {
				t.Helper()
				if mode != "autocommit" {
					mustExec(t, a, "BEGIN "+mode)
				}
				for _, s := range stmts {
					r := mustExec(t, a, s.sql)
					if got, want := rowsAffected(r), wantRows(s.rows); got != want {
						t.Errorf("%s: %d rows, want %d", s.sql, got, want)
					}
				}
				if mode != "autocommit" {
					mustExec(t, a, "COMMIT")
				}
			}
			run(func(n int64) int64 { return n })
			if got := queryString(t, p.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', v, ':', token) ORDER BY id) FROM items WHERE id >= ? AND id < ?", base, base+1000); got != fmt.Sprintf("%d:1:1,%d:7:1", base, base+2) {
				t.Fatalf("after the valid writes: %s", got)
			}
			if _, _, err := takeover(ctx, b, "pessimistic", lname, "owner-B"); err != nil {
				t.Fatal(err)
			}
			before := len(p.audits(audit.StaleToken))
			// The same statements again (the INSERT of a new id, the DELETE
			// of an existing row) with the old token.
			stmts[1].sql = fmt.Sprintf("DELETE FROM items WHERE id = %d", base)
			stmts[2].sql = fmt.Sprintf("INSERT INTO items (id, v, token) VALUES (%d, 7, @fence_token)", base+3)
			run(func(int64) int64 { return 0 })
			if got := queryString(t, p.root, "SELECT GROUP_CONCAT(CONCAT(id, ':', v, ':', token) ORDER BY id) FROM items WHERE id >= ? AND id < ?", base, base+1000); got != fmt.Sprintf("%d:1:1,%d:7:1", base, base+2) {
				t.Errorf("stale writes changed rows: %s", got)
			}
			if got := len(p.audits(audit.StaleToken)) - before; got != 3 {
				t.Errorf("%d stale_token audit records, want 3", got)
			}
		})
	}
}

// TestTiDBProxyOpenTransactions: through the proxy, a fenced write in an
// open pessimistic transaction makes a takeover wait for its commit, and in
// an optimistic transaction the takeover wins and the writer's COMMIT fails
// with TiDB's 9007, which is audited as a conflict and counted.
func TestTiDBProxyOpenTransactions(t *testing.T) {
	p := newTiDBProxy(t)
	ctx := context.Background()
	b := p.conn(t)
	var bSession uint64
	if err := b.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&bSession); err != nil {
		t.Fatal(err)
	}
	for i, kind := range tidbKinds {
		id := int64(100 + i)
		if kind != "INSERT" {
			mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0)", id)
		}
		t.Run("pessimistic/"+kind, func(t *testing.T) {
			lname := "p-" + kind
			p.newLease(t, lname, "owner-A")
			a := p.session(t, lname, "owner-A", 1)
			mustExec(t, a, "BEGIN PESSIMISTIC")
			if r := mustExec(t, a, clientSQL(kind, id)); rowsAffected(r) != 1 {
				t.Fatalf("valid fenced %s changed %d rows", kind, rowsAffected(r))
			}
			done := make(chan error, 1)
			var bTS uint64
			go func() {
				var err error
				_, bTS, err = takeover(ctx, b, "pessimistic", lname, "owner-B")
				done <- err
			}()
			eventually(t, 20*time.Second, "the takeover to wait for the writer's lock", func() bool {
				select {
				case err := <-done:
					t.Fatalf("the takeover finished while the fenced transaction was open: %v", err)
				default:
				}
				return queryString(t, p.root, "SELECT COUNT(*) FROM information_schema.tidb_trx WHERE session_id = ? AND state = 'LockWaiting'", bSession) != "0"
			})
			mustExec(t, a, "COMMIT")
			aTS, err := lastCommitTS(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if bTS < aTS {
				t.Errorf("the takeover committed (ts %d) before the fenced write (ts %d)", bTS, aTS)
			}
		})
		t.Run("optimistic/"+kind, func(t *testing.T) {
			lname := "o-" + kind
			p.newLease(t, lname, "owner-A")
			oid := id + 10
			if kind != "INSERT" {
				mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0)", oid)
			}
			before, beforeMetric := len(p.audits(audit.Conflict)), p.rejectedMetric(t, audit.Conflict)
			a := p.session(t, lname, "owner-A", 1)
			mustExec(t, a, "BEGIN OPTIMISTIC")
			if r := mustExec(t, a, clientSQL(kind, oid)); rowsAffected(r) != 1 {
				t.Fatalf("valid fenced %s changed %d rows", kind, rowsAffected(r))
			}
			if _, _, err := takeover(ctx, b, "pessimistic", lname, "owner-B"); err != nil {
				t.Fatal(err)
			}
			_, err := a.ExecContext(ctx, "COMMIT")
			if errCode(err) != 9007 {
				t.Fatalf("COMMIT after the takeover: %v, want TiDB's error 9007", err)
			}
			want := "0:0"
			if kind == "INSERT" {
				want = "none"
			}
			if got := queryString(t, p.root, "SELECT COALESCE((SELECT CONCAT(v, ':', token) FROM items WHERE id = ?), 'none')", oid); got != want {
				t.Errorf("the stale transaction changed the row: %q", got)
			}
			recs := p.audits(audit.Conflict)
			if len(recs) != before+1 {
				t.Fatalf("%d conflict audit records, want %d", len(recs), before+1)
			}
			r := recs[len(recs)-1]
			if r.Lease != lname || r.Table != p.db+".items" || r.PresentedToken == nil || *r.PresentedToken != 1 || r.Outcome != "error" ||
				r.PresentedOwner != ownerHash("owner-A") || r.Schema != p.db || r.Digest == "" || r.Mode != "enforce" {
				t.Errorf("conflict record: %+v", r)
			}
			if got := p.rejectedMetric(t, audit.Conflict) - beforeMetric; got != 1 {
				t.Errorf("fenceproxy_stale_writes_rejected_total{reason=conflict} rose by %v, want 1", got)
			}
		})
	}
}

// TestTiDBProxyRace is the randomized race through the proxy: three writers
// (one of them in autocommit mode only, after a LOCK TABLES, which TiDB
// ignores) send plain UPDATE,
// DELETE and INSERT through fenceproxy (explicit
// pessimistic and optimistic transactions at both isolation levels, and
// autocommit under both tidb_txn_mode values) with the token they last saw,
// until a write changes nothing or fails; a direct session takes the lease
// over every 1-15 ms. No writer transaction may commit with token t after
// the takeover to t+1 (TiDB's commit timestamps), and every 9007 a writer
// got in a transaction in which a write passed its guard is one conflict
// audit record (counted).
func TestTiDBProxyRace(t *testing.T) {
	if testing.Short() {
		t.Skip("randomized race of 30 s")
	}
	runFor := tidbRaceDuration(t)
	p := newTiDBProxy(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s", seed, runFor)
	const lname = "race-proxy"
	p.newLease(t, lname, "owner-0")
	st := &raceStats{takeovers: map[uint64]uint64{}, conflicts: map[string]int{}}
	// stop ends the run (raceStop); no statement runs under it
	// (raceWriter.run).
	stop, cancel := raceStop(runFor, st)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	const writers = 3
	errc := make(chan error, writers+1)
	b := p.conn(t)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1000))
		for n := 1; stop.Err() == nil; n++ {
			time.Sleep(time.Duration(1+rng.IntN(15)) * time.Millisecond) // pacing, not synchronisation
			mode := []string{"pessimistic", "optimistic"}[rng.IntN(2)]
			tok, ts, err := takeover(context.Background(), b, mode, lname, fmt.Sprintf("owner-%d", n))
			if err != nil {
				errc <- fmt.Errorf("takeover: %w", err)
				return
			}
			st.mu.Lock()
			st.takeovers[tok] = ts
			st.mu.Unlock()
		}
	}()
	for w := 0; w < writers; w++ {
		c, err := appDB(t, p.tp, p.db).Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if w == 0 {
			// TiDB accepts LOCK TABLES as a no-op (warning 1235), also of
			// the protected table, and the proxy then believes tables are
			// locked: its autocommit writes must still be wrapped in a
			// transaction with their guard.
			mustExec(t, p.root, "CREATE TABLE IF NOT EXISTS plain_items LIKE items")
			mustExec(t, c, "LOCK TABLES items WRITE, plain_items WRITE")
		}
		base := int64(w) * 10_000_000
		wr := &raceWriter{c: c, root: p.root, st: st, shape: shapeProxy, lease: lname,
			rng: rand.New(rand.NewPCG(seed, uint64(w))), nextID: base, counter: base, autocommitOnly: w == 0}
		mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0)", base)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := wr.run(stop); err != nil {
				errc <- fmt.Errorf("writer: %w", err)
			}
		}()
	}
	wg.Wait()
	t.Logf("ran %s", time.Since(began).Round(time.Millisecond))
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	stale, byMode := st.staleCommits()
	conflicts := 0
	for k, n := range st.conflicts {
		if strings.HasPrefix(k, "9007 ") && !strings.HasSuffix(k, "(no write passed)") {
			conflicts += n
		}
	}
	// The metric counts every audit record (the in-memory log keeps only
	// the latest 1000).
	audited := int(p.rejectedMetric(t, audit.Conflict))
	t.Logf("takeovers %d  committed writer txns %d  refused statements %d  stale commits %d %v  not committed %v  conflicts audited %d",
		len(st.takeovers), len(st.commits), st.rejected, stale, byMode, sortedCounts(st.conflicts), audited)
	if stale > 0 {
		t.Errorf("%d writer transactions committed through the proxy after the takeover to the next token", stale)
	}
	if !st.exercised() {
		t.Errorf("the run did not exercise the race in %s: %d takeovers, %d commits, %d refused", raceLimit*runFor, len(st.takeovers), len(st.commits), st.rejected)
	}
	if audited != conflicts {
		t.Errorf("%d conflicts audited for %d errors 9007 the writers got after a write passed its guard", audited, conflicts)
	}
}

// TestTiDBProxyLeaseFunctions: the SQL lease functions answered by the
// proxy work on TiDB, and the fence follows them.
func TestTiDBProxyLeaseFunctions(t *testing.T) {
	p := newTiDBProxy(t)
	ctx := context.Background()
	c, err := appDB(t, p.tp, p.db).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (1, 0, 0)")
	var tok sql.NullInt64
	if err := c.QueryRowContext(ctx, "SELECT fence_acquire('job', 30)").Scan(&tok); err != nil || !tok.Valid {
		t.Fatalf("fence_acquire: %v %v", tok, err)
	}
	if r := mustExec(t, c, "UPDATE items SET v = v + 1, token = @fence_token WHERE id = 1"); rowsAffected(r) != 1 {
		t.Fatal("write under a fresh lease changed nothing")
	}
	var n int
	if err := c.QueryRowContext(ctx, "SELECT fence_renew(30)").Scan(&n); err != nil || n != 1 {
		t.Fatalf("fence_renew: %d %v", n, err)
	}
	if err := c.QueryRowContext(ctx, "SELECT fence_release()").Scan(&n); err != nil || n != 1 {
		t.Fatalf("fence_release: %d %v", n, err)
	}
	if r := mustExec(t, c, "UPDATE items SET v = v + 1 WHERE id = 1"); rowsAffected(r) != 0 {
		t.Fatal("write after fence_release changed a row")
	}
	if got := queryString(t, p.root, "SELECT CONCAT(v, ':', token) FROM items WHERE id = 1"); got != fmt.Sprintf("1:%d", tok.Int64) {
		t.Errorf("row: %s", got)
	}
	if recs := p.audits(audit.Expired); len(recs) != 1 {
		t.Errorf("%d expired audit records, want 1", len(recs))
	}
}

// TestTiDBProxyStaleForms tries to get a stale UPDATE, DELETE or INSERT
// through the proxy on TiDB by the other ways a statement can reach the
// server: the binary protocol, SQL-level PREPARE/EXECUTE, and a packet of
// several statements. With a valid fence each form writes.
func TestTiDBProxyStaleForms(t *testing.T) {
	p := newTiDBProxy(t)
	ctx := context.Background()
	b := p.conn(t)
	forms := []struct {
		name string
		run  func(t *testing.T, c *sql.Conn, id int64) int64
	}{
		{"binary protocol", func(t *testing.T, c *sql.Conn, id int64) int64 {
			var n int64
			for _, q := range []string{"UPDATE items SET v = v + 1, token = @fence_token WHERE id = ?", "DELETE FROM items WHERE id = ? + 1", "INSERT INTO items (id, v, token) VALUES (? + 2, 0, @fence_token)"} {
				n += rowsAffected(mustExec(t, c, q, id))
			}
			return n
		}},
		{"PREPARE and EXECUTE", func(t *testing.T, c *sql.Conn, id int64) int64 {
			var n int64
			mustExec(t, c, "SET @id = ?", id)
			for i, q := range []string{"UPDATE items SET v = v + 1, token = @fence_token WHERE id = ?", "DELETE FROM items WHERE id = ? + 1", "INSERT INTO items (id, v, token) VALUES (? + 2, 0, @fence_token)"} {
				name := fmt.Sprintf("s%d", i)
				mustExec(t, c, "PREPARE "+name+" FROM '"+q+"'")
				n += rowsAffected(mustExec(t, c, "EXECUTE "+name+" USING @id"))
				mustExec(t, c, "DEALLOCATE PREPARE "+name)
			}
			return n
		}},
		{"one packet", func(t *testing.T, c *sql.Conn, id int64) int64 {
			q := fmt.Sprintf("UPDATE items SET v = v + 1, token = @fence_token WHERE id = %d; DELETE FROM items WHERE id = %d; INSERT INTO items (id, v, token) VALUES (%d, 0, @fence_token)", id, id+1, id+2)
			mustExec(t, c, q)
			return -1 // database/sql reports one count for the packet: the rows tell
		}},
	}
	for i, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			lname := fmt.Sprintf("forms-%d", i)
			p.newLease(t, lname, "owner-A")
			dump := func(id int64) string {
				return queryString(t, p.root, "SELECT COALESCE(GROUP_CONCAT(CONCAT(id, ':', v, ':', token) ORDER BY id), '') FROM items WHERE id BETWEEN ? AND ?", id, id+2)
			}
			valid := int64(10_000 * (i + 1))
			stale := valid + 100
			mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0), (?, 0, 0), (?, 0, 0), (?, 0, 0)", valid, valid+1, stale, stale+1)
			c, err := appDB(t, p.tp, p.db, "multiStatements=true").Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := setFenceVars(ctx, c, lname, "owner-A", 1); err != nil {
				t.Fatal(err)
			}
			if n := f.run(t, c, valid); n != 3 && n != -1 {
				t.Errorf("valid fence: %d rows, want 3", n)
			}
			if got, want := dump(valid), fmt.Sprintf("%d:1:1,%d:0:1", valid, valid+2); got != want {
				t.Errorf("valid fence: rows %s, want %s", got, want)
			}
			if _, _, err := takeover(ctx, b, "pessimistic", lname, "owner-B"); err != nil {
				t.Fatal(err)
			}
			if n := f.run(t, c, stale); n != 0 && n != -1 {
				t.Errorf("stale fence: %d rows, want 0", n)
			}
			if got, want := dump(stale), fmt.Sprintf("%d:0:0,%d:0:0", stale, stale+1); got != want {
				t.Errorf("stale fence changed rows: %s, want %s", got, want)
			}
		})
	}
}

// TestTiDBProxyLockTables: TiDB accepts LOCK TABLES of a protected table
// through the proxy, as a no-op (warning 1235) unless enable-table-lock is
// set (FENCEPROXY_TEST_TIDB_DSN can name such a server), and after it a
// fenced write still holds: with a valid fence it changes
// its row, after a takeover it changes nothing and is audited, in
// autocommit mode (the proxy wraps guard and write in a transaction even
// though the session "holds" table locks) and in pessimistic and
// optimistic transactions.
func TestTiDBProxyLockTables(t *testing.T) {
	p := newTiDBProxy(t)
	ctx := context.Background()
	b := p.conn(t)
	modes := []struct{ name, begin string }{
		{"autocommit", ""},
		{"pessimistic", "BEGIN PESSIMISTIC"},
		{"optimistic", "BEGIN OPTIMISTIC"},
	}
	n := 0
	for _, kind := range tidbKinds {
		for _, m := range modes {
			n++
			valid, stale := int64(20_000+n*10), int64(20_000+n*10+1)
			t.Run(kind+"/"+m.name, func(t *testing.T) {
				lname := fmt.Sprintf("lock-tables-%d", n)
				p.newLease(t, lname, "owner-A")
				if kind != "INSERT" {
					mustExec(t, p.root, "INSERT INTO items (id, v, token) VALUES (?, 0, 0), (?, 0, 0)", valid, stale)
				}
				a := p.session(t, lname, "owner-A", 1)
				mustExec(t, a, "LOCK TABLES items WRITE")
				defer mustExec(t, a, "UNLOCK TABLES")
				switch w := warningCodes(t, a); w {
				case "1235": // enable-table-lock off, the harness's tidb-server
				case "":
					if n == 1 {
						t.Log("enable-table-lock is on: the table lock is real")
					}
				default:
					t.Errorf("warnings after LOCK TABLES: %q, want TiDB's 1235 (LOCK TABLES is not enabled) or none", w)
				}
				write := func(id int64) int64 {
					t.Helper()
					if m.begin != "" {
						mustExec(t, a, m.begin)
					}
					got := rowsAffected(mustExec(t, a, clientSQL(kind, id)))
					if m.begin != "" {
						mustExec(t, a, "COMMIT")
					}
					return got
				}
				row := func(id int64) string {
					t.Helper()
					// Read by the session holding the lock: with
					// enable-table-lock other sessions may not read the table.
					var s string
					if err := a.QueryRowContext(ctx, "SELECT COALESCE((SELECT CONCAT(v, ':', token) FROM items WHERE id = ?), 'none')", id).Scan(&s); err != nil {
						t.Fatal(err)
					}
					return s
				}
				if got := write(valid); got != 1 {
					t.Errorf("valid fenced %s after LOCK TABLES: %d rows, want 1", kind, got)
				}
				if _, _, err := takeover(ctx, b, "pessimistic", lname, "owner-B"); err != nil {
					t.Fatal(err)
				}
				before, audits := row(stale), len(p.audits(audit.StaleToken))
				if got := write(stale); got != 0 {
					t.Errorf("stale %s after LOCK TABLES: %d rows, want 0", kind, got)
				}
				if after := row(stale); after != before {
					t.Errorf("stale %s after LOCK TABLES changed the row: %s, was %s", kind, after, before)
				}
				recs := p.audits(audit.StaleToken)
				if len(recs) != audits+1 || recs[len(recs)-1].Lease != lname {
					t.Errorf("stale %s after LOCK TABLES: %d new stale_token records (lease %q), want 1 for %s", kind, len(recs)-audits, lastLease(recs), lname)
				}
			})
		}
	}
}

func lastLease(recs []audit.Record) string {
	if len(recs) == 0 {
		return ""
	}
	return recs[len(recs)-1].Lease
}

// warningCodes is SHOW WARNINGS' codes, comma-separated.
func warningCodes(t *testing.T, c *sql.Conn) string {
	t.Helper()
	rows, err := c.QueryContext(context.Background(), "SHOW WARNINGS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var codes []string
	for rows.Next() {
		var level, code, msg string
		if err := rows.Scan(&level, &code, &msg); err != nil {
			t.Fatal(err)
		}
		codes = append(codes, code)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(codes, ",")
}
