package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestBackendEndsIdleSession: when the server ends a session while its
// client is idle outside a transaction (KILL from another session,
// wait_timeout), the proxy closes the client's connection at once, as the
// server would have closed it direct, without waiting for the client's
// next command. (readClosed reads until EOF within the wire client's
// timeout; it never sends anything.)
func TestBackendEndsIdleSession(t *testing.T) {
	s := dbtest.Shared(t)
	root := dbtest.Open(t, s.RootDSN(""))
	tp := startProxy(t, s.Addr, "")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, w *wireConn)
		end   func(t *testing.T, w *wireConn)
	}{
		{"KILL", nil, func(t *testing.T, w *wireConn) {
			mustExec(t, root, fmt.Sprintf("KILL CONNECTION %d", w.connID))
		}},
		{"wait_timeout", func(t *testing.T, w *wireConn) { w.mustQuery(t, "SET SESSION wait_timeout = 1") }, nil},
	} {
		for _, target := range []struct{ name, addr string }{{"direct", s.Addr}, {"proxy", tp.Addr}} {
			t.Run(tc.name+"/"+target.name, func(t *testing.T) {
				w := appWire(t, target.addr, "")
				if tc.setup != nil {
					tc.setup(t, w)
				}
				if tc.end != nil {
					tc.end(t, w)
				}
				r, err := w.readClosed()
				if err != nil || !r.Closed {
					t.Fatalf("idle connection after the server ended its session: %v %v", r, err)
				}
			})
		}
	}
}

// TestBackendEndsSessionInTransaction: inside a transaction the proxy does
// not watch the backend; the client learns of the lost session from its
// next command, with ERR 1053 (08S01), and the connection then closes.
func TestBackendEndsSessionInTransaction(t *testing.T) {
	s := dbtest.Shared(t)
	root := dbtest.Open(t, s.RootDSN(""))
	tp := startProxy(t, s.Addr, "")
	w := appWire(t, tp.Addr, "")
	w.mustQuery(t, "BEGIN")
	mustExec(t, root, fmt.Sprintf("KILL CONNECTION %d", w.connID))
	eventually(t, 10*time.Second, "the killed session to end", func() bool { return !processExists(t, root, w.connID) })
	r, err := w.query("SELECT 1")
	if err != nil {
		t.Fatalf("want an ERR packet, got %v", err)
	}
	if e := r.err(); e == nil || e.Code != 1053 || e.State != "08S01" || !strings.Contains(e.Msg, "lost connection to the backend") {
		t.Fatalf("want ERR 1053 (08S01), got %v", describe(r, err))
	}
	if r, err := w.readClosed(); err != nil || !r.Closed {
		t.Fatalf("connection not closed after the ERR: %v %v", r, err)
	}
}

// TestPoolSurvivesWaitTimeout is go-sql-driver's own stale-connection
// check (TestStaleConnectionChecks) in the form an app meets it: a pooled
// connection outlives the server's wait_timeout; the next use must succeed
// on a fresh connection (the driver's liveness check sees the closed
// socket), not fail with "lost connection".
func TestPoolSurvivesWaitTimeout(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	db := appDB(t, tp, "")
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	mustExec(t, db, "SET SESSION wait_timeout = 1")
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the proxy to close the timed-out connection", func() bool { return tp.Proxy.ActiveConnections() == 0 })
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("first use after wait_timeout: %v", err)
	}
	if n := db.Stats().OpenConnections; n != 1 {
		t.Fatalf("%d open connections, want the one fresh connection", n)
	}
}
