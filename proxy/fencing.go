package proxy

import (
	"log/slog"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// fencing is what the proxy does to fence one session's writes, apart from
// the relay and the command dispatch:
//
//   - tracker.go: the per-packet tracker (the 0-row writes whose lease
//     must be checked, the held OK), shadow mode's checks, one-by-one
//     execution of a multi-statement packet;
//   - guard.go: guarded writes (the guard before the write, the proxy's
//     own transaction around an autocommit one, the answer to a rejected
//     guard);
//   - warnings.go: on TiDB, the warnings of an autocommit guarded write,
//     read before the proxy's COMMIT, for the client's SHOW WARNINGS;
//   - verdict.go: the lease check after a 0-row write, and the verdict;
//   - conflict.go: the watch of a transaction that carries a guarded write,
//     and the audit of its engine conflict;
//   - auditrecord.go: audit records, the stale-write metric, refusals.
//
// It sees the connection only through four narrow interfaces: what it
// reads of the session (sessionView), the proxy's own statements on the
// backend connection (ownRunner), the client's response and the records
// of what happened (responder), and the session effects of the client's
// statements that succeeded (sessionEffects). The connection implements
// them all (fenceConn, a conversion: no allocation); a unit test can
// implement them without a server (guard_unit_test.go).
type fencing struct {
	s   sessionView
	own ownRunner
	out responder
	fx  sessionEffects
	// fenced: the open transaction carries a guarded write whose guard
	// passed (TiDB, Galera; see conflict.go), nil otherwise.
	fenced *fencedTxn
}

// sessionView is what the fencing layer reads of the session: it changes
// nothing.
type sessionView interface {
	// server: the backend's engine (flavour, Galera).
	server() rewrite.Server
	// serverStatus: the last status flags the server sent.
	serverStatus() uint16
	inTransaction() bool
	// locksHeld: the session holds table locks (LOCK TABLES).
	locksHeld() bool
	// namedStmt: the statement prepared under name with SQL-level
	// PREPARE, or nil.
	namedStmt(name string) *rewrite.Stmt
	// digest: the audit record's digest of sql, read under the session's
	// settings.
	digest(sql string) string
	log() *slog.Logger
}

// ownRunner runs the proxy's own statements (and the client's statement of
// a packet the proxy runs one by one) on the session's backend connection.
// Nothing of what it reads reaches the client. Errors: a *wire.ServerError is
// the server's ERR to the statement; anything else is a failure of the
// backend connection.
type ownRunner interface {
	// queue writes a statement without flushing; read reads the
	// responses in order.
	queue(sql string) error
	flush() error
	// read reads the next response: the rows of its result set (nil for
	// an OK); affected is then the affected rows of its last OK.
	read() ([][]wire.Value, error)
	affected() uint64
	// query and exec run one statement: queue, flush, read.
	query(sql string) ([][]wire.Value, error)
	exec(sql string) (uint64, error)
	// sendStatement sends text as a COM_QUERY of its own packet, whose
	// response the responder relays.
	sendStatement(text []byte) error
	// learnStatus makes serverStatus the server's after an ERR (asking
	// it); statusUnknown says an ERR came that may have changed it.
	learnStatus() error
	statusUnknown()
	// readWarnings reads the response to a queued SHOW WARNINGS.
	readWarnings() (warnPackets, error)
	// broken is err as a failure of the backend connection (the server
	// sent what the proxy cannot read).
	broken(err error) error
}

// responder answers the client's command and records what the fencing
// layer decided.
type responder interface {
	// The command's state (exchange.go), as far as the fencing layer
	// reads or sets it:
	//
	// holding: the final packet of the response is held back (its
	// statement succeeded); dropHeld forgets it, writeHeld writes it;
	// heldWarnings is its warning count.
	holding() bool
	dropHeld()
	heldWarnings() uint16
	// answered: some of the response went to the client; failed: it
	// ended with an ERR.
	answered() bool
	failed() bool
	// moreFollows: the response's end says more results follow (the
	// proxy runs the client's packet one statement at a time); markEnd
	// sets the end's status flags in an OK payload so.
	moreFollows() bool
	markEnd(ok []byte) bool
	// statement starts the response to one statement of the client's
	// packet, sent as a packet of its own (first: the packet's first;
	// more: others follow).
	statement(first, more bool)
	// ownTransaction: the statement runs in a transaction of the
	// proxy's (own: its status bits, which the client never sees).
	ownTransaction(own uint16)
	// takeConflict returns and forgets the conflict the relay deferred
	// while the proxy's statements were queued behind the write.
	takeConflict() (*fencedTxn, uint16)
	// relayResponse relays the backend's response to the client, t
	// watching it; holdEnd: its final packet goes to the exchange's held
	// packet instead.
	relayResponse(t resultHook, holdEnd bool) error
	sendError(code uint16, state, msg string) error
	sendNoRows() error
	writeHeld() error
	// keepWarnings keeps TiDB's warnings for the client's next SHOW
	// WARNINGS.
	keepWarnings(w *keptWarnings)
	// audit writes rec (with the session's identity) to the audit trail,
	// counts it and logs it, rate-limited.
	audit(rec audit.Record, rt *runtime)
	// countRefused counts a refused statement: answered, the client got
	// the refusal (else shadow mode let it through).
	countRefused(reason, mode string, answered bool)
	// logLimited logs msg at warning level unless key's lines are over
	// their rate.
	logLimited(key logging.Key, msg string, args ...any)
	// testPanic is a test's hook.
	testPanic(at panicPoint)
}

// sessionEffects applies what a statement that the tracker followed did
// to the session (USE, sql_mode, PREPARE, LOCK TABLES ...).
type sessionEffects interface {
	applyResult(rt *runtime, st *rewrite.Stmt, r result)
}

// fenceConn is the connection as the fencing layer's interfaces.
type fenceConn clientConn

// newFencing is the fencing layer of c.
func newFencing(c *clientConn) fencing {
	fc := (*fenceConn)(c)
	return fencing{s: fc, own: fc, out: fc, fx: fc}
}

func (f *fenceConn) conn() *clientConn { return (*clientConn)(f) }

func (f *fenceConn) server() rewrite.Server { return f.srv }
func (f *fenceConn) serverStatus() uint16   { return f.status }
func (f *fenceConn) inTransaction() bool    { return f.conn().inTransaction() }
func (f *fenceConn) locksHeld() bool        { return f.conn().tablesLocked }
func (f *fenceConn) namedStmt(name string) *rewrite.Stmt {
	if ps := f.conn().named[name]; ps != nil {
		return &ps.stmt
	}
	return nil
}
func (f *fenceConn) digest(sql string) string { return statementDigest(sql, f.srv, &f.sess) }
func (f *fenceConn) log() *slog.Logger        { return f.conn().log() }

func (f *fenceConn) queue(sql string) error                   { return f.conn().queueOwn(sql) }
func (f *fenceConn) flush() error                             { return f.backend.Flush() }
func (f *fenceConn) read() ([][]wire.Value, error)            { return f.conn().readOwn() }
func (f *fenceConn) affected() uint64                         { return f.ownAffected }
func (f *fenceConn) query(sql string) ([][]wire.Value, error) { return f.conn().backendQuery(sql) }
func (f *fenceConn) exec(sql string) (uint64, error)          { return f.conn().backendExec(sql) }
func (f *fenceConn) sendStatement(text []byte) error {
	if _, err := f.backend.WriteCommand(0, []byte{mysql.COM_QUERY}, text); err != nil {
		return err
	}
	return f.backend.Flush()
}
func (f *fenceConn) learnStatus() error                 { return f.conn().learnStatus() }
func (f *fenceConn) statusUnknown()                     { f.statusStale = true }
func (f *fenceConn) readWarnings() (warnPackets, error) { return f.conn().readWarnings() }
func (f *fenceConn) broken(err error) error             { return f.backend.Err(err) }

func (f *fenceConn) holding() bool          { return f.x.held.p != nil }
func (f *fenceConn) dropHeld()              { f.x.held.p = nil }
func (f *fenceConn) heldWarnings() uint16   { return heldWarnings(f.x.held) }
func (f *fenceConn) answered() bool         { return f.x.started }
func (f *fenceConn) failed() bool           { return f.x.lastErr }
func (f *fenceConn) moreFollows() bool      { return f.x.more }
func (f *fenceConn) markEnd(ok []byte) bool { return f.x.markEnd(ok, false) }
func (f *fenceConn) statement(first, more bool) {
	// Each statement goes out as one packet: its response starts at 1, and
	// reaches the client after the command's packet, or after what the
	// statement before sent.
	next := f.x.cmdSeq + 1
	if !first {
		next = f.client.LastOut() + 1
	}
	f.x.statement(1, next, more)
}
func (f *fenceConn) ownTransaction(own uint16) { f.x.ownTransaction(own) }
func (f *fenceConn) takeConflict() (*fencedTxn, uint16) {
	ft, code := f.x.conflict, f.x.conflictCode
	f.x.conflict = nil
	return ft, code
}
func (f *fenceConn) relayResponse(t resultHook, holdEnd bool) error {
	if holdEnd {
		return f.conn().relayHolding(t)
	}
	return f.conn().relayResults(t)
}
func (f *fenceConn) sendError(code uint16, state, msg string) error {
	return f.conn().sendError(code, state, msg)
}
func (f *fenceConn) sendNoRows() error                   { return f.conn().sendNoRows() }
func (f *fenceConn) writeHeld() error                    { return f.conn().writeHeld() }
func (f *fenceConn) keepWarnings(w *keptWarnings)        { f.warn = w }
func (f *fenceConn) audit(rec audit.Record, rt *runtime) { f.conn().writeAudit(rec, rt) }
func (f *fenceConn) countRefused(reason, mode string, answered bool) {
	if answered {
		f.p.metrics.stmtRefused.Inc()
	}
	f.p.metrics.StatementsRefused.WithLabelValues(reason, mode).Inc()
}
func (f *fenceConn) logLimited(key logging.Key, msg string, args ...any) {
	if f.p.logLimit.Allow(key) {
		f.conn().log().Warn(msg, args...)
	}
}
func (f *fenceConn) testPanic(at panicPoint) { f.conn().testPanic(at) }

func (f *fenceConn) applyResult(rt *runtime, st *rewrite.Stmt, r result) {
	f.conn().applyResult(rt, st, r)
}
