package proxy

import (
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
	"github.com/fenceproxy/fenceproxy/proxy/wire"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// auditStale records a rejected (or, in shadow mode, would-be rejected)
// write and counts it.
func (fg *fencing) auditStale(rt *runtime, f *rewrite.Fence, v verdict, outcome string) {
	fg.writeAudit(audit.Record{
		Reason: v.reason, Lease: v.lease, Table: v.table,
		PresentedOwner: v.presentedOwner, PresentedToken: v.presentedToken, CurrentToken: v.currentToken,
		Digest: f.Digest, Outcome: outcome,
	}, rt)
}

// auditExpired records a guarded write that ran after its lease expired
// (the recheck after it said so, or could not run: rerr).
func (fg *fencing) auditExpired(rt *runtime, f *rewrite.Fence, v verdict, outcome string, rerr *wire.ServerError) {
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

// refuse answers a statement the rewriter refused, and audits it.
func (fg *fencing) refuse(rt *runtime, r *rewrite.Refusal, sql string) error {
	fg.auditRefusal(rt, r, sql, "refused")
	if r.UnknownKind {
		return fg.out.sendError(erParse, "42000", r.Error())
	}
	return fg.out.sendError(erNotAllowed, "42000", r.Error())
}

// auditRefusal records a statement that cannot be fenced.
func (fg *fencing) auditRefusal(rt *runtime, r *rewrite.Refusal, sql, outcome string) {
	lease := ""
	if r.Table != "" {
		if i := strings.IndexByte(r.Table, '.'); i > 0 {
			if t, ok := rt.policy.Lookup(r.Table[:i], r.Table[i+1:]); ok {
				lease = t.Lease
			}
		}
	}
	reason := "unverifiable"
	if r.Table != "" {
		reason = "protected_table"
	}
	fg.out.countRefused(reason, rt.policy.Mode, outcome == "refused")
	fg.writeAudit(audit.Record{Reason: audit.Refused, Table: r.Table, Lease: lease,
		Digest: fg.s.digest(sql), Outcome: outcome, Detail: r.Reason}, rt)
}

func (fg *fencing) writeAudit(rec audit.Record, rt *runtime) { fg.out.audit(rec, rt) }

// writeAudit writes a record of the fencing layer's, with the session's
// identity, to the audit trail, counts it and logs it.
func (c *clientConn) writeAudit(rec audit.Record, rt *runtime) {
	rec.Time = time.Now().UTC()
	rec.Mode = rt.policy.Mode
	rec.Client = c.remote()
	rec.User = c.user
	rec.Schema = c.sess.Schema
	c.auditOrigin(&rec)
	if err := c.p.audit.Write(rec); err != nil {
		c.p.metrics.auditFileErrors.Inc()
		c.log().Error("audit write failed", "err", err)
	}
	// The log gets a few lines per reason and table and then a count
	// (logLimit): a client can repeat a rejected write at will, and the
	// audit trail above has every record.
	if rec.Reason == audit.Refused {
		if c.p.logLimit.Allow(logging.Key{Event: msgRefused, Reason: rec.Reason, Table: rec.Table}) {
			c.log().Warn(msgRefused, "table", rec.Table, "lease", rec.Lease, "outcome", rec.Outcome)
		}
		return
	}
	c.p.metrics.StaleRejected.WithLabelValues(rec.Table, c.p.leaseLabels.label(rec.Lease), rec.Reason, rec.Mode).Inc()
	if c.p.logLimit.Allow(logging.Key{Event: msgRejected, Reason: rec.Reason, Table: rec.Table}) {
		c.log().Warn(msgRejected, "reason", rec.Reason, "table", rec.Table, "lease", rec.Lease, "outcome", rec.Outcome)
	}
}

// The messages of the rate-limited audit lines.
const (
	msgRefused  = "statement refused"
	msgRejected = "fenced write rejected"
)

// leaseLabels bounds the cardinality of a proxy's stale-write metric:
// per-entity leases (one per customer, say) would otherwise make a series
// each.
type leaseLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const maxLeaseLabels = 1000

// label is lease's label value: the lease itself, or "_other" once
// maxLeaseLabels others were seen.
func (l *leaseLabels) label(lease string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[lease]; ok {
		return lease
	}
	if len(l.seen) >= maxLeaseLabels {
		return "_other"
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	l.seen[lease] = struct{}{}
	return lease
}
