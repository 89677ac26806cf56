package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/prometheus/client_golang/prometheus"
)

func newMetrics(t *testing.T) *lease.Metrics {
	t.Helper()
	m, err := lease.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func awaitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestKeeperRenewsUntilStopped(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := lease.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	l := mustAcquire(t, e.store, "invoice run", ttl)
	jobCtx, k := e.store.Keep(ctxT(t), l, ttl, lease.WithInterval(20*time.Millisecond), lease.WithMetrics(m))
	await(t, 10*time.Second, "five renewals", func() bool {
		return counter(t, reg, "fenceproxy_lease_renewals_total", "result", "ok") >= 5
	})
	if got := counter(t, reg, "fenceproxy_lease_keepers"); got != 1 {
		t.Fatalf("keepers gauge %v", got)
	}
	cur := k.Lease()
	if !cur.Until.After(l.Until) || cur.Token != l.Token || cur.Owner != l.Owner {
		t.Fatalf("keeper lease %#v, acquired %#v", cur, l)
	}
	if st := mustGet(t, e.store, l.Name); !st.Held || st.Until.Before(cur.Until) {
		t.Fatalf("row %+v behind the keeper's view %v", st, cur.Until)
	}
	if jobCtx.Err() != nil {
		t.Fatalf("job canceled while the lease is held: %v", context.Cause(jobCtx))
	}
	final, err := k.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !errors.Is(context.Cause(jobCtx), lease.ErrStopped) {
		t.Fatalf("job cause after Stop: %v", context.Cause(jobCtx))
	}
	if err := e.store.Release(ctxT(t), final); err != nil {
		t.Fatalf("Release after Stop: %v", err)
	}
	if got := counter(t, reg, "fenceproxy_lease_keepers"); got != 0 {
		t.Fatalf("keepers gauge after Stop %v", got)
	}
	if got := counter(t, reg, "fenceproxy_lease_lost_total"); got != 0 {
		t.Fatalf("lost %v", got)
	}
	if _, err := k.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestKeeperCancelsJobWhenTakenOver(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := lease.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, e.store, "admin:reconciliation", long)
	jobCtx, k := e.store.Keep(ctxT(t), l, long, lease.WithInterval(20*time.Millisecond), lease.WithMetrics(m))
	await(t, 10*time.Second, "a first renewal", func() bool {
		return counter(t, reg, "fenceproxy_lease_renewals_total", "result", "ok") >= 1
	})
	// Behind the keeper's back: the row moves to another owner at the
	// next token, as a takeover after an unnoticed expiry leaves it.
	if _, err := e.root.ExecContext(ctxT(t),
		"UPDATE fenced_job_leases SET owner_token = 'thief', fence_token = fence_token + 1 WHERE lease_name = ?", l.Name); err != nil {
		t.Fatal(err)
	}
	awaitDone(t, jobCtx, "the job context to be canceled")
	if !errors.Is(context.Cause(jobCtx), lease.ErrLost) || !errors.Is(k.Err(), lease.ErrLost) {
		t.Fatalf("cause %v, Err %v; want ErrLost", context.Cause(jobCtx), k.Err())
	}
	<-k.Done()
	if _, err := k.Stop(); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Stop: %v", err)
	}
	if got := counter(t, reg, "fenceproxy_lease_renewals_total", "result", "lost"); got != 1 {
		t.Fatalf("lost renewals %v", got)
	}
	if got := counter(t, reg, "fenceproxy_lease_lost_total"); got != 1 {
		t.Fatalf("lost leases %v", got)
	}
	if st := mustGet(t, e.store, l.Name); st.Owner != "thief" {
		t.Fatalf("the keeper touched the new owner's row: %+v", st)
	}
}

func TestKeeperBoundsEachRenewal(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := lease.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, e.store, "slow database", long)
	// Another transaction holds the lease row's lock: the renewal waits
	// (as behind a long fenced transaction or a stalled server) and must
	// give up on its own timeout, not the server's lock wait timeout.
	tx, err := e.root.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// (QueryRow, not Exec: go-sql-driver v1.10.1's Exec of a prepared
	// SELECT of 2+ columns hangs on MariaDB >= 10.6, which skips the
	// repeated result metadata.)
	var token uint64
	if err := tx.QueryRowContext(ctxT(t), "SELECT fence_token FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE", l.Name).Scan(&token); err != nil {
		t.Fatal(err)
	}
	jobCtx, k := e.store.Keep(ctxT(t), l, long, lease.WithInterval(time.Minute), lease.WithRenewTimeout(200*time.Millisecond),
		lease.WithMetrics(m))
	awaitDone(t, jobCtx, "the job context to be canceled")
	if err := k.Err(); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lease.ErrLost) {
		t.Fatalf("Err %v, want a deadline", err)
	}
	if got := counter(t, reg, "fenceproxy_lease_renewals_total", "result", "error"); got != 1 {
		t.Fatalf("error renewals %v", got)
	}
}

func TestKeeperStopsWithItsParent(t *testing.T) {
	e := newEnv(t)
	l := mustAcquire(t, e.store, "parent", long)
	parent, cancel := context.WithCancel(ctxT(t))
	jobCtx, k := e.store.Keep(parent, l, long, lease.WithInterval(10*time.Millisecond), lease.WithMetrics(newMetrics(t)))
	cancel()
	awaitDone(t, jobCtx, "the job context")
	<-k.Done()
	if _, err := k.Stop(); err != nil {
		t.Fatalf("a parent's cancellation is not a renewal failure: %v", err)
	}
}

func TestKeeperRejectsBadSettings(t *testing.T) {
	e := newEnv(t)
	l := lease.Lease{Name: "x", Owner: "o", Token: 1}
	tests := []struct {
		name string
		ttl  time.Duration
		opts []lease.KeeperOption
	}{
		{"interval not shorter than ttl", time.Second, []lease.KeeperOption{lease.WithInterval(time.Second)}},
		{"negative interval", time.Second, []lease.KeeperOption{lease.WithInterval(-time.Second)}},
		{"fraction 1", time.Second, []lease.KeeperOption{lease.WithFraction(1)}},
		{"fraction 0", time.Second, []lease.KeeperOption{lease.WithFraction(0)}},
		{"zero ttl", 0, nil},
		{"negative timeout", time.Second, []lease.KeeperOption{lease.WithRenewTimeout(-1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobCtx, k := e.store.Keep(ctxT(t), l, tc.ttl, tc.opts...)
			if jobCtx.Err() == nil || !errors.Is(k.Err(), lease.ErrInvalid) || !errors.Is(context.Cause(jobCtx), lease.ErrInvalid) {
				t.Fatalf("job ctx %v, Err %v", context.Cause(jobCtx), k.Err())
			}
			if _, err := k.Stop(); !errors.Is(err, lease.ErrInvalid) {
				t.Fatal(err)
			}
		})
	}
}

func TestKeeperRejectsALostLeaseAtOnce(t *testing.T) {
	e := newEnv(t)
	l := mustAcquire(t, e.store, "gone", long)
	if err := e.store.Release(ctxT(t), l); err != nil {
		t.Fatal(err)
	}
	jobCtx, k := e.store.Keep(ctxT(t), l, long, lease.WithInterval(time.Minute))
	awaitDone(t, jobCtx, "the job context")
	if !errors.Is(k.Err(), lease.ErrLost) {
		t.Fatalf("Err %v", k.Err())
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := lease.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.NewMetrics(reg)
	if err != nil || a == nil || b == nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	if len(mfs) != 4 || n != 6 {
		t.Fatalf("%d families, %d series; want 4 and 6 (renewals ok/lost/error, lost, keepers, duration)", len(mfs), n)
	}
}
