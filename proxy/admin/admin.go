// Package admin is fenceproxy's HTTP endpoint for operators: Prometheus
// metrics, liveness, readiness (backend reachable) and the latest audit
// records.
package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Handler serves /metrics, /healthz, /readyz and /audit.
type Handler struct {
	Gatherer prometheus.Gatherer
	Audit    *audit.Log
	// Ready reports whether the backend can be reached; it is called at
	// most once a second however often /readyz is asked.
	Ready func(ctx context.Context) error
	// Draining, when it reports true, makes /readyz answer 503 at once,
	// without waiting for the next Ready check.
	Draining func() bool

	once sync.Once
	mux  *http.ServeMux

	mu        sync.Mutex
	checkedAt time.Time
	lastErr   error
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.once.Do(func() {
		h.mux = http.NewServeMux()
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(h.Gatherer, promhttp.HandlerOpts{}))
		h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("ok\n"))
		})
		h.mux.HandleFunc("GET /readyz", h.readyz)
		h.mux.HandleFunc("GET /audit", h.audit)
	})
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.Draining != nil && h.Draining() {
		http.Error(w, "not ready: draining (shutting down)", http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	if time.Since(h.checkedAt) >= time.Second {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		h.lastErr = h.Ready(ctx)
		cancel()
		h.checkedAt = time.Now()
	}
	err := h.lastErr
	h.mu.Unlock()
	if err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

// audit returns the latest audit records as JSON lines, oldest first;
// ?n= limits how many (default 100).
func (h *Handler) audit(w http.ResponseWriter, r *http.Request) {
	n := 100
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			http.Error(w, "n must be a positive integer", http.StatusBadRequest)
			return
		}
		n = v
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, rec := range h.Audit.Recent(n) {
		enc.Encode(rec)
	}
}
