package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// TestBackendUpFollowsAnIdleProxy: with no client and nobody asking
// /readyz, the active health check notices a backend killed under the
// proxy within its interval: fenceproxy_backend_up drops to 0 and
// fenceproxy_backend_dial_failures_total counts the failed checks (both
// stayed as they were for as long as nobody connected, before).
func TestBackendUpFollowsAnIdleProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		account bool
	}{{"with the proxy's account", true}, {"without it (loopback greeting)", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srv, err := dbserver.Start(ctx, dbserver.Options{})
			if err != nil {
				dbtest.Unavailable(t, err)
			}
			t.Cleanup(func() { srv.Close() })
			const interval = 500 * time.Millisecond
			yml := "timeouts: {connect: 1s}\n"
			var backend []string
			if tc.account {
				// Not dbtest.NewDatabase: its clean-up drops it from a
				// server this test kills.
				const db = "fp_health_000000"
				root := dbtest.Open(t, srv.RootDSN(""))
				mustExec(t, root, "CREATE DATABASE "+db)
				if err := lease.CreateSchema(ctx, root, db+".fenced_job_leases"); err != nil {
					t.Fatal(err)
				}
				backend = proxyAccount(t, srv, db)
			}
			backend = append(backend, "health_interval: "+interval.String())
			tp := startProxy(t, srv.Addr, yml, backend...)
			p := tp.Proxy
			// The first check runs as the proxy starts.
			if err := p.WaitHealth(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if up := series(t, tp.Reg, "fenceproxy_backend_up", nil); up != 1 {
				t.Fatalf("backend_up = %v after the first check of a live backend", up)
			}
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			for series(t, tp.Reg, "fenceproxy_backend_up", nil) != 0 {
				n := p.HealthChecks()
				wctx, wcancel := context.WithTimeout(ctx, 10*interval)
				err := p.WaitHealth(wctx, n)
				wcancel()
				if err != nil {
					t.Fatalf("backend_up still 1 %v after the backend was killed: %v", time.Since(killed), err)
				}
			}
			// One interval to the next check, plus that check's dial.
			if d := time.Since(killed); d > interval+time.Second+500*time.Millisecond {
				t.Errorf("backend_up dropped %v after the kill, want within the interval (%v) and the dial", d, interval)
			}
			if f := series(t, tp.Reg, "fenceproxy_backend_dial_failures_total", nil); f < 1 {
				t.Errorf("backend_dial_failures_total = %v after failed checks", f)
			}
			if n := p.ActiveConnections(); n != 0 {
				t.Fatalf("%d client connections: the proxy was not idle", n)
			}
		})
	}
}

// TestCatalogHealthMetrics: the catalog's health is exported from the
// first scrape (enabled, readable, the last successful refresh), follows
// an account that loses a privilege the catalog needs, and /readyz
// decides as documented: not ready until the catalog was read once, ready
// (fencing with the last good catalog) while it cannot be refreshed.
func TestCatalogHealthMetrics(t *testing.T) {
	s := dbtest.Shared(t)
	db, root := newLeaseDB(t, s)
	mustExec(t, root, "CREATE TABLE jobs (id INT PRIMARY KEY)")
	backend := proxyAccount(t, s, db)
	user := strings.TrimPrefix(backend[0], "user: ")
	tp := startProxy(t, s.Addr, "tables:\n  - name: "+db+".jobs\ncatalog: {refresh: 200ms}\n", append(backend, "health_interval: 0s")...)
	started := time.Now()
	if v := series(t, tp.Reg, "fenceproxy_catalog_enabled", nil); v != 1 {
		t.Fatalf("catalog_enabled = %v", v)
	}
	if v := series(t, tp.Reg, "fenceproxy_catalog_readable", nil); v != 1 {
		t.Fatalf("catalog_readable = %v at the first scrape", v)
	}
	last := series(t, tp.Reg, "fenceproxy_catalog_last_refresh_success_timestamp_seconds", nil)
	if last <= 0 || time.Unix(0, int64(last*1e9)).After(time.Now()) {
		t.Fatalf("catalog_last_refresh_success_timestamp_seconds = %v", last)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tp.Proxy.Ready(ctx); err != nil {
		t.Fatalf("Ready with a readable catalog: %v", err)
	}

	mustExec(t, root, "REVOKE EVENT ON *.* FROM '"+user+"'@'%'")
	for series(t, tp.Reg, "fenceproxy_catalog_readable", nil) != 0 {
		if err := tp.Proxy.WaitCatalog(ctx, tp.Proxy.CatalogChecks()); err != nil {
			t.Fatalf("catalog_readable still 1 after REVOKE EVENT: %v", err)
		}
	}
	stuck := series(t, tp.Reg, "fenceproxy_catalog_last_refresh_success_timestamp_seconds", nil)
	if err := tp.Proxy.WaitCatalog(ctx, tp.Proxy.CatalogChecks()); err != nil {
		t.Fatal(err)
	}
	if now := series(t, tp.Reg, "fenceproxy_catalog_last_refresh_success_timestamp_seconds", nil); now != stuck {
		t.Errorf("the last success moved from %v to %v while the catalog cannot be read", stuck, now)
	}
	if err := tp.Proxy.Ready(ctx); err != nil {
		t.Errorf("Ready with a catalog read once and now unreadable: %v (the documented decision: ready)", err)
	}

	// A proxy whose account could never read the catalog is not ready.
	tp2 := startProxy(t, s.Addr, "tables:\n  - name: "+db+".jobs\n", append(backend, "health_interval: 0s")...)
	if v := series(t, tp2.Reg, "fenceproxy_catalog_readable", nil); v != 0 {
		t.Errorf("catalog_readable = %v for an account without EVENT", v)
	}
	if v := series(t, tp2.Reg, "fenceproxy_catalog_last_refresh_success_timestamp_seconds", nil); v != 0 {
		t.Errorf("catalog_last_refresh_success_timestamp_seconds = %v, never read", v)
	}
	if err := tp2.Proxy.Ready(ctx); err == nil || !strings.Contains(err.Error(), "the schema catalog has not been read") {
		t.Errorf("Ready of a proxy that never read its catalog: %v", err)
	}
	mustExec(t, root, "GRANT EVENT ON *.* TO '"+user+"'@'%'")
	for series(t, tp.Reg, "fenceproxy_catalog_readable", nil) != 1 {
		if err := tp.Proxy.WaitCatalog(ctx, tp.Proxy.CatalogChecks()); err != nil {
			t.Fatalf("catalog_readable still 0 after GRANT EVENT: %v", err)
		}
	}
	if now := series(t, tp.Reg, "fenceproxy_catalog_last_refresh_success_timestamp_seconds", nil); now <= stuck || now < float64(started.Unix()) {
		t.Errorf("the last success did not move on: %v (stuck at %v)", now, stuck)
	}

	// Without a catalog: enabled 0, readable 0, and ready.
	tp3 := startProxy(t, s.Addr, "tables:\n  - name: "+db+".jobs\n")
	if e, r := series(t, tp3.Reg, "fenceproxy_catalog_enabled", nil), series(t, tp3.Reg, "fenceproxy_catalog_readable", nil); e != 0 || r != 0 {
		t.Errorf("without a catalog: enabled %v readable %v", e, r)
	}
	if err := tp3.Proxy.Ready(ctx); err != nil {
		t.Errorf("Ready without a catalog: %v", err)
	}
}
