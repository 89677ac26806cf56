package proxy

import (
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
)

// Panic isolation. A panic while serving one connection, on its goroutine
// (wire code, rewrite, fencing, lease calls) or on one it started (the idle
// watch, the replication pipe), ends that connection only: it is logged
// with its stack and counted (fenceproxy_connection_panics_total), and the
// proxy goes on serving the others.
//
// It fails closed. The backend connection is closed without a COM_QUIT and
// without flushing what the proxy had buffered for it: a half-written
// packet is never completed into a statement the proxy did not mean, no
// COMMIT is sent, and the server rolls back an open transaction when its
// session ends. The client gets an ERR (server range: 1815, internal
// error) if a command was in flight, nothing of its response had been
// written and the command expects a response; otherwise its connection
// just closes. The connection's buffers are not returned to the pools: a
// goroutine interrupted mid-use may have left them in any state.
//
// The log names the connection (id, client address, backend connection
// id), where it happened and the stack, never the panic's value unless it
// is a runtime error: a value built by code that handles statements may
// hold a statement's literals.

// erInternal is ER_INTERNAL_ERROR ("Internal error: %s"), in MariaDB and
// MySQL alike.
const erInternal = 1815

// panicPoint names a place where a test makes a connection panic (see
// Proxy.panicAt).
type panicPoint uint8

const (
	panicHandshake panicPoint = iota + 1 // backend connected, client not yet answered
	panicCommand                         // a command read, nothing of it sent on
	panicResponse                        // a result set's first packet relayed
	panicGuarded                         // a guarded write's lease check passed, inside its transaction
	panicWatch                           // the idle watch's goroutine started
)

// panicHook is a test's: it may panic at the named point.
type panicHook func(c *clientConn, at panicPoint)

// testPanic calls the test's panic hook, if any (one atomic load otherwise).
func (c *clientConn) testPanic(at panicPoint) {
	if h := c.p.panicAt.Load(); h != nil {
		(*h)(c, at)
	}
}

// recoverServe ends a panic on the connection's goroutine: serve defers
// it, after close, so that close runs next and finds quitSent set.
func (c *clientConn) recoverServe() {
	v := recover()
	if v == nil {
		return
	}
	phase, cmd := c.phase()
	c.notePanic(v, phase)
	c.quitSent = true // close sends no COM_QUIT and flushes nothing to the backend
	if phase == "command" && !c.x.started && answered(cmd) {
		c.sendPanicError()
	}
}

// identifyPeerIsolated is identifyPeer (the PROXY protocol header, before
// serve) with a panic in it ending this connection only: false, and the
// caller closes it (no backend connection exists yet).
func (c *clientConn) identifyPeerIsolated(rt *runtime, nc net.Conn) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			c.notePanic(v, "proxy protocol header")
			ok = false
		}
	}()
	return c.identifyPeer(rt, nc)
}

// recoverGoroutine ends a panic on a goroutine the connection started
// once its backend is connected (deferred after the goroutine's own
// cleanup, so that it runs first): it closes both sides, so that the connection's goroutine reads a closed
// connection and ends, and sends errPanicked on done, if any, in place of
// the goroutine's result.
func (c *clientConn) recoverGoroutine(what string, done chan<- error) {
	v := recover()
	if v == nil {
		return
	}
	c.notePanic(v, what)
	// The backend first: the connection's goroutine, which wakes when the
	// client's side closes, then finds nothing to send a COM_QUIT into.
	c.backend.Close()
	c.client.Close()
	if done != nil {
		done <- errPanicked
	}
}

var errPanicked = errors.New("fenceproxy: internal error (panic) on this connection")

// msgPanic is the log message of a connection's panic.
const msgPanic = "panic serving the connection; closed it (no COMMIT: an open transaction rolls back), the others go on"

// notePanic logs and counts a panic of the connection, on any goroutine.
// The log gets a few lines per place and then a count (logLimit): a client
// that found input which makes the proxy panic can send it at will; the
// metric counts every one.
func (c *clientConn) notePanic(v any, where string) {
	c.panicked.Store(true)
	c.p.metrics.ConnectionPanics.Inc()
	if c.p.logLimit.Allow(logging.Key{Event: msgPanic, Reason: where}) {
		c.newLog().Error(msgPanic, "where", where, "backend_conn_id", c.connID, "panic", panicValue(v), "stack", string(debug.Stack()))
	}
}

// panicValue is what the log may say of a panic's value: a runtime
// error's message (index, nil pointer, conversion: no data), else its type.
func panicValue(v any) string {
	if re, ok := v.(interface {
		error
		RuntimeError() // runtime.Error
	}); ok {
		return re.Error()
	}
	return fmt.Sprintf("%T", v)
}

// phase says what the connection was doing: handshake, idle or command,
// and the command in flight. It reads the state published for the admin
// endpoint; if that lock is held (the panic may have left it so), it says
// "unknown", and the client then gets no ERR.
func (c *clientConn) phase() (phase, cmd string) {
	if !c.mu.TryLock() {
		return "unknown", ""
	}
	defer c.mu.Unlock()
	switch {
	case !c.pub.ready:
		return "handshake", ""
	case c.pub.busy:
		return "command", c.pub.cmd
	}
	return "idle", ""
}

// answered tells whether the server answers a command (by its metric
// name): COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA and COM_QUIT get no
// response, so an ERR would be taken for the next command's.
func answered(cmd string) bool {
	switch cmd {
	case "stmt_close", "stmt_send_long_data", "quit":
		return false
	}
	return true
}

// sendPanicError tells the client its command failed, if nothing else is
// waiting in the client's buffer.
func (c *clientConn) sendPanicError() {
	defer func() { recover() }() // the client's buffers may be what broke
	if c.client.Parked() || c.client.PendingWrite() {
		return
	}
	c.client.SetWriteDeadline(time.Now().Add(time.Second))
	msg := "Internal error: fenceproxy failed serving this command (logged as connection " + strconv.FormatUint(c.id, 10) +
		"); the connection is closed and an open transaction rolled back"
	if _, err := c.client.WritePacket(c.x.cmdSeq+1, wire.ErrPayload(erInternal, "HY000", msg)); err == nil {
		c.client.Flush()
	}
}
