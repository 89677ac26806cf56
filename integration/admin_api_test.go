package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/admin"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

const adminToken = "admin-Token-0123456789"

// adminAPI serves tp's admin endpoint with the proxy's sessions and a
// bearer token, as cmd/fenceproxy wires it.
func adminAPI(t *testing.T, tp *testProxy, protectProbes bool) string {
	t.Helper()
	srv := httptest.NewServer(&admin.Handler{Gatherer: tp.Reg, Audit: tp.Audit, Ready: tp.Proxy.CheckBackend,
		Sessions: tp.Proxy, Token: adminToken, ProtectProbes: protectProbes})
	t.Cleanup(srv.Close)
	return srv.URL
}

func adminDo(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func decodeLines[T any](t *testing.T, body string) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

// TestAdminTokenRequired: with a token set, /audit, /connections and
// /leases answer 401 without it or with a wrong one; the probes stay open
// unless protect_probes is set.
func TestAdminTokenRequired(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	for _, protect := range []bool{false, true} {
		base := adminAPI(t, e.proxy, protect)
		for _, path := range []string{"/audit", "/connections", "/leases", "/metrics", "/healthz", "/readyz"} {
			probe := path == "/metrics" || path == "/healthz" || path == "/readyz"
			t.Run(path+" protect_probes="+strconv.FormatBool(protect), func(t *testing.T) {
				for _, tok := range []string{"", "wrong", adminToken + "x", strings.ToLower(adminToken)} {
					code, _ := adminDo(t, "GET", base+path, tok)
					if open := probe && !protect; open && code == http.StatusUnauthorized || !open && code != http.StatusUnauthorized {
						t.Errorf("token %q: %d", tok, code)
					}
				}
				code, body := adminDo(t, "GET", base+path, adminToken)
				want := http.StatusOK
				if path == "/leases" {
					want = http.StatusServiceUnavailable // no backend.user
				}
				if code != want {
					t.Errorf("with the token: %d %s, want %d", code, body, want)
				}
			})
		}
	}
	code, body := adminDo(t, "GET", adminAPI(t, e.proxy, false)+"/leases", adminToken)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "backend.user") {
		t.Errorf("/leases without backend.user: %d %q", code, body)
	}
}

// TestAdminConnectionsListAndClose: /connections shows each client (user,
// address, schema, transaction, the lease from fence_acquire, the command in
// flight), and DELETE /connections/ID closes one, inside a command.
func TestAdminConnectionsListAndClose(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	base := adminAPI(t, e.proxy, false)
	ctx := context.Background()

	idle := e.session(t, "connectionAttributes=program_name:lister")
	var leaseToken int64
	if err := idle.QueryRowContext(ctx, "SELECT fence_acquire('list:me', 30)").Scan(&leaseToken); err != nil {
		t.Fatal(err)
	}
	mustExec(t, idle, "BEGIN")
	busy := e.session(t)
	var idleID, busyID uint32
	idle.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&idleID)
	busy.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&busyID)

	sleepDone := make(chan error, 1)
	go func() {
		_, err := busy.ExecContext(ctx, "DO SLEEP(30)")
		sleepDone <- err
	}()

	byBackend := func() map[uint32]proxy.ConnInfo {
		code, body := adminDo(t, "GET", base+"/connections", adminToken)
		if code != http.StatusOK {
			t.Fatalf("/connections: %d %s", code, body)
		}
		m := map[uint32]proxy.ConnInfo{}
		for _, c := range decodeLines[proxy.ConnInfo](t, body) {
			m[c.BackendConnID] = c
		}
		return m
	}
	eventually(t, 5*time.Second, "the sleeping session listed in a command", func() bool {
		c, ok := byBackend()[busyID]
		return ok && c.State == "command" && c.Command == "query"
	})
	conns := byBackend()
	ic := conns[idleID]
	if ic.User != dbserver.AppUser || ic.Schema != e.db || !ic.InTransaction || ic.Lease != "list:me" || ic.LeaseToken != uint64(leaseToken) ||
		ic.State != "idle" || ic.Program != "lister" || !strings.HasPrefix(ic.Client, "127.0.0.1:") || ic.ID == 0 {
		t.Errorf("idle session in a transaction: %+v", ic)
	}
	bc := conns[busyID]
	if bc.InTransaction || bc.Lease != "" || bc.Seconds < 0 {
		t.Errorf("busy session: %+v", bc)
	}

	if code, _ := adminDo(t, "DELETE", base+"/connections/"+strconv.FormatUint(bc.ID, 10), ""); code != http.StatusUnauthorized {
		t.Fatalf("DELETE without the token: %d", code)
	}
	if code, body := adminDo(t, "DELETE", base+"/connections/"+strconv.FormatUint(bc.ID, 10), adminToken); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	select {
	case err := <-sleepDone:
		if err == nil {
			t.Fatal("the closed session's statement succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the closed session's statement still runs 10s after DELETE")
	}
	eventually(t, 5*time.Second, "the closed connection gone from /connections", func() bool {
		_, ok := byBackend()[busyID]
		return !ok
	})
	// The backend session ended too: its SLEEP does not run on. The
	// server looks at a sleeping session's socket every 5 seconds.
	eventually(t, 15*time.Second, "the backend session of the closed connection to end", func() bool {
		return queryString(t, e.root, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "+strconv.FormatUint(uint64(busyID), 10)) == "0"
	})
	if _, ok := byBackend()[idleID]; !ok {
		t.Fatal("the other session was closed too")
	}
	for _, tt := range []struct {
		path string
		code int
	}{{"/connections/999999", http.StatusNotFound}, {"/connections/x", http.StatusBadRequest}} {
		if code, _ := adminDo(t, "DELETE", base+tt.path, adminToken); code != tt.code {
			t.Errorf("DELETE %s: %d, want %d", tt.path, code, tt.code)
		}
	}
}

// TestAdminLeasesThroughProxyAccount: /leases lists the leases of the
// protected tables' lease tables, with the owner only as its hash.
func TestAdminLeasesThroughProxyAccount(t *testing.T) {
	e := newAuditEnv(t, "")
	l := e.acquire(t, "invoice:listed", time.Minute)
	base := adminAPI(t, e.proxy, false)
	code, body := adminDo(t, "GET", base+"/leases", adminToken)
	if code != http.StatusOK {
		t.Fatalf("/leases: %d %s", code, body)
	}
	ls := decodeLines[proxy.LeaseInfo](t, body)
	if len(ls) != 1 || ls[0].Name != "invoice:listed" || ls[0].Token != l.Token || !ls[0].Held || ls[0].Remaining <= 0 ||
		ls[0].Table != e.db+".fenced_job_leases" || ls[0].OwnerID == "" {
		t.Fatalf("/leases: %+v", ls)
	}
	if strings.Contains(body, l.Owner) {
		t.Fatal("/leases shows the owner token")
	}
}

// TestAdminAuditFilters: /audit takes since, until, lease, table, reason
// and n over the records in memory.
func TestAdminAuditFilters(t *testing.T) {
	e := newAuditEnv(t, "")
	a, _, _ := e.staleSession(t, "invoice:a")
	staleWrite(t, a, "a1")
	staleWrite(t, a, "a2")
	if _, err := a.ExecContext(context.Background(), "TRUNCATE TABLE invoices"); err == nil {
		t.Fatal("TRUNCATE not refused")
	}
	base := adminAPI(t, e.proxy, false)
	tests := []struct {
		query string
		want  int // records, or -HTTP status
	}{
		{"", 3},
		{"?n=1", 1},
		{"?reason=stale_token", 2},
		{"?reason=refused", 1},
		{"?lease=invoice:a", 2},
		{"?lease=invoice:b", 0},
		{"?table=invoices", 3},
		{"?table=" + e.db + ".INVOICES", 3},
		{"?table=notes", 0},
		{"?since=1h", 3},
		{"?until=1h", 0},
		{"?since=" + time.Now().UTC().Add(time.Hour).Format(time.RFC3339), 0},
		{"?reason=stale", -http.StatusBadRequest},
		{"?since=yesterday", -http.StatusBadRequest},
		{"?since=1h&until=2h", -http.StatusBadRequest},
		{"?n=0", -http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			code, body := adminDo(t, "GET", base+"/audit"+tt.query, adminToken)
			if tt.want < 0 {
				if code != -tt.want {
					t.Fatalf("%d %s, want %d", code, body, -tt.want)
				}
				return
			}
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			if recs := decodeLines[audit.Record](t, body); len(recs) != tt.want {
				t.Fatalf("%d records, want %d:\n%s", len(recs), tt.want, body)
			}
		})
	}
}
