package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// The proxy's model of the session follows the server after every answer,
// errors included. An ERR carries no status flags, and some errors end
// the client's transaction (a deadlock, a failed COMMIT, a failing
// statement that commits implicitly) while most leave it open: after each
// one, what the proxy decides (here: whether a lease function may run,
// which it refuses inside a transaction) must agree with what the server
// says of the session, measured from the server itself.

// errCase produces one error on a session through the proxy. begin opens
// the transaction the error happens in ("" : the case does).
type errCase struct {
	name    string
	engines []string // nil: every engine
	begin   string
	// noMarker: the error is the first statement after begin (no row of
	// the transaction to look for).
	noMarker bool
	run      func(t *testing.T, e *fencedEnv, s *sql.Conn) error
	code     uint16 // the error the session must have got
}

// inTxQuery asks the server whether the session is in a transaction.
func inTxQuery(eng string) string {
	if eng == engTiDB {
		return "SELECT @@tidb_current_ts <> 0"
	}
	return "SELECT @@in_transaction"
}

// errNumber is the MySQL error number of err, 0 if it has none.
func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// blockOn holds row id of notes locked in a direct transaction of
// another session until the test ends or release is called.
func blockOn(t *testing.T, e *fencedEnv, id int) (release func()) {
	t.Helper()
	o, err := e.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, o, "BEGIN")
	mustExec(t, o, "UPDATE notes SET body = 'held' WHERE id = ?", id)
	var once sync.Once
	release = func() {
		once.Do(func() {
			o.ExecContext(context.Background(), "ROLLBACK")
			o.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func connID(t *testing.T, s *sql.Conn) int64 {
	t.Helper()
	var id int64
	if err := s.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

var errCases = []errCase{{
	name:  "deadlock victim (1213)",
	begin: "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		// The other transaction changed more rows: InnoDB picks the
		// session as the victim; TiDB fails the statement that closed
		// the cycle, the session's.
		o, err := e.root.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		mustExec(t, o, "BEGIN")
		defer o.ExecContext(context.Background(), "ROLLBACK")
		for id := 3; id <= 8; id++ {
			// One row at a time: a small table's IN list is read whole,
			// which would lock the session's new row too.
			mustExec(t, o, "UPDATE notes SET body = 'o' WHERE id = ?", id)
		}
		mustExec(t, s, "UPDATE notes SET body = 's' WHERE id = 1")
		waiting := make(chan error, 1)
		go func() {
			_, err := o.ExecContext(context.Background(), "UPDATE notes SET body = 'o' WHERE id = 1")
			waiting <- err
		}()
		awaitLockWait(t, e)
		_, err = s.ExecContext(context.Background(), "UPDATE notes SET body = 's' WHERE id = 3")
		if err := <-waiting; err != nil {
			t.Logf("the other transaction: %v", err)
		}
		return err
	},
	code: 1213,
}, {
	name:  "lock wait timeout (1205)",
	begin: "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		blockOn(t, e, 1)
		mustExec(t, s, "SET SESSION innodb_lock_wait_timeout = 1")
		_, err := s.ExecContext(context.Background(), "UPDATE notes SET body = 's' WHERE id = 1")
		return err
	},
	code: 1205,
}, {
	name:  "duplicate key (1062)",
	begin: "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		_, err := s.ExecContext(context.Background(), "INSERT INTO notes (id, body) VALUES (1, 'dup')")
		return err
	},
	code: 1062,
}, {
	name:  "implicit commit, then the statement fails (1051)",
	begin: "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		_, err := s.ExecContext(context.Background(), "DROP TABLE no_such_table")
		return err
	},
	code: 1051,
}, {
	name:  "killed query (1317)",
	begin: "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		id := connID(t, s)
		kill := "KILL QUERY "
		if e.eng == engTiDB {
			kill = "KILL TIDB QUERY "
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				var n int
				// Kill it once it runs.
				if e.root.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE id = ? AND info LIKE 'SELECT SLEEP%'", id).Scan(&n); n > 0 {
					e.root.Exec(kill + fmt.Sprint(id))
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		var v sql.NullInt64
		err := s.QueryRowContext(context.Background(), "SELECT SLEEP(20)").Scan(&v)
		<-done
		if err == nil && v.Int64 == 1 {
			// MariaDB's SLEEP returns 1 when killed, without an error,
			// unless it was waiting for something else.
			return &mysql.MySQLError{Number: 1317, Message: "SLEEP interrupted"}
		}
		return err
	},
	code: 1317,
}, {
	// The other way round: the proxy last saw no transaction, and the
	// failing write started one.
	name:     "failed first write under autocommit=0 (1062)",
	begin:    "SET autocommit = 0",
	noMarker: true,
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		_, err := s.ExecContext(context.Background(), "INSERT INTO notes (id, body) VALUES (1, 'dup')")
		return err
	},
	code: 1062,
}, {
	name:     "write conflict at COMMIT (9007)",
	engines:  []string{engTiDB},
	noMarker: true, // the case inserts it after its BEGIN
	// BEGIN OPTIMISTIC would do, but the rewriter reads it as a block.
	begin: "SET SESSION tidb_txn_mode = 'optimistic'",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		t.Cleanup(func() { s.ExecContext(context.Background(), "SET SESSION tidb_txn_mode = 'pessimistic'") })
		mustExec(t, s, "BEGIN")
		mustExec(t, s, "INSERT INTO notes (body) VALUES (?)", "m:"+t.Name())
		mustExec(t, s, "UPDATE notes SET body = 's' WHERE id = 1")
		mustExec(t, e.other, "UPDATE notes SET body = 'o' WHERE id = 1")
		_, err := s.ExecContext(context.Background(), "COMMIT")
		return err
	},
	code: 9007,
}, {
	name:    "certification failure at COMMIT (1213)",
	engines: []string{engGalera},
	begin:   "BEGIN",
	run: func(t *testing.T, e *fencedEnv, s *sql.Conn) error {
		mustExec(t, s, "UPDATE notes SET body = 's' WHERE id = 1")
		mustExec(t, e.other, "UPDATE notes SET body = 'o' WHERE id = 1")
		_, err := s.ExecContext(context.Background(), "COMMIT")
		return err
	},
	code: 1213,
}}

// awaitLockWait waits until some session of the env's server waits for a
// row lock.
func awaitLockWait(t *testing.T, e *fencedEnv) {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.innodb_lock_waits"
	if e.eng == engTiDB {
		q = "SELECT COUNT(*) FROM information_schema.data_lock_waits"
	}
	// A wait that starts before InnoDB gave the waiting transaction an id
	// (its first write is the one waiting) is missing from
	// innodb_lock_waits (seen on MariaDB 10.11): a write running for a
	// while counts too.
	running := "SELECT COUNT(*) FROM information_schema.processlist WHERE user <> 'system user' AND command = 'Query' " +
		"AND time_ms > 300 AND (info LIKE 'INSERT%' OR info LIKE 'UPDATE%' OR info LIKE 'DELETE%')"
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n, r int
		err := e.root.QueryRow(q).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if e.eng != engTiDB && e.root.QueryRow(running).Scan(&r) == nil && r > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lock wait after 10s (%d, %v); sessions: %v; transactions: %v", n, err,
				runQuery(e.root, "SELECT * FROM information_schema.processlist"),
				runQuery(e.root, "SELECT trx_id, trx_state, trx_mysql_thread_id, trx_query FROM information_schema.innodb_trx"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSessionStateFollowsErrors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true})
		for i := 1; i <= 9; i++ {
			mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (?, 'x')", i)
		}
		for _, tc := range errCases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.engines != nil && !containsString(tc.engines, eng) {
					t.Skipf("only on %v", tc.engines)
				}
				s := e.session(t)
				ctx := context.Background()
				marker := "m:" + t.Name()
				mustExec(t, s, tc.begin)
				t.Cleanup(func() { s.ExecContext(context.Background(), "SET autocommit = 1") })
				if !tc.noMarker {
					mustExec(t, s, "INSERT INTO notes (body) VALUES (?)", marker)
				}
				err := tc.run(t, e, s)
				if got := errNumber(err); got != tc.code {
					t.Fatalf("the session got %v, want error %d", err, tc.code)
				}
				// Straight after the error: the proxy's own answer.
				var tok sql.NullInt64
				acqErr := s.QueryRowContext(ctx, "SELECT fence_acquire(?, 30)", "sess:"+t.Name()).Scan(&tok)
				// Then the server's.
				var inTx bool
				if err := s.QueryRowContext(ctx, inTxQuery(eng)).Scan(&inTx); err != nil {
					t.Fatal(err)
				}
				var self, others int
				s.QueryRowContext(ctx, "SELECT COUNT(*) FROM notes WHERE body = ?", marker).Scan(&self)
				e.sync(t)
				e.root.QueryRow("SELECT COUNT(*) FROM notes WHERE body = ?", marker).Scan(&others)
				t.Logf("after error %d the server says in_transaction=%v (the transaction's row: seen by the session %d, by others %d); fence_acquire: %v %v",
					tc.code, inTx, self, others, tok, acqErr)
				switch {
				case inTx && errNumber(acqErr) != 1210:
					t.Errorf("the server says the session is in a transaction, but fence_acquire ran: %v %v", tok, acqErr)
				case !inTx && (acqErr != nil || !tok.Valid):
					t.Errorf("the server says the session is outside a transaction, but fence_acquire answered %v %v", tok, acqErr)
				}
				if !tc.noMarker && inTx != (self == 1 && others == 0) {
					t.Errorf("in_transaction=%v disagrees with the row's visibility (%d, %d)", inTx, self, others)
				}
				s.ExecContext(ctx, "ROLLBACK")
			})
		}
	})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The case as a retry loop: a worker whose transaction lost a
// deadlock calls only fence_acquire until it gets the lease.
func TestAcquireRetryAfterDeadlock(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng, account: true})
		for i := 1; i <= 9; i++ {
			mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (?, 'x')", i)
		}
		s := e.session(t)
		mustExec(t, s, "BEGIN")
		mustExec(t, s, "INSERT INTO notes (body) VALUES ('retry')")
		if err := errCases[0].run(t, e, s); errNumber(err) != 1213 {
			t.Fatalf("want a deadlock, got %v", err)
		}
		var refusals int
		for attempt := 0; ; attempt++ {
			var tok sql.NullInt64
			err := s.QueryRowContext(context.Background(), "SELECT fence_acquire('retry:job', 30)").Scan(&tok)
			if err == nil && tok.Valid {
				break
			}
			if !strings.Contains(fmt.Sprint(err), "outside a transaction") || attempt == 20 {
				t.Fatalf("attempt %d: %v %v", attempt, tok, err)
			}
			refusals++
		}
		if refusals > 0 {
			t.Errorf("fence_acquire was refused %d times after the deadlock ended the transaction", refusals)
		}
	})
}

// With innodb_rollback_on_timeout a lock wait timeout rolls the whole
// transaction back (without it, only the statement): a server of its own.
func TestSessionStateAfterRollbackOnTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := dbserver.Start(ctx, dbserver.Options{Args: []string{"--innodb-rollback-on-timeout=ON"}})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { srv.Close() })
	e := newFencedEnv(t, envOptions{server: srv, account: true})
	mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'x')")
	s := e.session(t)
	mustExec(t, s, "BEGIN")
	mustExec(t, s, "INSERT INTO notes (body) VALUES ('timeout')")
	blockOn(t, e, 1)
	mustExec(t, s, "SET SESSION innodb_lock_wait_timeout = 1")
	if _, err := s.ExecContext(ctx, "UPDATE notes SET body = 's' WHERE id = 1"); errNumber(err) != 1205 {
		t.Fatalf("want 1205, got %v", err)
	}
	var tok sql.NullInt64
	acqErr := s.QueryRowContext(ctx, "SELECT fence_acquire('timeout:job', 30)").Scan(&tok)
	var inTx bool
	if err := s.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	t.Logf("after 1205 under innodb_rollback_on_timeout: in_transaction=%v; fence_acquire: %v %v", inTx, tok, acqErr)
	if inTx {
		t.Fatal("the server kept the transaction: the option did not apply")
	}
	if acqErr != nil || !tok.Valid {
		t.Errorf("the transaction was rolled back, but fence_acquire answered %v %v", tok, acqErr)
	}
}

// On Galera a replicated write aborts a local transaction that holds its
// row (a brute-force abort) while the session is idle; the server tells
// the session at its next command. A lease function as that next command
// must not take the proxy's last view (in a transaction) for the truth.
func TestGaleraAbortedTransactionThenAcquire(t *testing.T) {
	e := newFencedEnv(t, envOptions{engine: engGalera, account: true})
	mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (1, 'x')")
	s := e.session(t)
	ctx := context.Background()
	mustExec(t, s, "BEGIN")
	mustExec(t, s, "UPDATE notes SET body = 'local' WHERE id = 1")
	mustExec(t, e.other, "UPDATE notes SET body = 'replicated' WHERE id = 1")
	if got := queryString(t, e.root, "SELECT body FROM notes WHERE id = 1"); got != "replicated" {
		t.Fatalf("node 1 has %q", got)
	}
	var answers []string
	for i := 0; i < 3; i++ {
		var tok sql.NullInt64
		err := s.QueryRowContext(ctx, "SELECT fence_acquire('abort:job', 30)").Scan(&tok)
		answers = append(answers, fmt.Sprintf("%v %v", tok, err))
		if err == nil && tok.Valid {
			break
		}
		if errNumber(err) != 1213 {
			t.Fatalf("fence_acquire after the abort: %v %v (answers so far %q)", tok, err, answers)
		}
	}
	t.Logf("fence_acquire after a brute-force abort: %q", answers)
	if len(answers) > 2 {
		t.Errorf("fence_acquire did not succeed by the second call: %q", answers)
	}
}

// A worker loop as apps write it, on Galera where certification conflicts
// are routine: fence_acquire until it has the lease, then fenced writes in
// a transaction until an error; any error sends it back to fence_acquire
// alone. Another worker takes the lease over on node 2 now and then. No
// fence_acquire may be refused as "inside a transaction" when the server
// says the session is outside one.
func TestGaleraAcquireLoopAfterConflicts(t *testing.T) {
	e := newFencedEnv(t, envOptions{engine: engGalera, account: true})
	const workers = 3
	d := 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var attempts, acquired, writes, rejected, conflicts, refusals int
	var wg sync.WaitGroup
	errc := make(chan error, workers+1)
	for w := 0; w < workers; w++ {
		s := e.session(t)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			bg := context.Background()
			for n := 0; ctx.Err() == nil; n++ {
				var tok sql.NullInt64
				err := s.QueryRowContext(bg, "SELECT fence_acquire('loop:job', 0.3)").Scan(&tok)
				mu.Lock()
				attempts++
				switch {
				case err == nil && tok.Valid:
					acquired++
				case err != nil && strings.Contains(err.Error(), "outside a transaction"):
					refusals++
				}
				mu.Unlock()
				if err != nil && errNumber(err) != 1213 && !strings.Contains(err.Error(), "outside a transaction") {
					errc <- fmt.Errorf("worker %d: fence_acquire: %w", w, err)
					return
				}
				if !tok.Valid {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				for i := 0; ctx.Err() == nil; i++ {
					stale := false
					err := func() error {
						if _, err := s.ExecContext(bg, "BEGIN"); err != nil {
							return err
						}
						r, err := s.ExecContext(bg, "INSERT INTO invoices (customer, period, amount, token) VALUES (?, '2026-01', 1, @fence_token)",
							fmt.Sprintf("w%d-%d-%d", w, n, i))
						if err != nil {
							return err
						}
						stale = rowsAffected(r) == 0
						_, err = s.ExecContext(bg, "COMMIT")
						return err
					}()
					if err == nil && stale {
						mu.Lock()
						rejected++
						mu.Unlock()
						break
					}
					if err != nil {
						// 1213 ended the transaction: straight back to
						// fence_acquire, no ROLLBACK.
						mu.Lock()
						conflicts++
						mu.Unlock()
						if errNumber(err) != 1213 {
							errc <- fmt.Errorf("worker %d: %w", w, err)
							return
						}
						break
					}
					mu.Lock()
					writes++
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			// Take the lease over on node 2 whenever it lapses.
			if _, err := e.store.Acquire(context.Background(), "loop:job", 100*time.Millisecond); err != nil && !errors.Is(err, lease.ErrHeld) && !isConflict(err) {
				errc <- fmt.Errorf("taker: %w", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%s, %d workers through the proxy (own account) on node 1, takeovers on node 2: %d fence_acquire calls, %d acquisitions, "+
		"%d committed transactions, %d rejected as stale, %d errors (1213) sending the worker back to fence_acquire, %d refused as inside a transaction",
		d, workers, attempts, acquired, writes, rejected, conflicts, refusals)
	if conflicts == 0 {
		t.Fatal("no conflict: the loop tested nothing")
	}
	if refusals > 0 {
		t.Errorf("%d fence_acquire calls refused as inside a transaction after an error ended it", refusals)
	}
}

// learnStatus asks the server with COM_PING: measured here, on each
// engine directly, that a ping leaves what the session can read as it was.
func TestPingLeavesSessionAsItWas(t *testing.T) {
	forEachEngine(t, func(t *testing.T, eng string) {
		e := newFencedEnv(t, envOptions{engine: eng})
		for i := 1; i <= 3; i++ {
			mustExec(t, e.root, "INSERT INTO notes (id, body) VALUES (?, 'x')", i)
		}
		c, err := e.root.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		read := func(q string) string {
			o := runQueryConn(c, q)
			return strings.TrimSpace(fmt.Sprint(o.Rows, " ", o.Err))
		}
		for _, tc := range []struct {
			name, setup, read string
			// pingSets: what the read says after a ping instead, on the
			// engines listed (measured).
			pingSets map[string]string
		}{
			{"warnings", "SELECT CAST('x' AS SIGNED)", "SHOW WARNINGS", nil},
			{"warning_count", "SELECT CAST('x' AS SIGNED)", "SELECT @@warning_count", nil},
			{"error in SHOW WARNINGS", "SELECT * FROM no_such_table", "SHOW WARNINGS", nil},
			{"error_count", "SELECT * FROM no_such_table", "SELECT @@error_count", nil},
			// MariaDB's ping is an OK of 0 rows: ROW_COUNT() says 0 after it.
			{"ROW_COUNT()", "UPDATE notes SET body = CONCAT(body, 'y')", "SELECT ROW_COUNT()",
				map[string]string{engMariaDB: "[[0]]", engGalera: "[[0]]"}},
			{"ROW_COUNT() after an error", "SELECT * FROM no_such_table", "SELECT ROW_COUNT()",
				map[string]string{engMariaDB: "[[0]]", engGalera: "[[0]]"}},
			{"FOUND_ROWS()", "SELECT * FROM notes", "SELECT FOUND_ROWS()", nil},
			{"LAST_INSERT_ID()", "SELECT LAST_INSERT_ID(42)", "SELECT LAST_INSERT_ID()", nil},
		} {
			runQueryConn(c, tc.setup)
			want := read(tc.read)
			runQueryConn(c, tc.setup)
			if err := c.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			got := read(tc.read)
			t.Logf("%s: %s (without the ping: %s)", tc.name, got, want)
			if v, ok := tc.pingSets[eng]; ok {
				want = v
			}
			if got != want {
				t.Errorf("%s after a ping: %s, without: %s", tc.name, got, want)
			}
		}
	})
}

// runQueryConn is runQuery on one connection.
func runQueryConn(c *sql.Conn, q string) outcome {
	rows, err := c.QueryContext(context.Background(), q)
	if err != nil {
		return outcome{Err: err.Error()}
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var o outcome
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		rows.Scan(ptrs...)
		var r []string
		for _, v := range vals {
			r = append(r, v.String)
		}
		o.Rows = append(o.Rows, r)
	}
	if err := rows.Err(); err != nil {
		o.Err = err.Error()
	}
	return o
}
