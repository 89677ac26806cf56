package proxy

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// A session without multi-statements (no CLIENT_MULTI_STATEMENTS at the
// handshake, or COM_SET_OPTION off since) gets from the server an error
// for a packet of several statements, and nothing of it runs (measured on
// MariaDB 10.11: SELECT 1; INSERT ... answers 1064 and inserts nothing).
// The proxy runs such a packet one statement at a time only for a session
// that has multi-statements; for any other it gives the server's answer
// without running anything:
//
//   - MariaDB, MySQL: the server prepares the text (COM_STMT_PREPARE never
//     takes several statements, and parses as COM_QUERY does): its parse
//     error is the answer, byte for byte what COM_QUERY would have said
//     (measured on MariaDB 10.11). Should the server read one statement
//     where the proxy reads several, the proxy closes it and refuses.
//   - TiDB: the session's tidb_multi_statement_mode decides, as in the
//     server: OFF answers TiDB's error 8130; ON and WARN run the
//     statements (WARN's warning is not repeated).

const (
	erMultiStatementDisabled  = 8130 // TiDB's ErrMultiStatementDisabled
	msgMultiStatementDisabled = "client has multi-statement capability disabled. " +
		"Run SET GLOBAL tidb_multi_statement_mode='ON' after you understand the security risk"
)

// refuseMultiStatement answers a packet of n statements from a session
// without multi-statements as the server would, consuming the client's
// command; handled is false when the server would run the statements (TiDB
// with tidb_multi_statement_mode ON or WARN): the caller goes on with the
// packet, which is still unread.
func (c *clientConn) refuseMultiStatement(payload []byte, inPlace bool, n int) (handled bool, err error) {
	if c.srv.Flavor == rewrite.TiDB {
		rows, err := c.backendQuery("SELECT @@SESSION.tidb_multi_statement_mode")
		if err != nil {
			if _, ok := err.(*wire.ServerError); !ok {
				return true, err
			}
		}
		if err == nil && len(rows) == 1 && len(rows[0]) == 1 && !strings.EqualFold(rows[0][0].S, "OFF") {
			return false, nil
		}
		c.consumeCommand(payload, inPlace)
		return true, c.sendError(erMultiStatementDisabled, "HY000", msgMultiStatementDisabled)
	}
	if _, err := c.backend.WriteCommand(0, []byte{mysql.COM_STMT_PREPARE}, payload[1:]); err != nil {
		return true, err
	}
	c.consumeCommand(payload, inPlace)
	if err := c.backend.Flush(); err != nil {
		return true, err
	}
	p, ok, err := c.walker().Prepare((*prepareProbe)(c))
	if err != nil || !ok {
		return true, err // an ERR: relayed as the answer
	}
	id := p.StmtID
	if _, err := c.backend.WritePacket(0, stmtCmdPacket(mysql.COM_STMT_CLOSE, id)); err != nil {
		return true, err
	}
	if err := c.backend.Flush(); err != nil {
		return true, err
	}
	return true, c.sendError(erNotAllowed, "42000", fmt.Sprintf(
		"fenceproxy reads %d statements in this packet where the server reads one, and the session has no multi-statements: send one statement per packet", n))
}

// prepareProbe is the clientConn as the walker's handler of the response
// to the proxy's own COM_STMT_PREPARE of the client's text: an ERR is the
// server's answer to the client's packet, relayed; a prepared statement's
// response is read and dropped.
type prepareProbe clientConn

func (p *prepareProbe) Err([]byte, int, bool) error {
	c := (*clientConn)(p)
	c.x.align(1, c.x.cmdSeq+1)
	c.x.lastErr = true
	_, err := c.relayPacket()
	return err
}

func (p *prepareProbe) Prepared(_ wire.Prepared, n int) error {
	p.backend.DiscardPacket(n)
	return nil
}

func (p *prepareProbe) Def() error {
	_, err := p.backend.SkipPacket()
	return err
}

// stmtCmdPacket is a COM_STMT_* packet naming statement id.
func stmtCmdPacket(cmd byte, id uint32) []byte {
	return []byte{cmd, byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)}
}
