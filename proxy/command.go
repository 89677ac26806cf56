package proxy

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/rewrite"
)

// preparedStmt is what the proxy remembers of a prepared statement
// (COM_STMT_PREPARE by id, SQL-level PREPARE by name): what executing it
// does, and under which policy that was decided.
type preparedStmt struct {
	stmt rewrite.Stmt       // what each execution does: a protected write, a session effect, or nothing (Kind Other)
	call *rewrite.LeaseCall // a lease function the proxy answers itself

	// A policy reload can protect a table that a statement prepared before
	// it writes: gen is the fencing generation the statement was decided
	// under, fenced whether the server holds the fenced text, text the
	// client's statement (COM_STMT_PREPARE only) to decide again.
	gen    uint64
	fenced bool
	text   string

	// for lease functions the proxy answers itself
	id     uint32
	params int
	types  []uint16 // parameter types last bound by the client
}

// command handles one client command, from its first packet to the end of
// its response, and returns the command byte (for metrics).
func (c *clientConn) command(rt *runtime) (byte, error) {
	// Before anything of the command reaches the backend, or is decided
	// (the engine picks the fence shape).
	if err := c.finishEngineProbe(); err != nil {
		return 0, err
	}
	n, seq, err := c.client.peekHeader()
	if err != nil {
		return 0, err
	}
	c.x.begin(seq)
	c.cmdLimit = 0
	c.prevWarn, c.warn = c.warn, nil
	if seq != 0 {
		// What the server itself does: this ERR, then the connection ends.
		c.client.writePacket(0, errPayload(erNetPacketsOutOfOrder, "08S01", "Got packets out of order"))
		c.client.flush()
		return 0, c.client.sideErr(malformed("command with sequence number %d", seq))
	}
	if n == 0 {
		// The server answers an empty packet with "Unknown command" and
		// goes on: let it.
		if err := c.forwardCommand(); err != nil {
			return 0, err
		}
		if err := c.relayResults(nil); err != nil {
			return 0, err
		}
		return 0, c.client.flush()
	}
	head, err := c.client.r.Peek(headerLen + min(n, 5))
	if err != nil {
		return 0, c.client.sideErr(err)
	}
	cmd := head[headerLen]
	c.noteCommand(cmd)
	c.testPanic(panicCommand)
	if cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_PREPARE {
		// The statement text may not exceed max_query_bytes, whether the
		// proxy inspects it or only relays it; forwardCommand counts
		// statements longer than one packet.
		c.cmdLimit = rt.cfg.Limits.MaxQueryBytes
		if c.cmdLimit > 0 && n-1 > c.cmdLimit {
			return cmd, c.refuseTooLarge()
		}
	}

	switch cmd {
	case mysql.COM_QUERY:
		err = c.comQuery(rt)
	case mysql.COM_STMT_PREPARE:
		err = c.comPrepare(rt)
	case mysql.COM_STMT_EXECUTE:
		err = c.comExecute(rt, head)
	case mysql.COM_STMT_CLOSE, mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_STMT_RESET:
		if cmd == mysql.COM_STMT_CLOSE {
			// Not a statement: the server's warnings stay (drivers close a
			// statement between its execution and SHOW WARNINGS).
			c.warn = c.prevWarn
		}
		if ps := c.proxyStmt(head); ps != nil {
			// A statement the proxy answers itself: the server never saw it.
			return cmd, c.proxyStmtCommand(cmd, ps)
		}
		if cmd == mysql.COM_STMT_RESET {
			if err = c.forwardCommand(); err == nil {
				_, err = c.relayOne()
			}
			break
		}
		if cmd == mysql.COM_STMT_CLOSE && n >= 5 {
			delete(c.prepared, binary.LittleEndian.Uint32(head[headerLen+1:]))
		}
		return cmd, c.forwardCommand() // no response
	case mysql.COM_STMT_FETCH, mysql.COM_FIELD_LIST:
		if err = c.forwardCommand(); err == nil {
			_, err = c.relayRows()
		}
	case mysql.COM_STATISTICS, mysql.COM_PING, mysql.COM_PROCESS_KILL, mysql.COM_SET_OPTION, mysql.COM_REFRESH:
		if err = c.forwardCommand(); err == nil {
			_, err = c.relayOne()
		}
	case mysql.COM_INIT_DB:
		err = c.comInitDB()
	case mysql.COM_RESET_CONNECTION:
		var ok bool
		if err = c.forwardCommand(); err == nil {
			if ok, err = c.relayOne(); ok {
				c.resetConnection()
			}
		}
	case mysql.COM_CHANGE_USER:
		err = c.comChangeUser()
	case mysql.COM_QUIT:
		c.quitSent = c.forwardCommand() == nil
		return cmd, errQuit
	case mysql.COM_BINLOG_DUMP, mysql.COM_BINLOG_DUMP_GTID:
		// A replication stream never returns to commands: become a pipe.
		if err = c.forwardCommand(); err == nil {
			err = c.pipe()
		}
	default:
		// Anything else is answered by OK, ERR, EOF or a result set.
		if err = c.forwardCommand(); err == nil {
			err = c.relayResults(nil)
		}
	}
	if err != nil {
		return cmd, err
	}
	return cmd, c.client.flush()
}

// comInitDB forwards COM_INIT_DB and tracks the new current schema.
func (c *clientConn) comInitDB() error {
	p, ok, err := c.client.peekPacket()
	if err != nil {
		return err
	}
	db := ""
	if ok {
		db = string(p[headerLen+1:])
	}
	if err := c.forwardCommand(); err != nil {
		return err
	}
	okResp, err := c.relayOne()
	if okResp {
		c.sess.Schema = db
	}
	return err
}

// comChangeUser relays COM_CHANGE_USER's authentication exchange like the
// initial one.
func (c *clientConn) comChangeUser() error {
	p, _, err := c.client.readPacket(c.buf[:0], maxWholePacket)
	if err != nil {
		return err
	}
	cu, perr := parseChangeUser(p, c.caps)
	if perr != nil {
		return c.client.sideErr(perr)
	}
	if _, err := c.backend.writePacket(0, p); err != nil {
		return err
	}
	if err := c.backend.flush(); err != nil {
		return err
	}
	c.x.started = true
	ok, err := c.relayAuth(0, 0, cu.plugin)
	if err != nil {
		return err
	}
	if !ok {
		c.noteLoginRefused(cu.user)
		c.changeUserFailed(cu)
		return nil
	}
	c.changedUser(cu)
	return nil
}

// pipe copies bytes both ways until either side closes (replication).
func (c *clientConn) pipe() error {
	if err := c.client.flush(); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { defer c.recoverGoroutine("replication pipe", errc); errc <- copyAll(c.client, c.backend) }()
	go func() { defer c.recoverGoroutine("replication pipe", errc); errc <- copyAll(c.backend, c.client) }()
	err := <-errc
	c.forceClose()
	<-errc
	return err
}

func copyAll(dst, src *packetConn) error {
	for {
		if src.r.Buffered() == 0 {
			if _, err := src.r.Peek(1); err != nil {
				return src.sideErr(err)
			}
		}
		if err := copyN(dst, src, src.r.Buffered()); err != nil {
			return err
		}
		if err := dst.flush(); err != nil {
			return err
		}
	}
}

// proxyStmt returns the statement a COM_STMT_* packet names if the proxy
// owns it (a prepared lease function).
func (c *clientConn) proxyStmt(head []byte) *preparedStmt {
	if len(head) < headerLen+5 || c.prepared == nil {
		return nil
	}
	ps := c.prepared[binary.LittleEndian.Uint32(head[headerLen+1:])]
	if ps == nil || ps.call == nil {
		return nil
	}
	return ps
}

// proxyStmtCommand handles CLOSE, SEND_LONG_DATA and RESET of a statement
// the proxy owns.
func (c *clientConn) proxyStmtCommand(cmd byte, ps *preparedStmt) error {
	n, _, err := c.client.peekHeader()
	if err != nil {
		return err
	}
	if _, _, err := c.client.readPacket(nil, max(n, maxWholePacket)); err != nil {
		return err
	}
	switch cmd {
	case mysql.COM_STMT_CLOSE:
		delete(c.prepared, ps.id)
		return nil
	case mysql.COM_STMT_SEND_LONG_DATA:
		return nil // lease function arguments are short; long data is not used
	}
	c.x.started = true
	ok := append([]byte{mysql.OK_HEADER, 0, 0}, byte(c.status), byte(c.status>>8), 0, 0)
	if _, err := c.client.writePacket(c.x.cmdSeq+1, ok); err != nil {
		return err
	}
	return c.client.flush()
}

// refuseTooLarge answers a statement longer than limits.max_query_bytes,
// whose first packet (or, after forwardCommand streamed some, next packet)
// is unread in the client buffer: the rest of it is consumed, the client
// gets ERR 1153 as from a server's max_allowed_packet, and the connection
// ends (the backend may have seen part of the packet).
func (c *clientConn) refuseTooLarge() error {
	c.client.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	seq, err := c.client.skipPacket()
	if err != nil {
		return err
	}
	c.client.writePacket(seq+1, errPayload(erNetPacketTooBig, "08S01", fmt.Sprintf(
		"fenceproxy: statement larger than limits.max_query_bytes (%d bytes)", c.cmdLimit)))
	c.client.flush()
	return c.client.sideErr(errTooLarge)
}
