package proxy

import (
	"log/slog"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/fencing"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// fenceConn is the connection as the fencing layer's interfaces
// (fencing.Session, Runner, Responder, Effects): a conversion of
// clientConn, so that newFencing allocates nothing. The fencing package
// sees the connection only through these methods.
type fenceConn clientConn

// newFencing is the fencing layer of c.
func newFencing(c *clientConn) fencing.Layer {
	fc := (*fenceConn)(c)
	return fencing.New(fc, fc, fc, fc)
}

// fenceRT is what the fencing layer reads of rt (the zero value for nil).
func (rt *runtime) fenceRT() fencing.Runtime {
	if rt == nil {
		return fencing.Runtime{}
	}
	return fencing.Runtime{Policy: rt.policy, Gen: rt.gen}
}

func (f *fenceConn) conn() *clientConn { return (*clientConn)(f) }

// fencing.Session

func (f *fenceConn) Server() rewrite.Server { return f.srv }
func (f *fenceConn) ServerStatus() uint16   { return f.status }
func (f *fenceConn) InTransaction() bool    { return f.conn().inTransaction() }
func (f *fenceConn) LocksHeld() bool        { return f.conn().tablesLocked }
func (f *fenceConn) NamedStmt(name string) *rewrite.Stmt {
	if ps := f.conn().named[name]; ps != nil {
		return &ps.stmt
	}
	return nil
}
func (f *fenceConn) Digest(sql string) string { return statementDigest(sql, f.srv, &f.sess) }
func (f *fenceConn) Log() *slog.Logger        { return f.conn().log() }

// fencing.Runner

func (f *fenceConn) Queue(sql string) error                   { return f.conn().queueOwn(sql) }
func (f *fenceConn) Flush() error                             { return f.backend.Flush() }
func (f *fenceConn) Read() ([][]wire.Value, error)            { return f.conn().readOwn() }
func (f *fenceConn) Affected() uint64                         { return f.ownAffected }
func (f *fenceConn) Query(sql string) ([][]wire.Value, error) { return f.conn().backendQuery(sql) }
func (f *fenceConn) Exec(sql string) (uint64, error)          { return f.conn().backendExec(sql) }
func (f *fenceConn) SendStatement(text []byte) error {
	if _, err := f.backend.WriteCommand(0, []byte{mysql.COM_QUERY}, text); err != nil {
		return err
	}
	return f.backend.Flush()
}
func (f *fenceConn) LearnStatus() error                    { return f.conn().learnStatus() }
func (f *fenceConn) StatusUnknown()                        { f.statusStale = true }
func (f *fenceConn) ReadWarnings() (*wire.Recorded, error) { return f.conn().readWarnings() }
func (f *fenceConn) Broken(err error) error                { return f.backend.Err(err) }

// fencing.Responder

func (f *fenceConn) Holding() bool          { return f.x.held.p != nil }
func (f *fenceConn) DropHeld()              { f.x.held.p = nil }
func (f *fenceConn) HeldWarnings() uint16   { return heldWarnings(f.x.held) }
func (f *fenceConn) Answered() bool         { return f.x.started }
func (f *fenceConn) Failed() bool           { return f.x.lastErr }
func (f *fenceConn) MoreFollows() bool      { return f.x.more }
func (f *fenceConn) MarkEnd(ok []byte) bool { return f.x.markEnd(ok, false) }
func (f *fenceConn) Statement(first, more bool) {
	// Each statement goes out as one packet: its response starts at 1, and
	// reaches the client after the command's packet, or after what the
	// statement before sent.
	next := f.x.cmdSeq + 1
	if !first {
		next = f.client.LastOut() + 1
	}
	f.x.statement(1, next, more)
}
func (f *fenceConn) OwnTransaction(own uint16) { f.x.ownTransaction(own) }
func (f *fenceConn) TakeConflict() (*fencing.Txn, uint16) {
	ft, code := f.x.conflict, f.x.conflictCode
	f.x.conflict = nil
	return ft, code
}
func (f *fenceConn) RelayResponse(t fencing.Hook, holdEnd bool) error {
	if holdEnd {
		return f.conn().relayHolding(t)
	}
	return f.conn().relayResults(t)
}
func (f *fenceConn) SendError(code uint16, state, msg string) error {
	return f.conn().sendError(code, state, msg)
}
func (f *fenceConn) SendNoRows() error                    { return f.conn().sendNoRows() }
func (f *fenceConn) WriteHeld() error                     { return f.conn().writeHeld() }
func (f *fenceConn) KeepWarnings(w *fencing.KeptWarnings) { f.warn = w }
func (f *fenceConn) Audit(rec audit.Record)               { f.conn().writeAudit(rec) }
func (f *fenceConn) CountRefused(reason, mode string, answered bool) {
	if answered {
		f.p.metrics.stmtRefused.Inc()
	}
	f.p.metrics.StatementsRefused.WithLabelValues(reason, mode).Inc()
}
func (f *fenceConn) LogLimited(key logging.Key, msg string, args ...any) {
	if f.p.logLimit.Allow(key) {
		f.conn().log().Warn(msg, args...)
	}
}
func (f *fenceConn) GuardHeld() { f.conn().testPanic(panicGuarded) }

// fencing.Effects

func (f *fenceConn) ApplyResult(rt fencing.Runtime, st *rewrite.Stmt, r fencing.Result) {
	f.conn().applyResult(rt, st, r)
}
