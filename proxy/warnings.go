package proxy

import (
	"errors"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// TiDB empties SHOW WARNINGS at every statement but SHOW WARNINGS itself,
// COMMIT included, so the COMMIT of the transaction the proxy wraps around
// an autocommit guarded write would leave the client's next SHOW WARNINGS
// empty where a direct session lists the write's warnings. The fencing
// layer's guardedWrite reads SHOW WARNINGS before that COMMIT and has the
// connection keep TiDB's packets (c.warn) when the write's OK counted
// warnings or the write failed; the client's
// next command, if it is exactly SHOW WARNINGS or SHOW COUNT(*) WARNINGS
// (neither empties them on TiDB), gets them, and anything else drops them
// (what it does on the server empties the warnings there too). Measured on
// tidb-server v8.4.0: the response inside the transaction is byte for byte
// the direct session's but for SERVER_STATUS_IN_TRANS in its EOF packets.
// @@warning_count goes to the server as before (its column is named as
// the client wrote it).

// readWarnings reads the response to the proxy's SHOW WARNINGS: its
// packets, or nil when it failed.
func (c *clientConn) readWarnings() (*wire.Recorded, error) {
	return c.walker().Record()
}

// heldWarnings is the warning count of a held final packet.
func heldWarnings(h heldPacket) uint16 { return wire.Warnings(h.p, h.eof) }

// answerWarnings answers SHOW WARNINGS with the kept packets, the status
// flags of their EOF packets those after the proxy's COMMIT, and keeps them
// for another SHOW WARNINGS (which does not empty them on the server).
func (c *clientConn) answerWarnings() error {
	c.warn = c.prevWarn
	c.x.started = true
	err := c.warn.Packets.Replay(c.client, c.x.cmdSeq+1, func(st uint16) uint16 {
		return c.x.endStatus(st &^ (mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_IN_TRANS_READONLY))
	})
	if errors.Is(err, wire.ErrMalformed) {
		return c.backend.Err(err)
	}
	return err
}

// warnCountCol is TiDB's column of SHOW COUNT(*) WARNINGS (captured).
var warnCountCol = wire.Column{Name: "Count", Type: mysql.MYSQL_TYPE_LONG, Charset: wire.CharsetBinary, Length: 11}

// answerWarningCount answers SHOW COUNT(*) WARNINGS from the kept
// warnings, and keeps them.
func (c *clientConn) answerWarningCount() error {
	c.warn = c.prevWarn
	return c.writeResultSet([]wire.Column{warnCountCol}, [][]wire.Value{{{S: strconv.FormatUint(c.warn.Count, 10)}}}, false)
}
