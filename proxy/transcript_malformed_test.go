package proxy

import (
	"bytes"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// pingWorks shows a connection is still served: a COM_PING round trip.
func pingWorks(c *hconn) {
	c.h.t.Helper()
	c.send(0, []byte{mysql.COM_PING})
	c.backendGets()
	c.respond(okPkt(0, 0, stAuto, 0, ""))
	c.response()
}

var malformedCases = []transcriptCase{{
	name: "malformed_command_sequence",
	about: `A command whose sequence number is not 0: the proxy answers ERR 1156 as a server does and closes
that connection (both hops); the other client's connection goes on.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		ok := h.login("A", loginOpts{db: "app"})
		bad := h.login("B", loginOpts{db: "app"})
		bad.send(3, append([]byte{mysql.COM_QUERY}, "SELECT 1"...))
		bad.clientGets()
		bad.backendClosed()
		bad.clientClosed()
		h.note("the other connection")
		pingWorks(ok)
	},
}, {
	name: "malformed_handshake_sequence",
	about: `A handshake response with the wrong sequence number: ERR 1156 with the number a server expects,
and the end of the connection; the backend never sees the response.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(2, handshakeResponse(goDriverCaps, "app", "app", mysql.AUTH_NATIVE_PASSWORD, nativePassword("secret", harnessScramble)), "handshake response")
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}, {
	name: "malformed_handshake_short",
	about: `A handshake response shorter than its fixed part (a bad length): ERR 1043 Bad handshake, and the
end of the connection.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.dial("A")
		c.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		c.clientGetsAs("greeting")
		c.sendAs(1, []byte{0x84, 0xa2, 0x3b, 0x01, 0, 0, 0, 1, 45}, "raw")
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}, {
	name: "malformed_truncated_command",
	about: `A command packet whose header promises more bytes than come before the client goes away (a
truncated packet): the proxy forwards nothing of it and closes the backend connection; another
client's connection goes on.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		ok := h.login("A", loginOpts{db: "app"})
		bad := h.login("B", loginOpts{db: "app"})
		pkt := []byte{100, 0, 0, 0, mysql.COM_QUERY}
		pkt = append(pkt, "UPDATE invoices SET v"...)
		bad.sendRaw(pkt, "a COM_QUERY header for 100 bytes, 22 of them, then the client half-closes")
		bad.client.(*net.TCPConn).CloseWrite()
		bad.backendClosed()
		bad.clientClosed()
		h.note("the other connection")
		pingWorks(ok)
	},
}, {
	name: "malformed_oversized_statement",
	about: `A statement longer than limits.max_query_bytes (64 here): the proxy reads and drops the rest of
the packet, answers ERR 1153 as a server past max_allowed_packet does, and closes the connection;
the backend never sees any of it. Another client's connection goes on.`,
	backend: "engine: mariadb",
	config:  "limits:\n  max_query_bytes: 64\n",
	run: func(h *harness) {
		ok := h.login("A", loginOpts{db: "app"})
		bad := h.login("B", loginOpts{db: "app"})
		bad.query("SELECT '" + string(bytes.Repeat([]byte("x"), 100)) + "'")
		bad.clientGets()
		bad.backendClosed()
		bad.clientClosed()
		h.note("the other connection")
		pingWorks(ok)
	},
}, {
	name: "malformed_backend_response",
	about: `A backend that answers a command with an empty packet breaks the protocol: the client, which has
seen nothing of the response yet, gets ERR 1053 (lost connection, SQLSTATE 08S01), and both hops close.`,
	backend: "engine: mariadb",
	run: func(h *harness) {
		c := h.login("A", loginOpts{db: "app"})
		c.query("SELECT 1")
		c.backendGets()
		c.respond(pkt{payload: nil})
		c.clientGets()
		c.backendClosed()
		c.clientClosed()
	},
}}

func TestTranscriptMalformed(t *testing.T) { runTranscripts(t, malformedCases) }
