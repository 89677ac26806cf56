package proxy

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Prepared statements by id: COM_STMT_EXECUTE, SEND_LONG_DATA, RESET,
// CLOSE and FETCH name one by the id COM_STMT_PREPARE gave it. MariaDB
// also takes 0xFFFFFFFF for "the last statement prepared", resolved
// (measured on 10.11) to the last COM_STMT_PREPARE that succeeded; a
// failed one, COM_STMT_CLOSE of that statement, COM_RESET_CONNECTION and
// COM_CHANGE_USER leave none, and SQL-level PREPARE, other statements and
// a refusal for max_prepared_stmt_count change nothing. The proxy keeps
// the same rule, over what the client saw (statements the proxy answers
// itself and prepares it refused count), and sends the server the
// statement's own id instead: the server then runs exactly the statement
// the proxy decided on. MySQL and TiDB have no such id: there the proxy
// answers, as they would, that no statement has it.

const (
	// lastStmtID is MariaDB's id for the last prepared statement.
	lastStmtID = math.MaxUint32
	// firstProxyStmtID is where statement ids the proxy hands out itself
	// start, counting down: servers count theirs up from 1, and
	// lastStmtID means something else.
	firstProxyStmtID = math.MaxUint32 - 1
	// maxOwnStmts bounds the statements a connection holds that the proxy
	// answers itself (the server never sees them, so its
	// max_prepared_stmt_count does not apply): MariaDB's and MySQL's
	// default for that limit.
	maxOwnStmts = 16382

	erUnknownStmtHandler   = 1243 // ER_UNKNOWN_STMT_HANDLER
	erStmtHasNoOpenCursor  = 1421 // ER_STMT_HAS_NO_OPEN_CURSOR
	erMaxPreparedStmtCount = 1461 // ER_MAX_PREPARED_STMT_COUNT_REACHED
)

// stmtBook is the connection's bookkeeping of prepared statements beside
// what each one is (clientConn.prepared): the statement MariaDB's
// lastStmtID names, and how many the proxy answers itself. A session
// reset clears it as a whole.
type stmtBook struct {
	last    uint32
	hasLast bool
	own     int // entries of clientConn.prepared the proxy answers itself
}

// prepared records a COM_STMT_PREPARE that succeeded, as the client saw it.
func (b *stmtBook) prepared(id uint32) { b.last, b.hasLast = id, true }

// failed records one that failed, as the client saw it (the server's
// error, or the proxy's refusal).
func (b *stmtBook) failed() { b.hasLast = false }

// closeStmt forgets statement id (COM_STMT_CLOSE).
func (c *clientConn) closeStmt(id uint32) {
	if c.stmts.hasLast && c.stmts.last == id {
		c.stmts.hasLast = false
	}
	if ps := c.prepared[id]; ps != nil && ps.call != nil {
		c.stmts.own--
	}
	delete(c.prepared, id)
}

// stmtIDOf is the statement id of a COM_STMT_* packet, from head (its
// header and at least 5 payload bytes); ok is false for a packet too short
// to carry one.
func stmtIDOf(head []byte) (id uint32, ok bool) {
	if len(head) < wire.HeaderLen+5 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(head[wire.HeaderLen+1:]), true
}

// resolveStmt finds the statement a COM_STMT_* packet names, as the
// server resolves its id, and makes the packet (head is in the client's
// read buffer, not yet consumed) name it by its own id. ps is nil for a
// statement the proxy does not know (the server answers for it); none is
// true for MariaDB's lastStmtID when no statement is the last one, and
// for the id of a statement the proxy prepared for itself (the caller
// answers as the server does for an unknown id, and nothing is sent).
func (c *clientConn) resolveStmt(head []byte) (id uint32, ps *preparedStmt, none bool) {
	id, ok := stmtIDOf(head)
	if !ok {
		return 0, nil, false
	}
	if id == lastStmtID {
		// On MySQL and TiDB no statement has this id (they count from 1
		// per session) and the server would answer that it knows none:
		// the proxy answers so itself, so that a MariaDB server it did
		// not recognise as such never resolves the id behind its back.
		if c.srv.Flavor != rewrite.MariaDB || !c.stmts.hasLast {
			return id, nil, true
		}
		id = c.stmts.last
		binary.LittleEndian.PutUint32(head[wire.HeaderLen+1:], id)
	}
	ps = c.prepared[id]
	if ps == nil && c.isTrapID(id) {
		// The proxy's own statement (preptrap.go): no statement of the
		// client's has its id.
		return id, nil, true
	}
	return id, ps, false
}

// isTrapID reports whether id is the server's id of a trapped variant the
// proxy prepared.
func (c *clientConn) isTrapID(id uint32) bool {
	for _, ps := range c.prepared {
		if ps.trap != nil && ps.trap.id == id {
			return true
		}
	}
	return false
}

// unknownStmt answers a command naming no statement, as MariaDB does:
// COM_STMT_CLOSE and SEND_LONG_DATA get no answer, the others ERR 1243
// naming the server function.
func (c *clientConn) unknownStmt(cmd byte, id uint32) error {
	seq, err := c.client.SkipPacket()
	if err != nil {
		return err
	}
	var fn string
	switch cmd {
	case mysql.COM_STMT_EXECUTE:
		fn = "mysqld_stmt_execute"
	case mysql.COM_STMT_RESET:
		fn = "mysqld_stmt_reset"
	case mysql.COM_STMT_FETCH:
		fn = "mysqld_stmt_fetch"
	default:
		return nil
	}
	c.x.cmdSeq = seq
	return c.sendError(erUnknownStmtHandler, "HY000", fmt.Sprintf("Unknown prepared statement handler (%d) given to %s", id, fn))
}

// ownStmtLimit answers a COM_STMT_PREPARE the proxy would answer itself
// when the connection holds maxOwnStmts such statements already: the
// server's error for max_prepared_stmt_count (measured on MariaDB 10.11:
// 1461, 42000, the last statement left as it was).
func (c *clientConn) ownStmtLimit() error {
	return c.sendError(erMaxPreparedStmtCount, "42000",
		fmt.Sprintf("Can't create more than max_prepared_stmt_count statements (current value: %d)", maxOwnStmts))
}
