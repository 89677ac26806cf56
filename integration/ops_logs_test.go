package integration

import (
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
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
// writers and refused statements during which the backend restarts (a
// real server's shutdown and start on the same address: sessions in
// flight get 1053, clients reconnect while it is down, go-sql-driver finds
// the proxy account's pooled connections dead and says so), and a TLS
// handshake error on the admin endpoint (net/http says so). The rejected
// and refused statements' lines are rate-limited per reason and table,
// and the lines written plus the counts in the summary lines add up to
// the audit file's records, per key; before the restart the audit table
// has every record too.
func TestJSONLogUnderStaleStormAndBackendRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := dbserver.Start(ctx, dbserver.Options{}) // of its own: it restarts
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { s.Close() })
	o := newOpsDB(t, s)
	certs, err := dbserver.WriteCerts(filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildFenceproxy(t)
	started := time.Now()
	sp := startServe(t, bin, func(listen, admin string) string {
		return "listen: " + listen + "\nadmin: " + admin + "\nlog_format: json\n" +
			"backend:\n  address: " + s.Addr + "\n" + o.backendExtra + o.tablesYAML() +
			"audit:\n  file: audit.jsonl\n  queue_size: 100000\n" +
			"admin_tls: {cert_file: " + certs.ServerCertFile + ", key_file: " + certs.ServerKeyFile + "}\n"
	})
	auditFile := filepath.Join(sp.dir, "audit.jsonl")

	// The storm: stale writers and a client whose statements are refused.
	// A session the restart breaks is opened again (a new stale lease)
	// once the server takes connections.
	const workers = 6
	var (
		rejected, refused, failed atomic.Int64
		stop                      atomic.Bool
		wg                        sync.WaitGroup
		opened                    atomic.Int64
	)
	open := func() (*sql.Conn, error) {
		db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+sp.addr+")/"+o.db)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background())
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("invoice:storm-%d", opened.Add(1))
		l, err := o.store.Acquire(context.Background(), name, time.Minute)
		if err == nil {
			_, err = c.ExecContext(context.Background(), "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", l.Name, l.Owner, l.Token)
		}
		if err == nil {
			_, err = o.root.Exec("UPDATE fenced_job_leases SET fence_token = fence_token + 1, owner_token = 'new-owner' WHERE lease_name = ?", name)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	// storm runs one client's statement until stop; ok tells whether an
	// answer is the one expected (counted in n).
	storm := func(n *atomic.Int64, run func(c *sql.Conn, i int) (ok bool, err error)) {
		defer wg.Done()
		var c *sql.Conn
		for i := 0; !stop.Load(); i++ {
			if c == nil {
				var err error
				if c, err = open(); err != nil {
					time.Sleep(50 * time.Millisecond) // the server is down: pace the attempts
					continue
				}
			}
			ok, err := run(c, i)
			switch {
			case ok:
				n.Add(1)
			case err != nil:
				// The restart: the proxy answers 1053 (backend lost) or
				// the connection is gone.
				failed.Add(1)
				c.Close()
				c = nil
			default:
				t.Error("a stale write affected rows")
				stop.Store(true)
			}
		}
		if c != nil {
			c.Close()
		}
	}
	for w := range workers {
		wg.Add(1)
		go storm(&rejected, func(c *sql.Conn, i int) (bool, error) {
			r, err := c.ExecContext(context.Background(), "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-11', 1)", fmt.Sprintf("c%d-%d", w, i))
			if err != nil {
				return false, err
			}
			n, _ := r.RowsAffected()
			return n == 0, nil
		})
	}
	wg.Add(1)
	go storm(&refused, func(c *sql.Conn, _ int) (bool, error) {
		_, err := c.ExecContext(context.Background(), "TRUNCATE TABLE invoices")
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1148 {
			return true, nil
		}
		if err == nil {
			t.Error("TRUNCATE of a protected table was not refused")
			stop.Store(true)
		}
		return false, err
	})
	stopped := false
	stopStorm := func() {
		if !stopped {
			stopped = true
			stop.Store(true)
			wg.Wait()
		}
	}
	defer stopStorm()

	eventually(t, 60*time.Second, "a storm before the restart", func() bool { return rejected.Load() >= 300 && refused.Load() >= 50 })
	beforeRejected, beforeRefused := rejected.Load(), refused.Load()
	eventually(t, 60*time.Second, "the records so far in fenced_audit", func() bool {
		return int64(o.auditRows(t)) >= beforeRejected+beforeRefused
	})
	// The backend restarts under the storm.
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	afterRejected, afterRefused := rejected.Load(), refused.Load()
	eventually(t, 60*time.Second, "the storm to go on after the restart", func() bool {
		return rejected.Load() >= afterRejected+300 && refused.Load() >= afterRefused+50
	})
	stopStorm()
	if t.Failed() {
		t.FailNow()
	}
	total := rejected.Load() + refused.Load()
	t.Logf("%d stale writes rejected, %d statements refused, %d failed by the restart (%d sessions opened)",
		rejected.Load(), refused.Load(), failed.Load(), opened.Load())
	if failed.Load() == 0 {
		t.Error("no statement failed: the restart did not happen under the storm")
	}
	eventually(t, 20*time.Second, "go-sql-driver's words in the log", func() bool {
		return strings.Contains(sp.stderr(), `"component":"go-sql-driver"`)
	})
	// The audit table has every record the proxy wrote to it (the ones
	// it could not, while the server was down, are counted as dropped).
	adminClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.CAPool}}, Timeout: 10 * time.Second}
	metric := func(name string) float64 {
		t.Helper()
		resp, err := adminClient.Get("https://" + sp.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return -1
	}
	fileRecords := func() int { return len(auditFileRecords(t, auditFile)) }
	eventually(t, 30*time.Second, "the audit table's queue to drain", func() bool {
		return metric("fenceproxy_audit_table_written_total")+metric("fenceproxy_audit_table_dropped_total") == float64(fileRecords())
	})
	tableWritten, tableDropped := metric("fenceproxy_audit_table_written_total"), metric("fenceproxy_audit_table_dropped_total")
	tableFailed := metric(`fenceproxy_audit_write_errors_total{destination="table"}`)
	t.Logf("audit table: %v written, %v dropped (%v of them failed INSERTs)", tableWritten, tableDropped, tableFailed)
	// An INSERT the restart cut off may have committed all the same.
	if rows := float64(o.auditRows(t)); rows < tableWritten || rows > tableWritten+tableFailed || tableWritten < float64(beforeRejected+beforeRefused) {
		t.Errorf("fenced_audit has %v rows; %v written, %v failed, %v before the restart", rows, tableWritten, tableFailed, beforeRejected+beforeRefused)
	}

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
	t.Logf("%d JSON lines; go-sql-driver's %d", len(lines), driver)
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
	// A statement whose answer the restart cut off may have been audited
	// (the server answered, the client never heard): at most one a failure.
	if int64(n) < total || int64(n) > total+failed.Load() {
		t.Errorf("audit file: %d records for %d answered and %d failed statements", n, total, failed.Load())
	}
	for k, want := range records {
		t.Logf("%+v: %d records, %d lines, %d suppressed", k, want, written[k], suppressed[k])
		if got := written[k] + suppressed[k]; got != want {
			t.Errorf("%+v: %d lines + %d suppressed, want %d records", k, written[k], suppressed[k], want)
		}
		// 5 lines a key per 10 s window.
		if windows := int(time.Since(started)/(10*time.Second)) + 1; written[k] > windows*logging.DefaultBurst {
			t.Errorf("%+v: %d lines written for %d records in %d windows: not rate-limited", k, written[k], want, windows)
		}
	}
	if len(records) < 2 {
		t.Errorf("records by key: %v", records)
	}
}

// TestLoginFailuresLoggedAndCounted: a refused login is logged with the
// user, the client, the server's error code and a reason, and counted as
// an authentication failure only for a wrong password (1045), not for an
// unknown or forbidden database (1049, 1044); a refused COM_CHANGE_USER
// the same way.
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
	// COM_CHANGE_USER on a session that logged in.
	for _, tc := range []struct {
		user, pw, db string
		code         uint16
	}{
		{dbserver.AppUser, "wrong", "", 1045},
		{user, pw, "mysql", 1044},
	} {
		w := appWire(t, tp.Addr, "")
		resp, err := w.changeUser(tc.user, tc.pw, tc.db)
		if err != nil {
			t.Fatal(err)
		}
		last := resp.Packets[len(resp.Packets)-1].Payload
		if len(last) < 3 || last[0] != 0xff || binary.LittleEndian.Uint16(last[1:3]) != tc.code {
			t.Fatalf("COM_CHANGE_USER to %s %q: %v, want ERR %d", tc.user, tc.db, resp, tc.code)
		}
	}
	// The proxy counts and logs a refused login after the client has its
	// ERR: wait for the six before reading the counters.
	eventually(t, 5*time.Second, "6 login lines", func() bool { return strings.Count(out.String(), `"msg":"login failed"`) == 6 })
	if got := testutilCounter(t, tp.Reg, "fenceproxy_auth_failures_total"); got != 3 {
		t.Errorf("auth_failures_total %v, want 3 (the 1045s)", got)
	}
	for reason, want := range map[string]float64{"authentication": 3, "database": 3, "host": 0, "limit": 0, "other": 0} {
		if got := series(t, tp.Reg, "fenceproxy_login_failures_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("login_failures_total{reason=%q} %v, want %v", reason, got, want)
		}
	}
	found := map[string]int{}
	for _, l := range jsonLogLines(t, out.String()) {
		if l["msg"] != "login failed" {
			continue
		}
		if c, _ := l["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
			t.Errorf("login line without the client: %v", l)
		}
		found[fmt.Sprintf("%v %v %v", l["user"], l["code"], l["reason"])]++
	}
	for want, n := range map[string]int{dbserver.AppUser + " 1045 authentication": 2, "nobody 1045 authentication": 1,
		dbserver.AppUser + " 1049 database": 1, user + " 1044 database": 2} {
		if found[want] != n {
			t.Errorf("%d login lines %q, want %d, in %v", found[want], want, n, found)
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
