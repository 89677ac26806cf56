package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/fenceproxy/fenceproxy/rewrite"
)

// What COM_RESET_CONNECTION and COM_CHANGE_USER do to the session, measured
// on MariaDB 10.11 (integration/session_reset_test.go reads it back):
//
//   - Both reset it first, whether or not the change of user then succeeds:
//     prepared statements, user variables and temporary tables are gone, the
//     transaction is rolled back, and sql_mode and every other variable take
//     their global values. ROW_COUNT(), FOUND_ROWS() and LAST_INSERT_ID()
//     are left as the server leaves them (the proxy asks the server nothing
//     here: any SELECT would overwrite FOUND_ROWS()).
//   - The character set: COM_RESET_CONNECTION returns to the one of the
//     handshake, or of the last COM_CHANGE_USER that named a collation the
//     server knows, even one whose authentication failed (the "reset
//     character set" below). A COM_CHANGE_USER that names a known collation
//     switches to it; one that names none or an unknown one leaves the
//     server's default, and so does a failed one.
//   - The schema: kept by COM_RESET_CONNECTION; a COM_CHANGE_USER that
//     succeeds switches to the one it names (none if empty), a failed one
//     keeps the old one, as it keeps the old user.
//   - After three failed COM_CHANGE_USER on one connection every further one
//     fails with "Unknown command", still after resetting the session.
//
// The server's default character set and sql_mode are not visible to the
// proxy: where they apply, the character set counts as unsafe and sql_mode
// as unknown, which the rewriter handles by refusing or by asking.

// setCharset records what the proxy believes of the client character set.
// While it counts as unsafe, whether read from a SET, from a collation id or
// left unknown (the server's default applies), a refused statement makes
// the proxy ask the server once (learnCharset).
func (c *clientConn) setCharset(unsafe bool) {
	c.sess.UnsafeCharset = unsafe
	c.charsetUnknown = unsafe
}

// resetConnection records a COM_RESET_CONNECTION the server answered with
// OK (whose status flags noteStatus has already read).
func (c *clientConn) resetConnection() {
	c.forgetSessionState()
	// MySQL's and TiDB's reset are not measured here: fail closed.
	c.setCharset(c.resetCharsetUnsafe || c.srv.Flavor != rewrite.MariaDB)
	// Whether it is UTF-8 (for prepared statement names) and whether it
	// reads ASCII as ASCII are learned when a refusal needs them
	// (Refusal.CharsetUnknown).
	c.sess.NamesUTF8 = false
	c.sess.ASCIIRemap = c.sess.UnsafeCharset
}

// changedUser records a COM_CHANGE_USER the server accepted (its OK's
// status flags already read).
func (c *clientConn) changedUser(cu changeUser) {
	c.forgetSessionState()
	c.user = cu.user
	c.sess.Schema = cu.db
	if !cu.hasCharset {
		c.setCharset(true) // the server's default
		c.sess.NamesUTF8, c.sess.ASCIIRemap = false, true
		return
	}
	c.resetCharsetUnsafe = collationUnsafe(c.srv, cu.charset)
	c.setCharset(c.resetCharsetUnsafe)
	c.sess.NamesUTF8 = collationUTF8(c.srv, cu.charset)
	c.sess.ASCIIRemap = collationRemaps(c.srv, cu.charset)
}

// changeUserFailed records a COM_CHANGE_USER the server refused: the
// session was reset all the same, under the old user and schema.
func (c *clientConn) changeUserFailed(cu changeUser) {
	c.forgetSessionState()
	c.setCharset(true) // the server's default
	c.sess.NamesUTF8, c.sess.ASCIIRemap = false, true
	// No OK, no status flags: NO_BACKSLASH_ESCAPES is whatever the global
	// sql_mode says, and no transaction is open.
	c.sess.NoBackslashEscapes = rewrite.Unknown
	c.status &^= mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED
	if cu.hasCharset {
		// The server may or may not have read the collation before it
		// failed (not after three failures): the reset character set can
		// only become less certain.
		c.resetCharsetUnsafe = c.resetCharsetUnsafe || collationUnsafe(c.srv, cu.charset)
	}
}

// forgetSessionState drops what a session reset takes from the server:
// prepared statements (by id and by name), the sql_mode the client set and
// table locks.
func (c *clientConn) forgetSessionState() {
	c.prepared = nil
	c.stmts = stmtBook{}
	c.named = nil
	c.sess.ANSIQuotes = rewrite.Unknown
	c.sess.Oracle = rewrite.Unknown
	c.setTablesLocked(false)
	c.fence.Forget() // the reset ended the transaction
}

// collationUnsafe reports whether a client character set named by collation
// id (handshake, COM_CHANGE_USER) must be read as unsafe: a set whose
// multibyte characters can hide quote or backslash bytes, or an id this
// server may not know, for which it falls back to its default character
// set, which the proxy cannot see.
func collationUnsafe(srv rewrite.Server, id uint16) bool {
	if !collationKnown(srv, id) {
		return true
	}
	c, err := charset.GetCollationByID(int(id))
	if err != nil {
		return true
	}
	return rewrite.UnsafeCharsetName(c.CharsetName)
}

// collationUTF8 reports whether a client character set named by collation
// id is utf8mb3 or utf8mb4 (rewrite.Session.NamesUTF8).
func collationUTF8(srv rewrite.Server, id uint16) bool {
	if !collationKnown(srv, id) {
		return false
	}
	c, err := charset.GetCollationByID(int(id))
	return err == nil && rewrite.UTF8CharsetName(c.CharsetName)
}

// collationRemaps reports whether a client character set named by
// collation id may read ASCII bytes as other characters (swe7), or is not
// known (rewrite.Session.ASCIIRemap).
func collationRemaps(srv rewrite.Server, id uint16) bool {
	if !collationKnown(srv, id) {
		return true
	}
	c, err := charset.GetCollationByID(int(id))
	return err != nil || rewrite.RemapsASCIIName(c.CharsetName)
}

// collationKnown: the parser's table is MySQL 8's; MariaDB 10.11 has every
// id of it below 248 with the same character set except 76, and of its
// own ids above 255 the proxy knows none (measured against
// information_schema.COLLATIONS).
func collationKnown(srv rewrite.Server, id uint16) bool {
	switch srv.Flavor {
	case rewrite.MariaDB:
		return id != 76 && id < 248
	case rewrite.MySQL:
		return srv.Version >= 80000 || id <= 250 && id != 76
	}
	return true
}
