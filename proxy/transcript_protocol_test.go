package proxy

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The closed protocol model: the command table, the capability flags the
// server receives, MariaDB's "last statement" id, multi-statements for a
// session without them, replication commands, and responses of a shape
// the walker does not model.

// guardedInsert is the statement the cases try to smuggle past the guard.
const guardedInsert = "INSERT INTO invoices (v) VALUES (1)"

var protocolCases = []transcriptCase{{
	name: "command_table",
	about: `Every command byte outside the proxy's command table, each with the text of a guarded INSERT as
its payload (COM_STMT_BULK_EXECUTE with the id of a prepared guarded INSERT and three rows), and
an empty packet: each gets an ERR from the proxy (1047 08S01 "Unknown command", what the server
answers them; 1295 for bulk execution, what MariaDB answers without the capability), nothing of
them reaches the backend (its next packet is the COM_PING after them), and the connection goes on.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, guardedInsert...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, label: "prepare OK"},
			colDef(col{"?", mysql.MYSQL_TYPE_VAR_STRING}))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		for b := 0; b < 256; b++ {
			if commandTable[b].run != nil {
				continue
			}
			p := append([]byte{byte(b)}, guardedInsert...)
			label := fmt.Sprintf("=command 0x%02x %q", b, guardedInsert)
			if b == comStmtBulkExecute {
				p = []byte{comStmtBulkExecute, 4, 0, 0, 0, 128, 0, mysql.MYSQL_TYPE_LONGLONG, 0}
				for v := byte(1); v <= 3; v++ {
					p = append(append(p, 0), v, 0, 0, 0, 0, 0, 0, 0)
				}
				label = "=COM_STMT_BULK_EXECUTE stmt=4, 3 rows"
			}
			c.sendAs(0, p, label)
			c.clientGets()
		}
		c.send(0, nil)
		c.clientGets()
		h.note("the backend's next packet is the ping: nothing of the refused commands reached it")
		pingWorks(c)
	},
}, {
	name: "capabilities_rebuilt",
	about: `A client that sets every capability flag, and MariaDB's extended capabilities in the reserved
bytes 28-31 (with CLIENT_MYSQL set, which the proxy clears as the server does not offer it): the
server receives the flags the proxy relays (no CLIENT_NO_SCHEMA, compression, query attributes,
ODBC, ...) and zeros in the 23 reserved bytes: no extended capability (bulk operations, cached
metadata) reaches it. The greeting offered none of them.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		c.clientGetsAs("greeting")
		resp := handshakeResponse(0xffffffff&^(mysql.CLIENT_SSL|mysql.CLIENT_COMPRESS), "app", "app", mysql.AUTH_NATIVE_PASSWORD, nil)
		binary.LittleEndian.PutUint32(resp[28:], 0xffffffff)
		for i := 9; i < 28; i++ {
			resp[i] = 0xee
		}
		c.sendAs(1, resp, "handshake response")
		_, got := c.backendGetsAs("handshake response")
		if caps := binary.LittleEndian.Uint32(got); caps&^relayedCaps != 0 {
			h.fail("the backend got flags the proxy does not relay: %08x", caps&^relayedCaps)
		}
		for i := 9; i < 32; i++ {
			if got[i] != 0 {
				h.fail("reserved byte %d reached the backend as %02x", i, got[i])
			}
		}
		c.reply(2, okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		pingWorks(c)
	},
}, {
	name: "last_statement_id",
	about: `MariaDB's statement id 0xFFFFFFFF names the last statement COM_STMT_PREPARE made, as the client
saw it: the proxy resolves it so and sends the statement's own id, so a guarded INSERT executed
as 0xFFFFFFFF is guarded; a lease function prepared last is answered by the proxy; after a
prepare that failed, or COM_STMT_CLOSE of the last one, there is none, and the proxy answers as
MariaDB does (1243 for EXECUTE, RESET and FETCH; nothing for CLOSE and SEND_LONG_DATA) without
sending anything.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		last := execPkt(0)
		binary.LittleEndian.PutUint32(last[1:], lastStmtID)
		h.note("nothing prepared yet")
		c.sendAs(0, last, "COM_STMT_EXECUTE stmt=0xffffffff")
		c.clientGets()
		h.note("a guarded INSERT (server id 4), executed as the last statement: guarded, sent as stmt=4")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, guardedInsert...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
		c.sendAs(0, last, "COM_STMT_EXECUTE stmt=0xffffffff")
		guardRound(c, true, guardStale)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		c.sendAs(0, last, "COM_STMT_EXECUTE stmt=0xffffffff")
		guardRound(c, true, guardHolds)
		c.backendGetsAs("COM_STMT_EXECUTE")
		c.backendGets()
		c.respond(okPkt(1, 11, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.note("a lease function prepared last: the proxy's own statement")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT fence_release()"...))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_RESET, lastStmtID), "COM_STMT_RESET stmt=0xffffffff")
		c.clientGets()
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_FETCH, lastStmtID), "COM_STMT_FETCH stmt=0xffffffff")
		c.clientGets()
		h.note("a prepare the server refuses: no last statement")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT nosuchcol FROM notes"...))
		c.backendGets()
		c.respond(errPkt(1054, "42S22", "Unknown column 'nosuchcol' in 'SELECT'"))
		c.clientGets()
		c.sendAs(0, last, "COM_STMT_EXECUTE stmt=0xffffffff")
		c.clientGets()
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_CLOSE, lastStmtID), "COM_STMT_CLOSE stmt=0xffffffff")
		h.note("a SELECT (server id 5), then COM_STMT_CLOSE of the last statement: sent as stmt=5")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT 1"...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
		c.sendAs(0, append(stmtCmdPacket(mysql.COM_STMT_SEND_LONG_DATA, lastStmtID), 0, 0, 'x'), "COM_STMT_SEND_LONG_DATA stmt=0xffffffff")
		c.backendGetsAs("COM_STMT_SEND_LONG_DATA")
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_CLOSE, lastStmtID), "COM_STMT_CLOSE stmt=0xffffffff")
		c.backendGetsAs("COM_STMT_CLOSE")
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_RESET, lastStmtID), "COM_STMT_RESET stmt=0xffffffff")
		c.clientGets()
		h.note("the guarded INSERT is still stmt=4 by its own id")
		c.sendAs(0, execPkt(4), "COM_STMT_EXECUTE stmt=4")
		guardRound(c, true, guardStale)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		pingWorks(c)
	},
}, {
	name: "last_statement_id_mysql",
	about: `On MySQL (and TiDB) no statement has the id 0xFFFFFFFF: the proxy answers as the server would
(1243), even with a statement prepared, and sends nothing, so that a MariaDB server the proxy took
for MySQL never resolves the id to a statement the proxy did not decide on.`,
	backend: "engine: mysql",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, guardedInsert...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
		last := execPkt(0)
		binary.LittleEndian.PutUint32(last[1:], lastStmtID)
		c.sendAs(0, last, "COM_STMT_EXECUTE stmt=0xffffffff")
		c.clientGets()
		pingWorks(c)
	},
}, {
	name: "multi_statements_off",
	about: `A session without CLIENT_MULTI_STATEMENTS sends a SELECT and a guarded INSERT in one packet: the
proxy runs neither; the server prepares the text (which never runs it) and its parse error is the
answer, as COM_QUERY would have had it. After COM_SET_OPTION on (sent as the 3-byte packet the
server reads, from a 1-byte one) the packet runs one statement at a time with the guard; after
COM_SET_OPTION off it is refused again. Should the server read one statement where the proxy
reads several, it is closed unrun and refused.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", caps: goDriverCaps &^ mysql.CLIENT_MULTI_STATEMENTS})
		setFence(c, "1")
		const both = "SELECT 1; " + guardedInsert
		c.query(both)
		c.backendGets()
		c.respond(errPkt(1064, "42000", "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near '; INSERT INTO invoices (v) VALUES (1)' at line 1"))
		c.response()
		h.note("trailing ';' are the server's to strip: one statement, fenced")
		c.query("UPDATE invoices SET v = 1;;")
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, "Rows matched: 1  Changed: 1  Warnings: 0"))
		c.response()
		h.note("should the server read one statement where the proxy reads two (this scripted backend prepares it)")
		c.query("UPDATE invoices SET v = 2; SELECT 1")
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.backendGets()
		c.response()
		h.note("multi-statements on, from a COM_SET_OPTION of one byte (the option read as 0)")
		c.sendAs(0, []byte{mysql.COM_SET_OPTION}, "COM_SET_OPTION")
		c.backendGetsAs("COM_SET_OPTION")
		c.respond(c.endRows(stAuto))
		c.response()
		c.query(both)
		c.backendGets()
		c.respond(c.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 12, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.note("multi-statements off again")
		c.sendAs(0, []byte{mysql.COM_SET_OPTION, 1, 0}, "COM_SET_OPTION")
		c.backendGetsAs("COM_SET_OPTION")
		c.respond(c.endRows(stAuto))
		c.response()
		c.query(both)
		c.backendGets()
		c.respond(errPkt(1064, "42000", "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near '; INSERT INTO invoices (v) VALUES (1)' at line 1"))
		c.response()
		pingWorks(c)
	},
}, {
	name: "multi_statements_off_tidb",
	about: `On TiDB the session's tidb_multi_statement_mode decides, as in the server: OFF (the default)
answers TiDB's error 8130 and nothing reaches the server but the proxy's question; ON runs the
packet one statement at a time with the guard.`,
	backend: "engine: tidb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", caps: goDriverCaps &^ mysql.CLIENT_MULTI_STATEMENTS})
		setFence(c, "1")
		const both = "SELECT 1; " + guardedInsert
		c.query(both)
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("@@SESSION.tidb_multi_statement_mode"), []string{"OFF"})...)
		c.response()
		c.relayed("SET tidb_multi_statement_mode = 'ON'", okPkt(0, 0, stAuto, 0, ""))
		c.query(both)
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("@@SESSION.tidb_multi_statement_mode"), []string{"ON"})...)
		c.backendGets()
		c.respond(c.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
		guardRound(c, true, guardStale)
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		h.audit()
		pingWorks(c)
	},
}, {
	name: "own_packets_carry_no_session_state",
	about: `After a server OK that says session state follows (SERVER_SESSION_STATE_CHANGED, here USE with
session_track_schema), a packet the proxy writes itself (here the OK of COM_STMT_RESET of its own
statement; its result sets' terminators and 0-row OKs take the same status) carries the session's
status without that flag: it holds no session state, and a client reads state where the flag says.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("USE other")
		c.backendGets()
		st := okPkt(0, 0, stAuto|mysql.SERVER_SESSION_STATE_CHANGED, 0, "").payload
		st = append(st, 0, 9, 1, 7, 5, 'o', 't', 'h', 'e', 'r', 0)
		c.respond(pkt{payload: st, label: "=OK status=AUTOCOMMIT|SESSION_STATE_CHANGED, schema now other"})
		c.clientGetsAs("=OK status=AUTOCOMMIT|SESSION_STATE_CHANGED, schema now other")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT fence_release()"...))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		c.sendAs(0, stmtCmdPacket(mysql.COM_STMT_RESET, firstProxyStmtID), "COM_STMT_RESET of it")
		c.clientGets()
		pingWorks(c)
	},
}, {
	name: "binlog_dump_refused_by_server",
	about: `COM_BINLOG_DUMP that the server refuses before the dump starts (no REPLICATION SLAVE
privilege): the server reads commands again, and so does the proxy: the UPDATE that follows is
fenced, not piped through.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		dump := append([]byte{mysql.COM_BINLOG_DUMP, 4, 0, 0, 0, 0, 0, 9, 0, 0, 0}, "binlog.000001"...)
		c.sendAs(0, dump, "COM_BINLOG_DUMP")
		c.backendGetsAs("COM_BINLOG_DUMP")
		c.respond(errPkt(1227, "42000", "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation"))
		c.response()
		c.query("UPDATE invoices SET v = 1")
		c.backendGets()
		c.respond(okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.response()
	},
}, {
	name: "unmodeled_response_shape",
	about: `A response of a shape the walker does not model: a column count followed by a metadata flag (a
COM_STMT_EXECUTE result under MariaDB's cache-metadata capability, which the proxy never lets a
session have): the proxy does not wait for column definitions that never come; the client gets
the proxy's lost-connection error and both connections close at once.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "SELECT id, v FROM notes"...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 7, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0}, label: "prepare OK"},
			colDef(col{"id", mysql.MYSQL_TYPE_LONG}), colDef(col{"v", mysql.MYSQL_TYPE_LONG}))
		c.clientGetsAs("prepare OK")
		c.clientGetsAs("column definition")
		c.clientGetsAs("column definition")
		c.sendAs(0, execPkt(7), "COM_STMT_EXECUTE stmt=7")
		c.backendGetsAs("COM_STMT_EXECUTE stmt=7")
		c.respond(pkt{payload: []byte{2, 0}, label: "column count 2, metadata not sent"}, c.endRows(stAuto))
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}, {
	name: "unmodeled_response_missing_column",
	about: `A result set with fewer column definitions than its column count: the walker fails at the first
packet that is not a definition, and both connections close.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("SELECT id, v FROM notes")
		c.backendGets()
		c.respond(pkt{payload: []byte{2}}, colDef(col{"id", mysql.MYSQL_TYPE_LONG}), c.endRows(stAuto))
		c.backendClosed()
		c.clientClosed()
	},
}}

func TestTranscriptProtocol(t *testing.T) { runTranscripts(t, protocolCases) }
