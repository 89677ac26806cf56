package fencing

import (
	"errors"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Guarded writes (INSERT, REPLACE: Fence.Guard) go to the server exactly as
// the client sent them, preceded on the same connection and in the same
// transaction by a guard statement that reads the lease row with a lock
// (lease.GuardFor). The lock lasts until the transaction ends, so a
// takeover either waits for the write's commit or commits first and the
// guard sees its token.
//
//   - In a transaction (or with autocommit off, where the guard starts one)
//     the guard simply runs first; the client's COMMIT ends both.
//   - In autocommit mode the proxy makes the transaction:
//     START TRANSACTION + guard (one write, two responses), then the write +
//     COMMIT AND NO CHAIN NO RELEASE (one write); the write's final packet
//     is held until the COMMIT succeeded and then shows the status flags
//     autocommit would (no SERVER_STATUS_IN_TRANS). A stale guard is
//     followed by ROLLBACK, and the write is never sent.
//   - Under LOCK TABLES no START TRANSACTION (it would unlock the tables):
//     the table lock on the lease table makes guard and write atomic.

const (
	commitOwn   = "COMMIT AND NO CHAIN NO RELEASE"
	rollbackOwn = "ROLLBACK AND NO CHAIN NO RELEASE"
)

// GuardOf returns the fence of a statement the proxy must guard (a guarded
// write, or EXECUTE of one prepared by name), or nil.
func (fg *Layer) GuardOf(st *rewrite.Stmt) *rewrite.Fence {
	var f *rewrite.Fence
	switch st.Kind {
	case rewrite.Write:
		f = st.Fence
	case rewrite.Execute:
		if ps := fg.s.NamedStmt(st.Name); ps != nil && ps.Kind == rewrite.Write {
			f = ps.Fence
		}
	}
	if f != nil && f.Guard {
		return f
	}
	return nil
}

// HasGuarded reports whether any statement of a packet must be guarded,
// or prepares a guarded write by name: an EXECUTE of it later in the same
// packet finds it among the named statements only once the PREPARE has
// run, so such a packet runs one statement at a time too.
func (fg *Layer) HasGuarded(stmts []rewrite.Stmt) bool {
	for i := range stmts {
		st := &stmts[i]
		if fg.GuardOf(st) != nil || st.Kind == rewrite.Prepare && st.Fence != nil && st.Fence.Guard {
			return true
		}
	}
	return false
}

// guardEngine is the lease package's engine family for the backend.
func (fg *Layer) guardEngine() lease.Engine {
	switch {
	case fg.s.Server().Flavor == rewrite.TiDB:
		return lease.TiDB
	case fg.s.Server().Galera:
		return lease.Galera
	}
	return lease.InnoDB
}

// guardsFor builds the guard of each distinct lease of f's targets.
func (fg *Layer) guardsFor(rt Runtime, f *rewrite.Fence) ([]lease.Guard, []rewrite.Target, error) {
	var gs []lease.Guard
	var ts []rewrite.Target
	seen := map[string]bool{}
	for _, tg := range f.Targets {
		if tg.RowParams != nil && !tg.RowParams.Pinned() && tg.RowLease == "" {
			// The rows' lease follows from the values bound at this
			// execution, and was not computed: checking the session's lease
			// alone would accept any lease (rowparams.go).
			return nil, nil, errors.New("the lease of the rows was not computed from the values bound")
		}
		g, err := lease.GuardFor(fg.guardEngine(), leaseSpec(rt.Policy, f, tg))
		if err != nil {
			return nil, nil, err
		}
		if seen[g.SQL] {
			continue
		}
		seen[g.SQL] = true
		gs = append(gs, g)
		ts = append(ts, tg)
	}
	return gs, ts, nil
}

// guardedWrite runs one guarded write: the guard, then (if the lease holds)
// the client's statement, which send puts on the wire unchanged, with its
// response relayed through t; drop discards the client's command when it
// is not sent. The caller finishes t afterwards (session effects; a
// guarded write has no lease check left to do).
func (fg *Layer) guardedWrite(rt Runtime, f *rewrite.Fence, t *Tracker, send, drop func() error) (err error) {
	// The transaction state decides the shape: after an ERR, ask.
	if err := fg.own.LearnStatus(); err != nil {
		be, ok := err.(*wire.ServerError)
		if !ok {
			return err
		}
		if err := drop(); err != nil {
			return err
		}
		// A conflict here (a brute-force abort on Galera shows at the
		// next command) ended an earlier fenced write's transaction.
		if err := fg.NoteError(be.Code); err != nil {
			return err
		}
		return fg.out.SendError(be.Code, be.State, be.Msg)
	}
	// Under LOCK TABLES the table lock on the lease table keeps guard and
	// write atomic, and START TRANSACTION would unlock the tables. Not on
	// TiDB: there LOCK TABLES is a no-op (warning 1235) unless the
	// experimental enable-table-lock is set, and a guard outside a
	// transaction locks nothing: measured, 216 stale commits in 30 s
	// (TestTiDBProxyRace). So TiDB's autocommit writes are always wrapped.
	tablesHeld := fg.s.LocksHeld() && fg.s.Server().Flavor != rewrite.TiDB
	wrap := fg.s.ServerStatus()&mysql.SERVER_STATUS_AUTOCOMMIT != 0 && !fg.s.InTransaction() && !tablesHeld
	gs, ts, err := fg.guardsFor(rt, f)
	if err != nil {
		if err := drop(); err != nil {
			return err
		}
		return fg.out.SendError(erNotAllowed, "42000", "fenceproxy cannot build the lease check for this write: "+err.Error())
	}
	// In the client's transaction a savepoint goes before the guard, so
	// that a write that outlives its lease can be undone alone. Not
	// between the guard and the write: nothing of the proxy's may run
	// there. On Galera a replicated write that aborts the transaction
	// after the guard is reported to the next command, which must be the
	// write (it then runs not at all); a statement of the proxy's would
	// take the error, and the write would run on its own, outside the
	// guard's transaction (measured: 24 stale commits in a 5 s race).
	undo := !wrap && (fg.s.InTransaction() || fg.s.ServerStatus()&mysql.SERVER_STATUS_AUTOCOMMIT == 0)
	switch {
	case wrap:
		if err := fg.own.Queue("START TRANSACTION"); err != nil {
			return err
		}
	case undo:
		if err := fg.own.Queue("SAVEPOINT " + recheckSavepoint); err != nil {
			return err
		}
	}
	// Everything the server does for this write, the guard's reading of
	// the clock included, happens after this instant.
	began := time.Now()
	v, gerr, err := fg.runGuards(gs, ts, wrap || undo)
	if err != nil {
		return err
	}
	if wrap && fg.s.ServerStatus()&mysql.SERVER_STATUS_IN_TRANS_READONLY != 0 && fg.s.Server().Flavor != rewrite.TiDB {
		// The proxy's START TRANSACTION took a one-shot READ ONLY: see
		// keepReadOnly.
		defer func() {
			if err == nil {
				err = fg.keepReadOnly()
			}
		}()
	}
	if gerr != nil || v.rejected() {
		end := "DO 0" // ROW_COUNT() as after a write of 0 rows
		if wrap {
			end = rollbackOwn
		}
		var endErr *wire.ServerError
		if _, err := fg.own.Exec(end); err != nil {
			be, ok := err.(*wire.ServerError)
			if !ok {
				return err
			}
			if !wrap && fg.engineConflict(be.Code) {
				endErr = be
			}
		}
		if err := drop(); err != nil {
			return err
		}
		if gerr != nil {
			return fg.guardError(rt, f, gerr, ts)
		}
		if endErr != nil {
			// The client's transaction was rolled back under the rejected
			// write (on Galera a brute-force abort shows at the next
			// statement): it must hear so, not "0 rows" in a transaction
			// that is gone.
			fg.auditStale(rt, f, v, "error")
			if err := fg.NoteError(endErr.Code); err != nil {
				return err
			}
			return fg.out.SendError(endErr.Code, endErr.State, endErr.Msg)
		}
		return fg.rejectGuarded(rt, f, v)
	}
	fg.watchConflicts(rt, f, v)
	fg.out.GuardHeld()
	recheck, ok := lease.Recheck(v.until)
	if !ok {
		// A lease row without an expiry the proxy can read back: no
		// recheck can say the write ran while it was live.
		return fg.own.Broken(wire.Malformed("lease guard returned the expiry %q", v.until))
	}
	if !wrap {
		return fg.writeInTransaction(rt, f, v, t, send, recheck, began, undo)
	}
	return fg.writeWrapped(rt, f, v, t, send, recheck)
}

// keepReadOnly gives the session back the READ ONLY characteristic the
// proxy's own transaction used up. SET TRANSACTION READ ONLY (no GLOBAL or
// SESSION) applies to the next transaction only, and the server forgets it
// when a transaction ends or after an autocommit statement that used a
// transactional engine; an autocommit write it refuses for the
// characteristic (1792) opens no table, so directly the characteristic
// stays, and every later autocommit write is refused too (measured on
// MariaDB 10.11: TestOneShotTransactionCharacteristics). The proxy's
// START TRANSACTION for a guarded autocommit write takes it (the server
// says so with SERVER_STATUS_IN_TRANS_READONLY) and its ROLLBACK ends it:
// before, the second autocommit INSERT after SET TRANSACTION READ ONLY
// inserted. The server shows no one-shot characteristic in any variable,
// so the flag is what the proxy can know: once its transaction has ended,
// it sets READ ONLY again. (A session whose default is READ ONLY gets the
// same one-shot it has anyway.) A one-shot isolation level set with it is
// not restored: docs/sessions.md. Not on TiDB, which refuses SET
// TRANSACTION READ ONLY (1235) unless its no-op functions are on, and
// whose kept warnings (warnings.go) a statement of the proxy's would
// drop.
func (fg *Layer) keepReadOnly() error {
	if fg.s.InTransaction() {
		return nil
	}
	_, err := fg.own.Exec("SET TRANSACTION READ ONLY")
	if be, ok := err.(*wire.ServerError); ok {
		fg.s.Log().Warn("setting the session's READ ONLY characteristic again failed", "code", be.Code)
		return nil
	}
	return err
}

// Expiry at the write. The guard checks the lease before the write goes
// out, and the write may then wait (for a row lock: measured, a guarded
// INSERT blocked on a unique key by another transaction until after the
// lease expired then landed, on MariaDB, Galera and TiDB; on TiDB and
// Galera every write is guarded and their UPDATEs and DELETEs landed the
// same way, while MariaDB's in-statement fences read the lease again
// after the wait and matched no row: TestNoWriteAfterExpiry). The lease
// row stays locked, so no takeover can commit in between, but the write
// would take effect after the lease's expiry by database time. So the
// lease is checked again after the write, in its transaction (Recheck:
// the guard's expiry against SYSDATE(3)): always in the proxy's own
// transaction, before its COMMIT; in the client's transaction when the
// write's answer came late (writeInTransaction). A write that outlived
// its lease is undone (the proxy's transaction rolled back, or the
// client's rolled back to the savepoint set before the guard) and
// answered as a rejected one. Recheck names no table, so MariaDB keeps
// the write's warnings; on TiDB they are read before it (warnings.go).

// recheckSavepoint is the savepoint the proxy sets in the client's
// transaction right before a guarded write.
const recheckSavepoint = "fenceproxy_write"

// writeInTransaction sends a guarded write whose guard held inside the
// client's transaction (or one the guard opened under autocommit=0), after
// the savepoint set before the guard. The recheck goes out only when the
// write's answer came so late that the lease may have ended meanwhile: an
// extra statement in the client's transaction would set ROW_COUNT() (and
// on TiDB empty SHOW WARNINGS), which the write's must be. The write ran,
// by the database's clock, between the guard's reading of the clock and
// the answer; that is at most the proxy's elapsed time since it sent the
// guard (began), so a write answered within half the time the lease had
// left cannot have outlived it (the other half covers a database clock
// that steps forward meanwhile).
func (fg *Layer) writeInTransaction(rt Runtime, f *rewrite.Fence, v verdict, t *Tracker, send func() error, recheck string,
	began time.Time, undo bool) error {
	// undo false: under LOCK TABLES in autocommit mode there is no
	// transaction to undo the write in: it commits with its statement
	// (nothing can hold its rows meanwhile: the client's table locks keep
	// other sessions out).
	if err := send(); err != nil {
		return err
	}
	if err := fg.out.RelayResponse(t, true); err != nil {
		return err
	}
	elapsed := time.Since(began)
	if err := fg.auditDeferred(); err != nil {
		return err
	}
	if !fg.out.Holding() {
		return nil // the write failed; its ERR went out
	}
	if v.remainingKnown && elapsed < v.remaining/2 {
		return fg.out.WriteHeld()
	}
	// Late: ask the database.
	keep := fg.s.Server().Flavor == rewrite.TiDB && !fg.out.MoreFollows()
	if keep {
		if err := fg.own.Queue("SHOW WARNINGS"); err != nil {
			return err
		}
	}
	if err := fg.own.Queue(recheck); err != nil {
		return err
	}
	if err := fg.own.Flush(); err != nil {
		return err
	}
	kept, rows, rerr, err := fg.readAfterWrite(keep)
	if err != nil {
		return err
	}
	if rerr == nil && lease.RecheckHolds(ToFields(rows)) {
		fg.keepWarnings(kept, fg.out.HeldWarnings())
		return fg.out.WriteHeld()
	}
	fg.out.DropHeld()
	if rerr != nil && fg.engineConflict(rerr.Code) {
		return fg.lostAfterWrite(rerr)
	}
	switch {
	case undo:
		if _, err := fg.own.Exec("ROLLBACK TO SAVEPOINT " + recheckSavepoint); err != nil {
			if _, ok := err.(*wire.ServerError); !ok {
				return err
			}
			undo = false
		}
	case fg.s.InTransaction():
		// No savepoint: the whole transaction goes, and the client hears
		// so.
		if _, err := fg.own.Exec("ROLLBACK"); err != nil {
			if _, ok := err.(*wire.ServerError); !ok {
				return err
			}
		}
		fg.auditExpired(rt, f, v, "error", rerr)
		return fg.out.SendError(erSignal, "45000", v.expiredMessage()+"; the transaction was rolled back")
	default:
		// Committed already (LOCK TABLES, autocommit): say so.
		fg.auditExpired(rt, f, v, "committed", rerr)
		fg.s.Log().Warn("a guarded write under LOCK TABLES ran after its lease expired and committed with its statement", "table", v.table)
		return fg.out.SendError(erSignal, "45000", v.expiredMessage()+"; it ran under LOCK TABLES in autocommit mode and was committed")
	}
	return fg.rejectExpired(rt, f, v, rerr)
}

// writeWrapped sends a guarded autocommit write inside the transaction
// the proxy opened for it: the write and the recheck in one round trip,
// then COMMIT, or ROLLBACK when the write outlived its lease. The write's
// final packet is held until the COMMIT succeeded and then shows the
// status flags autocommit would (no SERVER_STATUS_IN_TRANS).
func (fg *Layer) writeWrapped(rt Runtime, f *rewrite.Fence, v verdict, t *Tracker, send func() error, recheck string) error {
	// The transaction is the proxy's: it ends with this command.
	defer func() { fg.fenced = nil }()
	fg.out.OwnTransaction(mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_IN_TRANS_READONLY)
	// TiDB empties SHOW WARNINGS at every statement (MariaDB keeps them
	// past the recheck and the COMMIT), so on TiDB the write's warnings
	// are read right after it, in the same flush, for the client's next
	// SHOW WARNINGS (see warnings.go). Not for a statement of a packet
	// that others follow: they would replace them.
	keep := fg.s.Server().Flavor == rewrite.TiDB && !fg.out.MoreFollows()
	if err := send(); err != nil {
		return err
	}
	if keep {
		if err := fg.own.Queue("SHOW WARNINGS"); err != nil {
			return err
		}
	}
	if err := fg.own.Queue(recheck); err != nil {
		return err
	}
	if err := fg.own.Flush(); err != nil {
		return err
	}
	if err := fg.out.RelayResponse(t, true); err != nil {
		return err
	}
	kept, rows, rerr, err := fg.readAfterWrite(keep)
	if err != nil {
		return err
	}
	live := rerr == nil && lease.RecheckHolds(ToFields(rows))
	if rerr != nil && fg.engineConflict(rerr.Code) && fg.out.Holding() {
		if err := fg.auditDeferred(); err != nil {
			return err
		}
		fg.out.DropHeld()
		return fg.lostAfterWrite(rerr)
	}
	if !fg.out.Holding() || !live {
		// The write failed (its ERR went out already), or it outlived its
		// lease: nothing of it may commit.
		if _, err := fg.own.Exec(rollbackOwn); err != nil {
			if _, ok := err.(*wire.ServerError); !ok {
				return err
			}
		}
		if err := fg.auditDeferred(); err != nil {
			return err
		}
		if !fg.out.Holding() {
			if !t.Trapped() {
				// The ERR the client got is the write's own: so are
				// the warnings. A trap's ERR is the proxy's business
				// (Tracker.Finish), not the client's.
				fg.keepWarnings(kept, 0)
			}
			return nil
		}
		fg.out.DropHeld()
		return fg.rejectExpired(rt, f, v, rerr)
	}
	_, cerr := fg.own.Exec(commitOwn)
	if _, ok := cerr.(*wire.ServerError); cerr != nil && !ok {
		return cerr
	}
	if err := fg.auditDeferred(); err != nil {
		return err
	}
	if cerr != nil {
		be := cerr.(*wire.ServerError)
		// Nothing was committed: the client gets the COMMIT's error in
		// place of the write's success (after its rows, for RETURNING).
		fg.out.DropHeld()
		fg.own.StatusUnknown()
		if err := fg.NoteError(be.Code); err != nil {
			return err
		}
		return fg.out.SendError(be.Code, be.State, be.Msg)
	}
	fg.keepWarnings(kept, fg.out.HeldWarnings())
	return fg.out.WriteHeld()
}

// lostAfterWrite answers a guarded write whose transaction an engine
// conflict ended right after it (the recheck got Galera's 1213 or TiDB's
// 9007): nothing of it will commit, and the client hears the engine's
// error, as from its own next statement.
func (fg *Layer) lostAfterWrite(be *wire.ServerError) error {
	fg.own.StatusUnknown()
	if err := fg.NoteError(be.Code); err != nil {
		return err
	}
	return fg.out.SendError(be.Code, be.State, be.Msg)
}

// readAfterWrite reads what follows a guarded write's response: TiDB's
// SHOW WARNINGS (keep) and the recheck's rows, or the recheck's error.
func (fg *Layer) readAfterWrite(keep bool) (kept *wire.Recorded, rows [][]wire.Value, rerr *wire.ServerError, err error) {
	if keep {
		if kept, err = fg.own.ReadWarnings(); err != nil {
			return nil, nil, nil, err
		}
	}
	rows, err = fg.own.Read()
	if err != nil {
		be, ok := err.(*wire.ServerError)
		if !ok {
			return nil, nil, nil, err
		}
		return kept, nil, be, nil
	}
	return kept, rows, nil, nil
}

// auditDeferred audits the engine conflict the write itself met, once the
// statements queued behind it are read.
func (fg *Layer) auditDeferred() error {
	ft, code := fg.out.TakeConflict()
	if ft == nil {
		return nil
	}
	return fg.auditConflict(ft.rt, ft.fence, ft.v, code)
}

// keepWarnings keeps TiDB's SHOW WARNINGS packets for the client's next
// SHOW WARNINGS: n, the write's warning count, or the rows (after an ERR,
// n 0).
func (fg *Layer) keepWarnings(kept *wire.Recorded, n uint16) {
	if kept == nil {
		return
	}
	count := uint64(n)
	if n == 0 {
		if fg.out.Holding() {
			return // no warnings to keep
		}
		count = uint64(kept.Rows)
	}
	fg.out.KeepWarnings(&KeptWarnings{Packets: kept, Count: count})
}

// rejectExpired answers a guarded write that ran after its lease expired,
// and was undone, as a rejected one (reason expired).
func (fg *Layer) rejectExpired(rt Runtime, f *rewrite.Fence, v verdict, rerr *wire.ServerError) error {
	if rt.Policy.OnStale == policy.OnStaleError || f.Rows || fg.out.Answered() {
		// An OK of 0 rows cannot follow rows already relayed.
		fg.auditExpired(rt, f, v, "error", rerr)
		return fg.out.SendError(erSignal, "45000", v.expiredMessage())
	}
	fg.auditExpired(rt, f, v, "zero_rows", rerr)
	return fg.out.SendNoRows()
}

// runGuards sends the guards (after a queued START TRANSACTION or
// SAVEPOINT when lead) and reads their verdict. gerr is the server's error for a guard that
// could not run (lock wait timeout, deadlock, missing lease table); err a
// failure of the connection.
func (fg *Layer) runGuards(gs []lease.Guard, ts []rewrite.Target, lead bool) (v verdict, gerr *wire.ServerError, err error) {
	var first verdict
	until := ""
	var remaining time.Duration
	known := true
	for i, g := range gs {
		if err := fg.own.Queue(g.SQL); err != nil {
			return v, nil, err
		}
		// Galera's guard is an UPDATE: the locking read of the row goes
		// with it, for the expiry (or, when it matched no row, why).
		// Not under autocommit=0, where that read after a guard that
		// failed (a 1213 rolled the transaction back) would open a
		// transaction of its own: there it waits for the guard's answer.
		classify := g.Kind == lease.GuardAffected
		ahead := classify && fg.s.ServerStatus()&mysql.SERVER_STATUS_AUTOCOMMIT != 0
		if ahead {
			if err := fg.own.Queue(g.Classify); err != nil {
				return v, nil, err
			}
		}
		if err := fg.own.Flush(); err != nil {
			return v, nil, err
		}
		if lead && i == 0 {
			if _, err := fg.own.Read(); err != nil {
				be, ok := err.(*wire.ServerError)
				if !ok {
					return v, nil, err
				}
				gerr = be
			}
		}
		rows, err := fg.own.Read()
		if ahead {
			crows, cerr := fg.own.Read()
			if _, ok := cerr.(*wire.ServerError); cerr != nil && !ok {
				return v, nil, cerr
			}
			if err == nil && cerr != nil {
				err = cerr
			}
			rows = crows
		}
		if gerr != nil {
			// The guard ran outside the transaction that failed to start
			// (or that the savepoint found aborted): its lock is gone
			// already, whatever it found.
			if _, ok := err.(*wire.ServerError); err != nil && !ok {
				return v, nil, err
			}
			return v, gerr, nil
		}
		if err != nil {
			be, ok := err.(*wire.ServerError)
			if !ok {
				return v, nil, err
			}
			return v, be, nil
		}
		held := classify && g.Holds(fg.own.Affected())
		if classify && !ahead {
			// The current row, read with a lock.
			if rows, err = fg.own.Query(g.Classify); err != nil {
				be, ok := err.(*wire.ServerError)
				if !ok {
					return v, nil, err
				}
				return v, be, nil
			}
		}
		gv, valid := g.Read(ToFields(rows))
		if valid && gv.NeedVars {
			if held {
				return v, nil, fg.own.Broken(wire.Malformed("the lease row of a guard that held is gone"))
			}
			vr, err := fg.own.Query(g.VarsSQL)
			if err != nil {
				be, ok := err.(*wire.ServerError)
				if !ok {
					return v, nil, err
				}
				return v, be, nil
			}
			gv, valid = g.ReadVars(ToFields(vr))
		}
		if !valid {
			return v, nil, fg.own.Broken(wire.Malformed("lease guard returned %d rows", len(rows)))
		}
		gvv := verdictOf(gv, ts[i])
		switch {
		case held:
			// The guard decides; its row read says when the lease ends.
			gvv.reason = ""
		case classify && !gvv.rejected():
			// The row changed between the guard and its reading; the guard
			// decides, and a token can only have moved on.
			gvv.reason = audit.StaleToken
		}
		if gvv.rejected() {
			return gvv, nil, nil
		}
		until = lease.EarlierUntil(until, gvv.until)
		if !gvv.remainingKnown {
			known = false
		} else if i == 0 || gvv.remaining < remaining {
			remaining = gvv.remaining
		}
		if i == 0 {
			first = gvv
		}
	}
	// Reason "": the lease holds; the rest is what the first guard read,
	// for a conflict's audit record, and the earliest expiry.
	first.until, first.remaining, first.remainingKnown = until, remaining, known && len(gs) > 0
	return first, nil, nil
}

// ToFields is rows as the lease package reads them.
func ToFields(rows [][]wire.Value) [][]lease.Field {
	out := make([][]lease.Field, len(rows))
	for i, r := range rows {
		out[i] = make([]lease.Field, len(r))
		for j, x := range r {
			out[i][j] = lease.Field{S: x.S, Null: x.Null}
		}
	}
	return out
}

// guardError answers a write whose guard failed with the guard's error:
// nothing of the write was sent.
func (fg *Layer) guardError(rt Runtime, f *rewrite.Fence, be *wire.ServerError, ts []rewrite.Target) error {
	msg := be.Msg
	switch {
	case be.Code == mysql.ER_NO_SUCH_TABLE:
		msg = "fenceproxy: the lease table for " + ts[0].Schema + "." + ts[0].Table +
			" is missing (run fenceproxy init): " + msg
	case be.Code == mysql.ER_BAD_FIELD_ERROR && strings.Contains(msg, lease.WriteCounter):
		msg = "fenceproxy: the lease table for " + ts[0].Schema + "." + ts[0].Table + " has no " + lease.WriteCounter +
			" column, which fenced writes on MariaDB Galera bump (run fenceproxy init to add it): " + msg
	case fg.engineConflict(be.Code):
		// The guard itself (or the read after it) lost certification, or
		// TiDB found a write conflict: its transaction is rolled back,
		// this write and any earlier one in it.
		fg.fenced = nil
		if err := fg.auditConflict(rt, f, verdict{lease: ts[0].Lease, table: ts[0].Schema + "." + ts[0].Table}, be.Code); err != nil {
			return err
		}
	}
	return fg.out.SendError(be.Code, be.State, msg)
}

// erConflict is ER_LOCK_DEADLOCK: on Galera also a certification failure
// or a brute-force abort by a replicated write.
const erConflict = 1213

// rejectGuarded answers a guarded write whose lease check failed, after the
// audit record is written: an OK of 0 rows (on_stale: zero_rows, what the
// server says of an INSERT ... SELECT that selected nothing), or ERR 1644.
func (fg *Layer) rejectGuarded(rt Runtime, f *rewrite.Fence, v verdict) error {
	if rt.Policy.OnStale == policy.OnStaleError || f.Rows {
		// A write that answers with rows (RETURNING) would need an empty
		// result set with its column definitions, which only the server
		// can give: the error says what happened instead.
		fg.auditStale(rt, f, v, "error")
		return fg.out.SendError(erSignal, "45000", v.message())
	}
	fg.auditStale(rt, f, v, "zero_rows")
	return fg.out.SendNoRows()
}

// Guarded runs a packet of one guarded write (see guardedWrite). drop nil:
// the client's command was consumed already. text: the packet's text as
// sent, when the proxy rewrote it (Tracker.SetText), else nil.
func (fg *Layer) Guarded(rt Runtime, f *rewrite.Fence, stmts []rewrite.Stmt, text []byte, send, drop func() error) error {
	return fg.GuardedWith(rt, f, NewTracker(fg, rt, stmts, true).SetText(text), send, drop)
}

// GuardedWith is Guarded with the Tracker t of the write's statement.
func (fg *Layer) GuardedWith(rt Runtime, f *rewrite.Fence, t *Tracker, send, drop func() error) error {
	if drop == nil {
		drop = func() error { return nil }
	}
	if err := fg.guardedWrite(rt, f, t, send, drop); err != nil {
		return err
	}
	return t.Finish()
}
