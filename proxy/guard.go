package proxy

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
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

// guardOf returns the fence of a statement the proxy must guard (a guarded
// write, or EXECUTE of one prepared by name), or nil.
func (fg *fencing) guardOf(st *rewrite.Stmt) *rewrite.Fence {
	c := fg.c
	var f *rewrite.Fence
	switch st.Kind {
	case rewrite.Write:
		f = st.Fence
	case rewrite.Execute:
		if ps := c.named[st.Name]; ps != nil && ps.stmt.Kind == rewrite.Write {
			f = ps.stmt.Fence
		}
	}
	if f != nil && f.Guard {
		return f
	}
	return nil
}

// hasGuarded reports whether any statement of a packet must be guarded,
// or prepares a guarded write by name: an EXECUTE of it later in the same
// packet finds it in c.named only once the PREPARE has run, so such a
// packet runs one statement at a time too.
func (fg *fencing) hasGuarded(stmts []rewrite.Stmt) bool {
	for i := range stmts {
		st := &stmts[i]
		if fg.guardOf(st) != nil || st.Kind == rewrite.Prepare && st.Fence != nil && st.Fence.Guard {
			return true
		}
	}
	return false
}

// guardEngine is the lease package's engine family for the backend.
func (fg *fencing) guardEngine() lease.Engine {
	c := fg.c
	switch {
	case c.srv.Flavor == rewrite.TiDB:
		return lease.TiDB
	case c.srv.Galera:
		return lease.Galera
	}
	return lease.InnoDB
}

// guardsFor builds the guard of each distinct lease of f's targets.
func (fg *fencing) guardsFor(rt *runtime, f *rewrite.Fence) ([]lease.Guard, []rewrite.Target, error) {
	var gs []lease.Guard
	var ts []rewrite.Target
	seen := map[string]bool{}
	for _, tg := range f.Targets {
		g, err := lease.GuardFor(fg.guardEngine(), leaseSpec(rt.policy, tg))
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
func (fg *fencing) guardedWrite(rt *runtime, f *rewrite.Fence, t *tracker, send, drop func() error) error {
	c := fg.c
	// The transaction state decides the shape: after an ERR, ask.
	if err := c.learnStatus(); err != nil {
		be, ok := err.(*backendError)
		if !ok {
			return err
		}
		if err := drop(); err != nil {
			return err
		}
		// A conflict here (a brute-force abort on Galera shows at the
		// next command) ended an earlier fenced write's transaction.
		if err := fg.noteError(be.code); err != nil {
			return err
		}
		return c.sendError(be.code, be.state, be.msg)
	}
	// Under LOCK TABLES the table lock on the lease table keeps guard and
	// write atomic, and START TRANSACTION would unlock the tables. Not on
	// TiDB: there LOCK TABLES is a no-op (warning 1235) unless the
	// experimental enable-table-lock is set, and a guard outside a
	// transaction locks nothing: measured, 216 stale commits in 30 s
	// (TestTiDBProxyRace). So TiDB's autocommit writes are always wrapped.
	tablesHeld := c.tablesLocked && c.srv.Flavor != rewrite.TiDB
	wrap := c.status&mysql.SERVER_STATUS_AUTOCOMMIT != 0 && !c.inTransaction() && !tablesHeld
	gs, ts, err := fg.guardsFor(rt, f)
	if err != nil {
		if err := drop(); err != nil {
			return err
		}
		return c.sendError(erNotAllowed, "42000", "fenceproxy cannot build the lease check for this write: "+err.Error())
	}
	if wrap {
		if err := c.queueOwn("START TRANSACTION"); err != nil {
			return err
		}
	}
	v, gerr, err := fg.runGuards(gs, ts, wrap)
	if err != nil {
		return err
	}
	if gerr != nil || v.rejected() {
		end := "DO 0" // ROW_COUNT() as after a write of 0 rows
		if wrap {
			end = rollbackOwn
		}
		var endErr *backendError
		if _, err := c.backendExec(end); err != nil {
			be, ok := err.(*backendError)
			if !ok {
				return err
			}
			if !wrap && fg.engineConflict(be.code) {
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
			if err := fg.noteError(endErr.code); err != nil {
				return err
			}
			return c.sendError(endErr.code, endErr.state, endErr.msg)
		}
		return fg.rejectGuarded(rt, f, v)
	}
	fg.watchConflicts(rt, f, v)
	c.testPanic(panicGuarded)
	if !wrap {
		if err := send(); err != nil {
			return err
		}
		return c.relayResults(t)
	}
	// The transaction is the proxy's: it ends with this command.
	defer func() { fg.fenced, fg.deferred = nil, nil }()
	c.x.holdEnd, c.x.own = true, mysql.SERVER_STATUS_IN_TRANS|mysql.SERVER_STATUS_IN_TRANS_READONLY
	defer func() { c.x.holdEnd, c.x.own = false, 0 }()
	// TiDB's COMMIT empties SHOW WARNINGS (MariaDB's does not), so on TiDB
	// the write's warnings are read before it, in the same flush, for the
	// client's next SHOW WARNINGS (see warnings.go). Not for a statement
	// of a packet that others follow: they would replace them.
	keep := c.srv.Flavor == rewrite.TiDB && !c.x.more
	if err := send(); err != nil {
		return err
	}
	if keep {
		if err := c.queueOwn("SHOW WARNINGS"); err != nil {
			return err
		}
	}
	if err := c.queueOwn(commitOwn); err != nil {
		return err
	}
	if err := c.backend.flush(); err != nil {
		return err
	}
	if err := c.relayResults(t); err != nil {
		return err
	}
	c.x.holdEnd = false
	var kept warnPackets
	if keep {
		var err error
		if kept, err = c.readWarnings(); err != nil {
			return err
		}
	}
	_, cerr := c.readOwn()
	if _, ok := cerr.(*backendError); cerr != nil && !ok {
		return cerr
	}
	if ft := fg.deferred; ft != nil {
		// The write itself met the conflict; the COMMIT after it committed
		// nothing.
		fg.deferred = nil
		if err := fg.auditConflict(ft.rt, ft.fence, ft.v, fg.deferredCode); err != nil {
			return err
		}
	}
	if cerr != nil {
		be := cerr.(*backendError)
		// Nothing was committed: the client gets the COMMIT's error in
		// place of the write's success (after its rows, for RETURNING).
		c.x.held.p = nil
		c.statusStale = true
		if err := fg.noteError(be.code); err != nil {
			return err
		}
		return c.sendError(be.code, be.state, be.msg)
	}
	if c.x.held.p == nil {
		// The write failed, and its ERR went out already: SHOW WARNINGS
		// names the error.
		if kept != nil {
			c.warn = &keptWarnings{pkts: kept, count: uint64(kept.rows())}
		}
		return nil
	}
	if n := heldWarnings(c.x.held); n > 0 && kept != nil {
		c.warn = &keptWarnings{pkts: kept, count: uint64(n)}
	}
	return c.writeHeld()
}

// runGuards sends the guards (after a queued START TRANSACTION when wrap)
// and reads their verdict. gerr is the server's error for a guard that
// could not run (lock wait timeout, deadlock, missing lease table); err a
// failure of the connection.
func (fg *fencing) runGuards(gs []lease.Guard, ts []rewrite.Target, wrap bool) (v verdict, gerr *backendError, err error) {
	c := fg.c
	var first verdict
	for i, g := range gs {
		if err := c.queueOwn(g.SQL); err != nil {
			return v, nil, err
		}
		if err := c.backend.flush(); err != nil {
			return v, nil, err
		}
		if wrap && i == 0 {
			if _, err := c.readOwn(); err != nil {
				be, ok := err.(*backendError)
				if !ok {
					return v, nil, err
				}
				gerr = be
			}
		}
		rows, err := c.readOwn()
		if gerr != nil {
			// The guard ran outside the transaction that failed to start:
			// its lock is gone already, whatever it found.
			if _, ok := err.(*backendError); err != nil && !ok {
				return v, nil, err
			}
			return v, gerr, nil
		}
		if err != nil {
			be, ok := err.(*backendError)
			if !ok {
				return v, nil, err
			}
			return v, be, nil
		}
		if g.Kind == lease.GuardAffected {
			if g.Holds(c.ownAffected) {
				continue
			}
			// Why it matched no row: the current row, read with a lock.
			if rows, err = c.backendQuery(g.Classify); err != nil {
				be, ok := err.(*backendError)
				if !ok {
					return v, nil, err
				}
				return v, be, nil
			}
		}
		gv, valid := g.Read(toFields(rows))
		if valid && gv.NeedVars {
			vr, err := c.backendQuery(g.VarsSQL)
			if err != nil {
				be, ok := err.(*backendError)
				if !ok {
					return v, nil, err
				}
				return v, be, nil
			}
			gv, valid = g.ReadVars(toFields(vr))
		}
		if !valid {
			return v, nil, c.backend.sideErr(malformed("lease guard returned %d rows", len(rows)))
		}
		v = verdictOf(gv, ts[i])
		if g.Kind == lease.GuardAffected && !v.rejected() {
			// The row changed between the guard and its reading; the guard
			// decides, and a token can only have moved on.
			v.reason = audit.StaleToken
		}
		if v.rejected() {
			return v, nil, nil
		}
		if i == 0 {
			first = v
		}
	}
	// Reason "": the lease holds; the rest is what the first guard read,
	// for a conflict's audit record.
	return first, nil, nil
}

func toFields(rows [][]value) [][]lease.Field {
	out := make([][]lease.Field, len(rows))
	for i, r := range rows {
		out[i] = make([]lease.Field, len(r))
		for j, x := range r {
			out[i][j] = lease.Field{S: x.s, Null: x.null}
		}
	}
	return out
}

// guardError answers a write whose guard failed with the guard's error:
// nothing of the write was sent.
func (fg *fencing) guardError(rt *runtime, f *rewrite.Fence, be *backendError, ts []rewrite.Target) error {
	c := fg.c
	msg := be.msg
	switch {
	case be.code == mysql.ER_NO_SUCH_TABLE:
		msg = "fenceproxy: the lease table for " + ts[0].Schema + "." + ts[0].Table +
			" is missing (run fenceproxy init): " + msg
	case be.code == mysql.ER_BAD_FIELD_ERROR && strings.Contains(msg, lease.WriteCounter):
		msg = "fenceproxy: the lease table for " + ts[0].Schema + "." + ts[0].Table + " has no " + lease.WriteCounter +
			" column, which fenced writes on MariaDB Galera bump (run fenceproxy init to add it): " + msg
	case fg.engineConflict(be.code):
		// The guard itself (or the read after it) lost certification, or
		// TiDB found a write conflict: its transaction is rolled back,
		// this write and any earlier one in it.
		fg.fenced = nil
		if err := fg.auditConflict(rt, f, verdict{lease: ts[0].Lease, table: ts[0].Schema + "." + ts[0].Table}, be.code); err != nil {
			return err
		}
	}
	return c.sendError(be.code, be.state, msg)
}

// erConflict is ER_LOCK_DEADLOCK: on Galera also a certification failure
// or a brute-force abort by a replicated write.
const erConflict = 1213

// rejectGuarded answers a guarded write whose lease check failed, after the
// audit record is written: an OK of 0 rows (on_stale: zero_rows, what the
// server says of an INSERT ... SELECT that selected nothing), or ERR 1644.
func (fg *fencing) rejectGuarded(rt *runtime, f *rewrite.Fence, v verdict) error {
	c := fg.c
	if rt.policy.OnStale == onStaleError || f.Rows {
		// A write that answers with rows (RETURNING) would need an empty
		// result set with its column definitions, which only the server
		// can give: the error says what happened instead.
		fg.auditStale(rt, f, v, "error")
		return c.sendError(erSignal, "45000", v.message())
	}
	fg.auditStale(rt, f, v, "zero_rows")
	return c.sendNoRows()
}
