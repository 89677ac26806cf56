package lease

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Keeper's Prometheus metrics. Create them once per
// registry with NewMetrics and pass them to Keep with WithMetrics. There is
// no lease-name label: per-customer leases would make it unbounded.
//
//	fenceproxy_lease_renewals_total{result="ok|lost|error"}
//	fenceproxy_lease_lost_total              keepers that gave up and canceled their job
//	fenceproxy_lease_keepers                 keepers running
//	fenceproxy_lease_renewal_duration_seconds
type Metrics struct {
	renewals *prometheus.CounterVec
	lost     prometheus.Counter
	active   prometheus.Gauge
	duration prometheus.Histogram
}

// NewMetrics creates the Keeper metrics and registers them with reg (nil:
// not registered). Registering twice on one registry returns the collectors
// registered first, so several Stores may share a registry.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lease_renewals_total",
			Help: "Lease renewals by keepers, by result (ok, lost: the lease was no longer held, error: the renewal failed or timed out).",
		}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_lease_lost_total",
			Help: "Keepers that stopped because a renewal failed, canceling their job.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_lease_keepers",
			Help: "Keepers currently renewing a lease.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenceproxy_lease_renewal_duration_seconds",
			Help:    "Time a keeper's renewal took, from sending to its result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	for _, r := range []string{"ok", "lost", "error"} {
		m.renewals.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.renewals = register(reg, m.renewals, &err)
	m.lost = register(reg, m.lost, &err)
	m.active = register(reg, m.active, &err)
	m.duration = register(reg, m.duration, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if *errp != nil {
		return c
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = err
	return c
}
