package integration

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/proxy/admin"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// adminServer serves tp's admin endpoint, wired as cmd/fenceproxy does.
func adminServer(t *testing.T, tp *testProxy) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(&admin.Handler{Gatherer: tp.Reg, Audit: tp.Audit, Ready: tp.Proxy.CheckBackend})
	t.Cleanup(srv.Close)
	return srv
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics into series -> value, series as printed
// (name{labels}).
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m
}

// TestAdminEndpoints: /healthz, /readyz (and its 503 with a reason when the
// backend is down), /metrics counting what the test did, /audit as JSON
// lines.
func TestAdminEndpoints(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	base := adminServer(t, tp).URL

	t.Run("healthz", func(t *testing.T) {
		if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("readyz", func(t *testing.T) {
		if code, body := httpGet(t, base+"/readyz"); code != 200 || body != "ready\n" {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("readyz with the backend down", func(t *testing.T) {
		down := closedPort(t)
		dp := startProxy(t, down, "")
		code, body := httpGet(t, adminServer(t, dp).URL+"/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready") || !strings.Contains(body, down) {
			t.Fatalf("%d %q: want 503 naming the backend", code, body)
		}
		// A client's failed connect is counted as a dial failure.
		if err := connectErr(dp.DSN(dbserver.AppUser, dbserver.AppPassword, "")); err == nil {
			t.Fatal("connected to a backend that is down")
		}
		if v := scrape(t, adminServer(t, dp).URL)["fenceproxy_backend_dial_failures_total"]; v != 1 {
			t.Errorf("backend_dial_failures_total = %v, want 1", v)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		m0 := scrape(t, base)
		a := appWire(t, tp.Addr, "")
		b := appWire(t, tp.Addr, "")
		const queries = 5
		for i := 0; i < queries; i++ {
			a.mustQuery(t, "SELECT REPEAT('m', 100000)")
		}
		if err := b.send([]byte{comPing}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.readOne(); err != nil {
			t.Fatal(err)
		}
		if err := connectErr(tp.DSN(dbserver.AppUser, "wrong", "")); err == nil {
			t.Fatal("wrong password accepted")
		}
		// The refused login's connection ends asynchronously: await it.
		eventually(t, 5*time.Second, "connections_active = 2", func() bool {
			return scrape(t, base)["fenceproxy_connections_active"] == 2
		})
		m := scrape(t, base)
		delta := func(series string) float64 { return m[series] - m0[series] }
		checks := []struct {
			series   string
			min, max float64
		}{
			{"fenceproxy_connections_total", 3, 3},
			{`fenceproxy_commands_total{command="query"}`, queries, queries},
			{`fenceproxy_commands_total{command="ping"}`, 1, 1},
			{`fenceproxy_command_duration_seconds_count{command="query"}`, queries, queries},
			{`fenceproxy_bytes_total{direction="backend_to_client"}`, queries * 100000, queries * 101000},
			{`fenceproxy_bytes_total{direction="client_to_backend"}`, queries * 30, 10000},
			{"fenceproxy_auth_failures_total", 1, 1},
			{"fenceproxy_backend_dial_failures_total", 0, 0},
		}
		for _, c := range checks {
			got := delta(c.series)
			if _, ok := m[c.series]; !ok {
				t.Errorf("%s missing from /metrics", c.series)
			} else if got < c.min || got > c.max {
				t.Errorf("%s: %v, want [%v, %v]", c.series, got, c.min, c.max)
			}
		}
		a.Close()
		eventually(t, 5*time.Second, "connections_active to drop", func() bool {
			return scrape(t, base)["fenceproxy_connections_active"] == 1
		})
	})
	t.Run("audit of a refused statement", func(t *testing.T) {
		db := dbtest.NewDatabase(t, s)
		mustExec(t, dbtest.Open(t, s.RootDSN(db)), "CREATE TABLE t (id INT PRIMARY KEY)")
		fp := startProxy(t, s.Addr, "tables:\n  - name: "+db+".t\n")
		w := appWire(t, fp.Addr, db)
		if r, err := w.query("TRUNCATE TABLE t"); err != nil || r.err() == nil {
			t.Fatalf("TRUNCATE of a protected table: %v %v", r, err)
		}
		code, body := httpGet(t, adminServer(t, fp).URL+"/audit")
		var rec audit.Record
		if code != 200 || strings.Count(body, "\n") != 1 || json.Unmarshal([]byte(body), &rec) != nil {
			t.Fatalf("/audit: %d %q", code, body)
		}
		if rec.Reason != audit.Refused || !strings.EqualFold(rec.Table, db+".t") || rec.User != dbserver.AppUser {
			t.Errorf("audit record %+v", rec)
		}
	})
	t.Run("audit", func(t *testing.T) {
		// The endpoint serves what the proxy's audit log holds, oldest
		// first, with every contract field.
		tok := uint64(7)
		for i, reason := range []string{audit.StaleToken, audit.Refused, audit.NoFence} {
			if err := tp.Audit.Write(audit.Record{Time: time.Unix(int64(1700000000+i), 0).UTC(), Reason: reason,
				Mode: "enforce", Lease: "job", Table: "app.t", PresentedToken: &tok, Digest: "UPDATE t SET v = ?"}); err != nil {
				t.Fatal(err)
			}
		}
		code, body := httpGet(t, base+"/audit")
		if code != 200 {
			t.Fatalf("/audit: %d %q", code, body)
		}
		var reasons []string
		for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("/audit line %q: %v", line, err)
			}
			for _, field := range []string{"time", "reason", "mode", "lease", "table", "presented_owner", "presented_token",
				"current_token", "client", "user", "schema", "digest"} {
				if _, ok := rec[field]; !ok {
					t.Errorf("record lacks %q: %s", field, line)
				}
			}
			reasons = append(reasons, rec["reason"].(string))
		}
		if strings.Join(reasons, ",") != "stale_token,refused,no_fence" {
			t.Errorf("reasons %v, want oldest first", reasons)
		}
		if _, body := httpGet(t, base+"/audit?n=1"); strings.Count(body, "\n") != 1 || !strings.Contains(body, "no_fence") {
			t.Errorf("/audit?n=1: %q", body)
		}
		if code, _ := httpGet(t, base+"/audit?n=x"); code != http.StatusBadRequest {
			t.Errorf("/audit?n=x: %d", code)
		}
	})
}
