package proxy

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// The tests in this file need a real server (the integration tier: they
// run under make test, and are skipped by make unit).
func TestMain(m *testing.M) { dbtest.Main(m) }

// panicEnv is a proxy in front of a real server, with a protected table
// (runs, fixed lease admin:runs), an unprotected one (notes) and the lease
// held, and a hook that makes one chosen connection panic.
type panicEnv struct {
	srv  *dbserver.Server
	db   string
	root *sql.DB
	p    *Proxy
	addr string
	logs *lockedBuffer
	l    lease.Lease

	victim atomic.Int64 // backend connection id of the connection to panic; -1: the next one to connect
	at     atomic.Uint32
}

func newPanicEnv(t *testing.T) *panicEnv {
	t.Helper()
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE runs (id INT PRIMARY KEY, status VARCHAR(40) NOT NULL)",
		"CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(40) NOT NULL)",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.CreateSchema(ctx, root, ""); err != nil {
		t.Fatal(err)
	}
	store, err := lease.NewStore(root, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &panicEnv{srv: srv, db: db, root: root, logs: &lockedBuffer{}}
	if e.l, err = store.Acquire(ctx, "admin:runs", 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse("panic.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+srv.Addr+
		"\ntables:\n  - name: "+db+".runs\n    lease: admin:runs\ncatalog:\n  refresh: 0s\n"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if e.p, err = New(cfg, cfg.Policy(1), Options{Logger: log}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- e.p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.p.Shutdown(ctx)
		<-done
	})
	e.victim.Store(0)
	hook := panicHook(func(c *clientConn, at panicPoint) {
		v := e.victim.Load()
		if panicPoint(e.at.Load()) == at && (v == -1 || v > 0 && int64(c.connID) == v) && e.victim.CompareAndSwap(v, 0) {
			panic("boom near '" + panicLiteral + "'")
		}
	})
	e.p.panicAt.Store(&hook)
	return e
}

// session is one app connection through the proxy, and its backend
// connection's id.
func (e *panicEnv) session(t *testing.T) (*sql.Conn, int64) {
	t.Helper()
	db := dbtest.Open(t, dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+e.addr+")/"+e.db)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var id int64
	if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return c, id
}

// arm makes the connection with backend id (-1: the next to connect) panic
// once at the point named.
func (e *panicEnv) arm(id int64, at panicPoint) {
	e.at.Store(uint32(at))
	e.victim.Store(id)
}

// gone waits until the server has ended backend session id: the proxy
// closed it, and the server rolled back whatever it had open.
func (e *panicEnv) gone(t *testing.T, id int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := e.root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend session %d still open 30 s after the panic: the proxy did not close it", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *panicEnv) rows(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.root.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func exec(t *testing.T, c *sql.Conn, q string, args ...any) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// wantInternalError checks that err is the proxy's ERR 1815.
func wantInternalError(t *testing.T, err error) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != erInternal {
		t.Fatalf("got %v, want ERR %d from the proxy", err, erInternal)
	}
}

// A panic at each point ends its connection only, and fails closed: the
// open transaction (the client's, or the proxy's own around a guarded
// write) is rolled back by the server, never committed; another
// connection, open all along, and new ones are served as before.
func TestPanicRollsBackOnRealServer(t *testing.T) {
	e := newPanicEnv(t)
	other, otherID := e.session(t)
	ctx := context.Background()
	fence := func(t *testing.T, c *sql.Conn) {
		exec(t, c, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", e.l.Name, e.l.Owner, e.l.Token)
	}
	cases := []struct {
		name   string
		at     panicPoint
		before []string                              // run before the hook is armed
		panics func(t *testing.T, c *sql.Conn) error // the statement that panics
		empty  []string                              // tables the transaction wrote to: empty afterwards
		erred  bool                                  // the client gets ERR 1815 (else: a closed connection)
	}{
		{"mid-command in the client's transaction", panicCommand,
			[]string{"BEGIN", "INSERT INTO notes VALUES (1, 'kept until the panic')"},
			func(t *testing.T, c *sql.Conn) error {
				_, err := c.ExecContext(ctx, "INSERT INTO notes VALUES (2, '"+panicLiteral+"')")
				return err
			}, []string{"notes"}, true},
		{"mid-response in the client's transaction", panicResponse,
			[]string{"BEGIN", "INSERT INTO notes VALUES (3, 'kept until the panic')"},
			func(t *testing.T, c *sql.Conn) error {
				rows, err := c.QueryContext(ctx, "SELECT body FROM notes WHERE body <> '"+panicLiteral+"'")
				if err == nil {
					for rows.Next() {
					}
					err = rows.Err()
					rows.Close()
				}
				if err == nil {
					err = c.PingContext(ctx)
				}
				return err
			}, []string{"notes"}, false},
		{"inside a guarded write's own transaction (autocommit)", panicGuarded, nil,
			func(t *testing.T, c *sql.Conn) error {
				_, err := c.ExecContext(ctx, "INSERT INTO runs VALUES (1, '"+panicLiteral+"')")
				return err
			}, []string{"runs"}, true},
		{"inside a guarded write in the client's transaction", panicGuarded,
			[]string{"BEGIN", "INSERT INTO notes VALUES (4, 'kept until the panic')", "INSERT INTO runs VALUES (2, 'kept until the panic')"},
			func(t *testing.T, c *sql.Conn) error {
				_, err := c.ExecContext(ctx, "INSERT INTO runs VALUES (3, '"+panicLiteral+"')")
				return err
			}, []string{"notes", "runs"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, id := e.session(t)
			fence(t, c)
			for _, q := range tc.before {
				exec(t, c, q)
			}
			e.arm(id, tc.at)
			err := tc.panics(t, c)
			switch {
			case tc.erred:
				wantInternalError(t, err)
			case err == nil:
				t.Fatal("the connection went on after the panic")
			}
			e.gone(t, id)
			for _, table := range tc.empty {
				if n := e.rows(t, table); n != 0 {
					t.Errorf("%s has %d rows: the panicked connection's transaction committed", table, n)
				}
			}
			// The lease row is free: no lock of the panicked session is left.
			tx, err := e.root.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var tok uint64
			if err := tx.QueryRowContext(ctx, "SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'admin:runs' FOR UPDATE NOWAIT").Scan(&tok); err != nil {
				t.Errorf("the lease row is still locked: %v", err)
			}
			tx.Rollback()
			var one int
			if err := other.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("the other connection (backend %d) after the panic: %v", otherID, err)
			}
		})
	}
	t.Run("during the handshake", func(t *testing.T) {
		e.arm(-1, panicHandshake)
		db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+e.addr+")/"+e.db)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.PingContext(ctx); err == nil {
			t.Fatal("a connection whose handshake panicked logged in")
		}
		if err := other.PingContext(ctx); err != nil {
			t.Fatalf("the other connection after the panic: %v", err)
		}
		fresh, _ := e.session(t)
		exec(t, fresh, "INSERT INTO notes VALUES (9, 'after the panics')")
		if n := e.rows(t, "notes"); n != 1 {
			t.Fatalf("notes has %d rows after a new connection's write, want 1", n)
		}
	})

	if got := counterValue(e.p.metrics.ConnectionPanics); got != 5 {
		t.Errorf("fenceproxy_connection_panics_total = %v, want 5", got)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "panic serving the connection"); n != 5 {
		t.Errorf("%d panics logged, want 5:\n%s", n, logs)
	}
	for _, want := range []string{"goroutine ", "recoverServe", "backend_conn_id="} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	for _, secret := range []string{panicLiteral, e.l.Owner, dbserver.AppPassword} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}
