package fencing

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// verdict is what the lease check found.
type verdict struct {
	reason         string // audit reason; "" = the fence holds
	lease          string
	table          string
	presentedOwner string
	presentedToken *uint64
	currentToken   *uint64
	// until: the lease's expiry the guard read (a Unix time, see
	// lease.Recheck); of several leases, the earliest. remaining: how long
	// it had left when the guard ran (remainingKnown: the guard said).
	until          string
	remaining      time.Duration
	remainingKnown bool
}

func (v verdict) rejected() bool { return v.reason != "" }

func (v verdict) message() string {
	why := map[string]string{
		audit.StaleToken:    "the lease was taken over (fence token " + tokenString(v.currentToken) + " is current, this session presented " + tokenString(v.presentedToken) + ")",
		audit.Expired:       "the lease expired",
		audit.OwnerMismatch: "this session's owner token does not hold the lease",
		audit.NoFence:       "this session has no fence context: call fence_acquire or set the fence variables",
		audit.LeaseMissing:  "the lease does not exist",
		audit.RowLeaseMismatch: "the rows belong to another lease (the table's lease is a template over its columns: " +
			"write each row under its own lease)",
	}[v.reason]
	return fmt.Sprintf("fenceproxy: stale write to %s rejected under lease '%s': %s", v.table, v.lease, why)
}

// expiredMessage is the error of a guarded write that ran after its lease
// expired, and was undone.
func (v verdict) expiredMessage() string {
	return fmt.Sprintf("fenceproxy: stale write to %s rejected under lease '%s': the lease expired while the write ran "+
		"(it waited, for a row lock or the network, past the lease's expiry), and the write was undone", v.table, v.lease)
}

func tokenString(t *uint64) string {
	if t == nil {
		return "none"
	}
	return strconv.FormatUint(*t, 10)
}

// classify reads the lease behind fence f on the client's own connection
// (its variables live there) and says whether the fence holds. locking
// reads the latest committed lease row, as the fenced write did.
func (fg *Layer) classify(rt Runtime, f *rewrite.Fence, locking bool) (verdict, error) {
	seen := map[string]bool{}
	// When the fence holds: what the first check read (its lease names
	// the fence's for a record that is not the check's, such as a
	// row-lease trap's).
	var first *verdict
	for _, tg := range f.Targets {
		sql := lease.VerdictSQL(leaseSpec(rt.Policy, f, tg), fg.guardEngine(), locking)
		if seen[sql] {
			continue
		}
		seen[sql] = true
		rows, err := fg.own.Query(sql)
		if err != nil {
			if be, ok := err.(*wire.ServerError); ok && locking && (be.Code == erConflict || be.Code == erLockWait) {
				// A deadlock rolled the transaction back, or another
				// transaction (a takeover) locked the lease row after
				// the write: that is no verdict on the lease.
				return verdict{}, err
			}
			if _, ok := err.(*wire.ServerError); ok {
				// The lease table is unreadable: the write cannot have
				// passed its fence either.
				v := verdict{table: tg.Schema + "." + tg.Table, lease: tg.Lease, reason: audit.LeaseMissing}
				fg.s.Log().Warn("lease check failed", "table", v.table, "err", err)
				return v, nil
			}
			return verdict{}, err
		}
		lv, valid := lease.ReadVerdict(ToFields(rows))
		if !valid {
			return verdict{}, fg.own.Broken(wire.Malformed("lease check returned %d rows", len(rows)))
		}
		v := verdictOf(lv, tg)
		if v.rejected() {
			return v, nil
		}
		if first == nil {
			first = &v
		}
	}
	if first != nil {
		return *first, nil
	}
	return verdict{}, nil
}

// leaseSpec is the lease check of target tg of protected write f: under
// the statement's own fence when it carries one (f.Presented), else under
// the session's fence variables.
func leaseSpec(pol *policy.Policy, f *rewrite.Fence, tg rewrite.Target) lease.GuardSpec {
	schema, table := pol.LeaseTableFor(tg.Schema)
	return lease.GuardSpec{Schema: schema, Table: table, Lease: tg.Lease, Vars: LeaseVars(pol), Presented: f.Presented, Row: tg.RowLease}
}

// LeaseVars names the session variables of the fence context (fencing's
// variables in the policy).
func LeaseVars(pol *policy.Policy) lease.Vars {
	return lease.Vars{Lease: pol.Vars.Lease, Owner: pol.Vars.Owner, Token: pol.Vars.Token}
}

// verdictOf is the proxy's verdict for target tg from what the lease
// package read.
func verdictOf(lv lease.Verdict, tg rewrite.Target) verdict {
	v := verdict{reason: string(lv.Reason), lease: tg.Lease, table: tg.Schema + "." + tg.Table,
		presentedOwner: lv.PresentedOwner, presentedToken: lv.PresentedToken, currentToken: lv.CurrentToken, until: lv.Until,
		remaining: lv.Remaining, remainingKnown: lv.RemainingKnown}
	if tg.Lease == "" {
		v.lease = lv.Lease
	}
	// A write to a table whose lease is a template, aimed at rows of
	// another lease than the session's: the guard found no lease row (it
	// looks the session's lease up as the rows' one), or, after an UPDATE
	// or DELETE of 0 rows, the session's lease holds but is not the rows'.
	if (lv.Reason == lease.LeaseMissing || lv.Reason == lease.Holds) && tg.RowLease != "" &&
		lease.RowMismatch(lease.GuardSpec{Row: tg.RowLease}, lv.Lease) {
		v.reason = audit.RowLeaseMismatch
	}
	return v
}

// erLockWait is ER_LOCK_WAIT_TIMEOUT. At the lease check it means another
// transaction (typically a takeover) locked the lease row after the write
// released its share lock (an autocommit write; measured in
// integration/lockwait_test.go): only the check was rolled back, and
// whether the write's fence held is unknown.
const erLockWait = 1205

// auditLockWait records a 0-row write whose lease check timed out waiting
// for a lock on the lease row, with the engine's answer and the fence
// context the session presents (the lease may come from its variables).
// err is a failure of the backend connection only.
func (fg *Layer) auditLockWait(rt Runtime, f *rewrite.Fence, outcome string) error {
	var v verdict
	if len(f.Targets) > 0 {
		tg := f.Targets[0]
		v.table, v.lease = tg.Schema+"."+tg.Table, tg.Lease
	}
	if err := fg.readPresented(rt, f, &v); err != nil {
		return err
	}
	fg.writeAudit(audit.Record{
		Reason: audit.Conflict, Lease: v.lease, Table: v.table,
		PresentedOwner: v.presentedOwner, PresentedToken: v.presentedToken,
		Digest: f.Digest, Outcome: outcome,
		Detail: "the server answered error 1205 (lock wait timeout) to the lease check after this fenced write " +
			"matched no rows: another transaction held the lease row; whether the fence held is unknown",
	}, rt)
	return nil
}
