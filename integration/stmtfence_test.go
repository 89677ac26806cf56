package integration

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// A statement may carry its own fence (a sqlcommenter comment with
// fence_lease, fence_owner, fence_token): these tests run it through the
// proxy against the real engines.

// fencedPool opens a database/sql pool through the proxy whose statements
// carry the fence of their context (lease.FencedConnector).
func fencedPool(t testing.TB, e *fencedEnv, conns int) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(e.proxy.DSN(dbserver.AppUser, dbserver.AppPassword, e.db))
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(lease.FencedConnector(c))
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

// withComment is q with l's fence comment.
func withComment(t testing.TB, q string, l lease.Lease) string {
	t.Helper()
	s, err := lease.WithFenceComment(q, l)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// retryable: an engine's write conflict (Galera 1213, TiDB 9007), which
// means "not committed" and which an app retries.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 9007)
}

// Two jobs, each under its own lease, share one pool of 4 connections,
// 2 goroutines each. Every pooled connection carries job B's valid fence in
// its session variables, so a statement whose comment were ignored would be
// accepted under the wrong lease. Half-way job A's lease is taken over:
// from then on A's writes (stale comment) must all be rejected and B's and
// the new holder's all accepted.
func TestStmtFencePooledJobsWithTakeover(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		la := e.acquire(t, "job:a", time.Minute)
		lb := e.acquire(t, "job:b", time.Minute)
		db := fencedPool(t, e, 4)
		// Every connection of the pool gets B's fence in its session.
		var held []*sql.Conn
		for i := 0; i < 4; i++ {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			setFence(t, c, lb)
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		const n = 15
		type outcome struct {
			job      string
			phase    int
			affected int64
			err      error
		}
		var mu sync.Mutex
		var outs []outcome
		run := func(job string, phase int, l lease.Lease, g int, wg *sync.WaitGroup) {
			defer wg.Done()
			jctx := lease.WithFence(ctx, l)
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("%s-%d-%d-%d", job, phase, g, i)
				var res sql.Result
				var err error
				for try := 0; try < 20; try++ {
					if i%2 == 0 {
						res, err = db.ExecContext(jctx, "INSERT INTO invoices (customer, period, amount, token) VALUES (?, '2026-01', 1, ?)", id, l.Token)
					} else {
						res, err = db.ExecContext(jctx, "INSERT INTO notes (body) VALUES (?)", id) // unprotected: always runs
						if err == nil {
							res, err = db.ExecContext(jctx, "UPDATE invoices SET amount = amount + 1 WHERE customer LIKE ?", job+"-"+fmt.Sprint(phase)+"-%")
						}
					}
					if !retryable(err) {
						break
					}
				}
				var aff int64
				if err == nil {
					aff, _ = res.RowsAffected()
				}
				mu.Lock()
				outs = append(outs, outcome{job, phase, aff, err})
				mu.Unlock()
			}
		}
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(2)
			go run("a", 1, la, g, &wg)
			go run("b", 1, lb, g, &wg)
		}
		wg.Wait()
		// Takeover of job:a.
		if err := e.store.Release(ctx, la); err != nil {
			t.Fatal(err)
		}
		la2 := e.acquire(t, "job:a", time.Minute)
		if la2.Token != la.Token+1 {
			t.Fatalf("takeover token %d after %d", la2.Token, la.Token)
		}
		for g := 0; g < 2; g++ {
			wg.Add(3)
			go run("a", 2, la, g, &wg) // stale
			go run("b", 2, lb, g, &wg)
			go run("c", 2, la2, g, &wg) // the new holder of job:a
		}
		wg.Wait()
		for _, o := range outs {
			if o.err != nil {
				t.Errorf("job %s phase %d: %v", o.job, o.phase, o.err)
				continue
			}
			stale := o.job == "a" && o.phase == 2
			if stale && o.affected != 0 {
				t.Errorf("stale write of job a accepted (%d rows) under another fence", o.affected)
			}
			if !stale && o.affected == 0 {
				t.Errorf("job %s phase %d: a valid write was rejected", o.job, o.phase)
			}
		}
		e.sync(t)
		for _, c := range []struct {
			like string
			want string
		}{{"a-1-%", fmt.Sprint(2 * ((n + 1) / 2))}, {"a-2-%", "0"}, {"b-1-%", fmt.Sprint(2 * ((n + 1) / 2))},
			{"b-2-%", fmt.Sprint(2 * ((n + 1) / 2))}, {"c-2-%", fmt.Sprint(2 * ((n + 1) / 2))}} {
			if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer LIKE ?", c.like); got != c.want {
				t.Errorf("rows %s: %s, want %s", c.like, got, c.want)
			}
		}
		// Rejections were audited under A's lease with A's presented token
		// and owner hash, never B's (the session's).
		var stale int
		for _, r := range e.auditRecords(t) {
			if r.PresentedToken == nil || *r.PresentedToken != la.Token || r.Lease != "job:a" || r.PresentedOwner != lease.OwnerHash(la.Owner) {
				t.Errorf("audit record not under the comment's fence: %+v", r)
				continue
			}
			if r.Reason != audit.StaleToken && r.Reason != audit.OwnerMismatch {
				t.Errorf("reason %s", r.Reason)
			}
			stale++
		}
		if stale == 0 {
			t.Error("no audit record of job a's stale writes")
		}
		// The session variables are still B's on every connection.
		for i := 0; i < 4; i++ {
			if got := queryString(t, db, "SELECT HEX(@fence_owner)"); got != hex.EncodeToString([]byte(lb.Owner)) && got != strings.ToUpper(hex.EncodeToString([]byte(lb.Owner))) {
				t.Fatalf("a session's fence owner changed")
			}
		}
	})
}

// The comment overrides the session's fence whether that one is stale or
// valid; the next statement without a comment uses the session's again;
// prepared statements keep the comment's fence at every execution.
func TestStmtFenceOverridesSessionNoLeak(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
		la := e.acquire(t, "job:a", time.Minute)
		lb := e.acquire(t, "job:b", time.Minute)
		staleB := lb
		staleB.Token--
		c := e.session(t)
		upd := "UPDATE invoices SET amount = amount + 1 WHERE id = 1"
		affected := func(q string) int64 {
			t.Helper()
			var res sql.Result
			var err error
			for try := 0; try < 20; try++ {
				if res, err = c.ExecContext(ctx, q); !retryable(err) {
					break
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", strings.SplitN(q, "*/", 2)[len(strings.SplitN(q, "*/", 2))-1], err)
			}
			n, _ := res.RowsAffected()
			return n
		}
		// A stale session fence, a valid comment: accepted.
		setFence(t, c, staleB)
		if n := affected(withComment(t, upd, la)); n != 1 {
			t.Fatalf("valid comment over a stale session: %d rows", n)
		}
		// ... and the next statement without one is the session's: stale.
		if n := affected(upd); n != 0 {
			t.Fatalf("the comment's fence leaked to the next statement: %d rows", n)
		}
		// A valid session fence, a stale comment: rejected.
		setFence(t, c, lb)
		staleA := la
		staleA.Token++
		if n := affected(withComment(t, upd, staleA)); n != 0 {
			t.Fatalf("stale comment over a valid session: %d rows", n)
		}
		other := la
		other.Owner = "not-the-owner"
		if n := affected(withComment(t, upd, other)); n != 0 {
			t.Fatalf("wrong owner in the comment: %d rows", n)
		}
		if n := affected(upd); n != 1 {
			t.Fatalf("valid session after comments: %d rows", n)
		}
		// A read with a comment: relayed without its keys, rows intact.
		var amt, amt2 string
		if err := c.QueryRowContext(ctx, withComment(t, "SELECT amount FROM invoices WHERE id = 1", la)).Scan(&amt); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, withComment(t, "SELECT amount FROM invoices WHERE id = ?", la), 1).Scan(&amt2); err != nil {
			t.Fatal(err)
		}
		if amt != "3.00" || amt2 != amt {
			t.Fatalf("read with a comment: %s %s", amt, amt2)
		}
		// The session's variables were neither read nor changed.
		var owner, token string
		if err := c.QueryRowContext(ctx, "SELECT HEX(@fence_owner), @fence_token").Scan(&owner, &token); err != nil {
			t.Fatal(err)
		}
		if !strings.EqualFold(owner, hex.EncodeToString([]byte(lb.Owner))) || token != fmt.Sprint(lb.Token) {
			t.Fatalf("session fence changed: token %s", token)
		}
		// INSERT (guarded everywhere) the same way.
		ins := func(id int) string {
			return fmt.Sprintf("INSERT INTO invoices (id, customer, period, amount) VALUES (%d, 'c%d', '2026-01', 1)", id, id)
		}
		setFence(t, c, staleB)
		if n := affected(withComment(t, ins(10), la)); n != 1 {
			t.Fatalf("INSERT with a valid comment over a stale session: %d", n)
		}
		if n := affected(ins(11)); n != 0 {
			t.Fatalf("INSERT without comment on a stale session: %d", n)
		}
		setFence(t, c, lb)
		if n := affected(withComment(t, ins(12), staleA)); n != 0 {
			t.Fatalf("INSERT with a stale comment over a valid session: %d", n)
		}
		// A prepared statement (COM_STMT_PREPARE) carries its comment's
		// fence to every execution.
		setFence(t, c, staleB)
		st, err := c.PrepareContext(ctx, withComment(t, "UPDATE invoices SET amount = amount + ? WHERE id = 1", la))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for i := 0; i < 2; i++ {
			res, err := st.ExecContext(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("prepared execution %d under the comment's fence: %d rows", i, n)
			}
		}
		if err := e.store.Release(ctx, la); err != nil {
			t.Fatal(err)
		}
		e.acquire(t, "job:a", time.Minute)
		setFence(t, c, lb) // valid, but not the statement's
		res, err := st.ExecContext(ctx, 1)
		if err != nil && !retryable(err) {
			t.Fatal(err)
		}
		if err == nil {
			if n, _ := res.RowsAffected(); n != 0 {
				t.Fatalf("prepared statement after the takeover: %d rows", n)
			}
		}
		// A malformed comment on a protected write is refused, saying why.
		_, err = c.ExecContext(ctx, upd+" /*fence_lease='job%3Ab',fence_owner='x'*/")
		if err == nil || !strings.Contains(err.Error(), "lacks fence_token") {
			t.Fatalf("partial comment: %v", err)
		}
		_, err = c.ExecContext(ctx, "UPDATE invoices /*"+strings.TrimSuffix(strings.TrimPrefix(lease.FenceComment(lb), "/*"), "*/")+"*/ SET amount = 0 WHERE id = 1")
		if err == nil || !strings.Contains(err.Error(), "outside a fence comment") {
			t.Fatalf("comment in the middle: %v", err)
		}
	})
}

// The text the server receives holds no fence key and no owner: read back
// from information_schema.PROCESSLIST while the write waits for a row lock
// (every engine), and from MariaDB's general log.
func TestStmtFenceNotInServerText(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
		la := e.acquire(t, "job:a", time.Minute)
		la.Owner = "owner-secret-" + fmt.Sprint(time.Now().UnixNano())
		// Give the lease that owner, so the write must pass.
		mustExec(t, e.other, "UPDATE fenced_job_leases SET owner_token = ? WHERE lease_name = 'job:a'", la.Owner)
		e.sync(t)
		c := e.session(t)
		if eng == engMariaDB {
			read := generalLog(t, e)
			q := withComment(t, "UPDATE invoices SET amount = amount + 1 WHERE id = 1 /*traceparent='00-abc-def-01'*/", la)
			res, err := c.ExecContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d rows", n)
			}
			log := read()
			// The lease lookup stays a primary-key lookup with the owner
			// compared by digest: EXPLAIN of the fence's subquery as sent.
			i := strings.Index(log, "EXISTS (SELECT 1 FROM ")
			j := strings.Index(log, " LOCK IN SHARE MODE)")
			if i < 0 || j < i {
				t.Fatalf("no fence in the general log:\n%s", log)
			}
			sub := log[i+len("EXISTS (") : j]
			var id, selType, table, typ, possible, key, keyLen, ref, rows, extra sql.NullString
			if err := e.root.QueryRowContext(ctx, "EXPLAIN "+sub).Scan(&id, &selType, &table, &typ, &possible, &key, &keyLen, &ref, &rows, &extra); err != nil {
				t.Fatalf("EXPLAIN %s: %v", sub, err)
			}
			if typ.String != "const" || key.String != "PRIMARY" {
				t.Errorf("the statement fence's lease lookup is %s on %s, want const on PRIMARY", typ.String, key.String)
			}
			if !strings.Contains(log, "UPDATE invoices SET amount = amount + 1 WHERE (id = 1) AND EXISTS") || !strings.Contains(log, "/*traceparent='00-abc-def-01'*/") {
				t.Fatalf("the write is not in the general log:\n%s", log)
			}
			checkNoFence(t, "general log", log, la)
		}
		// PROCESSLIST: hold the row, let the fenced write wait on it.
		tx, err := e.root.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT * FROM invoices WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(ctx, withComment(t, "UPDATE invoices SET amount = amount + 5 WHERE id = 1 /*app='x'*/", la))
			done <- err
		}()
		var info string
		eventually(t, 20*time.Second, "the fenced write to show in PROCESSLIST", func() bool {
			var s sql.NullString
			err := e.root.QueryRowContext(ctx, "SELECT INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE '%amount + 5%' AND INFO NOT LIKE '%PROCESSLIST%' LIMIT 1").Scan(&s)
			if err == nil && s.Valid {
				info = s.String
				return true
			}
			return false
		})
		tx.Rollback()
		if err := <-done; err != nil && !retryable(err) {
			t.Fatal(err)
		}
		if !strings.Contains(info, "/*app='x'*/") {
			t.Errorf("PROCESSLIST shows %q", info)
		}
		checkNoFence(t, "PROCESSLIST", info, la)
	})
}

// A statement that writes nothing protected, with a malformed fence
// comment holding an owner (a missing quote, a partial comment, a bad
// escape, a bad token, a key twice, a line comment), runs and returns its
// rows, as a query and as a prepared statement; the comment goes whole, so
// the owner never reaches the server's general log. A protected write with
// such a comment is still refused, and so never sent.
func TestStmtFenceMalformedCommentNotInServerText(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	ctx := context.Background()
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1), (2, 'acme', '2026-02', 2)")
	owner := "owner-secret-" + fmt.Sprint(time.Now().UnixNano())
	c := e.session(t)
	read := generalLog(t, e)
	reads := []struct{ name, q string }{
		{"missing quote, at the end", "SELECT id FROM invoices ORDER BY id /*fence_lease='job%3Aa',fence_owner='" + owner + ",fence_token='1'*/"},
		{"partial, at the start", "/*fence_lease='job%3Aa',fence_owner='" + owner + "'*/ SELECT id FROM invoices ORDER BY id"},
		{"bad escape, between tokens", "SELECT id FROM invoices /*fence_lease='job%3Aa',fence_owner='" + owner + "%2',fence_token='1'*/ ORDER BY id"},
		{"bad token, with a traceparent", "SELECT id FROM invoices ORDER BY id /*traceparent='00-abc-def-01',fence_lease='job%3Aa',fence_owner='" + owner + "',fence_token='x'*/"},
		{"well-formed and a key twice", "/*fence_lease='job%3Aa',fence_owner='" + owner + "',fence_token='1'*/ SELECT id FROM invoices ORDER BY id /*fence_owner='" + owner + "',fence_owner='" + owner + "'*/"},
		{"line comment", "SELECT id FROM invoices ORDER BY id -- fence_owner='" + owner + "'"},
	}
	for _, r := range reads {
		for _, prepared := range []bool{false, true} {
			var rows *sql.Rows
			var err error
			if prepared {
				// An argument: go-sql-driver prepares it (COM_STMT_PREPARE).
				q := strings.Replace(r.q, "FROM invoices", "FROM invoices WHERE id > ?", 1)
				rows, err = c.QueryContext(ctx, q, 0)
			} else {
				rows, err = c.QueryContext(ctx, r.q)
			}
			if err != nil {
				t.Fatalf("%s (prepared %v): %v", r.name, prepared, err)
			}
			var ids []int
			for rows.Next() {
				var id int
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids) != "[1 2]" {
				t.Errorf("%s (prepared %v): rows %v, want [1 2]", r.name, prepared, ids)
			}
		}
	}
	// An unprotected write runs too; a protected one is refused.
	if _, err := c.ExecContext(ctx, "INSERT INTO notes (body) VALUES ('n') /*fence_lease='job%3Aa',fence_owner='"+owner+"'*/"); err != nil {
		t.Fatalf("unprotected write: %v", err)
	}
	_, err := c.ExecContext(ctx, "UPDATE invoices SET amount = 0 WHERE id = 1 /*fence_lease='job%3Aa',fence_owner='"+owner+"'*/")
	if err == nil || !strings.Contains(err.Error(), "lacks fence_token") {
		t.Fatalf("protected write: %v", err)
	}
	log := read()
	if n := strings.Count(log, "FROM invoices"); n < 2*len(reads) {
		t.Fatalf("%d reads in the general log, want %d:\n%s", n, 2*len(reads), log)
	}
	// The rest of the text as written: the comment between two tokens
	// left one space.
	if !strings.Contains(log, "Query\tSELECT id FROM invoices   ORDER BY id\n") {
		t.Errorf("the read with the comment between tokens is not in the general log as sent:\n%s", log)
	}
	checkNoFence(t, "general log", log, lease.Lease{Owner: owner})
	t.Logf("%d reads (query and prepared), 1 unprotected write: %d bytes of general log checked for the owner", len(reads), len(log))
}

func checkNoFence(t *testing.T, where, text string, l lease.Lease) {
	t.Helper()
	low := strings.ToLower(text)
	for _, s := range []string{"fence_lease=", "fence_owner=", "fence_token=", strings.ToLower(l.Owner),
		hex.EncodeToString([]byte(l.Owner))} {
		if strings.Contains(low, s) {
			t.Errorf("%s holds %q", where, s)
		}
	}
}

// generalLog turns MariaDB's general log on into a file for the rest of the
// test (on the test binary's own disposable server) and returns a function
// that turns it off and reads it.
func generalLog(t *testing.T, e *fencedEnv) func() string {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "general.log")
	mustExec(t, e.root, "SET GLOBAL general_log_file = ?", logFile)
	mustExec(t, e.root, "SET GLOBAL log_output = 'FILE'")
	mustExec(t, e.root, "SET GLOBAL general_log = ON")
	t.Cleanup(func() { e.root.Exec("SET GLOBAL general_log = OFF") })
	return func() string {
		mustExec(t, e.root, "SET GLOBAL general_log = OFF")
		b, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// Shadow mode forwards writes unfenced but still without the fence keys,
// and audits what would have been rejected under the comment's fence.
func TestStmtFenceShadowMode(t *testing.T) {
	e := newFencedEnv(t, envOptions{mode: "shadow"})
	ctx := context.Background()
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
	la := e.acquire(t, "job:a", time.Minute)
	c := e.session(t)
	setFence(t, c, la) // valid session: only the comment is stale
	stale := la
	stale.Token++
	read := generalLog(t, e)
	for _, q := range []string{"UPDATE invoices SET amount = 7 WHERE id = 1", "SELECT amount FROM invoices WHERE id = 1"} {
		if _, err := c.ExecContext(ctx, withComment(t, q, stale)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.PrepareContext(ctx, withComment(t, "UPDATE invoices SET amount = ? WHERE id = 1", stale))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecContext(ctx, 8); err != nil {
		t.Fatal(err)
	}
	st.Close()
	log := read()
	if !strings.Contains(log, "UPDATE invoices SET amount = 7 WHERE id = 1") {
		t.Fatalf("shadow mode did not forward the write:\n%s", log)
	}
	checkNoFence(t, "general log", log, stale)
	if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1"); got != "8.00" {
		t.Fatalf("amount %s", got)
	}
	var n int
	for _, r := range e.auditRecords(t) {
		if r.Mode != "shadow" || r.Reason != audit.StaleToken || r.Lease != "job:a" || r.PresentedToken == nil || *r.PresentedToken != stale.Token {
			t.Errorf("record %+v", r)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d shadow records, want 2", n)
	}
}

// Shadow mode runs a protected write that enforcing mode refuses for its
// fence comment (malformed, holding an owner; a fence key in a comment in
// the middle) unfenced, as shadow mode does, and audits the refusal; the
// comments that mention a fence key do not reach the server, so the owner
// is not in its general log. As a query and as a prepared statement. One
// whose text the proxy cannot read with certainty is refused.
func TestStmtFenceShadowRefusedWithoutOwner(t *testing.T) {
	e := newFencedEnv(t, envOptions{mode: "shadow"})
	ctx := context.Background()
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
	owner := "owner-secret-" + fmt.Sprint(time.Now().UnixNano())
	malformed := "/*fence_lease='job%3Aa',fence_owner='" + owner + ",fence_token='1'*/" // the owner's closing quote missing
	c := e.session(t)                                                                   // no session fence: the write runs unfenced
	read := generalLog(t, e)
	for _, q := range []string{
		"UPDATE invoices SET amount = 7 WHERE id = 1 " + malformed,
		"UPDATE invoices /*fence_lease='job%3Aa',fence_owner='" + owner + "',fence_token='1'*/ SET amount = amount - 1 WHERE id = 1",
	} {
		res, err := c.ExecContext(ctx, q)
		if err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%.40s: %d rows", q, n)
		}
	}
	if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1"); got != "6.00" {
		t.Fatalf("amount %s after the two queries, want 6.00", got)
	}
	// An argument: go-sql-driver prepares it (COM_STMT_PREPARE).
	st, err := c.PrepareContext(ctx, "UPDATE invoices SET amount = ? WHERE id = 1 "+malformed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecContext(ctx, 8); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// Under gbk a byte >= 0x80 may hide the quote after it: the proxy
	// cannot tell where the comments are, so nothing is sent.
	g := e.session(t)
	mustExec(t, g, "SET NAMES gbk")
	if _, err := g.ExecContext(ctx, "UPDATE invoices SET customer = '\xbf\\' WHERE id = 1 "+malformed); err == nil ||
		!strings.Contains(err.Error(), "so it was not sent") {
		t.Fatalf("a fence key in a text the proxy cannot read: %v", err)
	}
	log := read()
	if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1"); got != "8.00" {
		t.Fatalf("amount %s after the prepared write, want 8.00", got)
	}
	// The server strips the trailing space the removed comment left.
	for _, want := range []string{"Query\tUPDATE invoices SET amount = 7 WHERE id = 1\n",
		"Query\tUPDATE invoices   SET amount = amount - 1 WHERE id = 1\n",
		"Prepare\tUPDATE invoices SET amount = ? WHERE id = 1\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("%q is not in the general log:\n%s", want, log)
		}
	}
	checkNoFence(t, "general log", log, lease.Lease{Owner: owner})
	outcomes := map[string]int{}
	for _, r := range e.auditRecords(t) {
		if r.Mode != "shadow" || r.Reason != audit.Refused || r.Outcome == "shadow" && !strings.HasSuffix(r.Table, "invoices") {
			t.Errorf("record %+v", r)
		}
		if strings.Contains(r.Detail, owner) || strings.Contains(r.Digest, "secret") {
			t.Errorf("the audit record holds the owner: %+v", r)
		}
		outcomes[r.Outcome]++
	}
	if outcomes["shadow"] != 3 || outcomes["refused"] != 1 || len(outcomes) != 2 {
		t.Fatalf("audit outcomes %v, want 3 shadow (two queries, one prepare) and 1 refused (gbk)", outcomes)
	}
	t.Logf("2 queries and 1 prepared write ran in shadow mode, 1 unreadable refused; %d bytes of general log checked for the owner", len(log))
}

// The Go client: a transaction begun with a fenced context fences every
// statement in it; the Keeper's loss of the lease cancels the context and
// with it the job's statements.
func TestStmtFenceGoClientTxAndKeeper(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	ctx := context.Background()
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
	la := e.acquire(t, "job:a", 2*time.Second)
	db := fencedPool(t, e, 1)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := la
	stale.Token--
	setFence(t, c, stale) // the only connection's session: stale
	c.Close()
	jobCtx, k := e.store.Keep(ctx, la, 2*time.Second, lease.WithInterval(100*time.Millisecond))
	defer k.Stop()
	fctx := lease.WithFence(jobCtx, la)
	tx, err := db.BeginTx(fctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Statements of the transaction run with a plain context: still fenced.
	for i := 0; i < 3; i++ {
		res, err := tx.ExecContext(ctx, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("statement %d of the fenced transaction: %d rows", i, n)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// After the transaction the connection's statements are the session's.
	res, err := db.ExecContext(ctx, "UPDATE invoices SET amount = amount + 1 WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("the transaction's fence outlived it: %d rows", n)
	}
	// Take the lease over: the Keeper's renewal fails and cancels the job.
	mustExec(t, e.other, "UPDATE fenced_job_leases SET owner_token = 'thief', fence_token = fence_token + 1 WHERE lease_name = 'job:a'")
	select {
	case <-jobCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Keeper did not cancel the job after the takeover")
	}
	if _, err := db.ExecContext(fctx, "UPDATE invoices SET amount = 100 WHERE id = 1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write after the loss: %v", err)
	}
	if got := queryString(t, e.root, "SELECT amount FROM invoices WHERE id = 1"); got != "4.00" {
		t.Fatalf("amount %s", got)
	}
}

// on_stale: error: the rejection's error and audit record are the
// comment's fence's (its lease and token), not the session's.
func TestStmtFenceOnStaleError(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, onStale: "error"})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
		la := e.acquire(t, "job:a", time.Minute)
		lb := e.acquire(t, "job:b", time.Minute)
		c := e.session(t)
		setFence(t, c, lb) // valid: the comment's stale fence must decide
		stale := la
		stale.Token += 5
		for _, q := range []string{"UPDATE invoices SET amount = 9 WHERE id = 1",
			"INSERT INTO invoices (id, customer, period, amount) VALUES (2, 'b', '2026-01', 1)"} {
			_, err := c.ExecContext(ctx, withComment(t, q, stale))
			if err == nil || !strings.Contains(err.Error(), "lease 'job:a'") || !strings.Contains(err.Error(), fmt.Sprintf("presented %d", stale.Token)) {
				t.Fatalf("%s: %v", q, err)
			}
			if strings.Contains(err.Error(), stale.Owner) {
				t.Fatal("the error names the owner")
			}
		}
		recs := e.auditRecords(t)
		if len(recs) != 2 {
			t.Fatalf("%d records", len(recs))
		}
		for _, r := range recs {
			if r.Reason != audit.StaleToken || r.Lease != "job:a" || r.PresentedToken == nil || *r.PresentedToken != stale.Token ||
				r.CurrentToken == nil || *r.CurrentToken != la.Token || r.PresentedOwner != lease.OwnerHash(la.Owner) {
				t.Errorf("record %+v", r)
			}
		}
		if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE amount = 9 OR id = 2"); got != "0" {
			t.Fatalf("a rejected write landed: %s", got)
		}
	})
}

// In a multi-statement query each statement is fenced by its own comment,
// or by the session's fence when it has none.
func TestStmtFenceMultiStatement(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		for _, onStale := range []string{"zero_rows", "error"} {
			t.Run(onStale, func(t *testing.T) {
				e := newFencedEnv(t, envOptions{engine: eng, onStale: onStale})
				ctx := context.Background()
				mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-01', 1)")
				la := e.acquire(t, "job:a", time.Minute)
				stale := la
				stale.Token++
				db := appDB(t, e.proxy, e.db, "multiStatements=true")
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				setFence(t, c, stale)
				q := withComment(t, "UPDATE invoices SET amount = amount + 1 WHERE id = 1", la) + "; " +
					withComment(t, "INSERT INTO invoices (id, customer, period, amount) VALUES (4, 'd', '2026-01', 1)", la) + "; " +
					"UPDATE invoices SET amount = amount + 10 WHERE id = 1; " +
					withComment(t, "INSERT INTO invoices (id, customer, period, amount) VALUES (3, 'c', '2026-01', 1)", stale)
				_, err = c.ExecContext(ctx, q)
				if onStale == "error" {
					// The third statement (the session's stale fence) stops
					// the query.
					if err == nil || !strings.Contains(err.Error(), "stale write") {
						t.Fatalf("on_stale error: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				e.sync(t)
				if got := tableDump(t, e.root, "invoices"); !strings.HasPrefix(got, "1|acme|2026-01|2.00|") ||
					!strings.Contains(got, "\n4|d|") || strings.Contains(got, "\n3|c|") {
					t.Fatalf("invoices:\n%s", got)
				}
			})
		}
	})
}

// A statement prepared with a fence comment while its table was not
// protected is held by the server without a fence (only the comment's keys
// were removed): once a reload protects the table, executing it is refused.
func TestStmtFencePreparedBeforeReload(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		ctx := context.Background()
		mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'n')")
		la := e.acquire(t, "job:a", time.Minute)
		c := e.session(t)
		stmt, err := c.PrepareContext(ctx, withComment(t, "UPDATE notes SET body = ? WHERE id = 1", la))
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		if r, err := stmt.ExecContext(ctx, "before"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("unprotected write before the reload: %v", err)
		}
		audit := "audit:\n  file: " + e.audits + "\n"
		base := "tables:\n  - name: " + e.db + ".reconciliation_runs\n    lease: admin:reconciliation\n  - name: " + e.db + ".invoices\n"
		e.proxy.reload(t, "log_level: debug\n"+audit+base)
		if r, err := stmt.ExecContext(ctx, "same policy"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("write after a reload that does not touch fencing: %v", err)
		}
		e.proxy.reload(t, audit+base+"  - name: "+e.db+".notes\n")
		if _, err := stmt.ExecContext(ctx, "stale prepare"); err == nil || !strings.Contains(err.Error(), "prepare it again") {
			t.Fatalf("execute of a statement the server holds unfenced after notes became protected: %v", err)
		}
		if got := queryString(t, e.root, "SELECT body FROM notes WHERE id = 1"); got != "same policy" {
			t.Fatalf("body %q", got)
		}
		// Prepared again, it carries the comment's fence.
		stmt2, err := c.PrepareContext(ctx, withComment(t, "UPDATE notes SET body = ? WHERE id = 1", la))
		if err != nil {
			t.Fatal(err)
		}
		defer stmt2.Close()
		if r, err := stmt2.ExecContext(ctx, "fenced"); err != nil || rowsAffected(r) != 1 {
			t.Fatalf("prepared again under the comment's fence: %v", err)
		}
	})
}
