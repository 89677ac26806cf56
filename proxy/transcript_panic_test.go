package proxy

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/internal/logging"
)

// panicLiteral is in the statement a connection panics on, and in the
// panic's value: the log must hold neither.
const panicLiteral = "secret-literal-7"

// panicOn makes the proxy's connection of c panic once, at the point
// named, with a value that holds panicLiteral.
func (h *harness) panicOn(c *hconn, at panicPoint) {
	h.t.Helper()
	id := uint64(0)
	for i, hc := range h.conns {
		if hc == c {
			id = uint64(i + 1) // connections are numbered in the order they came
		}
	}
	h.secret(panicLiteral)
	var armed atomic.Bool
	armed.Store(true)
	hook := panicHook(func(cc *clientConn, p panicPoint) {
		if cc.id == id && p == at && armed.CompareAndSwap(true, false) {
			panic("boom near '" + panicLiteral + "'")
		}
	})
	h.p.panicAt.Store(&hook)
}

// panicked checks that the proxy counted and logged n panics, each with
// its stack and connection, and writes the count into the transcript.
func (h *harness) panicked(n int, where string) {
	h.t.Helper()
	h.waitFor("the panic to be counted", func() bool { return counterValue(h.p.metrics.ConnectionPanics) == float64(n) })
	fmt.Fprintf(&h.out, "\nmetric fenceproxy_connection_panics_total %d\n", n)
	logs := h.logs.String()
	if strings.Contains(where, " ") {
		where = strconv.Quote(where)
	}
	for _, want := range []string{"panic serving the connection", "where=" + where, "panic=string", "goroutine ", "recover", "conn=1 "} {
		if !strings.Contains(logs, want) {
			h.t.Errorf("the proxy's log lacks %q:\n%s", want, logs)
		}
	}
}

// counterValue reads a counter through a registry of its own.
func counterValue(c prometheus.Counter) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		return -1
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

var panicCases = []transcriptCase{{
	name:    "panic_mid_command",
	backend: "engine: mariadb",
	about: `A panic while the proxy handles a command (here: before any of it went on) ends that
connection only: the client gets ERR 1815 (internal error), the backend connection closes with
no COMMIT and no COM_QUIT, so the server rolls the open transaction back; B goes on.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret"})
		b := h.login("B", loginOpts{db: "app", password: "secret"})
		h.note("A writes inside a transaction")
		a.relayed("BEGIN", okPkt(0, 0, stInTrans, 0, ""))
		a.relayed("UPDATE notes SET body = 'x' WHERE id = 1", okPkt(1, 0, stInTrans, 0, rowsMatched("1")))
		h.note("the proxy panics on A's next command")
		h.panicOn(a, panicCommand)
		a.query("UPDATE notes SET body = '" + panicLiteral + "' WHERE id = 2")
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "command")
		h.note("B, connected all along, is served")
		b.relayed("SELECT 1", b.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
	},
}, {
	name:    "panic_mid_response",
	backend: "engine: mariadb",
	about: `A panic after part of a response was relayed: nothing more can be said honestly, so the
client's connection just closes (no ERR after a half-sent result set); the backend's closes too.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret"})
		b := h.login("B", loginOpts{db: "app", password: "secret"})
		a.query("SELECT id, body FROM notes WHERE body <> '" + panicLiteral + "'")
		a.backendGets()
		h.note("the proxy panics once it relayed the result set's first packet")
		h.panicOn(a, panicResponse)
		a.respond(a.resultSet(stAuto, strCols("id", "body"), []string{"1", "x"})...)
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "command")
		b.relayed("SELECT 1", b.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
	},
}, {
	name:    "panic_in_handshake",
	backend: "engine: mariadb",
	about: `A panic during the handshake (the backend connected, the client not yet answered): both
connections close; the next client logs in as usual.`,
	run: func(h *harness) {
		a := h.dial("A")
		h.panicOn(a, panicHandshake)
		a.reply(0, pkt{payload: greeting(mariaCaps, mysql.AUTH_NATIVE_PASSWORD), label: "greeting"})
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "handshake")
		b := h.login("B", loginOpts{db: "app", password: "secret"})
		b.relayed("SELECT 1", b.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
	},
}, {
	name:    "panic_in_idle_watch",
	backend: "engine: mariadb",
	about: `A panic on a goroutine of the connection, the watch of an idle client's backend: that
connection closes (no command was in flight: no ERR); B goes on.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret"})
		b := h.login("B", loginOpts{db: "app", password: "secret"})
		h.panicOn(a, panicWatch)
		h.note("A stays idle: after 200 ms the proxy watches its backend, and the watch panics")
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "idle watch")
		b.relayed("SELECT 1", b.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
	},
}, {
	name:    "panic_in_guarded_write",
	backend: "engine: mariadb",
	about: `A panic inside the proxy's own transaction of a guarded INSERT, after its guard passed: the
INSERT and the COMMIT are never sent; the backend connection closes, so the server rolls back the
guard's transaction (and releases its lock on the lease row); the client gets ERR 1815.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret"})
		b := h.login("B", loginOpts{db: "app", password: "secret"})
		setFence(a, "1")
		h.panicOn(a, panicGuarded)
		a.query("INSERT INTO invoices (v) VALUES ('" + panicLiteral + "')")
		guardRound(a, true, guardHolds)
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "command")
		b.relayed("SELECT 1", b.resultSet(stAuto, []col{{"1", mysql.MYSQL_TYPE_LONGLONG}}, []string{"1"})...)
	},
}, {
	name:    "panic_on_command_without_response",
	backend: "engine: mariadb",
	about: `A panic on COM_STMT_CLOSE, which gets no response: an ERR would be read as the answer to
the client's next command, so the connection just closes.`,
	run: func(h *harness) {
		a := h.login("A", loginOpts{db: "app", password: "secret"})
		h.panicOn(a, panicCommand)
		a.send(0, []byte{mysql.COM_STMT_CLOSE, 9, 0, 0, 0})
		a.clientClosed()
		a.backendClosed()
		h.panicked(1, "command")
	},
}}

func TestTranscriptPanics(t *testing.T) { runTranscripts(t, panicCases) }

// notePanic counts every panic, logs a few per place (a client can repeat
// whatever input made the proxy panic), and logs of the value only a
// runtime error's message, never a value code built.
func TestNotePanicCountsAllLogsSome(t *testing.T) {
	logs := &lockedBuffer{}
	p := &Proxy{logger: slog.New(slog.NewTextHandler(logs, nil)), metrics: NewMetrics(nil), logLimit: logging.NewLimiter(2, time.Hour)}
	c := &clientConn{p: p, id: 7}
	var runtimeErr any
	func() {
		defer func() { runtimeErr = recover() }()
		var s []int
		_ = s[len(logs.String())+3]
	}()
	for range 4 {
		c.notePanic("boom near '"+panicLiteral+"'", "command")
	}
	c.notePanic(runtimeErr, "idle watch")
	if got := counterValue(p.metrics.ConnectionPanics); got != 5 {
		t.Errorf("fenceproxy_connection_panics_total = %v, want 5", got)
	}
	out := logs.String()
	if n := strings.Count(out, msgPanic); n != 3 {
		t.Errorf("%d panic lines, want 2 for command and 1 for the idle watch:\n%s", n, out)
	}
	if strings.Contains(out, panicLiteral) || !strings.Contains(out, "panic=string") {
		t.Errorf("a panic's string value reached the log, or its type did not:\n%s", out)
	}
	if !strings.Contains(out, "index out of range [3] with length 0") || !strings.Contains(out, "conn=7") {
		t.Errorf("the runtime error's message or the connection id is missing:\n%s", out)
	}
	if !c.panicked.Load() {
		t.Error("the connection is not marked panicked: its buffers would go back to the pools")
	}
}
