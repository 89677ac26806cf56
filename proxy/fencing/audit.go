package fencing

import (
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// auditStale records a rejected (or, in shadow mode, would-be rejected)
// write and counts it.
func (fg *Layer) auditStale(rt Runtime, f *rewrite.Fence, v verdict, outcome string) {
	fg.writeAudit(audit.Record{
		Reason: v.reason, Lease: v.lease, Table: v.table,
		PresentedOwner: v.presentedOwner, PresentedToken: v.presentedToken, CurrentToken: v.currentToken,
		Digest: f.Digest, Outcome: outcome,
	}, rt)
}

// auditExpired records a guarded write that ran after its lease expired
// (the recheck after it said so, or could not run: rerr).
func (fg *Layer) auditExpired(rt Runtime, f *rewrite.Fence, v verdict, outcome string, rerr *wire.ServerError) {
	detail := "the write ran after the lease expired by database time (the recheck right after it, in its " +
		"transaction, found the lease expired), so it was undone"
	switch {
	case rerr != nil:
		detail = "the recheck of the lease's expiry right after the write failed (" + rerr.Error() + "), so the write was undone"
	case outcome == "committed":
		detail = "the write ran after the lease expired by database time, under LOCK TABLES in autocommit mode, where it " +
			"committed with its statement"
	}
	fg.writeAudit(audit.Record{
		Reason: audit.Expired, Lease: v.lease, Table: v.table,
		PresentedOwner: v.presentedOwner, PresentedToken: v.presentedToken, CurrentToken: v.currentToken,
		Digest: f.Digest, Outcome: outcome, Detail: detail,
	}, rt)
}

// Refuse answers a statement the rewriter refused, and audits it.
func (fg *Layer) Refuse(rt Runtime, r *rewrite.Refusal, sql string) error {
	fg.AuditRefusal(rt, r, sql, "refused")
	if r.UnknownKind {
		return fg.out.SendError(erParse, "42000", r.Error())
	}
	return fg.out.SendError(erNotAllowed, "42000", r.Error())
}

// AuditRefusal records a statement that cannot be fenced.
func (fg *Layer) AuditRefusal(rt Runtime, r *rewrite.Refusal, sql, outcome string) {
	lease := ""
	if r.Table != "" {
		if i := strings.IndexByte(r.Table, '.'); i > 0 {
			if t, ok := rt.Policy.Lookup(r.Table[:i], r.Table[i+1:]); ok {
				lease = t.Lease
			}
		}
	}
	reason := "unverifiable"
	if r.Table != "" {
		reason = "protected_table"
	}
	fg.out.CountRefused(reason, rt.Policy.Mode, outcome == "refused")
	fg.writeAudit(audit.Record{Reason: audit.Refused, Table: r.Table, Lease: lease,
		Digest: fg.s.Digest(sql), Outcome: outcome, Detail: r.Reason}, rt)
}

// writeAudit writes a record under the policy's mode.
func (fg *Layer) writeAudit(rec audit.Record, rt Runtime) {
	rec.Mode = rt.Policy.Mode
	fg.out.Audit(rec)
}

// AuditGuardError records a guard trigger's refusal (an ERR with
// GuardErrno and SQLSTATE 45000) before its ERR reaches the client
// unchanged. The message names the table and lease; a client can SIGNAL
// the same itself, so a table the policy does not protect is recorded as
// such and never becomes a metric label of its own. rt: the proxy's
// current runtime, for a response no Tracker follows.
func (fg *Layer) AuditGuardError(rt Runtime, hook Hook, e wire.ErrInfo) {
	if t, ok := hook.(*Tracker); ok && t.rt.Policy != nil {
		rt = t.rt
	}
	if rt.Policy == nil {
		return
	}
	ref, ok := lease.ParseGuardError(e.Msg)
	rec := audit.Record{Reason: audit.DatabaseGuard, Outcome: "error"}
	var fence *rewrite.Fence
	if t, isT := hook.(*Tracker); isT {
		if st := t.current(); st != nil {
			fence = t.fenceOf(st)
		}
	}
	how := "a statement fenceproxy forwarded unchanged (it did not see it write a protected table)"
	if fence != nil {
		rec.Digest = fence.Digest
		how = "a write fenceproxy fenced (the trigger read the lease differently: it expired, or the session's fence changed, in between)"
	}
	switch {
	case !ok:
		rec.Table = "_unknown"
		rec.Detail = "an error " + strconv.Itoa(lease.GuardErrno) + " (45000) that is not a guard trigger's message, from " + how
	default:
		rec.Table, rec.Lease = ref.Table, ref.Lease
		if i := strings.IndexByte(ref.Table, '.'); i < 0 {
			rec.Table = "_unknown"
		} else if t, prot := rt.Policy.Lookup(ref.Table[:i], ref.Table[i+1:]); !prot {
			rec.Table = "_unknown"
		} else {
			rec.Table = t.Name
		}
		rec.Detail = "the guard trigger of " + ref.Table + " refused the write (" + string(ref.Reason) + ") in " + how
	}
	fg.writeAudit(rec, rt)
	// A write that reached the guard past the proxy's own fence is a gap
	// in what the proxy reads: worth a line of its own (rate-limited: a
	// client can SIGNAL the same error at will).
	if fence == nil {
		fg.out.LogLimited(logging.Key{Event: msgGuardUnfenced, Reason: rec.Reason, Table: rec.Table},
			msgGuardUnfenced, "table", rec.Table, "lease", rec.Lease)
	}
}

const msgGuardUnfenced = "a guard trigger refused a write fenceproxy did not fence"
