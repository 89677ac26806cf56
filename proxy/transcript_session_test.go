package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

var sessionCases = []transcriptCase{{
	name: "session_effects",
	about: `What statements do to the session as the proxy tracks it: USE changes the schema the next
unqualified write is fenced in (app.invoices is protected, other.invoices is not); a named PREPARE of
a guarded INSERT followed by EXECUTE in one packet runs one statement at a time, and the EXECUTE gets
the guard; DEALLOCATE forgets it.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.relayed("USE other", okPkt(0, 0, stAuto, 0, ""))
		h.note("other.invoices is not protected: relayed as it is")
		c.relayed("UPDATE invoices SET v = 1 WHERE id = 1", okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.relayed("USE app", okPkt(0, 0, stAuto, 0, ""))
		h.note("a guarded write prepared by name and executed in the same packet")
		c.query("PREPARE ins FROM 'INSERT INTO invoices (v) VALUES (1)'; EXECUTE ins")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, "Statement prepared"))
		guardRound(c, true, guardHolds)
		c.backendGets()
		c.backendGets()
		c.respond(okPkt(1, 9, stInTrans, 0, ""))
		recheck(c, stInTrans, "1")
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.response()
		c.relayed("DEALLOCATE PREPARE ins", okPkt(0, 0, stAuto, 0, ""))
	},
}, {
	name: "learn_sql_mode_and_charset",
	about: `Where the session's settings are unknown to the proxy it asks the server before it refuses. The
sql_mode a session starts with is the server's: UPDATE "invoices" writes the protected table under
ANSI_QUOTES only, so the proxy reads @@SESSION.sql_mode (no ANSI_QUOTES here) and decides again:
without ANSI_QUOTES the statement does not parse and it names the protected table, so it is
refused (fail closed).
A handshake in gbk counts as unsafe: in gbk 0xBF 0x5C is one character, so the quote after it
ends the string and the DELETE below is a statement of its own; in utf8mb4 the backslash escapes
that quote and the packet is one SELECT of a string. The proxy asks the server, which says
utf8mb4, and relays the packet as it is.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.query(`UPDATE "invoices" SET v = 1 WHERE id = 1`)
		c.backendGets()
		c.respond(c.resultSet(stAuto, strCols("@@SESSION.sql_mode"),
			[]string{"STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"})...)
		c.response()
		h.audit()
		h.note("the character set, on a connection that logged in with gbk")
		b := h.login("B", loginOpts{db: "app", charset: 28})
		setFence(b, "1")
		b.query("SELECT '\xbf\\'; DELETE FROM invoices; -- '")
		b.backendGets()
		b.respond(b.resultSet(stAuto, strCols("@@SESSION.character_set_client"), []string{"utf8mb4"})...)
		b.backendGets()
		b.respond(b.resultSet(stAuto, strCols("\xbf'; DELETE FROM invoices; -- "), []string{"\xbf'; DELETE FROM invoices; -- "})...)
		b.response()
		h.note("the same packet where the server says gbk: the DELETE is real and hidden from a plain reading: refused")
		g := h.login("C", loginOpts{db: "app", charset: 28})
		g.relayed("SELECT '\xbf\\'; DELETE FROM invoices; -- '", g.resultSet(stAuto, strCols("@@SESSION.character_set_client"), []string{"gbk"})...)
		h.audit()
	},
}, {
	name: "prepared_before_reload",
	about: `A statement prepared while its table was not protected, executed after a reload protects it:
the server holds it unfenced, so the proxy refuses the execution (and audits it) instead of
relaying it; the client must prepare it again, and the new preparation is fenced.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "UPDATE ledger SET v = 1 WHERE id = 1"...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
		h.reload("  - name: app.invoices\n  - name: app.ledger\n")
		exec := []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0}
		c.sendAs(0, exec, "COM_STMT_EXECUTE stmt=1")
		c.response()
		h.audit()
		c.send(0, append([]byte{mysql.COM_STMT_PREPARE}, "UPDATE ledger SET v = 1 WHERE id = 1"...))
		c.backendGets()
		c.respond(pkt{payload: []byte{0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, label: "prepare OK"})
		c.clientGetsAs("prepare OK")
	},
}, {
	name: "load_data_local",
	about: `LOAD DATA LOCAL INFILE into a table that is not protected: the server's request for the file
goes to the client, the file's packets and the empty one that ends it go to the server, and its OK
ends the command; into a protected table it is refused before anything is sent.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE staging")
		c.backendGets()
		c.respond(pkt{payload: append([]byte{mysql.LocalInFile_HEADER}, "rows.csv"...), label: "=LOCAL INFILE request \"rows.csv\""})
		c.clientGetsAs("=LOCAL INFILE request \"rows.csv\"")
		c.sendAs(2, []byte("1,a\n2,b\n"), "=file data \"1,a\\n2,b\\n\"")
		c.sendAs(3, nil, "")
		c.backendGetsAs("=file data \"1,a\\n2,b\\n\"")
		c.backendGets()
		c.reply(4, okPkt(2, 0, stAuto, 0, "Records: 2  Deleted: 0  Skipped: 0  Warnings: 0"))
		c.clientGets()
		c.query("LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE invoices")
		c.response()
		h.audit()
	},
}, {
	name: "long_statement",
	about: `A fenced UPDATE longer than the proxy's 16 KiB read buffer is read whole (it must be inspected),
fenced and sent; a long read is relayed as it came.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		setFence(c, "1")
		ids := make([]string, 4000)
		for i := range ids {
			ids[i] = "1000"
		}
		in := strings.Join(ids, ",")
		c.relayed("UPDATE invoices SET v = 1 WHERE id IN ("+in+")", okPkt(1, 0, stAuto, 0, rowsMatched("1")))
		c.relayed("SELECT v FROM invoices WHERE id IN ("+in+")", c.resultSet(stAuto, []col{{"v", mysql.MYSQL_TYPE_LONG}}, []string{"1"})...)
	},
}, {
	name: "connection_limits",
	about: `max_connections: 1: a second client gets ERR 1040 from the proxy itself in place of a greeting
(the backend is never dialled); once the first one has left, the next client gets in.`,
	backend: "engine: mariadb",
	config:  "max_connections: 1\n",
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app"})
		b := h.dialOnly("B")
		b.clientGets()
		b.clientClosed()
		h.note("A leaves")
		a.send(0, []byte{mysql.COM_QUIT})
		a.backendGets()
		a.backendClosed()
		a.clientClosed()
		// The connection's goroutine deregisters after it closed both sides.
		h.waitFor("the first connection to deregister", func() bool { return h.p.ActiveConnections() == 0 })
		h.login("C", loginOpts{db: "app"})
	},
}, {
	name: "backend_unreachable",
	about: `The backend cannot be reached: the client gets ERR 9001 from the proxy in place of a greeting,
naming the backend and the dial error, and the connection ends.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		h.rename(h.ln.Addr().String(), "<backend address>")
		h.ln.Close()
		c := h.dialOnly("A")
		c.clientGets()
		c.clientClosed()
	},
}, {
	name: "backend_without_tls",
	about: `backend.tls: required, and the backend's greeting does not offer TLS: the client gets ERR 9001
in place of the greeting, and nothing is relayed.`,
	backend: "engine: mariadb\ntls: required",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}}

func TestTranscriptSession(t *testing.T) { runTranscripts(t, sessionCases) }
