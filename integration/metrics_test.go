package integration

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// series returns the sum of the counters and gauges named name whose
// labels include want (nil: all of them; 0 when there is none).
func series(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestMetricsHaveOneMeaning: a refused statement (also a mistyped lease
// function) counts as a refusal, never as a rejected stale write; a
// rejected write carries its mode; lease calls say held and lost apart from
// ok; backend_up follows the last backend connection.
func TestMetricsHaveOneMeaning(t *testing.T) {
	for _, mode := range []string{"enforce", "shadow"} {
		t.Run(mode, func(t *testing.T) {
			e := newFencedEnv(t, envOptions{mode: mode})
			reg := e.proxy.Reg
			c := e.session(t)
			ctx := context.Background()
			if got := series(t, reg, "fenceproxy_backend_up", nil); got != 1 {
				t.Fatalf("backend_up = %v after a client connected, want 1", got)
			}

			// Refusals: a statement that cannot be fenced, and a typo.
			for _, q := range []string{"TRUNCATE TABLE invoices", "SELECT fence_acquir('job', 30)"} {
				_, err := c.ExecContext(ctx, q)
				if mode == "enforce" && err == nil {
					t.Fatalf("%s: not refused", q)
				}
			}
			if got := series(t, reg, "fenceproxy_statements_refused_total", map[string]string{"mode": mode}); got < 1 {
				t.Fatalf("statements_refused_total{mode=%s} = %v, want at least 1", mode, got)
			}
			if got := series(t, reg, "fenceproxy_statements_refused_total", map[string]string{"reason": "protected_table", "mode": mode}); got != 1 {
				t.Fatalf("statements_refused_total{reason=protected_table} = %v, want 1 (TRUNCATE)", got)
			}
			if got := series(t, reg, "fenceproxy_stale_writes_rejected_total", nil); got != 0 {
				t.Fatalf("refusals counted as rejected stale writes: %v", got)
			}

			// A stale write: counted with its mode.
			la := e.acquire(t, "admin:reconciliation", time.Minute)
			setFence(t, c, la)
			mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'new')")
			e.setToken(t, "admin:reconciliation", la.Token+1)
			mustExec(t, c, "UPDATE reconciliation_runs SET status = 'stale' WHERE id = 1")
			if got := series(t, reg, "fenceproxy_stale_writes_rejected_total", map[string]string{"mode": mode, "reason": "stale_token"}); got != 1 {
				t.Fatalf("stale_writes_rejected_total{mode=%s,reason=stale_token} = %v, want 1", mode, got)
			}

			// Lease calls: ok, then held (another session holds it), then lost.
			other := e.session(t)
			var tok sql.NullInt64
			if err := c.QueryRowContext(ctx, "SELECT fence_acquire('job', 30)").Scan(&tok); err != nil || !tok.Valid {
				t.Fatalf("fence_acquire: %v %v", tok, err)
			}
			if err := other.QueryRowContext(ctx, "SELECT fence_acquire('job', 30)").Scan(&tok); err != nil || tok.Valid {
				t.Fatalf("fence_acquire of a held lease: %v %v", tok, err)
			}
			mustExec(t, e.root, "UPDATE fenced_job_leases SET fence_token = fence_token + 1 WHERE lease_name = 'job'")
			var n int
			if err := c.QueryRowContext(ctx, "SELECT fence_renew(30)").Scan(&n); err != nil || n != 0 {
				t.Fatalf("fence_renew of a lost lease: %v %v", n, err)
			}
			for _, tc := range []struct{ fn, result string }{
				{"fence_acquire", "ok"}, {"fence_acquire", "held"}, {"fence_renew", "lost"},
			} {
				if got := series(t, reg, "fenceproxy_lease_calls_total", map[string]string{"func": tc.fn, "result": tc.result}); got != 1 {
					t.Errorf("lease_calls_total{func=%s,result=%s} = %v, want 1", tc.fn, tc.result, got)
				}
			}
			if got := series(t, reg, "fenceproxy_lease_calls_total", map[string]string{"func": "fence_renew", "result": "ok"}); got != 0 {
				t.Errorf("a lost renewal counted as ok")
			}
		})
	}
}

// TestBackendUpGoesDown: a failed backend connection sets backend_up to 0.
func TestBackendUpGoesDown(t *testing.T) {
	tp := startProxy(t, closedPort(t), "")
	tp.Metrics.BackendUp.Set(1)
	if err := connectErr(tp.DSN("u", "p", "") + "&timeout=5s"); err == nil {
		t.Fatal("connected to a closed port")
	}
	if got := series(t, tp.Reg, "fenceproxy_backend_up", nil); got != 0 {
		t.Fatalf("backend_up = %v after a failed dial, want 0", got)
	}
}
