package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/policy"
)

// TestLeaseGaugesBoundedCardinality: the lease gauges take their lease
// label from the same bounded set as the stale-write counter: past
// maxLeaseLabels distinct leases, sessions holding further ones are
// counted under "_other" (with the soonest expiry among them), so a
// lease per customer cannot make a series each. Expired and released
// holds are not counted.
func TestLeaseGaugesBoundedCardinality(t *testing.T) {
	cfg, err := policy.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend: {address: \"127.0.0.1:1\"}\n"+
		"tables:\n  - name: app.runs\n    lease: nightly\n  - name: app.invoices\ncatalog: {refresh: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := New(cfg, cfg.Policy(1), Options{Metrics: NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const extra = 50
	hold := func(lease string, left, ttl time.Duration) {
		c := &clientConn{p: p}
		c.pub.lease, c.pub.leaseUntil, c.pub.leaseTTL = lease, now.Add(left), ttl
		p.conns[c] = struct{}{}
	}
	// "nightly" (the config's) takes one label; maxLeaseLabels-1 more fit.
	for i := range maxLeaseLabels - 1 + extra {
		hold(fmt.Sprintf("invoice:customer-%d", i), time.Duration(100+i)*time.Second, 300*time.Second)
	}
	hold("invoice:customer-0", 10*time.Second, 60*time.Second) // a second holder, sooner
	p.leaseLabels.label("invoice:customer-0")                  // seen first: labelled whatever the order
	hold("invoice:expired", -time.Second, 30*time.Second)      // expired: not held
	hold("", 0, 0)                                             // no lease

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if values[mf.GetName()] == nil {
				values[mf.GetName()] = map[string]float64{}
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "lease" {
					values[mf.GetName()][l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	held, expiry, ttl := values["fenceproxy_leases_held"], values["fenceproxy_lease_expiry_seconds"], values["fenceproxy_lease_ttl_seconds"]
	if len(held) != maxLeaseLabels+1 {
		t.Errorf("fenceproxy_leases_held: %d series, want %d (the bound and _other)", len(held), maxLeaseLabels+1)
	}
	if held["nightly"] != 0 {
		t.Errorf("nightly: %v held, want 0 (a lease of the config, held by no session)", held["nightly"])
	}
	if _, ok := expiry["nightly"]; ok {
		t.Error("an expiry for a lease no session holds")
	}
	if held["invoice:customer-0"] != 2 || expiry["invoice:customer-0"] > 10 || ttl["invoice:customer-0"] != 60 {
		t.Errorf("customer-0: held %v, expiry %v, ttl %v; want 2, <= 10 s (the sooner holder), 60",
			held["invoice:customer-0"], expiry["invoice:customer-0"], ttl["invoice:customer-0"])
	}
	if held["_other"] != extra {
		t.Errorf("_other: %v held, want %d", held["_other"], extra)
	}
	// Which leases got a label is first come (here the map's order): the
	// _other expiry is the soonest of the leases that did not.
	soonest := -1
	for i := range maxLeaseLabels - 1 + extra {
		if _, ok := held[fmt.Sprintf("invoice:customer-%d", i)]; !ok && soonest < 0 {
			soonest = 100 + i
		}
	}
	if e := expiry["_other"]; e < float64(soonest)-1 || e > float64(soonest) {
		t.Errorf("_other expiry %v, want the soonest of its holders (%d s)", e, soonest)
	}
	if _, ok := held["invoice:expired"]; ok {
		t.Error("an expired hold is counted")
	}
	if len(expiry) > maxLeaseLabels+1 || len(ttl) > maxLeaseLabels+1 {
		t.Errorf("expiry %d series, ttl %d series: unbounded", len(expiry), len(ttl))
	}
}
