// Package admin is fenceproxy's HTTP endpoint for operators: Prometheus
// metrics, liveness, readiness (backend reachable), the latest audit
// records, the client connections (list, close), the leases, the running
// configuration, the proxy's status and its pause; with a bearer token for
// what is not a probe.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// Sessions is what the proxy tells the admin endpoint about its clients
// and leases (*proxy.Proxy).
type Sessions interface {
	Connections() []proxy.ConnInfo
	CloseConnection(id uint64) bool
	Leases(ctx context.Context) ([]proxy.LeaseInfo, error)
}

// Control pauses and resumes the proxy (*proxy.Proxy).
type Control interface {
	Pause(proxy.PauseOptions) proxy.PauseState
	Resume() proxy.PauseState
	PauseState() proxy.PauseState
	Paused() bool
}

// Handler serves /metrics, /healthz, /readyz, /audit, /connections,
// /leases, /config, /status, /pause and /resume.
type Handler struct {
	Gatherer prometheus.Gatherer
	Audit    *audit.Log
	// Sessions answers /connections and /leases; nil: they answer 404.
	Sessions Sessions
	// Token, when set, is the bearer token /audit, /connections and
	// /leases require (and, with ProtectProbes, /metrics, /healthz and
	// /readyz too).
	Token         string
	ProtectProbes bool
	// Ready reports whether the backend can be reached; it is called at
	// most once a second however often /readyz is asked.
	Ready func(ctx context.Context) error
	// Draining, when it reports true, makes /readyz answer 503 at once,
	// without waiting for the next Ready check.
	Draining func() bool
	// Control answers POST /pause and /resume (and makes /readyz answer
	// 503 while paused); nil: they answer 404.
	Control Control
	// Config is the configuration in effect, for GET /config and
	// /status; nil: /config answers 404.
	Config func() ConfigState
	// Version and Instance are what GET /status names the proxy by.
	Version, Instance string
	// Started is when the proxy started, for /status.
	Started time.Time

	once sync.Once
	mux  *http.ServeMux

	mu        sync.Mutex
	checkedAt time.Time
	lastErr   error
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.once.Do(func() {
		h.mux = http.NewServeMux()
		probe := func(hf http.Handler) http.Handler {
			if h.ProtectProbes {
				return h.auth(hf)
			}
			return hf
		}
		h.mux.Handle("GET /metrics", probe(promhttp.HandlerFor(h.Gatherer, promhttp.HandlerOpts{})))
		h.mux.Handle("GET /healthz", probe(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("ok\n"))
		})))
		h.mux.Handle("GET /readyz", probe(http.HandlerFunc(h.readyz)))
		h.mux.Handle("GET /audit", h.auth(http.HandlerFunc(h.audit)))
		h.mux.Handle("GET /status", h.auth(http.HandlerFunc(h.status)))
		if h.Config != nil {
			h.mux.Handle("GET /config", h.auth(http.HandlerFunc(h.config)))
		}
		if h.Control != nil {
			h.mux.Handle("POST /pause", h.auth(http.HandlerFunc(h.pause)))
			h.mux.Handle("POST /resume", h.auth(http.HandlerFunc(h.resume)))
		}
		if h.Sessions != nil {
			h.mux.Handle("GET /connections", h.auth(http.HandlerFunc(h.connections)))
			h.mux.Handle("DELETE /connections/{id}", h.auth(http.HandlerFunc(h.closeConnection)))
			h.mux.Handle("GET /leases", h.auth(http.HandlerFunc(h.leases)))
		}
	})
	h.mux.ServeHTTP(w, r)
}

// auth requires the bearer token, when one is set. The comparison takes
// the same time whatever the token sent.
func (h *Handler) auth(next http.Handler) http.Handler {
	if h.Token == "" {
		return next
	}
	want := sha256.Sum256([]byte(h.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r.Header.Get("Authorization"))
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceproxy"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <admin token> (admin_auth)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// connections lists the client connections as JSON lines, by id.
func (h *Handler) connections(w http.ResponseWriter, r *http.Request) {
	if !knownParams(w, r.URL.Query()) {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, c := range h.Sessions.Connections() {
		enc.Encode(c)
	}
}

// closeConnection closes one client connection: 204, or 404 if there is
// none with that id.
func (h *Handler) closeConnection(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "connection id must be a number (the id of GET /connections)", http.StatusBadRequest)
		return
	}
	if !h.Sessions.CloseConnection(id) {
		http.Error(w, "no connection "+strconv.FormatUint(id, 10), http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// leases lists the leases as JSON lines; 503 when the proxy has no account
// of its own to read them with, or the database fails.
func (h *Handler) leases(w http.ResponseWriter, r *http.Request) {
	if !knownParams(w, r.URL.Query()) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	ls, err := h.Sessions.Leases(ctx)
	if err != nil {
		http.Error(w, "leases: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, l := range ls {
		enc.Encode(l)
	}
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.Draining != nil && h.Draining() {
		http.Error(w, "not ready: draining (shutting down)", http.StatusServiceUnavailable)
		return
	}
	if h.Control != nil && h.Control.Paused() {
		http.Error(w, "not ready: paused (POST /resume ends it)", http.StatusServiceUnavailable)
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

// audit returns the latest audit records kept in memory (the last 1,000)
// as JSON lines, oldest first. Filters, as `fenceproxy audit` takes them:
// since, until (a duration before now such as 12h, or a time), lease,
// table, reason; n limits how many of the newest matching records (default
// 100).
func (h *Handler) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !knownParams(w, q, "n", "since", "until", "lease", "table", "reason") {
		return
	}
	n := 100
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			http.Error(w, "n must be a positive integer", http.StatusBadRequest)
			return
		}
		n = v
	}
	now := time.Now()
	f := audit.Filter{Lease: q.Get("lease"), Table: q.Get("table"), Reason: q.Get("reason")}
	for _, b := range []struct {
		key string
		t   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := q.Get(b.key); s != "" {
			t, err := audit.ParseTime(s, now)
			if err != nil {
				http.Error(w, b.key+": "+err.Error(), http.StatusBadRequest)
				return
			}
			*b.t = t
		}
	}
	if err := f.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var out []audit.Record
	for _, rec := range h.Audit.Recent(0) {
		if f.Match(rec) {
			out = append(out, rec)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, rec := range out {
		enc.Encode(rec)
	}
}

// bearer reads the token of an "Authorization: Bearer TOKEN" header; the
// scheme's name is case-insensitive (RFC 7235), the token is not.
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// knownParams answers 400 naming the first query parameter not in known
// (a misspelt filter would otherwise be ignored and match everything).
func knownParams(w http.ResponseWriter, q url.Values, known ...string) bool {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			http.Error(w, "unknown parameter "+strconv.Quote(k)+" (known: "+strings.Join(known, ", ")+")", http.StatusBadRequest)
			return false
		}
	}
	return true
}
