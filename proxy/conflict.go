package proxy

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

// fencedTxn is a transaction on a TiDB or Galera backend that carries a guarded
// write whose guard passed: if the transaction then ends in a write
// conflict, that write was stopped by the engine, not by the guard, and is
// audited as a conflict.
type fencedTxn struct {
	rt    *runtime
	fence *rewrite.Fence
	v     verdict // what the guard read (reason "")
}

// watchConflicts remembers a guarded write that is about to go out.
func (fg *fencing) watchConflicts(rt *runtime, f *rewrite.Fence, v verdict) {
	if fg.s.server().Flavor == rewrite.TiDB || fg.s.server().Galera {
		fg.fenced = &fencedTxn{rt: rt, fence: f, v: v}
	}
}

// noteTxnStatus forgets the watched transaction once the server says none
// is open.
func (fg *fencing) noteTxnStatus(st uint16) {
	if fg.fenced != nil && st&mysql.SERVER_STATUS_IN_TRANS == 0 {
		fg.fenced = nil
	}
}

// engineConflict reports whether code is the backend's "the transaction
// was rolled back by a conflict" for the engines whose fenced
// transactions the proxy watches: TiDB's 9007, and 1213 on Galera.
func (fg *fencing) engineConflict(code uint16) bool {
	return code == erWriteConflict && fg.s.server().Flavor == rewrite.TiDB || code == erConflict && fg.s.server().Galera
}

// noteError looks at an ERR the server answered a statement of the client
// with (the guarded write itself, a later statement, or the client's
// COMMIT): a write conflict in a watched transaction is audited and
// counted, once per transaction (for its latest guarded write). The client
// gets the server's error as it is, after the record is written. err is a
// failure of the backend connection only.
func (fg *fencing) noteError(code uint16) error {
	if fg.fenced == nil || !fg.engineConflict(code) {
		return nil
	}
	ft := fg.fenced
	fg.fenced = nil
	return fg.auditConflict(ft.rt, ft.fence, ft.v, code)
}

// auditConflict records a fenced write that did not commit because the
// engine found a conflict on the lease row.
func (fg *fencing) auditConflict(rt *runtime, f *rewrite.Fence, v verdict, code uint16) error {
	detail := "TiDB answered error " + strconv.Itoa(int(code)) + " (write conflict) in the transaction of this fenced " +
		"write: a row it locked (the lease row, or another) was committed by another transaction after it began"
	if v.table == "" && len(f.Targets) > 0 {
		// A guard that held returns no verdict of its own: name the write's table.
		tg := f.Targets[0]
		v.table, v.lease = tg.Schema+"."+tg.Table, tg.Lease
	}
	switch {
	case code == erConflict && fg.s.server().Galera:
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
func (fg *fencing) readPresented(rt *runtime, f *rewrite.Fence, v *verdict) error {
	gs, _, err := fg.guardsFor(rt, f)
	if err != nil || len(gs) == 0 {
		return nil
	}
	rows, err := fg.own.query(gs[0].VarsSQL)
	if err != nil {
		if _, ok := err.(*wire.ServerError); ok {
			return nil
		}
		return err
	}
	pv, ok := gs[0].ReadVars(toFields(rows))
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
