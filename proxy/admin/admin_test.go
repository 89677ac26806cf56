package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReadyzDrainingAtOnce: once Draining reports true, /readyz answers 503
// without consulting (or waiting for) the cached backend check.
func TestReadyzDrainingAtOnce(t *testing.T) {
	var draining atomic.Bool
	var checks atomic.Int32
	h := &Handler{
		Gatherer: prometheus.NewRegistry(),
		Ready:    func(context.Context) error { checks.Add(1); return nil },
		Draining: draining.Load,
	}
	get := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("before draining: %d", code)
	}
	draining.Store(true)
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("draining, within the cache second: %d, want 503", code)
	}
	if n := checks.Load(); n != 1 {
		t.Fatalf("backend checked %d times, want 1 (draining needs no check)", n)
	}
}

func TestBearer(t *testing.T) {
	for _, tt := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc", "abc", true},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"", "", false},
	} {
		if token, ok := bearer(tt.header); token != tt.token || ok != tt.ok {
			t.Errorf("bearer(%q) = %q, %v", tt.header, token, ok)
		}
	}
}

// TestUnknownParameters: /audit, /config, /status, /pause answer 400
// naming a parameter they do not take.
func TestUnknownParameters(t *testing.T) {
	h := &Handler{Gatherer: prometheus.NewRegistry(), Audit: nil}
	for _, u := range []string{"/audit?reasn=stale_token", "/status?x=1"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown parameter") {
			t.Errorf("%s: %d %q", u, rec.Code, rec.Body.String())
		}
	}
}
