package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("/etc/fp/f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func settingsByKey(s []Setting) map[string]Setting {
	m := map[string]Setting{}
	for _, x := range s {
		m[x.Key] = x
	}
	return m
}

// TestRunning: restart-only keys keep the values the proxy started with,
// the rest follow the last reload; the file's differences are pending for
// a reload or a restart.
func TestRunning(t *testing.T) {
	started := mustParse(t, "listen: 127.0.0.1:6033\nmax_connections: 10\nbackend: {address: db:3306, user: fp, password_env: FP_PW}\n"+
		"tables:\n  - name: app.runs\n    lease: nightly\ntimeouts: {idle: 1h}\n")
	// A reload changed listen (not applied) and max_connections (applied).
	current := mustParse(t, "listen: 127.0.0.1:7000\nmax_connections: 20\nbackend: {address: db:3306, user: fp, password_env: FP_PW}\n"+
		"tables:\n  - name: app.runs\n    lease: nightly\ntimeouts: {idle: 1h}\n")
	// The file since: another backend, another table, a shorter idle.
	disk := mustParse(t, "listen: 127.0.0.1:7000\nmax_connections: 20\nbackend: {address: db2:3306, user: fp, password_env: FP_PW}\n"+
		"tables:\n  - name: app.runs\n    lease: nightly\n  - name: app.invoices\ntimeouts: {idle: 30m}\n")
	got := settingsByKey(Running(started, current, disk))
	for key, want := range map[string]Setting{
		"listen":               {Key: "listen", Value: "127.0.0.1:6033", File: "127.0.0.1:7000", Pending: "restart"},
		"max_connections":      {Key: "max_connections", Value: 20},
		"backend.address":      {Key: "backend.address", Value: "db:3306", File: "db2:3306", Pending: "restart"},
		"timeouts.idle":        {Key: "timeouts.idle", Value: "1h0m0s", File: "30m0s", Pending: "reload"},
		"backend.password_env": {Key: "backend.password_env", Value: "FP_PW"},
	} {
		g := got[key]
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%s: %s, want %s", key, gj, wj)
		}
	}
	if tb := got["tables"]; tb.Pending != "reload" || !strings.Contains(mustJSON(t, tb.File), "app.invoices") || strings.Contains(mustJSON(t, tb.Value), "app.invoices") {
		t.Errorf("tables: %s", mustJSON(t, tb))
	}
	// Without the file: no pending marks.
	for _, s := range Running(started, current, nil) {
		if s.Pending != "" || s.File != nil {
			t.Errorf("%s pending without a file", s.Key)
		}
	}
	// Nested keys and lists are there, by their path.
	for _, k := range []string{"fencing.variables.lease", "proxy_protocol.trusted_cidrs", "audit.retention", "limits.threads", "admin_tls.key_file"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no key %s", k)
		}
	}
}

// TestRunningClientTLSTurnedOn: turning client TLS on at a reload is a
// restart: the whole section keeps its started values.
func TestRunningClientTLSTurnedOn(t *testing.T) {
	started := mustParse(t, "")
	current := mustParse(t, "client_tls: {cert_file: c.pem, key_file: k.pem, required: true}\n")
	got := settingsByKey(Running(started, current, current))
	for _, k := range []string{"client_tls.cert_file", "client_tls.key_file", "client_tls.required"} {
		if s := got[k]; s.Pending != "restart" || s.Value == s.File {
			t.Errorf("%s: %s", k, mustJSON(t, s))
		}
	}
}

func TestRedact(t *testing.T) {
	for key, want := range map[string]any{
		"backend.password_env": "X", "backend.password_file": "X", "admin_auth.token_env": "X",
		"backend.password": Redacted, "x.api_token": Redacted, "x.secret": Redacted, "backend.user": "X",
	} {
		if got := redact(key, "X"); got != want {
			t.Errorf("redact(%s) = %v, want %v", key, got, want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
