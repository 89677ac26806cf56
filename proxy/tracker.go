package proxy

import (
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

const (
	onStaleError = policy.OnStaleError
	modeShadow   = policy.ModeShadow
)

// tracker follows the statements of one packet through their results: it
// applies session effects (USE, sql_mode, PREPARE ...) of the statements
// that succeeded, and collects the protected writes whose result needs a
// look at the lease: a fenced write that changed 0 rows may have been
// rejected, or merely matched nothing.
type tracker struct {
	fg     *fencing
	rt     *runtime
	stmts  []rewrite.Stmt
	pos    int  // statement whose result comes next
	single bool // the packet holds one statement: its final OK may be held back
	checks []pendingCheck
	held   *pendingCheck // the check whose OK is held in the exchange
}

type pendingCheck struct {
	fence *rewrite.Fence
	pos   int // the statement's position in the packet
}

func newTracker(fg *fencing, rt *runtime, stmts []rewrite.Stmt, single bool) *tracker {
	return &tracker{fg: fg, rt: rt, stmts: stmts, single: single}
}

func (t *tracker) current() *rewrite.Stmt {
	if t.pos < len(t.stmts) {
		return &t.stmts[t.pos]
	}
	return nil
}

// fenceOf returns the protected write of st, resolving SQL-level EXECUTE.
func (t *tracker) fenceOf(st *rewrite.Stmt) *rewrite.Fence { return t.fg.fenceOf(st) }

// fenceOf returns the protected write of st, resolving SQL-level EXECUTE.
func (fg *fencing) fenceOf(st *rewrite.Stmt) *rewrite.Fence {
	switch st.Kind {
	case rewrite.Write:
		return st.Fence
	case rewrite.Execute:
		if ps := fg.s.namedStmt(st.Name); ps != nil && ps.Kind == rewrite.Write {
			return ps.Fence
		}
	}
	return nil
}

func (t *tracker) enforcing() bool { return t.rt.policy.Mode != modeShadow }

func (t *tracker) okPacket(payload []byte, ok wire.OKPacket, final bool) ([]byte, bool) {
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
func (t *tracker) patchMore(payload []byte, final bool) []byte {
	if !final || !t.fg.out.moreFollows() {
		return nil
	}
	out := append([]byte(nil), payload...)
	t.fg.out.markEnd(out)
	return out
}

func (t *tracker) result(r result) {
	st := t.current()
	if st == nil {
		return
	}
	t.fg.fx.applyResult(t.rt, st, r)
	if !r.isErr {
		// In shadow mode the lease was checked before the statement went out.
		// A guarded write's lease was checked before it went out.
		if f := t.fenceOf(st); f != nil && !f.Guard && t.enforcing() && !r.isSet && r.ok.AffectedRows == 0 &&
			!(t.held != nil && t.held.fence == f) {
			t.checks = append(t.checks, pendingCheck{fence: f, pos: t.pos})
		}
	}
	// A CALL's result sets all belong to it; its OK or ERR ends it.
	if st.Kind != rewrite.Call || !r.isSet {
		t.pos++
	}
}

// finish classifies what the response left undecided, writes a held OK or
// the ERR that replaces it, and audits rejected writes.
func (t *tracker) finish() error {
	fg := t.fg
	if t.held != nil {
		v, err := fg.classify(t.rt, t.held.fence, true)
		if be, ok := err.(*wire.ServerError); ok && be.Code == erConflict {
			// The check's locking read was chosen as a deadlock's victim:
			// the transaction, this write with it, was rolled back.
			fg.out.dropHeld()
			if err := fg.auditConflict(t.rt, t.held.fence, verdict{}, be.Code); err != nil {
				return err
			}
			return fg.out.sendError(be.Code, be.State, be.Msg)
		}
		if be, ok := err.(*wire.ServerError); ok && be.Code == erLockWait {
			// The write's fence may have failed. Under on_stale: error
			// its 0 rows must not reach the client as if it had held:
			// the client gets the engine's error (the write changed
			// nothing); under zero_rows the write's own 0 rows.
			if t.rt.policy.OnStale != onStaleError {
				if err := fg.auditLockWait(t.rt, t.held.fence, "zero_rows"); err != nil {
					return err
				}
				if err := fg.out.writeHeld(); err != nil {
					return err
				}
				return t.restoreRowCount(t.held.pos)
			}
			fg.out.dropHeld()
			if err := fg.auditLockWait(t.rt, t.held.fence, "error"); err != nil {
				return err
			}
			return fg.out.sendError(be.Code, be.State, be.Msg)
		}
		if err != nil {
			return err
		}
		switch {
		case v.rejected() && t.rt.policy.OnStale == onStaleError:
			fg.auditStale(t.rt, t.held.fence, v, "error")
			fg.out.dropHeld()
			return fg.out.sendError(erSignal, "45000", v.message())
		case v.rejected():
			fg.auditStale(t.rt, t.held.fence, v, "zero_rows")
		}
		if err := fg.out.writeHeld(); err != nil {
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
func (t *tracker) restoreRowCount(pos int) error {
	if pos != len(t.stmts)-1 || t.fg.out.failed() {
		return nil
	}
	_, err := t.fg.own.exec("DO 0")
	return err
}

// shadowCheck, in shadow mode, checks the lease of every protected write of
// a packet before it goes out unchanged, and audits those a fence would
// reject. Checking before keeps the write's own results (affected rows,
// ROW_COUNT()) what the client would see without the proxy.
func (fg *fencing) shadowCheck(rt *runtime, stmts []rewrite.Stmt) error {
	for i := range stmts {
		f := fg.fenceOf(&stmts[i])
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

// runOneByOne runs a multi-statement packet holding a protected write one
// statement at a time: each guarded write needs its guard just before it,
// and under on_stale: error a rejected write ends the packet with its ERR
// exactly where the server would have stopped after an error, so later
// statements never run.
func (fg *fencing) runOneByOne(rt *runtime, sql []byte, stmts []rewrite.Stmt) error {
	for i := range stmts {
		st := stmts[i]
		fg.out.statement(i == 0, i < len(stmts)-1)
		text := sql[st.Span[0]:st.Span[1]]
		send := func() error { return fg.own.sendStatement(text) }
		t := newTracker(fg, rt, stmts[i:i+1], true)
		if f := fg.guardOf(&st); f != nil && t.enforcing() {
			if err := fg.guardedWrite(rt, f, t, send, func() error { return nil }); err != nil {
				return err
			}
		} else {
			if err := send(); err != nil {
				return err
			}
			if err := fg.out.relayResponse(t, false); err != nil {
				return err
			}
		}
		if err := t.finish(); err != nil {
			return err
		}
		if fg.out.failed() {
			return nil
		}
	}
	return nil
}
