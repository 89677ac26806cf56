package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/internal/logging"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// logKey is what the proxy rate-limits audit log lines by.
type logKey struct{ event, reason, table string }

// TestJSONLogUnderStaleStormAndBackendRestart: with log_format json every
// line the binary writes is a JSON object, through a storm of stale
// writers and refused statements, a backend restart (go-sql-driver finds
// the proxy account's pooled connections dead and says so) and a TLS
// handshake error on the admin endpoint (net/http says so). The rejected
// and refused statements' lines are rate-limited per reason and table,
// and the lines written plus the counts in the summary lines add up to
// the audit records, of which the file and the audit table have every one.
func TestJSONLogUnderStaleStormAndBackendRestart(t *testing.T) {
	s := dbtest.Shared(t)
	o := newOpsDB(t, s)
	fwd := startRestartableForwarder(t, s.Addr)
	certs, err := dbserver.WriteCerts(filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildFenceproxy(t)
	sp := startServe(t, bin, func(listen, admin string) string {
		return "listen: " + listen + "\nadmin: " + admin + "\nlog_format: json\n" +
			"backend:\n  address: " + fwd.addr + "\n" + o.backendExtra + o.tablesYAML() +
			"audit:\n  file: audit.jsonl\n  queue_size: 100000\n" +
			"admin_tls: {cert_file: " + certs.ServerCertFile + ", key_file: " + certs.ServerKeyFile + "}\n"
	})
	auditFile := filepath.Join(sp.dir, "audit.jsonl")

	// The storm: stale writers and a client whose statements are refused,
	// for 2 seconds.
	// At most maxEach statements each: the audit table's queue takes them
	// all (past it records reach the file only, by design).
	const workers, maxEach = 6, 500
	var rejected, refused atomic.Int64
	conns := make([]*sql.Conn, workers)
	for i := range conns {
		conns[i] = o.staleConn(t, sp.addr, fmt.Sprintf("invoice:storm-%d", i))
	}
	refuser := o.staleConn(t, sp.addr, "invoice:refuser")
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxEach && time.Now().Before(stop); n++ {
				r, err := c.ExecContext(context.Background(), "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-11', 1)", fmt.Sprintf("c%d-%d", i, n))
				if err != nil {
					t.Errorf("stale write: %v", err)
					return
				}
				if n, _ := r.RowsAffected(); n != 0 {
					t.Errorf("a stale write affected %d rows", n)
					return
				}
				rejected.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < maxEach && time.Now().Before(stop); n++ {
			if _, err := refuser.ExecContext(context.Background(), "TRUNCATE TABLE invoices"); err == nil {
				t.Error("TRUNCATE of a protected table was not refused")
				return
			}
			refused.Add(1)
		}
	}()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	total := rejected.Load() + refused.Load()
	t.Logf("%d stale writes rejected, %d statements refused", rejected.Load(), refused.Load())
	if rejected.Load() < 50 {
		t.Fatalf("only %d stale writes in 2 s: no storm", rejected.Load())
	}
	eventually(t, 20*time.Second, "every record in fenced_audit", func() bool {
		return int64(o.auditRows(t)) == total
	})

	// The backend restarts: every connection to it dies, the proxy
	// account's pooled ones too.
	fwd.restart(t, 500*time.Millisecond)
	eventually(t, 20*time.Second, "go-sql-driver's words in the log", func() bool {
		return strings.Contains(sp.stderr(), `"component":"go-sql-driver"`)
	})
	after := o.staleConn(t, sp.addr, "invoice:after-restart")
	for range 3 {
		mustExec(t, after, "INSERT INTO invoices (customer, period, amount) VALUES ('late', '2026-11', 1)")
	}
	total += 3
	eventually(t, 20*time.Second, "the records after the restart in fenced_audit", func() bool {
		return int64(o.auditRows(t)) == total
	})

	// net/http's own complaint: a TLS handshake error on the admin port.
	c, err := net.Dial("tcp", sp.admin)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 512))
	c.Close()
	eventually(t, 10*time.Second, "net/http's TLS handshake error in the log", func() bool {
		return strings.Contains(sp.stderr(), "TLS handshake error")
	})

	sp.stop(t)

	lines := jsonLogLines(t, sp.stderr())
	written := map[logKey]int{}
	suppressed := map[logKey]int{}
	var driver, httpErr, shuttingDown int
	for _, l := range lines {
		str := func(k string) string { s, _ := l[k].(string); return s }
		switch msg := str("msg"); {
		case msg == "fenced write rejected" || msg == "statement refused":
			reason := str("reason")
			if msg == "statement refused" {
				reason = audit.Refused
			}
			written[logKey{msg, reason, str("table")}]++
		case msg == "log lines suppressed":
			n, _ := l["suppressed"].(float64)
			suppressed[logKey{str("event"), str("reason"), str("table")}] += int(n)
		case strings.HasPrefix(msg, "http: TLS handshake error"):
			httpErr++
		case msg == "shutting down: draining connections":
			shuttingDown++
			if d := str("deadline"); d != "30s" {
				t.Errorf("shutdown deadline logged as %v, want \"30s\"", l["deadline"])
			}
		}
		if str("component") == "go-sql-driver" {
			driver++
		}
	}
	if driver == 0 || httpErr == 0 || shuttingDown != 1 {
		t.Errorf("go-sql-driver lines %d, net/http lines %d, shutdown lines %d", driver, httpErr, shuttingDown)
	}
	records := map[logKey]int{}
	n := 0
	for _, r := range auditFileRecords(t, auditFile) {
		k := logKey{"fenced write rejected", r.Reason, r.Table}
		if r.Reason == audit.Refused {
			k.event = "statement refused"
		}
		records[k]++
		n++
	}
	if int64(n) != total {
		t.Errorf("audit file: %d records, want %d", n, total)
	}
	for k, want := range records {
		t.Logf("%+v: %d records, %d lines, %d suppressed", k, want, written[k], suppressed[k])
		if got := written[k] + suppressed[k]; got != want {
			t.Errorf("%+v: %d lines + %d suppressed, want %d records", k, written[k], suppressed[k], want)
		}
		// 5 lines a key per 10 s window: the storm fits in at most two.
		if written[k] > 2*logging.DefaultBurst+1 {
			t.Errorf("%+v: %d lines written for %d records: not rate-limited", k, written[k], want)
		}
	}
	if len(records) < 2 {
		t.Errorf("records by key: %v", records)
	}
}

// TestLoginFailuresLoggedAndCounted: a refused login is logged with the
// user, the client, the server's error code and a reason, and counted as
// an authentication failure only for a wrong password (1045), not for an
// unknown or forbidden database (1049, 1044).
func TestLoginFailuresLoggedAndCounted(t *testing.T) {
	s := dbtest.Shared(t)
	var out syncBuffer
	cfg, err := policy.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+s.Addr+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	root := dbtest.Open(t, s.RootDSN(""))
	const user, pw = "fp_login_ro", "login-Pw-1"
	mustExec(t, root, "CREATE USER IF NOT EXISTS '"+user+"'@'%' IDENTIFIED BY '"+pw+"'")
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	tp := startProxyWithLogger(t, cfg, logging.New(&out, logging.FormatJSON, slog.LevelInfo))

	for _, tc := range []struct {
		user, pw, db string
		code         uint16
	}{
		{dbserver.AppUser, "wrong", "", 1045},
		{"nobody", "x", "", 1045},
		{dbserver.AppUser, dbserver.AppPassword, "no_such_db", 1049},
		{user, pw, "mysql", 1044},
	} {
		var me *mysql.MySQLError
		if err := connectErr(tp.DSN(tc.user, tc.pw, tc.db)); !errors.As(err, &me) || me.Number != tc.code {
			t.Fatalf("%s to %q: %v, want error %d", tc.user, tc.db, err, tc.code)
		}
	}
	// The proxy counts and logs a refused login after the client has its
	// ERR: wait for the four before reading the counters.
	eventually(t, 5*time.Second, "4 login lines", func() bool { return strings.Count(out.String(), `"msg":"login failed"`) == 4 })
	if got := testutilCounter(t, tp.Reg, "fenceproxy_auth_failures_total"); got != 2 {
		t.Errorf("auth_failures_total %v, want 2 (the 1045s)", got)
	}
	for reason, want := range map[string]float64{"authentication": 2, "database": 2, "host": 0, "limit": 0, "other": 0} {
		if got := series(t, tp.Reg, "fenceproxy_login_failures_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("login_failures_total{reason=%q} %v, want %v", reason, got, want)
		}
	}
	eventually(t, 5*time.Second, "4 login lines", func() bool { return strings.Count(out.String(), `"msg":"login failed"`) == 4 })
	found := map[string]bool{}
	for _, l := range jsonLogLines(t, out.String()) {
		if l["msg"] != "login failed" {
			continue
		}
		if c, _ := l["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
			t.Errorf("login line without the client: %v", l)
		}
		found[fmt.Sprintf("%v %v %v", l["user"], l["code"], l["reason"])] = true
	}
	for _, want := range []string{dbserver.AppUser + " 1045 authentication", "nobody 1045 authentication",
		dbserver.AppUser + " 1049 database", user + " 1044 database"} {
		if !found[want] {
			t.Errorf("no login line %q in %v", want, found)
		}
	}
	if strings.Contains(out.String(), "wrong") {
		t.Error("a password reached the log")
	}
}

// startProxyWithLogger is startProxyConfig with the test's own logger.
func startProxyWithLogger(t *testing.T, cfg *policy.Config, logger *slog.Logger) *testProxy {
	t.Helper()
	tp := startProxyConfigOpts(t, cfg, proxy.Options{Logger: logger})
	return tp
}

// auditFileRecords reads an audit file's records.
func auditFileRecords(t *testing.T, path string) []audit.Record {
	t.Helper()
	e := &fencedEnv{audits: path}
	return e.auditRecords(t)
}

// TestShutdownDeadlineOneConnection: the report of one force-closed
// connection is in the singular.
func TestShutdownDeadlineOneConnection(t *testing.T) {
	s := dbtest.Shared(t)
	tp := startProxy(t, s.Addr, "")
	tx := appWire(t, tp.Addr, "")
	tx.mustQuery(t, "BEGIN")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tp.Proxy.Shutdown(ctx); err == nil || err.Error() != "shutdown deadline: force-closed 1 connection" {
		t.Fatalf("Shutdown: %v", err)
	}
}
