package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/rewrite"
)

var (
	mariaDB1011 = rewrite.Server{Flavor: rewrite.MariaDB, Version: 101119}
	mysql80     = rewrite.Server{Flavor: rewrite.MySQL, Version: 80036}
	mysql57     = rewrite.Server{Flavor: rewrite.MySQL, Version: 50744}
)

func TestCollationUnsafe(t *testing.T) {
	for _, tc := range []struct {
		srv    rewrite.Server
		id     uint16
		unsafe bool
	}{
		{mariaDB1011, 45, false},  // utf8mb4_general_ci
		{mariaDB1011, 33, false},  // utf8mb3_general_ci
		{mariaDB1011, 8, false},   // latin1_swedish_ci
		{mariaDB1011, 63, false},  // binary
		{mariaDB1011, 224, false}, // utf8mb4_unicode_ci
		{mariaDB1011, 28, true},   // gbk
		{mariaDB1011, 87, true},   // gbk_bin
		{mariaDB1011, 95, true},   // cp932
		{mariaDB1011, 13, true},   // sjis
		{mariaDB1011, 1, true},    // big5
		{mariaDB1011, 0, true},    // no such id: the server's default
		{mariaDB1011, 100, true},  // no such id
		{mariaDB1011, 76, true},   // MySQL's utf8mb3_tolower_ci: not MariaDB's
		{mariaDB1011, 255, true},  // MySQL 8's utf8mb4_0900_ai_ci: unknown to MariaDB 10.11
		{mariaDB1011, 1025, true}, // big5_chinese_nopad_ci
		{mariaDB1011, 1069, true}, // utf8mb4_general_nopad_ci: not in the proxy's table
		{mariaDB1011, 35, true},   // ucs2: never a client character set
		{mysql80, 255, false},
		{mysql80, 76, false},
		{mysql80, 248, true}, // gb18030
		{mysql80, 1025, true},
		{mysql57, 255, true},
		{mysql57, 45, false},
	} {
		if got := collationUnsafe(tc.srv, tc.id); got != tc.unsafe {
			t.Errorf("%+v collation %d: unsafe=%v, want %v", tc.srv, tc.id, got, tc.unsafe)
		}
	}
}

// TestSessionAfterReset follows what the proxy believes through the
// sequences measured on MariaDB 10.11 (integration/session_reset_test.go
// compares the same cases with the server).
func TestSessionAfterReset(t *testing.T) {
	const gbk, utf8mb4, latin1, unknownID = 28, 45, 8, 100
	type step func(c *clientConn)
	handshake := func(id uint16) step {
		return func(c *clientConn) {
			c.resetCharsetUnsafe = collationUnsafe(c.srv, id)
			c.setCharset(c.resetCharsetUnsafe)
		}
	}
	setNames := func(unsafe bool) step { return func(c *clientConn) { c.setCharset(unsafe) } }
	reset := func(c *clientConn) { c.resetConnection() }
	changeUserStep := func(id int, ok bool) step {
		return func(c *clientConn) {
			cu := changeUser{user: "u2", db: "db2"}
			if id >= 0 {
				cu.charset, cu.hasCharset = uint16(id), true
			}
			if ok {
				c.changedUser(cu)
			} else {
				c.changeUserFailed(cu)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		steps  []step
		unsafe bool
		schema string
	}{
		{"gbk handshake, SET NAMES utf8mb4, reset", []step{handshake(gbk), setNames(false), reset}, true, "db1"},
		{"utf8mb4 handshake, SET NAMES gbk, reset", []step{handshake(utf8mb4), setNames(true), reset}, false, "db1"},
		{"unknown handshake id, reset", []step{handshake(unknownID), setNames(false), reset}, true, "db1"},
		{"change user to gbk", []step{handshake(utf8mb4), changeUserStep(gbk, true)}, true, "db2"},
		{"change user to gbk, SET NAMES utf8mb4, reset", []step{handshake(utf8mb4), changeUserStep(gbk, true), setNames(false), reset}, true, "db2"},
		{"gbk handshake, change user to latin1, reset", []step{handshake(gbk), changeUserStep(latin1, true), reset}, false, "db2"},
		{"change user without charset", []step{handshake(utf8mb4), changeUserStep(-1, true)}, true, "db2"},
		{"gbk handshake, change user without charset, SET NAMES, reset", []step{handshake(gbk), changeUserStep(-1, true), setNames(false), reset}, true, "db2"},
		{"change user with unknown id", []step{handshake(utf8mb4), changeUserStep(unknownID, true)}, true, "db2"},
		{"failed change user", []step{handshake(utf8mb4), changeUserStep(utf8mb4, false)}, true, "db1"},
		{"failed change user to gbk, SET NAMES utf8mb4, reset", []step{handshake(utf8mb4), changeUserStep(gbk, false), setNames(false), reset}, true, "db1"},
		{"gbk handshake, failed change user to latin1, reset", []step{handshake(gbk), changeUserStep(latin1, false), setNames(false), reset}, true, "db1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clientConn{srv: mariaDB1011, user: "u1"}
			c.sess = rewrite.Session{Schema: "db1", ANSIQuotes: rewrite.Off, NoBackslashEscapes: rewrite.Off}
			c.status = mysql.SERVER_STATUS_IN_TRANS
			c.prepared = map[uint32]*preparedStmt{1: {}}
			c.named = map[string]*preparedStmt{"s": {}}
			for _, s := range tc.steps {
				s(c)
			}
			if c.sess.UnsafeCharset != tc.unsafe {
				t.Errorf("UnsafeCharset = %v, want %v", c.sess.UnsafeCharset, tc.unsafe)
			}
			if c.sess.UnsafeCharset && !c.charsetUnknown {
				t.Error("an unsafe character set the proxy may ask about is not marked for asking")
			}
			if c.sess.Schema != tc.schema {
				t.Errorf("schema %q, want %q", c.sess.Schema, tc.schema)
			}
			if c.sess.ANSIQuotes != rewrite.Unknown {
				t.Errorf("ANSIQuotes %v after a session reset, want Unknown", c.sess.ANSIQuotes)
			}
			if c.prepared != nil || c.named != nil {
				t.Error("prepared statements survive a session reset")
			}
			wantUser := "u2"
			if tc.schema == "db1" {
				wantUser = "u1"
			}
			if c.user != wantUser {
				t.Errorf("user %q, want %q", c.user, wantUser)
			}
		})
	}
	t.Run("failed change user", func(t *testing.T) {
		c := &clientConn{srv: mariaDB1011, status: mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_AUTOCOMMIT}
		c.sess.NoBackslashEscapes = rewrite.Off
		c.changeUserFailed(changeUser{user: "u2"})
		if c.sess.NoBackslashEscapes != rewrite.Unknown {
			t.Errorf("NoBackslashEscapes %v, want Unknown (the global sql_mode applies)", c.sess.NoBackslashEscapes)
		}
		if c.inTransaction() {
			t.Error("still in a transaction after the server rolled it back")
		}
	})
	t.Run("MySQL reset", func(t *testing.T) {
		c := &clientConn{srv: mysql80}
		c.resetConnection()
		if !c.sess.UnsafeCharset {
			t.Error("a reset on MySQL (not measured) must leave the character set unsafe until asked")
		}
	})
}
