package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testProxy is a fenceproxy running in the test process.
type testProxy struct {
	Addr    string
	Proxy   *proxy.Proxy
	Audit   *audit.Log
	Metrics *proxy.Metrics
	Reg     *prometheus.Registry
	Config  *policy.Config
	Policy  *policy.Policy

	backendAddr string
	backendYAML []string
}

// startProxy runs a proxy in front of backendAddr with the given extra YAML
// (top-level keys besides listen/admin/backend.address; use backendYAML to
// add backend keys). It stops at the end of the test.
func startProxy(t testing.TB, backendAddr, extraYAML string, backendYAML ...string) *testProxy {
	t.Helper()
	if !withAccount(t) && !slices.ContainsFunc(backendYAML, func(b string) bool { return strings.HasPrefix(b, "health_interval:") }) {
		// The active health check's connections would be the first a
		// forwarder or a connection count sees; tests that want it say
		// so, and forEachEngine's account deployment runs it.
		backendYAML = append(slices.Clip(backendYAML), "health_interval: 0s")
	}
	yml := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + backendAddr + "\n"
	for _, b := range backendYAML {
		yml += "  " + b + "\n"
	}
	yml += knowingly(extraYAML, backendYAML)
	cfg, err := policy.Parse("test.yaml", []byte(yml))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yml)
	}
	tp := startProxyConfig(t, cfg)
	tp.backendAddr, tp.backendYAML = backendAddr, backendYAML
	return tp
}

// reload gives the running proxy a new configuration, as SIGHUP does.
func (tp *testProxy) reload(t testing.TB, extraYAML string) {
	t.Helper()
	tp.reloadWith(t, extraYAML, nil)
}

// reloadChecked reloads as serve does on SIGHUP: the new config's tables
// are checked against the backend (proxy.CheckSchema, which reads the
// template columns' types) before it is installed.
func (tp *testProxy) reloadChecked(t testing.TB, extraYAML string) {
	t.Helper()
	tp.reloadWith(t, extraYAML, func(cfg *policy.Config) {
		db, err := proxy.OpenAdminDB(cfg.Backend)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rep, err := proxy.CheckSchema(ctx, db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Errors) > 0 {
			t.Fatalf("schema check: %v", errors.Join(rep.Errors...))
		}
	})
}

func (tp *testProxy) reloadWith(t testing.TB, extraYAML string, check func(*policy.Config)) {
	t.Helper()
	yml := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + tp.backendAddr + "\n"
	for _, b := range tp.backendYAML {
		yml += "  " + b + "\n"
	}
	yml += knowingly(extraYAML, tp.backendYAML)
	cfg, err := policy.Parse("test.yaml", []byte(yml))
	if err != nil {
		t.Fatalf("test config: %v\n%s", err, yml)
	}
	if check != nil {
		check(cfg)
	}
	tp.Policy = cfg.Policy(tp.Policy.Version + 1)
	tp.Config = cfg
	tp.Proxy.Update(cfg, tp.Policy)
}

func startProxyConfig(t testing.TB, cfg *policy.Config) *testProxy {
	t.Helper()
	return startProxyConfigOpts(t, cfg, proxy.Options{})
}

// startProxyConfigOpts is startProxyConfig with some of the proxy's
// options given (the logger, say); metrics and audit log are the test's.
func startProxyConfigOpts(t testing.TB, cfg *policy.Config, opts proxy.Options) *testProxy {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg)
	al, err := audit.Open(audit.File{Path: cfg.Audit.File}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	pol := cfg.Policy(1)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts.Metrics, opts.Audit = m, al
	p, err := proxy.New(cfg, pol, opts)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
		<-done
		al.Close()
	})
	return &testProxy{Addr: ln.Addr().String(), Proxy: p, Audit: al, Metrics: m, Reg: reg, Config: cfg, Policy: pol}
}

// knowingly adds catalog.refresh: 0s to a config with protected tables
// and no proxy account: such a config is refused unless it says so (the
// bare deployment; forEachEngine's account deployment has the account).
func knowingly(extraYAML string, backendYAML []string) string {
	if strings.Contains(extraYAML, "tables:") && !hasUser(backendYAML) && !strings.Contains(extraYAML, "catalog:") {
		return extraYAML + "catalog:\n  refresh: 0s\n"
	}
	return extraYAML
}

func hasUser(backendYAML []string) bool {
	for _, b := range backendYAML {
		if strings.HasPrefix(strings.TrimSpace(b), "user:") {
			return true
		}
	}
	return false
}

// DSN is a go-sql-driver DSN through the proxy.
func (tp *testProxy) DSN(user, password, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?parseTime=true", user, password, tp.Addr, db)
}

// testWriter sends the proxy's logs to the test log, so they show only for
// failing tests.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() { recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// appDB opens db through the proxy as the app user.
func appDB(t testing.TB, tp *testProxy, db string, params ...string) *sql.DB {
	t.Helper()
	dsn := tp.DSN(dbserver.AppUser, dbserver.AppPassword, db)
	for _, p := range params {
		dsn += "&" + p
	}
	return dbtest.Open(t, dsn)
}

// directDB opens db on the server directly as the app user.
func directDB(t testing.TB, s *dbserver.Server, db string, params ...string) *sql.DB {
	t.Helper()
	dsn := s.DSN(dbserver.AppUser, dbserver.AppPassword, db)
	for _, p := range params {
		dsn += "&" + p
	}
	return dbtest.Open(t, dsn)
}

// eventually polls cond until it is true or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// execer is *sql.DB, *sql.Tx or *sql.Conn.
type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

func mustExec(t testing.TB, db execer, q string, args ...any) sql.Result {
	t.Helper()
	r, err := db.ExecContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

var _ = os.Getenv

// testutilCounter sums every series of the named counter or gauge in reg.
func testutilCounter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return series(t, reg, name, nil)
}
