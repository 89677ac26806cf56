package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// clientConn is one client connection and the backend connection that
// serves it for its whole life.
type clientConn struct {
	p      *Proxy
	id     uint64
	lg     *slog.Logger // see log
	client *wire.Conn
	peer   atomic.Pointer[peerInfo] // the client's address when its socket's is not it (peer.go)

	connectedAt time.Time
	acquired    lease.Lease // from the last fence_acquire, for /connections (Owner unused)
	// acquiredUntil: when acquired expires by its last fence_acquire or
	// fence_renew here, by the proxy's clock (the call's start + its TTL),
	// for the lease gauges (opsmetrics.go).
	acquiredUntil time.Time
	acquiredTTL   time.Duration
	pub           connState // under mu

	backend *wire.Conn
	// quitSent: the client's COM_QUIT went to the backend, which closes
	// the session on it; close need not send one more (measured: one
	// system call per connection, and a packet into a closing socket).
	quitSent bool

	// negotiated at the handshake
	caps         uint32 // capabilities in use between client and backend
	deprecateEOF bool
	// multiStatements: the server runs packets of several statements for
	// this session (CLIENT_MULTI_STATEMENTS, then COM_SET_OPTION).
	multiStatements bool
	clientTLS       bool
	backendTLS      bool
	scramble        []byte       // the backend's current auth challenge
	authErr         wire.ErrInfo // the backend's ERR to the last refused login (relayAuth), for loginRefused
	srv             rewrite.Server
	// probe: the engine probe whose answer is still unread (engine.go),
	// read before the first command under probeDeadline, or probeTimeout
	// from then on if that passed.
	probe         uint8
	probeDeadline time.Time
	probeTimeout  time.Duration
	// ownAffected: the affected rows of the last OK readOwn read (a
	// Galera guard's verdict).
	ownAffected uint64
	connID      uint32

	// session as the rewriter and the audit need it
	user    string
	program string // program_name connection attribute, for the audit
	sess    rewrite.Session
	status  uint16 // last server status flags seen
	// resetCharsetUnsafe: the character set COM_RESET_CONNECTION returns to
	// (see session.go) is unsafe or unknown.
	resetCharsetUnsafe bool
	// charsetUnknown: sess.UnsafeCharset was not yet confirmed by the
	// server; a refused statement makes the proxy ask (learnCharset).
	charsetUnknown bool
	// statusStale: an ERR came after the last status flags seen. An ERR
	// carries none, and some errors end the transaction (a deadlock rolls
	// it back) or start one (a failed write under autocommit=0), so
	// status may be wrong either way; whatever relies on it asks the
	// server first (learnStatus).
	statusStale bool
	// pendingErr: the server's error to a statement of the proxy's own
	// that the client's next command would have met (clearStmtFence); that
	// command is answered with it instead of being sent.
	pendingErr *wire.ServerError
	// xaBranch: an XA START succeeded and the server has not said since
	// that no transaction is open (XA COMMIT, XA ROLLBACK, or an abort
	// the next OK shows): the session may be in an XA branch, where the
	// proxy refuses protected writes (see xaRefusal).
	xaBranch bool
	// tablesLocked: the session holds table locks (LOCK TABLES, FLUSH
	// TABLES t WITH READ LOCK), as far as the proxy can tell: see
	// setTablesLocked. START TRANSACTION would unlock them, so a guarded
	// write in autocommit mode then runs its guard without one (the table
	// lock on the lease table, which the proxy adds to the client's LOCK
	// TABLES, keeps guard and write atomic).
	tablesLocked bool
	// warn: TiDB's warnings read inside the transaction the proxy wrapped
	// around the last command, an autocommit guarded write with warnings;
	// prevWarn: those of the command before, while the current one runs
	// (see warnings.go).
	warn, prevWarn *fencing.KeptWarnings
	// fence: everything the proxy does to fence this session's writes
	// (package proxy/fencing; it sees this connection as fenceConn)
	fence fencing.Layer

	prepared   map[uint32]*preparedStmt // COM_STMT_PREPARE ids the proxy must remember
	nextStmtID uint32                   // next id for a statement the proxy answers itself
	stmts      stmtBook                 // the last prepared statement, the proxy's own count (prepared.go)
	named      map[string]*preparedStmt // SQL-level PREPARE names

	// per command
	x     exchange // the command's state, reset as a whole (exchange.go)
	relay relayer  // relays the command's response (response.go)
	buf   []byte   // scratch for commands too large to peek in place

	// between commands: see waitCommand and wake
	mu         sync.Mutex
	panicked   atomic.Bool // a goroutine of the connection panicked (panic.go)
	idle       bool
	parked     bool // both sides' buffers are back in the pools (for tests)
	lastActive time.Time
}

func newClientConn(p *Proxy, nc net.Conn, id uint64) *clientConn {
	c := &clientConn{p: p, id: id, client: wire.NewConn(wire.Client, nc), connectedAt: time.Now()}
	c.fence = newFencing(c)
	return c
}

// log is the connection's logger: the proxy's, with the connection's id and
// client address. It is made on first use, on the connection's goroutine:
// slog's With formats its attributes at once (allocations and formatting on
// every connection), and at the usual levels most connections log nothing.
func (c *clientConn) log() *slog.Logger {
	if c.lg == nil {
		c.lg = c.newLog()
	}
	return c.lg
}

// newLog is a logger for the connection, for any goroutine.
func (c *clientConn) newLog() *slog.Logger {
	return c.p.logger.With("conn", c.id, "client", c.remote())
}

// debugOn tells whether the proxy logs at debug level; asked before a
// debug line, it spares the connection's logger and the line's arguments
// (each an allocation once boxed) when it does not.
func (c *clientConn) debugOn() bool {
	return c.p.logger.Enabled(context.Background(), slog.LevelDebug)
}

// remote is the client's address, as logs, /connections and audit records
// show it; formatted when asked for (any goroutine: the address is fixed
// at accept).
func (c *clientConn) remote() string {
	if p := c.peer.Load(); p != nil {
		return p.addr
	}
	if c.client == nil {
		return ""
	}
	if a := c.client.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

func (c *clientConn) serve(rt *runtime) {
	defer c.close()
	defer c.recoverServe()
	if err := c.handshake(rt); err != nil {
		c.logEnd(err, "handshake")
		return
	}
	if c.debugOn() {
		c.log().Debug("connection established", "user", c.user, "backend_conn_id", c.connID)
	}
	c.publish()
	for {
		rt := c.p.rt.Load()
		if err := c.waitCommand(rt); err != nil {
			c.logEnd(err, "idle")
			return
		}
		c.holdCommand() // POST /pause with hold: at a transaction boundary
		// The configuration may have changed while we waited: the command
		// runs under the one in force now.
		rt = c.p.rt.Load()
		start := time.Now()
		cmd, err := c.command(rt)
		m := c.p.metrics
		m.commands[cmd].Inc()
		m.durations[cmd].Observe(time.Since(start).Seconds())
		c.flushCounters()
		c.publish()
		if err != nil {
			c.abortCommand(err)
			return
		}
	}
}

// flushCounters moves the byte counts of both sides into the metrics.
func (c *clientConn) flushCounters() {
	m := c.p.metrics
	if n := c.client.TakeBytesIn(); n > 0 {
		m.bytesToServer.Add(float64(n))
	}
	if n := c.backend.TakeBytesIn(); n > 0 {
		m.bytesToClient.Add(float64(n))
	}
}

var (
	errQuit     = errors.New("client quit")
	errDraining = errors.New("proxy shutting down")
	errIdle     = errors.New("idle timeout")
	errGone     = errors.New("backend closed the idle session")
)

// waitCommand blocks until the client sends its next command. It returns an
// error when the connection should end instead: the client left, it was
// idle too long, the backend closed the idle session, or the proxy is
// draining and this connection is outside a transaction.
//
// A client idle for watchAfter settles: the connection's buffers go back
// to the pools until the next command (park), and outside a transaction
// the backend is watched. Commands that follow each other faster cost
// nothing extra.
func (c *clientConn) waitCommand(rt *runtime) error {
	idleTimeout := rt.cfg.Timeouts.Idle.D()
	now := time.Now()
	c.lastActive = now
	var watch *backendWatch
	settled := false
	defer func() {
		if watch != nil {
			watch.stop(c)
		}
		// What ends the wait, a command or the connection, needs them.
		c.client.Unpark()
		c.backend.Unpark()
	}()
	for {
		// Arm the deadline before declaring idleness, so that wake's
		// deadline, set after it sees idle, is the one that counts.
		var deadline time.Time
		if idleTimeout > 0 {
			deadline = c.lastActive.Add(idleTimeout)
		}
		early := false
		if !settled {
			if at := c.lastActive.Add(watchAfter); deadline.IsZero() || at.Before(deadline) {
				deadline, early = at, true
			}
		}
		c.client.SetReadDeadline(deadline)
		c.mu.Lock()
		// After an ERR the transaction state is unknown until asked: a
		// drain wakes the wait, and drainable asks.
		c.idle = c.statusStale || !c.inTransaction()
		c.parked = c.client.Parked() && c.backend.Parked()
		// A watch that fired before idle was set could not wake this
		// wait (it found idle false): its fired flag, stored before it
		// took mu, is visible here.
		fired := watch != nil && watch.fired.Load()
		c.mu.Unlock()
		if fired {
			watch.stop(c)
			watch = nil
			return c.backendGone()
		}
		if c.p.draining.Load() && c.drainable() {
			return errDraining
		}
		var err error
		if c.client.Parked() {
			err = c.client.WaitReadable()
		}
		if err == nil {
			c.client.Unpark()
			_, _, err = c.client.PeekHeader()
		}
		c.mu.Lock()
		c.idle, c.parked = false, false
		c.client.SetReadDeadline(time.Time{})
		c.mu.Unlock()
		if err == nil {
			return nil
		}
		if !isTimeout(err) {
			return err
		}
		if watch != nil && watch.fired.Load() {
			watch.stop(c)
			watch = nil
			return c.backendGone()
		}
		if c.p.draining.Load() && c.drainable() {
			return errDraining
		}
		if idleTimeout > 0 && time.Since(c.lastActive) >= idleTimeout {
			return errIdle
		}
		if early {
			settled = true
			// The probe's answer must not be taken for the server ending
			// the idle session.
			if err := c.finishEngineProbe(); err != nil {
				return err
			}
			c.settle()
			if !c.inTransaction() {
				watch = c.startWatch()
			}
		}
		// A wake-up that found us busy in a transaction, or an early timer:
		// keep waiting.
	}
}

// settle drops what a connection idle for watchAfter keeps only for the
// next command: its buffers (until that command comes), and the scratch
// of a large statement (up to maxKeptBuffer).
func (c *clientConn) settle() {
	c.client.Park()
	c.backend.Park()
	c.buf = nil
}

// wake interrupts an idle wait so that a draining proxy can close the
// connection now; a connection in a command or a transaction is left alone.
func (c *clientConn) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle {
		c.client.SetReadDeadline(time.Now())
	}
}

func (c *clientConn) forceClose() {
	c.client.Close()
	if c.backend != nil {
		c.backend.Close()
	}
}

// setTablesLocked records whether the session holds table locks. Where the
// server's state is uncertain (a failed LOCK TABLES, a CALL), the proxy
// says unlocked: a statement that would wrap a write in a transaction of
// its own then ends the locks (as the server documents for START
// TRANSACTION) instead of running its guard and its write apart.
// While tables are locked every statement takes the rewriter's slow path,
// so that each one that may release them is seen.
func (c *clientConn) setTablesLocked(v bool) {
	c.tablesLocked = v
	c.sess.TablesLocked = v
}

func (c *clientConn) inTransaction() bool { return c.status&mysql.SERVER_STATUS_IN_TRANS != 0 }

// drainable: the idle session may be closed for a shutdown, for it is
// outside a transaction. After an ERR the server is asked (learnStatus): a
// deadlock that ended the client's transaction must not keep the
// connection open until the drain deadline. A session that cannot answer,
// or whose answer is an error (its transaction was aborted), is closed.
func (c *clientConn) drainable() bool {
	if c.statusStale {
		c.backend.Unpark()
		if err := c.learnStatus(); err != nil {
			return true
		}
	}
	return !c.inTransaction()
}

// noteStatus records server status flags from an OK or EOF packet.
func (c *clientConn) noteStatus(st uint16) {
	c.status = st
	c.statusStale = false
	if st&mysql.SERVER_STATUS_IN_TRANS == 0 {
		c.xaBranch = false
	}
	c.fence.NoteTxnStatus(st)
	if st&mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED != 0 {
		c.sess.NoBackslashEscapes = rewrite.On
	} else {
		c.sess.NoBackslashEscapes = rewrite.Off
	}
}

// close ends both connections, politely telling the backend first when it
// is still in a sane state.
func (c *clientConn) close() {
	if c.backend != nil {
		if !c.quitSent {
			c.backend.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.backend.WritePacket(0, []byte{mysql.COM_QUIT}); err == nil {
				c.backend.Flush()
			}
		}
		c.backend.Close()
		c.flushCounters()
	}
	c.client.Close()
}

// abortCommand ends the connection after an error in a command. A backend failure
// before any of the response was sent reaches the client as an ERR packet;
// after that, the only honest signal is closing the connection.
func (c *clientConn) abortCommand(err error) {
	var ce *wire.ConnError
	if errors.As(err, &ce) && ce.Side == wire.Backend && !c.x.started {
		c.sendError(erBackendLost, stateBackendLost, "fenceproxy: lost connection to the backend ("+ce.Err.Error()+"); the session is closed: reconnect (an open transaction did not commit; the outcome of the statement in flight is unknown)")
		c.client.Flush()
	}
	c.logEnd(err, "command")
}

func (c *clientConn) logEnd(err error, phase string) {
	switch {
	case errors.Is(err, errQuit), errors.Is(err, io.EOF) && phase == "idle":
		if c.debugOn() {
			c.log().Debug("connection closed by client")
		}
	case errors.Is(err, errDraining):
		if c.debugOn() {
			c.log().Debug("connection closed for shutdown")
		}
	case errors.As(err, new(*loginError)): // logged by loginRefused
	case errors.Is(err, errIdle):
		c.log().Info("connection closed after idle timeout")
	case errors.Is(err, wire.ErrMalformed):
		c.log().Warn("connection closed: protocol violation", "phase", phase, "err", err)
	default:
		c.log().Info("connection closed", "phase", phase, "err", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}
