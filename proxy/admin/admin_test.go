package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/proxy"
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

// fakeControl counts the pauses and resumes it is asked for.
type fakeControl struct{ pauses, resumes int }

func (f *fakeControl) Pause(proxy.PauseOptions) proxy.PauseState {
	f.pauses++
	return proxy.PauseState{Paused: true}
}
func (f *fakeControl) Resume() proxy.PauseState     { f.resumes++; return proxy.PauseState{} }
func (f *fakeControl) PauseState() proxy.PauseState { return proxy.PauseState{} }
func (f *fakeControl) Paused() bool                 { return false }

// fakeSessions has no connections and no leases.
type fakeSessions struct{}

func (fakeSessions) Connections() []proxy.ConnInfo                     { return nil }
func (fakeSessions) CloseConnection(uint64) bool                       { return false }
func (fakeSessions) Leases(context.Context) ([]proxy.LeaseInfo, error) { return nil, nil }

// TestUnknownParameters: every endpoint behind the token answers 400
// naming a parameter it does not take, and does nothing else: a
// misspelt filter would return everything, a misspelt hold would pause
// without holding.
func TestUnknownParameters(t *testing.T) {
	ctl := &fakeControl{}
	h := &Handler{Gatherer: prometheus.NewRegistry(), Audit: nil, Control: ctl, Sessions: fakeSessions{},
		Config: func() ConfigState { return ConfigState{} }}
	for _, u := range []string{"GET /audit?reasn=stale_token", "GET /status?x=1", "GET /config?pending=1",
		"GET /connections?user=x", "GET /leases?lease=x", "POST /pause?hld=true", "POST /pause?hold=true&timout=1m", "POST /resume?now=1"} {
		method, path, _ := strings.Cut(u, " ")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown parameter") {
			t.Errorf("%s: %d %q", u, rec.Code, rec.Body.String())
		}
	}
	if ctl.pauses != 0 || ctl.resumes != 0 {
		t.Errorf("refused requests paused %d and resumed %d times", ctl.pauses, ctl.resumes)
	}
	// The parameters they take are taken.
	for _, u := range []string{"POST /pause?hold=true&timeout=1m", "POST /resume"} {
		method, path, _ := strings.Cut(u, " ")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d %q", u, rec.Code, rec.Body.String())
		}
	}
	if ctl.pauses != 1 || ctl.resumes != 1 {
		t.Errorf("paused %d and resumed %d times, want 1 and 1", ctl.pauses, ctl.resumes)
	}
}
