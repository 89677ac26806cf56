package proxy

import (
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// writeAudit writes a record of the fencing layer's (its mode set by the
// layer), with the session's identity, to the audit trail, counts it and logs it.
func (c *clientConn) writeAudit(rec audit.Record) {
	rec.Time = time.Now().UTC()
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
