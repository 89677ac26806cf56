// Package fencing is what the proxy does to fence one session's writes,
// apart from the relay and the command dispatch:
//
//   - tracker.go: the per-packet Tracker (the 0-row writes whose lease
//     must be checked, the held OK), shadow mode's checks, one-by-one
//     execution of a multi-statement packet;
//   - guard.go: guarded writes (the guard before the write, the proxy's
//     own transaction around an autocommit one, the answer to a rejected
//     guard);
//   - warnings.go: on TiDB, the warnings of an autocommit guarded write,
//     read before the proxy's COMMIT, kept for the client's SHOW WARNINGS;
//   - verdict.go: the lease check after a 0-row write, and the verdict;
//   - conflict.go: the watch of a transaction that carries a guarded write,
//     and the audit of its engine conflict;
//   - audit.go: the audit records of stale writes, refusals and guard
//     triggers' errors;
//   - errcodes.go: the error codes it answers with itself.
//
// It sees the connection only through four narrow interfaces: what it
// reads of the session (Session), the proxy's own statements on the
// backend connection (Runner), the client's response and the records
// of what happened (Responder), and the session effects of the client's
// statements that succeeded (Effects). The proxy's connection implements
// them all (proxy/fenceconn.go, a conversion: no allocation); a unit test
// implements them without a server (guard_test.go). It never imports
// proxy: the compiler keeps that boundary.
package fencing

import (
	"log/slog"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Layer is the fencing layer of one session.
type Layer struct {
	s   Session
	own Runner
	out Responder
	fx  Effects
	// fenced: the open transaction carries a guarded write whose guard
	// passed (TiDB, Galera; see conflict.go), nil otherwise.
	fenced *Txn
}

// New is the fencing layer of a session seen through s, own, out and fx
// (the proxy passes one connection as all four).
func New(s Session, own Runner, out Responder, fx Effects) Layer {
	return Layer{s: s, own: own, out: out, fx: fx}
}

// Runtime is what the fencing layer reads of the proxy's configuration
// snapshot for a command: the policy, and its generation (which changes
// when a reload changes what is fenced).
type Runtime struct {
	Policy *policy.Policy
	Gen    uint64
}

// Result is one statement's result seen in a response: an OK, an ERR
// (IsErr), or a result set (IsSet; OK then holds the terminator's
// status).
type Result struct {
	IsErr bool
	IsSet bool
	OK    wire.OKPacket
	Err   wire.ErrInfo
}

// Hook lets the fencing layer watch and amend the results the relay
// relays; nil on the hot path.
type Hook interface {
	// OKPacket is called for every OK packet that ends a statement,
	// before it is written. It may return a replacement payload (same
	// sequence number), or hold=true for the final packet of the
	// response, which is then held back (the exchange's held packet)
	// instead of being written.
	OKPacket(payload []byte, ok wire.OKPacket, final bool) (replace []byte, hold bool)
	// TrapErr is called for an ERR that ends a statement, before it is
	// written: true takes it from the client (the statement's per-row
	// trap fired, and the fencing layer answers in its place).
	TrapErr(e wire.ErrInfo) bool
	// Result is called for every result, in order.
	Result(r Result)
}

// Session is what the fencing layer reads of the session: it changes
// nothing.
type Session interface {
	// Server: the backend's engine (flavour, Galera).
	Server() rewrite.Server
	// ServerStatus: the last status flags the server sent.
	ServerStatus() uint16
	InTransaction() bool
	// LocksHeld: the session holds table locks (LOCK TABLES).
	LocksHeld() bool
	// NamedStmt: the statement prepared under name with SQL-level
	// PREPARE, or nil.
	NamedStmt(name string) *rewrite.Stmt
	// Digest: the audit record's digest of sql, read under the session's
	// settings.
	Digest(sql string) string
	Log() *slog.Logger
}

// Runner runs the proxy's own statements (and the client's statement of
// a packet the proxy runs one by one) on the session's backend connection.
// Nothing of what it reads reaches the client. Errors: a *wire.ServerError
// is the server's ERR to the statement; anything else is a failure of the
// backend connection.
type Runner interface {
	// Queue writes a statement without flushing; Read reads the
	// responses in order.
	Queue(sql string) error
	Flush() error
	// Read reads the next response: the rows of its result set (nil for
	// an OK); Affected is then the affected rows of its last OK.
	Read() ([][]wire.Value, error)
	Affected() uint64
	// Query and Exec run one statement: Queue, Flush, Read.
	Query(sql string) ([][]wire.Value, error)
	Exec(sql string) (uint64, error)
	// SendStatement sends text as a COM_QUERY of its own packet, whose
	// response the Responder relays.
	SendStatement(text []byte) error
	// LearnStatus makes ServerStatus the server's after an ERR (asking
	// it); StatusUnknown says an ERR came that may have changed it.
	LearnStatus() error
	StatusUnknown()
	// ReadWarnings reads the response to a queued SHOW WARNINGS.
	ReadWarnings() (*wire.Recorded, error)
	// Broken is err as a failure of the backend connection (the server
	// sent what the proxy cannot read).
	Broken(err error) error
}

// Responder answers the client's command and records what the fencing
// layer decided.
type Responder interface {
	// The command's state (proxy/exchange.go), as far as the fencing layer
	// reads or sets it:
	//
	// Holding: the final packet of the response is held back (its
	// statement succeeded); DropHeld forgets it, WriteHeld writes it;
	// HeldWarnings is its warning count.
	Holding() bool
	DropHeld()
	HeldWarnings() uint16
	// Answered: some of the response went to the client; Failed: it
	// ended with an ERR.
	Answered() bool
	Failed() bool
	// MoreFollows: the response's end says more results follow (the
	// proxy runs the client's packet one statement at a time); MarkEnd
	// sets the end's status flags in an OK payload so.
	MoreFollows() bool
	MarkEnd(ok []byte) bool
	// Statement starts the response to one statement of the client's
	// packet, sent as a packet of its own (first: the packet's first;
	// more: others follow).
	Statement(first, more bool)
	// OwnTransaction: the statement runs in a transaction of the
	// proxy's (own: its status bits, which the client never sees).
	OwnTransaction(own uint16)
	// TakeConflict returns and forgets the conflict the relay deferred
	// while the proxy's statements were queued behind the write.
	TakeConflict() (*Txn, uint16)
	// RelayResponse relays the backend's response to the client, t
	// watching it; holdEnd: its final packet goes to the exchange's held
	// packet instead.
	RelayResponse(t Hook, holdEnd bool) error
	SendError(code uint16, state, msg string) error
	SendNoRows() error
	WriteHeld() error
	// KeepWarnings keeps TiDB's warnings for the client's next SHOW
	// WARNINGS.
	KeepWarnings(w *KeptWarnings)
	// Audit writes rec (with the session's identity) to the audit trail,
	// counts it and logs it, rate-limited.
	Audit(rec audit.Record)
	// CountRefused counts a refused statement: answered, the client got
	// the refusal (else shadow mode let it through).
	CountRefused(reason, mode string, answered bool)
	// LogLimited logs msg at warning level unless key's lines are over
	// their rate.
	LogLimited(key logging.Key, msg string, args ...any)
	// GuardHeld is a test's hook: a guarded write's guard held, inside
	// its transaction, and the write is about to go out.
	GuardHeld()
}

// Effects applies what a statement that the Tracker followed did to the
// session (USE, sql_mode, PREPARE, LOCK TABLES ...).
type Effects interface {
	ApplyResult(rt Runtime, st *rewrite.Stmt, r Result)
}
