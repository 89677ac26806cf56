package integration

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestKillQueryFromSecondConnection: a KILL QUERY sent through the proxy on
// a second connection interrupts a long SELECT SLEEP of the first, exactly as
// direct; CONNECTION_ID() through the proxy is the backend's own thread id,
// so the KILL reaches the right session.
func TestKillQueryFromSecondConnection(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	root := dbtest.Open(t, s.RootDSN(""))
	type outcome struct {
		result  string
		err     string
		usable  bool
		elapsed time.Duration
	}
	run := func(t *testing.T, db *sql.DB) outcome {
		t.Helper()
		ctx := context.Background()
		victim, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer victim.Close()
		var id int64
		if err := victim.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		// The id is the server's: the processlist knows it as this user's.
		var user string
		if err := root.QueryRow("SELECT USER FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&user); err != nil || user != dbserver.AppUser {
			t.Fatalf("CONNECTION_ID() %d is not a server thread of %s: %q, %v", id, dbserver.AppUser, user, err)
		}
		type res struct {
			v   sql.NullString
			err error
		}
		done := make(chan res, 1)
		start := time.Now()
		go func() {
			var r res
			r.err = victim.QueryRowContext(ctx, "SELECT SLEEP(30)").Scan(&r.v)
			done <- r
		}()
		eventually(t, 10*time.Second, "SELECT SLEEP(30) running", func() bool {
			var n int
			root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT SLEEP%'", id).Scan(&n)
			return n == 1
		})
		if _, err := db.Exec("KILL QUERY ?", id); err != nil {
			t.Fatalf("KILL QUERY: %v", err)
		}
		var r res
		select {
		case r = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("SELECT SLEEP(30) was not interrupted by KILL QUERY")
		}
		o := outcome{result: r.v.String, elapsed: time.Since(start)}
		if r.err != nil {
			o.err = r.err.Error()
		}
		var one int
		o.usable = victim.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil && one == 1
		return o
	}
	var outcomes []outcome
	for _, tc := range []struct {
		name string
		db   func(t *testing.T) *sql.DB
	}{
		{"direct", func(t *testing.T) *sql.DB { return directDB(t, s, "") }},
		{"proxy", func(t *testing.T) *sql.DB { return appDB(t, tp, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, tc.db(t))
			if o.elapsed > 20*time.Second {
				t.Errorf("the killed query took %v", o.elapsed)
			}
			if !o.usable {
				t.Errorf("the connection is not usable after KILL QUERY")
			}
			outcomes = append(outcomes, o)
		})
	}
	if len(outcomes) == 2 && (outcomes[0].result != outcomes[1].result || outcomes[0].err != outcomes[1].err) {
		t.Errorf("KILL QUERY outcome differs: direct %+v, proxy %+v", outcomes[0], outcomes[1])
	}
}

// TestUseUnknownDatabase: USE of an unknown database gets the server's
// error through the proxy and leaves the connection and its current
// database as they were.
func TestUseUnknownDatabase(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	db := dbtest.NewDatabase(t, s)
	var errs []mysql.MySQLError
	for _, tc := range []struct {
		name string
		db   func(t *testing.T) *sql.DB
	}{
		{"direct", func(t *testing.T) *sql.DB { return directDB(t, s, db) }},
		{"proxy", func(t *testing.T) *sql.DB { return appDB(t, tp, db) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tc.db(t).Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = conn.ExecContext(context.Background(), "USE no_such_database_fp")
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1049 {
				t.Fatalf("USE unknown database: %v, want error 1049", err)
			}
			errs = append(errs, *me)
			var cur string
			if err := conn.QueryRowContext(context.Background(), "SELECT DATABASE()").Scan(&cur); err != nil || cur != db {
				t.Fatalf("after the failed USE: DATABASE() = %q, %v; want %q", cur, err, db)
			}
		})
	}
	if len(errs) == 2 && errs[0] != errs[1] {
		t.Errorf("error differs: direct %v, proxy %v", errs[0], errs[1])
	}
}

// TestChangeUserRawClient: COM_CHANGE_USER through the proxy relays the
// authentication (with the server's new salt), switches the user, resets
// the session (user variables, temporary tables), and a wrong password gets
// the server's own error, as direct.
func TestChangeUserRawClient(t *testing.T) {
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	if err := s.CreateUser(context.Background(), otherUser, otherPassword, "mysql_native_password"); err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, s.Addr, "")
	type outcome struct {
		currentUser, variable string
		tempTableErr          uint16
		wrongPassword         wireError
	}
	var outcomes []outcome
	for _, tc := range []struct{ name, addr string }{{"direct", s.Addr}, {"proxy", tp.Addr}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := dialWire(tc.addr, wireOptions{User: dbserver.AppUser, Password: dbserver.AppPassword, DB: db, DeprecateEOF: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.mustQuery(t, "SET @v = 'kept?'")
			w.mustQuery(t, "CREATE TEMPORARY TABLE tmp (i INT)")
			r, err := w.changeUser(otherUser, otherPassword, db)
			if err != nil || r.err() != nil {
				t.Fatalf("COM_CHANGE_USER: %v %v", err, r.err())
			}
			var o outcome
			rows := w.textRows(w.mustQuery(t, "SELECT CURRENT_USER(), @v"))
			o.currentUser, o.variable = rows[0][0], rows[0][1]
			if o.currentUser != otherUser+"@%" || o.variable != "NULL" {
				t.Errorf("after COM_CHANGE_USER: CURRENT_USER() %q, @v %q", o.currentUser, o.variable)
			}
			r, err = w.query("SELECT * FROM tmp")
			if err != nil || r.err() == nil {
				t.Errorf("temporary table survived COM_CHANGE_USER: %v %v", err, r)
			} else {
				o.tempTableErr = r.err().Code
			}
			r, err = w.changeUser(dbserver.AppUser, "wrong-password", db)
			if err != nil || r.err() == nil {
				t.Fatalf("COM_CHANGE_USER with a wrong password: %v %v", err, r)
			}
			o.wrongPassword = *r.err()
			if o.wrongPassword.Code != 1045 {
				t.Errorf("wrong password: %v", o.wrongPassword)
			}
			outcomes = append(outcomes, o)
		})
	}
	if len(outcomes) == 2 && outcomes[0] != outcomes[1] {
		t.Errorf("outcomes differ:\ndirect %+v\nproxy  %+v", outcomes[0], outcomes[1])
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
