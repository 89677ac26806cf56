package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// ownStatus is the status flags of a packet the proxy writes itself: the
// session's, without SERVER_SESSION_STATE_CHANGED, which says session
// state follows in the packet (a client reads it there), and the proxy's
// packets carry none.
func (c *clientConn) ownStatus() uint16 { return c.status &^ mysql.SERVER_SESSION_STATE_CHANGED }

// writeColumns writes column definitions and, unless CLIENT_DEPRECATE_EOF,
// the EOF after them.
func (c *clientConn) writeColumns(seq byte, cols []wire.Column) (byte, error) {
	return c.client.WriteColumns(seq, cols, c.deprecateEOF, c.ownStatus()&^mysql.SERVER_MORE_RESULTS_EXISTS)
}

// writeResultSet answers the current command with a complete result set in
// the text or the binary protocol.
func (c *clientConn) writeResultSet(cols []wire.Column, rows [][]wire.Value, binaryRows bool) error {
	c.x.started = true
	return c.client.WriteResultSet(c.x.cmdSeq+1, cols, rows, binaryRows, c.deprecateEOF, c.ownStatus()&^mysql.SERVER_MORE_RESULTS_EXISTS)
}
