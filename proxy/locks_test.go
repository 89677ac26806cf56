package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// TestTablesLockedTracking follows the session's table locks through the
// results the server gives, as measured on MariaDB 10.11 (see
// rewrite/leaselock.go): where the server's state is uncertain the proxy
// says unlocked.
func TestTablesLockedTracking(t *testing.T) {
	ok := func(status uint16) fencing.Result { return fencing.Result{OK: wire.OKPacket{Status: status}} }
	fail := func(code uint16) fencing.Result { return fencing.Result{IsErr: true, Err: wire.ErrInfo{Code: code}} }
	lockTables := rewrite.Stmt{Locks: rewrite.LocksTaken}
	cases := []struct {
		name   string
		before bool
		st     rewrite.Stmt
		r      fencing.Result
		want   bool
	}{
		{"lock tables", false, lockTables, ok(0), true},
		{"lock tables, missing table: old locks released", true, lockTables, fail(1146), false},
		{"lock tables, syntax error: old locks kept", true, lockTables, fail(1064), true},
		{"lock tables, duplicate alias: old locks kept", true, lockTables, fail(1066), true},
		{"lock tables, lock wait timeout", true, lockTables, fail(1205), false},
		{"unlock tables", true, rewrite.Stmt{Locks: rewrite.LocksReleased}, ok(0), false},
		{"begin", true, rewrite.Stmt{Locks: rewrite.LocksReleased}, ok(mysql.SERVER_STATUS_IN_TRANS), false},
		{"failed begin", true, rewrite.Stmt{Locks: rewrite.LocksReleased}, fail(1400), true},
		{"commit without chain", true, rewrite.Stmt{Locks: rewrite.LocksReleasedIfChained}, ok(mysql.SERVER_STATUS_AUTOCOMMIT), true},
		{"commit chained by completion_type", true, rewrite.Stmt{Locks: rewrite.LocksReleasedIfChained},
			ok(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS), false},
		{"call", true, rewrite.Stmt{Kind: rewrite.Call, Locks: rewrite.LocksMaybeReleased}, ok(0), false},
		{"failed call", true, rewrite.Stmt{Kind: rewrite.Call, Locks: rewrite.LocksMaybeReleased}, fail(1305), false},
		{"other statement", true, rewrite.Stmt{}, ok(0), true},
		{"execute of a prepared lock tables", false, rewrite.Stmt{Kind: rewrite.Execute, Name: "lt"}, ok(0), true},
		{"execute of a prepared begin", true, rewrite.Stmt{Kind: rewrite.Execute, Name: "b"}, ok(0), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &clientConn{named: map[string]*preparedStmt{
				"lt": {stmt: lockTables},
				"b":  {stmt: rewrite.Stmt{Locks: rewrite.LocksReleased}},
			}}
			c.setTablesLocked(tc.before)
			c.applyLocks(&tc.st, tc.r)
			if c.tablesLocked != tc.want || c.sess.TablesLocked != tc.want {
				t.Fatalf("tablesLocked %v (session %v), want %v", c.tablesLocked, c.sess.TablesLocked, tc.want)
			}
		})
	}
	c := &clientConn{}
	c.setTablesLocked(true)
	c.forgetSessionState()
	if c.tablesLocked || c.sess.TablesLocked {
		t.Fatal("a session reset (COM_RESET_CONNECTION, COM_CHANGE_USER) releases table locks")
	}
}
