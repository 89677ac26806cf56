package fencing

import (
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// erWriteConflict is TiDB's "Write conflict" (ErrWriteConflict): the
// transaction locked or wrote a key that another transaction committed
// after this one started, and was rolled back. The guard locks the lease
// row, so in an optimistic transaction (and in one the proxy wrapped
// around an autocommit write when tidb_txn_mode is optimistic) a takeover
// that committed meanwhile surfaces as 9007 at COMMIT, or at a statement:
// measured in integration/tidb_open_txn_test.go. Nothing of the
// transaction committed.
const erWriteConflict = 9007

// Txn is a transaction on a TiDB or Galera backend that carries a guarded
// write whose guard passed: if the transaction then ends in a write
// conflict, that write was stopped by the engine, not by the guard, and is
// audited as a conflict.
type Txn struct {
	rt    Runtime
	fence *rewrite.Fence
	v     verdict // what the guard read (reason "")
}

// watchConflicts remembers a guarded write that is about to go out.
func (fg *Layer) watchConflicts(rt Runtime, f *rewrite.Fence, v verdict) {
	if fg.s.Server().Flavor == rewrite.TiDB || fg.s.Server().Galera {
		fg.fenced = &Txn{rt: rt, fence: f, v: v}
	}
}

// NoteTxnStatus forgets the watched transaction once the server says none
// is open.
func (fg *Layer) NoteTxnStatus(st uint16) {
	if fg.fenced != nil && st&mysql.SERVER_STATUS_IN_TRANS == 0 {
		fg.fenced = nil
	}
}

// engineConflict reports whether code is the backend's "the transaction
// was rolled back by a conflict" for the engines whose fenced
// transactions the proxy watches: TiDB's 9007, and 1213 on Galera.
func (fg *Layer) engineConflict(code uint16) bool {
	return code == erWriteConflict && fg.s.Server().Flavor == rewrite.TiDB || code == erConflict && fg.s.Server().Galera
}

// NoteError looks at an ERR the server answered a statement of the client
// with (the guarded write itself, a later statement, or the client's
// COMMIT): a write conflict in a watched transaction is audited and
// counted, once per transaction (for its latest guarded write). The client
// gets the server's error as it is, after the record is written. err is a
// failure of the backend connection only.
func (fg *Layer) NoteError(code uint16) error {
	if fg.fenced == nil || !fg.engineConflict(code) {
		return nil
	}
	ft := fg.fenced
	fg.fenced = nil
	return fg.auditConflict(ft.rt, ft.fence, ft.v, code)
}

// auditConflict records a fenced write that did not commit because the
// engine found a conflict on the lease row.
func (fg *Layer) auditConflict(rt Runtime, f *rewrite.Fence, v verdict, code uint16) error {
	detail := "TiDB answered error " + strconv.Itoa(int(code)) + " (write conflict) in the transaction of this fenced " +
		"write: a row it locked (the lease row, or another) was committed by another transaction after it began"
	if v.table == "" && len(f.Targets) > 0 {
		// A guard that held returns no verdict of its own: name the write's table.
		tg := f.Targets[0]
		v.table, v.lease = tg.Schema+"."+tg.Table, tg.Lease
	}
	switch {
	case code == erConflict && fg.s.Server().Galera:
		detail = "Galera answered error 1213 in the transaction of this fenced write: certification ordered a " +
			"takeover or another write of the lease row first, and the transaction was rolled back"
	case code == erConflict:
		detail = "the server answered error 1213 (deadlock) to the lease check after this fenced write: " +
			"the transaction was rolled back"
	}
	if v.lease == "" || v.presentedOwner == "" && v.presentedToken == nil {
		// The guard that passed (an UPDATE on Galera) said nothing of the
		// fence context, and the lease may come from the session's
		// variable.
		if err := fg.readPresented(rt, f, &v); err != nil {
			return err
		}
	}
	fg.writeAudit(audit.Record{
		Reason: audit.Conflict, Lease: v.lease, Table: v.table,
		PresentedOwner: v.presentedOwner, PresentedToken: v.presentedToken, CurrentToken: v.currentToken,
		Digest: f.Digest, Outcome: "error",
		Detail: detail,
	}, rt)
	return nil
}

// readPresented fills in what the session presents (lease name, owner
// hash, token) from its fence variables, for the record of a conflict
// whose guard did not return them. The variables are read when the
// conflict is seen: the values of the write unless the client set them
// again in its transaction after that write. The read names no table, so
// it leaves the ERR the client is about to get in SHOW WARNINGS (measured
// on MariaDB 10.11); FOUND_ROWS() then says 1. err is a failure of the
// backend connection only.
func (fg *Layer) readPresented(rt Runtime, f *rewrite.Fence, v *verdict) error {
	gs, _, err := fg.guardsFor(rt, f)
	if err != nil || len(gs) == 0 {
		return nil
	}
	rows, err := fg.own.Query(gs[0].VarsSQL)
	if err != nil {
		if _, ok := err.(*wire.ServerError); ok {
			return nil
		}
		return err
	}
	pv, ok := gs[0].ReadVars(ToFields(rows))
	if !ok {
		return nil
	}
	if v.lease == "" {
		v.lease = pv.Lease
	}
	if v.presentedOwner == "" {
		v.presentedOwner = pv.PresentedOwner
	}
	if v.presentedToken == nil {
		v.presentedToken = pv.PresentedToken
	}
	return nil
}

// EndsWatched reports whether an ERR with code ends the watched
// transaction in an engine conflict: the relay then has it audited
// (NoteError, or after the proxy's own statements queued behind the
// write, through Responder.TakeConflict).
func (fg *Layer) EndsWatched(code uint16) bool { return fg.fenced != nil && fg.engineConflict(code) }

// TakeWatched returns and forgets the watched transaction, for the relay
// to hold until the proxy's own statements queued behind the write are
// read.
func (fg *Layer) TakeWatched() *Txn {
	ft := fg.fenced
	fg.fenced = nil
	return ft
}

// Forget forgets the watched transaction: the session ended it (a reset).
func (fg *Layer) Forget() { fg.fenced = nil }
