package proxy

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// opsMetrics are the gauges an operator reads the proxy's state from:
// the pause, the leases its sessions hold, the audit table's queue. They
// are computed at scrape time from the proxy's state (the hot path pays
// nothing), by a collector that New points at the proxy.
type opsMetrics struct {
	state *stateCollector
}

func newOpsMetrics(reg prometheus.Registerer) opsMetrics {
	o := opsMetrics{state: &stateCollector{}}
	if reg != nil {
		reg.MustRegister(o.state)
	}
	return o
}

var (
	descPaused = prometheus.NewDesc("fenceproxy_paused",
		"1 while the proxy is paused (POST /pause): it accepts no connections and /readyz answers 503.", nil, nil)
	descHeld = prometheus.NewDesc("fenceproxy_paused_commands_held",
		"Client commands waiting for the end of a pause with hold (POST /pause?hold=true).", nil, nil)
	descLeasesHeld = prometheus.NewDesc("fenceproxy_leases_held",
		"Sessions on this proxy holding the lease by their last fence_acquire or fence_renew, not released and not expired by that call's TTL (lease: capped at 1000 values as in fenceproxy_stale_writes_rejected_total, then _other). Fixed leases of the config are 0 when no session holds them.",
		[]string{"lease"}, nil)
	descLeaseExpiry = prometheus.NewDesc("fenceproxy_lease_expiry_seconds",
		"Seconds until the lease expires, by the TTL of its holder's last fence_acquire or fence_renew through this proxy, counted from when the proxy sent it (so never later than the database's expiry); the soonest of its holders. Absent while no session holds the lease.",
		[]string{"lease"}, nil)
	descLeaseTTL = prometheus.NewDesc("fenceproxy_lease_ttl_seconds",
		"The TTL of the last fence_acquire or fence_renew of the lease's holder counted in fenceproxy_lease_expiry_seconds.",
		[]string{"lease"}, nil)
	descAuditQueue = prometheus.NewDesc("fenceproxy_audit_table_queue_length",
		"Audit records waiting to be written to the audit table (fenced_audit); past audit.queue_size they are dropped (the file has them).", nil, nil)
	descAuditQueueCap = prometheus.NewDesc("fenceproxy_audit_table_queue_capacity",
		"audit.queue_size: the records the audit table's queue holds at most.", nil, nil)
)

// stateCollector reads the proxy's state at scrape time.
type stateCollector struct {
	p atomic.Pointer[Proxy]
}

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPaused, descHeld, descLeasesHeld, descLeaseExpiry, descLeaseTTL, descAuditQueue, descAuditQueueCap} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	p := s.p.Load()
	if p == nil {
		return
	}
	st := p.PauseState()
	ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, boolFloat(st.Paused))
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(st.Held))
	if t := p.auditTable; t != nil {
		ch <- prometheus.MustNewConstMetric(descAuditQueue, prometheus.GaugeValue, float64(t.QueueLen()))
		ch <- prometheus.MustNewConstMetric(descAuditQueueCap, prometheus.GaugeValue, float64(t.QueueCap()))
	}
	for lease, h := range p.heldLeases(time.Now()) {
		ch <- prometheus.MustNewConstMetric(descLeasesHeld, prometheus.GaugeValue, float64(h.n), lease)
		if h.n > 0 {
			ch <- prometheus.MustNewConstMetric(descLeaseExpiry, prometheus.GaugeValue, h.remaining.Seconds(), lease)
			ch <- prometheus.MustNewConstMetric(descLeaseTTL, prometheus.GaugeValue, h.ttl.Seconds(), lease)
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type leaseHold struct {
	n         int
	remaining time.Duration // the soonest expiry among the holders
	ttl       time.Duration // that holder's TTL
}

// heldLeases counts the sessions holding each lease (by its label), with
// the fixed leases of the config at 0 when none does.
func (p *Proxy) heldLeases(now time.Time) map[string]leaseHold {
	out := map[string]leaseHold{}
	for _, t := range p.rt.Load().policy.Tables {
		if t.Lease != "" && !strings.Contains(t.Lease, "{") {
			out[p.leaseLabels.label(t.Lease)] = leaseHold{}
		}
	}
	p.mu.Lock()
	conns := make([]*clientConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		name, until, ttl := c.pub.lease, c.pub.leaseUntil, c.pub.leaseTTL
		c.mu.Unlock()
		if name == "" || !until.After(now) {
			continue
		}
		label := p.leaseLabels.label(name)
		h := out[label]
		if rem := until.Sub(now); h.n == 0 || rem < h.remaining {
			h.remaining, h.ttl = rem, ttl
		}
		h.n++
		out[label] = h
	}
	return out
}

// initSeries creates the labelled series whose label values the config
// tells, at 0, so that a rule sees their first increase (increase()
// needs a sample before it): stale writes for each table with a fixed
// lease and each reason, refusals by reason, in the mode the config runs.
func (m *Metrics) initSeries(p *Proxy, pol *policy.Policy) {
	for _, t := range pol.Tables {
		if t.Lease == "" || strings.Contains(t.Lease, "{") {
			continue // the session's lease, or one per row: not known before
		}
		for _, r := range staleReasons {
			m.StaleRejected.WithLabelValues(t.Schema+"."+t.Table, p.leaseLabels.label(t.Lease), r, pol.Mode)
		}
	}
	for _, r := range []string{"protected_table", "unverifiable"} {
		m.StatementsRefused.WithLabelValues(r, pol.Mode)
	}
}

// initLeaseCalls creates every function and result of the lease calls
// counter at 0.
func (m *Metrics) initLeaseCalls() {
	for _, fr := range [][2]string{{"fence_acquire", "ok"}, {"fence_acquire", "held"}, {"fence_acquire", "error"},
		{"fence_renew", "ok"}, {"fence_renew", "lost"}, {"fence_renew", "error"},
		{"fence_release", "ok"}, {"fence_release", "lost"}, {"fence_release", "error"},
		{"fence_status", "ok"}, {"fence_status", "error"}} {
		m.LeaseCalls.WithLabelValues(fr[0], fr[1])
	}
}

// staleReasons are the reasons a fenced write is rejected for.
var staleReasons = []string{audit.StaleToken, audit.Expired, audit.OwnerMismatch, audit.NoFence, audit.LeaseMissing, audit.Conflict, audit.RowLeaseMismatch}
