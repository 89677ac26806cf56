package proxy

import (
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/wire"
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
	sent   [32]byte // SHA-256 of the text the server holds (fenced, or as written for a guarded write)

	// for lease functions the proxy answers itself, and writes whose rows'
	// lease follows from bound values (rowparams.go)
	id     uint32
	params int
	types  []uint16 // parameter types last bound by the client

	// longData: COM_STMT_SEND_LONG_DATA was sent for the statement since
	// it was prepared or last reset (COM_STMT_RESET).
	longData bool

	// trap: the trapped variant the proxy prepared beside an UPDATE or
	// DELETE whose WHERE pins no lease (preptrap.go); typesStale: the
	// last execution went out as T's, so the server holds other types
	// for this statement than the client bound last.
	trap       *trapStmt
	typesStale bool
	// trapLost: why the proxy has no trapped variant for a statement that
	// needs one; its executions are refused (shadow mode: relayed).
	trapLost string
}

// commandSpec is what the proxy does with one command byte. Every byte it
// relays has a run function in commandTable; any other byte is refused
// (refuseCommand): the client gets an ERR, nothing of the packet reaches
// the server, and the connection goes on. docs/protocol.md shows the same
// table (TestProtocolDocListsCommands).
type commandSpec struct {
	name string
	// relayed commands
	does     string // what the proxy does with it
	response string // how its response is framed
	run      func(c *clientConn, rt *runtime, head []byte) error
	// refused commands: the error, as the server answers the command
	// where it knows no better, and what to do instead
	code  uint16
	state string
	why   string
}

// commandTable is indexed by command byte (filled in init: its run
// functions refer back to it).
var commandTable [256]commandSpec

func init() {
	relay := func(cmd byte, name, does, response string, run func(*clientConn, *runtime, []byte) error) {
		commandTable[cmd] = commandSpec{name: name, does: does, response: response, run: run}
	}
	refuse := func(cmd byte, name, why string) {
		commandTable[cmd] = commandSpec{name: name, code: erUnknownComError, state: "08S01", why: why}
	}
	relay(mysql.COM_QUIT, "COM_QUIT", "relayed; both connections close", "none",
		func(c *clientConn, _ *runtime, _ []byte) error {
			c.quitSent = c.forwardCommand() == nil
			return errQuit
		})
	relay(mysql.COM_INIT_DB, "COM_INIT_DB", "relayed; the schema is tracked from its OK", "OK or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.comInitDB() })
	relay(mysql.COM_QUERY, "COM_QUERY", "the statement reader decides: relayed, fenced, guarded, refused or answered by the proxy",
		"OK, ERR, result sets chained by SERVER_MORE_RESULTS_EXISTS, LOCAL INFILE requests",
		func(c *clientConn, rt *runtime, _ []byte) error { return c.comQuery(rt) })
	relay(mysql.COM_FIELD_LIST, "COM_FIELD_LIST", "relayed (reads column definitions)", "column definitions, then EOF; or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsRows) })
	refuse(mysql.COM_CREATE_DB, "COM_CREATE_DB", "the servers no longer have it; send CREATE DATABASE as a statement")
	refuse(mysql.COM_DROP_DB, "COM_DROP_DB", "the servers no longer have it; send DROP DATABASE as a statement")
	relay(mysql.COM_REFRESH, "COM_REFRESH", "relayed (FLUSH privileges, logs, tables, hosts, status, threads; RESET SLAVE, RESET MASTER): writes no table",
		"OK or ERR", func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_SHUTDOWN, "COM_SHUTDOWN", "relayed (the server checks the SHUTDOWN privilege)", "EOF or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_STATISTICS, "COM_STATISTICS", "relayed", "one string packet",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_PROCESS_INFO, "COM_PROCESS_INFO", "relayed (SHOW PROCESSLIST)", "a result set or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsResults) })
	refuse(mysql.COM_CONNECT, "COM_CONNECT", "a server-internal command")
	relay(mysql.COM_PROCESS_KILL, "COM_PROCESS_KILL", "relayed (KILL of a session id)", "OK or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_DEBUG, "COM_DEBUG", "relayed (debug information to the server's error log)", "EOF or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_PING, "COM_PING", "relayed", "OK",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	refuse(mysql.COM_TIME, "COM_TIME", "a server-internal command")
	refuse(mysql.COM_DELAYED_INSERT, "COM_DELAYED_INSERT", "a server-internal command")
	relay(mysql.COM_CHANGE_USER, "COM_CHANGE_USER", "its authentication exchange is relayed like the handshake's; the session state is reset in the proxy's model as on the server",
		"authentication packets, then OK or ERR", func(c *clientConn, _ *runtime, _ []byte) error { return c.comChangeUser() })
	relay(mysql.COM_BINLOG_DUMP, "COM_BINLOG_DUMP", "replication: relayed; an ERR first (no privilege) leaves the session in commands, anything else starts the binary log stream, which the server ends by closing the session: the proxy then copies bytes both ways",
		"ERR, or binary log events until the server closes", func(c *clientConn, _ *runtime, _ []byte) error { return c.comBinlogDump() })
	refuse(mysql.COM_TABLE_DUMP, "COM_TABLE_DUMP", "the servers no longer have it")
	refuse(mysql.COM_CONNECT_OUT, "COM_CONNECT_OUT", "a server-internal command")
	relay(mysql.COM_REGISTER_SLAVE, "COM_REGISTER_SLAVE", "replication: relayed", "OK or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.relayCommand(relayAsOne) })
	relay(mysql.COM_STMT_PREPARE, "COM_STMT_PREPARE", "the statement reader decides once what each execution does; a lease function is prepared by the proxy itself; an UPDATE or DELETE whose WHERE pins no row lease gets a trapped variant the proxy prepares beside it",
		"prepare OK, parameter and column definitions; or ERR", func(c *clientConn, rt *runtime, _ []byte) error { return c.comPrepare(rt) })
	relay(mysql.COM_STMT_EXECUTE, "COM_STMT_EXECUTE", "the statement is resolved as the server resolves its id; a protected write is guarded or fenced as prepared (an INSERT into a table whose lease is a template, under the lease its bound values name; an UPDATE or DELETE with a trapped variant executed as that), a lease function answered",
		"as COM_QUERY (binary rows)", func(c *clientConn, rt *runtime, head []byte) error { return c.comExecute(rt, head) })
	relay(mysql.COM_STMT_SEND_LONG_DATA, "COM_STMT_SEND_LONG_DATA", "the statement resolved as for EXECUTE; relayed (ignored for the proxy's own statements); an INSERT whose template columns are bound refuses executions until COM_STMT_RESET", "none",
		func(c *clientConn, _ *runtime, head []byte) error {
			return c.comStmtData(mysql.COM_STMT_SEND_LONG_DATA, head)
		})
	relay(mysql.COM_STMT_CLOSE, "COM_STMT_CLOSE", "the statement resolved as for EXECUTE and forgotten; relayed unless the proxy's own (its trapped variant closed with it)", "none",
		func(c *clientConn, _ *runtime, head []byte) error { return c.comStmtData(mysql.COM_STMT_CLOSE, head) })
	relay(mysql.COM_STMT_RESET, "COM_STMT_RESET", "the statement resolved as for EXECUTE; relayed, or answered for the proxy's own", "OK or ERR",
		func(c *clientConn, _ *runtime, head []byte) error { return c.comStmtReset(head) })
	relay(mysql.COM_SET_OPTION, "COM_SET_OPTION", "multi-statements on or off: sent as the 3-byte packet the server reads, and tracked from its answer",
		"EOF (OK with 0xFE under CLIENT_DEPRECATE_EOF) or ERR", func(c *clientConn, _ *runtime, _ []byte) error { return c.comSetOption() })
	relay(mysql.COM_STMT_FETCH, "COM_STMT_FETCH", "the statement resolved as for EXECUTE; relayed (the proxy's own statements have no cursor)",
		"binary rows, then EOF; or ERR", func(c *clientConn, _ *runtime, head []byte) error { return c.comStmtFetch(head) })
	refuse(mysql.COM_DAEMON, "COM_DAEMON", "a server-internal command")
	relay(mysql.COM_BINLOG_DUMP_GTID, "COM_BINLOG_DUMP_GTID", "MySQL's replication by GTID: as COM_BINLOG_DUMP (MariaDB answers Unknown command)",
		"ERR, or binary log events until the server closes", func(c *clientConn, _ *runtime, _ []byte) error { return c.comBinlogDump() })
	relay(mysql.COM_RESET_CONNECTION, "COM_RESET_CONNECTION", "relayed; the session state is reset in the proxy's model as on the server", "OK or ERR",
		func(c *clientConn, _ *runtime, _ []byte) error { return c.comResetConnection() })
	refuse(comClone, "COM_CLONE", "MySQL's clone plugin: clone from the server directly")
	refuse(comSubscribeGRStream, "COM_SUBSCRIBE_GROUP_REPLICATION_STREAM", "MySQL group replication: connect to the server directly")
	commandTable[comStmtBulkExecute] = commandSpec{name: "COM_STMT_BULK_EXECUTE", code: erUnsupportedPS, state: "HY000",
		why: "bulk execution is never offered (no MARIADB_CLIENT_STMT_BULK_OPERATIONS); execute the statement once per row"}
	refuse(comSlaveWorker, "COM_SLAVE_WORKER", "a server-internal command")
	refuse(comSlaveIO, "COM_SLAVE_IO", "a server-internal command")
	refuse(comSlaveSQL, "COM_SLAVE_SQL", "a server-internal command")
	refuse(comReserved1, "COM_RESERVED_1 (COM_MULTI)", "removed from the server")
	refuse(comEnd, "COM_END", "not a command")
	refuse(mysql.COM_SLEEP, "COM_SLEEP", "a server-internal command")
}

// Command bytes go-mysql does not name.
const (
	comClone             = 0x20 // MySQL 8
	comSubscribeGRStream = 0x21 // MySQL 8
	comSlaveWorker       = 0xfb // MariaDB, internal
	comSlaveIO           = 0xfc
	comSlaveSQL          = 0xfd
	comReserved1         = 0xfe // MariaDB's removed COM_MULTI
	comEnd               = 0xff

	erUnsupportedPS = 1295 // ER_UNSUPPORTED_PS: what MariaDB answers COM_STMT_BULK_EXECUTE without the capability
)

// command handles one client command, from its first packet to the end of
// its response, and returns the command byte (for metrics).
func (c *clientConn) command(rt *runtime) (byte, error) {
	// Before anything of the command reaches the backend, or is decided
	// (the engine picks the fence shape).
	if err := c.finishEngineProbe(); err != nil {
		return 0, err
	}
	n, seq, err := c.client.PeekHeader()
	if err != nil {
		return 0, err
	}
	c.x.begin(seq)
	c.prevWarn, c.warn = c.warn, nil
	if seq != 0 {
		// What the server itself does: this ERR, then the connection ends.
		c.client.WritePacket(0, wire.ErrPayload(erNetPacketsOutOfOrder, "08S01", "Got packets out of order"))
		c.client.Flush()
		return 0, c.client.Err(wire.Malformed("command with sequence number %d", seq))
	}
	if n == 0 {
		// The server reads an empty packet as COM_SLEEP.
		if err := c.refuseCommand(mysql.COM_SLEEP, true); err != nil {
			return 0, err
		}
		return 0, c.client.Flush()
	}
	head, err := c.client.PeekPrefix(n, 5)
	if err != nil {
		return 0, err
	}
	cmd := head[wire.HeaderLen]
	c.noteCommand(cmd)
	c.testPanic(panicCommand)
	if cmd == mysql.COM_QUERY || cmd == mysql.COM_STMT_PREPARE {
		// The statement text may not exceed max_query_bytes, whether the
		// proxy inspects it or only relays it; forwardCommand counts
		// statements longer than one packet.
		c.x.limit = rt.cfg.Limits.MaxQueryBytes
		if c.x.limit > 0 && n-1 > c.x.limit {
			return cmd, c.refuseTooLarge()
		}
	}
	if spec := &commandTable[cmd]; spec.run != nil && c.pendingErr != nil && spec.response != "none" {
		be := c.pendingErr
		c.pendingErr = nil
		if _, err := c.client.SkipPacket(); err != nil {
			return cmd, err
		}
		err = c.sendError(be.Code, be.State, be.Msg)
	} else if spec.run != nil {
		err = spec.run(c, rt, head)
	} else {
		err = c.refuseCommand(cmd, false)
	}
	if err != nil {
		return cmd, err
	}
	return cmd, c.client.Flush()
}

// refuseCommand answers a command byte the proxy does not relay (empty: an
// empty packet) with an ERR, after consuming the whole packet: nothing of
// it reaches the server, and the connection goes on, as after the server's
// own "Unknown command".
func (c *clientConn) refuseCommand(cmd byte, empty bool) error {
	seq, err := c.client.SkipPacket()
	if err != nil {
		return err
	}
	c.x.cmdSeq = seq
	spec := &commandTable[cmd]
	code, state := spec.code, spec.state
	if code == 0 {
		code, state = erUnknownComError, "08S01"
	}
	var msg string
	switch {
	case empty:
		// Byte for byte the server's answer: there is no command to
		// name, and nothing else to do.
		msg = "Unknown command"
	case code == erUnsupportedPS:
		msg = fmt.Sprintf("This command is not supported in the prepared statement protocol yet: fenceproxy does not relay %s (0x%02X): %s",
			spec.name, cmd, spec.why)
	case spec.name != "":
		msg = fmt.Sprintf("Unknown command: fenceproxy does not relay %s (0x%02X): %s", spec.name, cmd, spec.why)
	default:
		msg = fmt.Sprintf("Unknown command: fenceproxy relays only the commands of its protocol model, and 0x%02X is none (docs/protocol.md)", cmd)
	}
	return c.sendError(code, state, msg)
}

// How relayCommand reads the response of a command the proxy only relays.
const (
	relayAsOne     = iota // one packet: OK, ERR, EOF or a string
	relayAsRows           // rows (or definitions) until a terminator or ERR
	relayAsResults        // OK, ERR or result sets
)

// relayCommand forwards the client's command as it came and relays its
// response.
func (c *clientConn) relayCommand(how int) error {
	if err := c.forwardCommand(); err != nil {
		return err
	}
	var err error
	switch how {
	case relayAsOne:
		_, err = c.relayOne()
	case relayAsRows:
		_, err = c.relayRows()
	default:
		err = c.relayResults(nil)
	}
	return err
}

// comResetConnection relays COM_RESET_CONNECTION and resets the proxy's
// model of the session when the server did.
func (c *clientConn) comResetConnection() error {
	if err := c.forwardCommand(); err != nil {
		return err
	}
	ok, err := c.relayOne()
	if ok {
		c.resetConnection()
	}
	return err
}

// comStmtData handles COM_STMT_CLOSE and COM_STMT_SEND_LONG_DATA, which
// the server never answers.
func (c *clientConn) comStmtData(cmd byte, head []byte) error {
	if cmd == mysql.COM_STMT_CLOSE {
		// Not a statement: the server's warnings stay (drivers close a
		// statement between its execution and SHOW WARNINGS).
		c.warn = c.prevWarn
	}
	id, ps, none := c.resolveStmt(head)
	if none {
		return c.unknownStmt(cmd, id)
	}
	if ps != nil && ps.call != nil {
		// A statement the proxy answers itself: the server never saw it.
		return c.proxyStmtCommand(cmd, ps)
	}
	if cmd == mysql.COM_STMT_CLOSE {
		if _, ok := stmtIDOf(head); ok {
			if ps != nil && ps.trap != nil {
				// T goes with S (no answer to either).
				if err := c.closeServerStmt(ps.trap.id, false); err != nil {
					return err
				}
			}
			c.closeStmt(id)
		}
	} else if ps != nil {
		// The server keeps the value, and reads no value for the
		// parameter from the executions that follow: the proxy no longer
		// knows where the values it reads are (rowparams.go).
		ps.longData = true
	}
	return c.forwardCommand()
}

// comStmtReset handles COM_STMT_RESET.
func (c *clientConn) comStmtReset(head []byte) error {
	id, ps, none := c.resolveStmt(head)
	if none {
		return c.unknownStmt(mysql.COM_STMT_RESET, id)
	}
	if ps != nil && ps.call != nil {
		return c.proxyStmtCommand(mysql.COM_STMT_RESET, ps)
	}
	if ps != nil {
		ps.longData = false // the server drops the statement's long data
	}
	return c.relayCommand(relayAsOne)
}

// comStmtFetch handles COM_STMT_FETCH.
func (c *clientConn) comStmtFetch(head []byte) error {
	id, ps, none := c.resolveStmt(head)
	if none {
		return c.unknownStmt(mysql.COM_STMT_FETCH, id)
	}
	if ps != nil && ps.call != nil {
		// The proxy's own statements return their row at once, never a
		// cursor: the server's answer for a statement without one.
		seq, err := c.client.SkipPacket()
		if err != nil {
			return err
		}
		c.x.cmdSeq = seq
		return c.sendError(erStmtHasNoOpenCursor, "HY000", fmt.Sprintf("The statement (%d) has no open cursor", id))
	}
	return c.relayCommand(relayAsRows)
}

// comSetOption relays COM_SET_OPTION as the packet the server reads (the
// option is the 2 bytes after the command, a missing byte 0, anything
// after them ignored) and follows its effect on multi-statements.
func (c *clientConn) comSetOption() error {
	p, seq, err := c.client.ReadPacket(c.buf[:0], wire.MaxWholePacket)
	if err != nil {
		return err
	}
	c.x.cmdSeq = seq
	var opt uint16
	if len(p) > 1 {
		opt = uint16(p[1])
	}
	if len(p) > 2 {
		opt |= uint16(p[2]) << 8
	}
	if _, err := c.backend.WritePacket(0, []byte{mysql.COM_SET_OPTION, byte(opt), byte(opt >> 8)}); err != nil {
		return err
	}
	if err := c.backend.Flush(); err != nil {
		return err
	}
	c.x.align(1, c.x.cmdSeq+1)
	done, err := c.walker().SetOption((*packetRelay)(c))
	if done {
		switch opt {
		case mysql.MYSQL_OPTION_MULTI_STATEMENTS_ON:
			c.multiStatements = true
		case mysql.MYSQL_OPTION_MULTI_STATEMENTS_OFF:
			c.multiStatements = false
		}
	}
	return err
}

// comBinlogDump handles COM_BINLOG_DUMP and COM_BINLOG_DUMP_GTID. The
// server answers an ERR and reads commands again when it refuses the dump
// before it starts (no REPLICATION SLAVE privilege); once the dump started
// it never reads a command again, and closes the session when the dump
// ends (measured on MariaDB 10.11, and so in MySQL's com_binlog_dump).
// Only then does the connection become a pipe.
func (c *clientConn) comBinlogDump() error {
	if err := c.forwardCommand(); err != nil {
		return err
	}
	started, err := c.walker().DumpStart((*packetRelay)(c))
	if err != nil || !started {
		return err
	}
	return c.pipe()
}

// comInitDB forwards COM_INIT_DB and tracks the new current schema.
func (c *clientConn) comInitDB() error {
	p, ok, err := c.client.PeekPacket()
	if err != nil {
		return err
	}
	db := ""
	if ok {
		db = string(p[wire.HeaderLen+1:])
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
	p, _, err := c.client.ReadPacket(c.buf[:0], wire.MaxWholePacket)
	if err != nil {
		return err
	}
	cu, perr := parseChangeUser(p, c.caps)
	if perr != nil {
		return c.client.Err(perr)
	}
	if _, err := c.backend.WritePacket(0, p); err != nil {
		return err
	}
	if err := c.backend.Flush(); err != nil {
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
	if err := c.client.Flush(); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { defer c.recoverGoroutine("replication pipe", errc); errc <- wire.CopyAll(c.client, c.backend) }()
	go func() { defer c.recoverGoroutine("replication pipe", errc); errc <- wire.CopyAll(c.backend, c.client) }()
	err := <-errc
	c.forceClose()
	<-errc
	return err
}

// proxyStmtCommand handles CLOSE, SEND_LONG_DATA and RESET of a statement
// the proxy owns.
func (c *clientConn) proxyStmtCommand(cmd byte, ps *preparedStmt) error {
	n, _, err := c.client.PeekHeader()
	if err != nil {
		return err
	}
	if _, _, err := c.client.ReadPacket(nil, max(n, wire.MaxWholePacket)); err != nil {
		return err
	}
	switch cmd {
	case mysql.COM_STMT_CLOSE:
		c.closeStmt(ps.id)
		return nil
	case mysql.COM_STMT_SEND_LONG_DATA:
		return nil // lease function arguments are short; long data is not used
	}
	c.x.started = true
	if _, err := c.client.WritePacket(c.x.cmdSeq+1, wire.OKPayload(0, c.ownStatus())); err != nil {
		return err
	}
	return c.client.Flush()
}

// refuseTooLarge answers a statement longer than limits.max_query_bytes,
// whose first packet (or, after forwardCommand streamed some, next packet)
// is unread in the client buffer: the rest of it is consumed, the client
// gets ERR 1153 as from a server's max_allowed_packet, and the connection
// ends (the backend may have seen part of the packet).
func (c *clientConn) refuseTooLarge() error {
	c.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	seq, err := c.client.SkipPacket()
	if err != nil {
		return err
	}
	c.client.WritePacket(seq+1, wire.ErrPayload(erNetPacketTooBig, "08S01", fmt.Sprintf(
		"fenceproxy: statement larger than limits.max_query_bytes (%d bytes)", c.x.limit)))
	c.client.Flush()
	return c.client.Err(wire.ErrTooLarge)
}
