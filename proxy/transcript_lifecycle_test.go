package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// hangUp closes the backend's side of the connection, as a server that
// ends the session.
func (c *hconn) hangUp() {
	c.h.t.Helper()
	c.waitWrite(&c.backendWrite)
	c.backend.Close()
	c.h.line(c, "B->P closed")
}

// parkedConns counts the proxy's connections whose buffers are parked.
func (h *harness) parkedConns() int {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	n := 0
	for c := range h.p.conns {
		c.mu.Lock()
		if c.parked {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

var lifecycleCases = []transcriptCase{{
	name: "idle_parks_buffers",
	about: `A client idle for watchAfter (200ms) gets its connection's buffers returned to the pools,
outside a transaction and inside one; its next command takes buffers again and is relayed as
ever.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		h.note("idle: the proxy parks the connection's buffers")
		h.waitFor("the idle connection to park its buffers", func() bool { return h.parkedConns() == 1 })
		c.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		h.note("idle inside the transaction: parked again")
		h.waitFor("the connection idle in a transaction to park its buffers", func() bool { return h.parkedConns() == 1 })
		c.relayed("UPDATE other.t SET v = 1", okPkt(1, 0, stInTrans, 0, rowsMatched("1")))
		c.relayed("COMMIT", okPkt(0, 0, stAuto, 0, ""))
	},
}, {
	name: "shutdown_drains",
	about: `Shutdown: an idle connection is closed at once (the proxy tells the backend COM_QUIT); a
connection inside a transaction keeps being served until the transaction ends, then it is closed
too, and Shutdown returns.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		idle := h.login("A", loginOpts{db: "app"})
		busy := h.login("B", loginOpts{db: "app"})
		busy.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		h.note("Shutdown starts")
		done := make(chan error, 1)
		go func() { done <- h.p.Shutdown(context.Background()) }()
		idle.backendGets()
		idle.backendClosed()
		idle.clientClosed()
		h.waitFor("the proxy to stop accepting", h.p.Draining)
		h.note("B's transaction goes on and ends")
		busy.relayed("UPDATE other.t SET v = 1", okPkt(1, 0, stInTrans, 0, rowsMatched("1")))
		busy.relayed("COMMIT", okPkt(0, 0, stAuto, 0, ""))
		busy.backendGets()
		busy.backendClosed()
		busy.clientClosed()
		select {
		case err := <-done:
			h.note("Shutdown returned %v", err)
		case <-time.After(ioTimeout):
			h.fail("Shutdown did not return")
		}
	},
}, {
	name: "idle_timeout",
	about: `timeouts.idle: a client silent for longer is disconnected by the proxy, which ends the backend
session politely (COM_QUIT).`,
	backend: "engine: mariadb",
	config:  "timeouts:\n  idle: 300ms\n",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.backendGets()
		c.backendClosed()
		c.clientClosed()
	},
}, {
	name: "backend_ends_idle_session",
	about: `The server ends an idle session (MySQL 8 sends ERR 4031 first, then closes): the proxy, which
watches the backend of a client idle outside a transaction, passes the ERR on and closes the
client's connection at once, so that a pool's next liveness check sees it dead.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.reply(0, errPkt(4031, "HY000", "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior."))
		c.hangUp()
		c.clientGets()
		c.clientClosed()
	},
}, {
	name: "other_commands",
	about: `Commands the proxy only relays, each answered as the server answers it: COM_STATISTICS (a bare
string), COM_SET_OPTION (EOF, no DEPRECATE_EOF client here), COM_FIELD_LIST (column definitions
and EOF), COM_INIT_DB, COM_STMT_RESET of a server statement (OK), COM_STMT_FETCH (rows of a
cursor).`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app", caps: eofCaps})
		c.send(0, []byte{mysql.COM_STATISTICS})
		c.backendGets()
		const stats = "Uptime: 1234  Threads: 2  Questions: 40  Slow queries: 0  Opens: 17  Open tables: 10  Queries per second avg: 0.032"
		c.respond(pkt{payload: []byte(stats), label: "=statistics \"" + stats + "\""})
		c.clientGetsAs("=statistics \"" + stats + "\"")
		c.sendAs(0, []byte{mysql.COM_SET_OPTION, 0, 0}, "COM_SET_OPTION multi-statements on")
		c.backendGetsAs("COM_SET_OPTION multi-statements on")
		c.respond(eofPkt(stAuto))
		c.clientGets()
		c.sendAs(0, append([]byte{mysql.COM_FIELD_LIST}, "invoices\x00"...), "COM_FIELD_LIST invoices")
		c.backendGetsAs("COM_FIELD_LIST invoices")
		c.respond(colDef(col{"id", mysql.MYSQL_TYPE_LONG}), colDef(col{"v", mysql.MYSQL_TYPE_LONG}), eofPkt(stAuto))
		c.clientGetsAs("column definition")
		c.clientGetsAs("column definition")
		c.clientGets()
		c.send(0, append([]byte{mysql.COM_INIT_DB}, "other"...))
		c.backendGets()
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		c.sendAs(0, []byte{mysql.COM_STMT_RESET, 3, 0, 0, 0}, "COM_STMT_RESET stmt=3")
		c.backendGetsAs("COM_STMT_RESET stmt=3")
		c.respond(okPkt(0, 0, stAuto, 0, ""))
		c.clientGets()
		c.sendAs(0, []byte{mysql.COM_STMT_FETCH, 3, 0, 0, 0, 2, 0, 0, 0}, "COM_STMT_FETCH stmt=3 rows=2")
		c.backendGetsAs("COM_STMT_FETCH stmt=3 rows=2")
		c.respond(pkt{payload: []byte{0, 0, 1, 0, 0, 0}, label: "binary row"}, pkt{payload: []byte{0, 0, 2, 0, 0, 0}, label: "binary row"},
			eofPkt(stAuto|mysql.SERVER_STATUS_CURSOR_EXISTS))
		c.clientGetsAs("binary row")
		c.clientGetsAs("binary row")
		c.clientGets()
		h.note("the schema is now other: an UPDATE of invoices there is relayed unfenced")
		c.relayed("UPDATE invoices SET v = 1", okPkt(3, 0, stAuto, 0, rowsMatched("3")))
	},
}}

func TestTranscriptLifecycle(t *testing.T) { runTranscripts(t, lifecycleCases) }
