package integration

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/policy"
)

// seriesPresent tells whether reg has a series of name with these labels.
func seriesPresent(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return true
		}
	}
	return false
}

// TestStateGauges: labelled series whose values the config tells exist
// at 0 from the start; the leases held through the proxy and their
// seconds to expiry follow fence_acquire, fence_renew and fence_release;
// the audit table's queue depth shows records waiting behind a lock.
func TestStateGauges(t *testing.T) {
	s := dbtest.Shared(t)
	o := newOpsDB(t, s)
	cfg, err := policy.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+s.Addr+"\n"+o.backendExtra+
		o.tablesYAML()+"audit:\n  queue_size: 500\n"))
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxyConfig(t, cfg)
	reg := tp.Reg
	runs := o.db + ".runs"
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"fenceproxy_leases_held", map[string]string{"lease": "nightly"}},
		{"fenceproxy_stale_writes_rejected_total", map[string]string{"table": runs, "lease": "nightly", "reason": "stale_token", "mode": "enforce"}},
		{"fenceproxy_stale_writes_rejected_total", map[string]string{"table": runs, "lease": "nightly", "reason": "conflict", "mode": "enforce"}},
		{"fenceproxy_statements_refused_total", map[string]string{"reason": "protected_table", "mode": "enforce"}},
		{"fenceproxy_statements_refused_total", map[string]string{"reason": "unverifiable", "mode": "enforce"}},
		{"fenceproxy_lease_calls_total", map[string]string{"func": "fence_acquire", "result": "held"}},
		{"fenceproxy_lease_calls_total", map[string]string{"func": "fence_renew", "result": "lost"}},
		{"fenceproxy_login_failures_total", map[string]string{"reason": "database"}},
		{"fenceproxy_connections_rejected_total", map[string]string{"reason": "proxy_protocol"}},
		{"fenceproxy_audit_write_errors_total", map[string]string{"destination": "table"}},
		{"fenceproxy_audit_write_errors_total", map[string]string{"destination": "file"}},
		{"fenceproxy_paused", nil},
		{"fenceproxy_audit_table_queue_length", nil},
	} {
		if !seriesPresent(t, reg, c.name, c.labels) {
			t.Errorf("%s%v: no series at start", c.name, c.labels)
		}
	}
	if got := series(t, reg, "fenceproxy_audit_table_queue_capacity", nil); got != 500 {
		t.Errorf("audit queue capacity %v, want 500", got)
	}

	// Leases held through the proxy.
	db := appDB(t, tp, o.db)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var tok int64
	if err := c.QueryRowContext(context.Background(), "SELECT fence_acquire('invoice:g', 30)").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	g := map[string]string{"lease": "invoice:g"}
	if n := series(t, reg, "fenceproxy_leases_held", g); n != 1 {
		t.Errorf("leases_held %v after fence_acquire", n)
	}
	if e := series(t, reg, "fenceproxy_lease_expiry_seconds", g); e <= 20 || e > 30 {
		t.Errorf("lease_expiry_seconds %v after fence_acquire(30)", e)
	}
	if ttl := series(t, reg, "fenceproxy_lease_ttl_seconds", g); ttl != 30 {
		t.Errorf("lease_ttl_seconds %v", ttl)
	}
	var ok int
	if err := c.QueryRowContext(context.Background(), "SELECT fence_renew(90)").Scan(&ok); err != nil || ok != 1 {
		t.Fatalf("fence_renew: %v %v", ok, err)
	}
	if e := series(t, reg, "fenceproxy_lease_expiry_seconds", g); e <= 80 || e > 90 {
		t.Errorf("lease_expiry_seconds %v after fence_renew(90)", e)
	}
	if ttl := series(t, reg, "fenceproxy_lease_ttl_seconds", g); ttl != 90 {
		t.Errorf("lease_ttl_seconds %v after renew", ttl)
	}
	if err := c.QueryRowContext(context.Background(), "SELECT fence_release()").Scan(&ok); err != nil || ok != 1 {
		t.Fatalf("fence_release: %v %v", ok, err)
	}
	if seriesPresent(t, reg, "fenceproxy_leases_held", g) || seriesPresent(t, reg, "fenceproxy_lease_expiry_seconds", g) {
		t.Error("a released lease is still counted as held")
	}
	if n := series(t, reg, "fenceproxy_leases_held", map[string]string{"lease": "nightly"}); n != 0 {
		t.Errorf("nightly held %v", n)
	}

	// The audit table's queue: records behind a locked table wait there.
	lock, err := o.root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	mustExec(t, lock, "LOCK TABLES fenced_audit WRITE")
	unlocked := false
	defer func() {
		if !unlocked {
			mustExec(t, lock, "UNLOCK TABLES")
		}
	}()
	stale := o.staleConn(t, tp.Addr, "invoice:queue")
	mustExec(t, stale, "INSERT INTO invoices (customer, period, amount) VALUES ('q0', '2026-11', 1)")
	// The writer's INSERT of that first record waits for the lock...
	eventually(t, 10*time.Second, "the audit writer to wait for the lock", func() bool {
		var n int
		o.root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE 'INSERT INTO%fenced_audit%'", o.user).Scan(&n)
		return n == 1
	})
	// ...so the next ones queue.
	for i := 1; i <= 5; i++ {
		mustExec(t, stale, "INSERT INTO invoices (customer, period, amount) VALUES ('q', '2026-11', 1)")
	}
	if q := series(t, reg, "fenceproxy_audit_table_queue_length", nil); q != 5 {
		t.Errorf("audit queue length %v with 5 records behind the lock", q)
	}
	mustExec(t, lock, "UNLOCK TABLES")
	unlocked = true
	eventually(t, 10*time.Second, "the queue to drain", func() bool {
		return series(t, reg, "fenceproxy_audit_table_queue_length", nil) == 0 && o.auditRows(t) == 6
	})
}
