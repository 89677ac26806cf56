package fencing

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// Tracker follows the statements of one packet through their results: it
// applies session effects (USE, sql_mode, PREPARE ...) of the statements
// that succeeded, and collects the protected writes whose result needs a
// look at the lease: a fenced write that changed 0 rows may have been
// rejected, or merely matched nothing.
type Tracker struct {
	fg     *Layer
	rt     Runtime
	stmts  []rewrite.Stmt
	pos    int  // statement whose result comes next
	single bool // the packet holds one statement: its final OK may be held back
	checks []pendingCheck
	held   *pendingCheck // the check whose OK is held in the exchange
	// text: the packet's text as sent (Decision.SQL), whose statements'
	// Spans it holds; set for writes that may carry a row-lease trap, to
	// send one again without it (SetText).
	text []byte
	// trapped: the write whose row-lease trap fired (its ERR was taken
	// from the client); retried: this Tracker follows the write sent
	// again without its trap, which must not be sent a third time.
	trapped *pendingCheck
	retried bool
	// resend sends the write again without its trap where the text
	// cannot say how: a prepared statement's execution (SetResend).
	resend func() error
	// retrap sends the write again with its trap (SetRetrap), after the
	// trap's confirming read found no row it fires on (confirmTrap);
	// confirmed: this Tracker follows that second send, whose trap is
	// not confirmed again.
	retrap    func() error
	confirmed bool
	// confirm runs the trap's confirming read where the text cannot
	// (SetConfirm): found is whether it read a row.
	confirm func() (found bool, err error)
}

// SetConfirm gives t how to run its trap's confirming read where the
// text cannot: prepared, with the execution's values bound.
func (t *Tracker) SetConfirm(run func() (bool, error)) *Tracker {
	t.confirm = run
	return t
}

// SetRetrap gives t how to send its trapped write again where the text
// cannot say how: the execution of the trapped variant.
func (t *Tracker) SetRetrap(send func() error) *Tracker {
	t.retrap = send
	return t
}

// SetResend gives t how to send its write again without the trap: the
// execution of the client's prepared statement in place of the trapped
// variant's.
func (t *Tracker) SetResend(send func() error) *Tracker {
	t.resend = send
	return t
}

// SetText gives t the packet's text as sent, which holds its statements'
// Spans: a write whose row-lease trap fires is sent again from it.
func (t *Tracker) SetText(text []byte) *Tracker {
	t.text = text
	return t
}

type pendingCheck struct {
	fence *rewrite.Fence
	pos   int // the statement's position in the packet
}

// NewTracker follows stmts, one packet's statements, through their results
// under rt (single: the packet holds one statement). The relay takes it as
// its Hook; Finish ends it.
func NewTracker(fg *Layer, rt Runtime, stmts []rewrite.Stmt, single bool) *Tracker {
	return &Tracker{fg: fg, rt: rt, stmts: stmts, single: single}
}

func (t *Tracker) current() *rewrite.Stmt {
	if t.pos < len(t.stmts) {
		return &t.stmts[t.pos]
	}
	return nil
}

// fenceOf returns the protected write of st, resolving SQL-level EXECUTE.
func (t *Tracker) fenceOf(st *rewrite.Stmt) *rewrite.Fence { return t.fg.FenceOf(st) }

// FenceOf returns the protected write of st, resolving SQL-level EXECUTE.
func (fg *Layer) FenceOf(st *rewrite.Stmt) *rewrite.Fence {
	switch st.Kind {
	case rewrite.Write:
		return st.Fence
	case rewrite.Execute:
		if ps := fg.s.NamedStmt(st.Name); ps != nil && ps.Kind == rewrite.Write {
			return ps.Fence
		}
	}
	return nil
}

func (t *Tracker) enforcing() bool { return t.rt.Policy.Mode != policy.ModeShadow }

// OKPacket holds back a lone fenced write's 0-row final OK for its lease
// check, and marks a final OK "more results follow" when the proxy runs
// the packet one statement at a time (Hook).
func (t *Tracker) OKPacket(payload []byte, ok wire.OKPacket, final bool) ([]byte, bool) {
	st := t.current()
	if st == nil {
		return t.patchMore(payload, final), false
	}
	// A lone fenced write's 0-row OK waits for the lease check: it becomes
	// ERR 1644 under on_stale: error, and the check's own failure (a
	// deadlock that rolled the transaction back) must reach the client in
	// its place.
	if f := t.fenceOf(st); f != nil && !f.Guard && t.enforcing() && ok.AffectedRows == 0 && final && t.single {
		t.held = &pendingCheck{fence: f, pos: t.pos}
		return nil, true
	}
	return t.patchMore(payload, final), false
}

// patchMore is the final OK with "more results" set when the proxy runs a
// multi-statement packet one statement at a time, nil when it goes as it is.
func (t *Tracker) patchMore(payload []byte, final bool) []byte {
	if !final || !t.fg.out.MoreFollows() {
		return nil
	}
	out := append([]byte(nil), payload...)
	t.fg.out.MarkEnd(out)
	return out
}

// TrapErr takes the ERR of a write whose row-lease trap fired: a row its
// WHERE matched belongs to another lease, and the server rolled the
// statement back. Finish answers for it (Hook).
func (t *Tracker) TrapErr(e wire.ErrInfo) bool {
	st := t.current()
	if st == nil || t.trapped != nil || !t.enforcing() {
		return false
	}
	f := t.fenceOf(st)
	if f == nil || f.Trap == nil || !rewrite.IsTrapError(e.Code, e.Msg) {
		return false
	}
	t.trapped = &pendingCheck{fence: f, pos: t.pos}
	return true
}

// Trapped reports whether the write's row-lease trap fired (TrapErr): the
// server's response is not the client's, and Finish answers.
func (t *Tracker) Trapped() bool { return t.trapped != nil }

// Result applies a statement's result to the session and notes a 0-row
// fenced write whose lease must be checked (Hook).
func (t *Tracker) Result(r Result) {
	st := t.current()
	if st == nil {
		return
	}
	t.fg.fx.ApplyResult(t.rt, st, r)
	if !r.IsErr {
		// In shadow mode the lease was checked before the statement went out.
		// A guarded write's lease was checked before it went out.
		if f := t.fenceOf(st); f != nil && !f.Guard && t.enforcing() && !r.IsSet && r.OK.AffectedRows == 0 &&
			!(t.held != nil && t.held.fence == f) {
			t.checks = append(t.checks, pendingCheck{fence: f, pos: t.pos})
		}
	}
	// A CALL's result sets all belong to it; its OK or ERR ends it.
	if st.Kind != rewrite.Call || !r.IsSet {
		t.pos++
	}
}

// Finish classifies what the response left undecided, writes a held OK or
// the ERR that replaces it, and audits rejected writes.
func (t *Tracker) Finish() error {
	fg := t.fg
	if t.trapped != nil {
		return t.finishTrapped()
	}
	if t.held != nil {
		v, err := fg.classify(t.rt, t.held.fence, true)
		if be, ok := err.(*wire.ServerError); ok && be.Code == erConflict {
			// The check's locking read was chosen as a deadlock's victim:
			// the transaction, this write with it, was rolled back.
			fg.out.DropHeld()
			if err := fg.auditConflict(t.rt, t.held.fence, verdict{}, be.Code); err != nil {
				return err
			}
			return fg.out.SendError(be.Code, be.State, be.Msg)
		}
		if be, ok := err.(*wire.ServerError); ok && be.Code == erLockWait {
			// The write's fence may have failed. Under on_stale: error
			// its 0 rows must not reach the client as if it had held:
			// the client gets the engine's error (the write changed
			// nothing); under zero_rows the write's own 0 rows.
			if t.rt.Policy.OnStale != policy.OnStaleError {
				if err := fg.auditLockWait(t.rt, t.held.fence, "zero_rows"); err != nil {
					return err
				}
				if err := fg.out.WriteHeld(); err != nil {
					return err
				}
				return t.restoreRowCount(t.held.pos)
			}
			fg.out.DropHeld()
			if err := fg.auditLockWait(t.rt, t.held.fence, "error"); err != nil {
				return err
			}
			return fg.out.SendError(be.Code, be.State, be.Msg)
		}
		if err != nil {
			return err
		}
		switch {
		case v.rejected() && t.rt.Policy.OnStale == policy.OnStaleError:
			fg.auditStale(t.rt, t.held.fence, v, "error")
			fg.out.DropHeld()
			return fg.out.SendError(erSignal, "45000", v.message())
		case v.rejected():
			fg.auditStale(t.rt, t.held.fence, v, "zero_rows")
		}
		if err := fg.out.WriteHeld(); err != nil {
			return err
		}
		return t.restoreRowCount(t.held.pos)
	}
	if len(t.checks) == 0 {
		return nil
	}
	// The client gets its answer after the audit record is written, so that
	// whoever sees the 0 rows can also find out why.
	for _, pc := range t.checks {
		v, err := fg.classify(t.rt, pc.fence, true)
		if be, ok := err.(*wire.ServerError); ok && be.Code == erLockWait {
			// The client gets the write's own 0 rows, as for a rejection.
			if err := fg.auditLockWait(t.rt, pc.fence, "zero_rows"); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if v.rejected() {
			fg.auditStale(t.rt, pc.fence, v, "zero_rows")
		}
	}
	return t.restoreRowCount(t.checks[len(t.checks)-1].pos)
}

// restoreRowCount undoes what the lease check did to ROW_COUNT(): after the
// 0-row write the client sent last, ROW_COUNT() must say 0, not the check
// SELECT's -1. DO sets it to 0 and changes nothing else the client can see
// (LAST_INSERT_ID stays; the write was rejected or changed nothing, so
// there were no warnings to keep). Only a packet's last statement leaves
// its ROW_COUNT() to the next one.
func (t *Tracker) restoreRowCount(pos int) error {
	if pos != len(t.stmts)-1 || t.fg.out.Failed() {
		return nil
	}
	_, err := t.fg.own.Exec("DO 0")
	return err
}

// shadowCheck, in shadow mode, checks the lease of every protected write of
// a packet before it goes out unchanged, and audits those a fence would
// reject. Checking before keeps the write's own results (affected rows,
// ROW_COUNT()) what the client would see without the proxy.
func (fg *Layer) ShadowCheck(rt Runtime, stmts []rewrite.Stmt) error {
	for i := range stmts {
		f := fg.FenceOf(&stmts[i])
		if f == nil {
			continue
		}
		v, err := fg.classify(rt, f, false)
		if err != nil {
			return err
		}
		if v.rejected() {
			fg.auditStale(rt, f, v, "shadow")
		}
	}
	return nil
}

// RunOneByOne runs a multi-statement packet holding a protected write one
// statement at a time: each guarded write needs its guard just before it,
// and under on_stale: error a rejected write ends the packet with its ERR
// exactly where the server would have stopped after an error, so later
// statements never run.
func (fg *Layer) RunOneByOne(rt Runtime, sql []byte, stmts []rewrite.Stmt) error {
	for i := range stmts {
		st := stmts[i]
		fg.out.Statement(i == 0, i < len(stmts)-1)
		text := sql[st.Span[0]:st.Span[1]]
		send := func() error { return fg.own.SendStatement(text) }
		t := NewTracker(fg, rt, stmts[i:i+1], true).SetText(sql)
		if f := fg.GuardOf(&st); f != nil && t.enforcing() {
			if err := fg.guardedWrite(rt, f, t, send, func() error { return nil }); err != nil {
				return err
			}
		} else {
			if err := send(); err != nil {
				return err
			}
			if err := fg.out.RelayResponse(t, false); err != nil {
				return err
			}
		}
		if err := t.Finish(); err != nil {
			return err
		}
		if fg.out.Failed() {
			return nil
		}
	}
	return nil
}

// Shadow audits what shadow mode does instead of d: sd, the rewriter's
// shadow decision on the same text (rewrite.Engine.Shadow), which the
// proxy then acts on. The statement goes unfenced, as the client sent it
// but for the fence keys in its comments; a statement that would be
// refused is audited now, a protected write after its result (the
// Tracker checks its lease). When sd refuses too (a fence key in a text
// the rewriter cannot read with certainty), the proxy's refusal is the
// record.
func (fg *Layer) Shadow(rt Runtime, d, sd rewrite.Decision, sql []byte) rewrite.Decision {
	if d.Action == rewrite.Refuse && sd.Action != rewrite.Refuse {
		fg.AuditRefusal(rt, d.Refusal, rewrite.DigestInput(sql), "shadow")
	}
	return sd
}

// confirmTrap runs the trap's confirming read (Trap.Confirm) after the
// trap fired under a valid fence. The server may read a row for the WHERE
// before it waits for another transaction's lock on it: MariaDB's UPDATE
// under READ COMMITTED reads the last committed version (semi-consistent
// read), TiDB reads before it locks, at any isolation level. When that
// transaction changes the row so that the WHERE no longer matches it, the
// trap fired on a row the write would not have changed (measured:
// TestRowLeaseTrapConcurrentChange). The confirming read locks, so it
// waits for that transaction and reads the row as it left it. No row: the
// write goes again with its trap, once (again is true, and its answer
// went to the client); a row, or a read that failed: the trap stands. A
// deadlock that chose the read rolled the transaction back: the client
// hears so, audited as for the lease check's.
func (t *Tracker) confirmTrap(f *rewrite.Fence, pc *pendingCheck) (again bool, err error) {
	fg := t.fg
	if t.confirmed || f.Trap.Confirm == "" || pc.pos >= len(t.stmts) {
		return false, nil
	}
	var t2 *Tracker
	var send func() error
	if t.retrap != nil {
		send = t.retrap
		t2 = NewTracker(fg, t.rt, []rewrite.Stmt{t.stmts[pc.pos]}, true).SetRetrap(t.retrap).SetResend(t.resend)
	} else if text, st, ok := t.stmtText(pc.pos); ok {
		t2, send = t.textAgain(st, text)
	} else {
		return false, nil
	}
	run := t.confirm
	if run == nil {
		if f.Trap.Params > 0 {
			return false, nil
		}
		run = func() (bool, error) {
			rows, err := fg.own.Query(f.Trap.Confirm)
			return len(rows) > 0, err
		}
	}
	found, err := t.confirmRead(run)
	if be, ok := err.(*wire.ServerError); ok && be.Code == erConflict {
		if err := fg.auditConflict(t.rt, f, verdict{}, be.Code); err != nil {
			return true, err
		}
		return true, fg.out.SendError(be.Code, be.State, be.Msg)
	}
	if err != nil {
		if _, ok := err.(*wire.ServerError); ok {
			fg.own.StatusUnknown()
			return false, nil
		}
		return true, err
	}
	if found {
		return false, nil
	}
	t2.confirmed = true
	return true, t.sendAgain(f, t2, send)
}

// stmtText is the text of statement pos of the packet as sent, and the
// statement with its Span in that text alone; ok is false when the
// Tracker holds no text for it.
func (t *Tracker) stmtText(pos int) ([]byte, rewrite.Stmt, bool) {
	st := t.stmts[pos]
	sp := st.Span
	if t.text == nil || sp[0] < 0 || sp[1] > len(t.text) || sp[0] > sp[1] {
		return nil, st, false
	}
	text := t.text[sp[0]:sp[1]]
	st.Span = [2]int{0, len(text)}
	return text, st, true
}

// textAgain is how to send st's text again, alone, and the Tracker of
// its response.
func (t *Tracker) textAgain(st rewrite.Stmt, text []byte) (*Tracker, func() error) {
	return NewTracker(t.fg, t.rt, []rewrite.Stmt{st}, true).SetText(text), func() error { return t.fg.own.SendStatement(text) }
}

// sendAgain sends a trapped write again (send) and relays its response,
// which t2 follows, to the client: behind a guard of its own where the
// write is guarded (the guard's transaction ended with the trapped write:
// the proxy's own rolled back; in the client's, the guard's lock stays).
func (t *Tracker) sendAgain(f *rewrite.Fence, t2 *Tracker, send func() error) error {
	if f.Guard {
		if err := t.fg.guardedWrite(t.rt, f, t2, send, func() error { return nil }); err != nil {
			return err
		}
		return t2.Finish()
	}
	if err := send(); err != nil {
		return err
	}
	if err := t.fg.out.RelayResponse(t2, false); err != nil {
		return err
	}
	return t2.Finish()
}

// confirmRead runs the trap's confirming read. On TiDB outside a
// transaction it runs in a pessimistic one of the proxy's, rolled back
// after it: an autocommit SELECT ... FOR UPDATE there did not wait for
// the other transaction's lock (measured: the trap stood).
func (t *Tracker) confirmRead(run func() (bool, error)) (bool, error) {
	fg := t.fg
	if fg.s.Server().Flavor != rewrite.TiDB {
		return run()
	}
	if err := fg.own.LearnStatus(); err != nil {
		return false, err
	}
	if fg.s.ServerStatus()&mysql.SERVER_STATUS_AUTOCOMMIT == 0 || fg.s.InTransaction() {
		return run()
	}
	if _, err := fg.own.Exec("BEGIN PESSIMISTIC"); err != nil {
		return false, err
	}
	found, err := run()
	if _, rerr := fg.own.Exec("ROLLBACK"); rerr != nil {
		if _, ok := rerr.(*wire.ServerError); !ok || err == nil {
			return false, rerr
		}
	}
	return found, err
}

// finishTrapped answers a write whose row-lease trap fired: a row its
// WHERE matched belongs to another lease than its fence's, and the
// server rolled the statement back, so nothing of it took effect. It is a
// rejection (row_lease_mismatch, audited and counted as any), and
// on_stale applies: ERR 1644, or, under zero_rows, the write again with
// the plain per-row condition (Trap.Untrapped), which changes the rows of
// the fence's lease and leaves the others, as without the trap; its
// response is the client's. The record names the table and the fence's
// lease, which the check reads, and no owner: the rows' leases are not
// read.
func (t *Tracker) finishTrapped() error {
	fg := t.fg
	pc := t.trapped
	f := pc.fence
	// A locking read, as the other checks after a write: in the client's
	// transaction a plain one would start its snapshot (REPEATABLE READ)
	// at the proxy's read; the fence or guard locked the row already.
	v, err := fg.classify(t.rt, f, true)
	if be, ok := err.(*wire.ServerError); ok && be.Code == erConflict {
		// The check was a deadlock's victim: the transaction was rolled
		// back, and the client must hear so.
		if err := fg.auditConflict(t.rt, f, verdict{}, be.Code); err != nil {
			return err
		}
		return fg.out.SendError(be.Code, be.State, be.Msg)
	}
	if err != nil {
		if _, ok := err.(*wire.ServerError); !ok {
			return err
		}
		// The check timed out waiting for the lease row: the write was
		// rolled back all the same; the record names no lease.
		v = verdict{}
	}
	if len(f.Targets) > 0 && v.table == "" {
		v.table = f.Targets[0].Schema + "." + f.Targets[0].Table
	}
	if !v.rejected() {
		if again, err := t.confirmTrap(f, pc); again || err != nil {
			return err
		}
		v.reason = audit.RowLeaseMismatch
	}
	v.presentedOwner = ""
	var send func() error
	var t2 *Tracker
	if t.rt.Policy.OnStale != policy.OnStaleError && !f.Rows && !t.retried && v.reason == audit.RowLeaseMismatch &&
		pc.pos < len(t.stmts) {
		if t.resend != nil {
			send = t.resend
			t2 = NewTracker(fg, t.rt, []rewrite.Stmt{t.stmts[pc.pos]}, true)
		} else if text, st, ok := t.stmtText(pc.pos); ok {
			if again := f.Trap.Untrapped(text); again != nil {
				st.Span = [2]int{0, len(again)}
				t2, send = t.textAgain(st, again)
			}
		}
	}
	if send == nil {
		fg.auditStale(t.rt, f, v, "error")
		return fg.out.SendError(erSignal, "45000", v.message()+"; the statement was rolled back")
	}
	fg.auditStale(t.rt, f, v, "zero_rows")
	t2.retried = true
	return t.sendAgain(f, t2, send)
}
