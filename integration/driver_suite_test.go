package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// driverModule is the go-sql-driver/mysql package whose own test suite runs
// through the proxy: the version this module requires (go.mod), from the
// module cache.
const driverModule = "github.com/go-sql-driver/mysql"

// driverSkip: tests of the driver's suite that are not run at all.
// TestConnectorReturnsTimeout dials 1.1.1.1 to provoke a timeout: this
// project's tests send traffic to loopback addresses only.
const driverSkip = "^TestConnectorReturnsTimeout$"

// TestGoSQLDriverSuite runs go-sql-driver/mysql's test suite once directly
// against the disposable server and once through the proxy (with a
// protected table configured, so every statement passes the rewriter), and
// fails on every test that fails only through the proxy.
func TestGoSQLDriverSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the driver's suite takes about a minute; skipped with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	tp := startProxy(t, s.Addr, "tables:\n  - name: fp_elsewhere.invoices\n")

	direct := runDriverSuite(t, goBin, s.Addr, db)
	proxied := runDriverSuite(t, goBin, tp.Addr, db)
	if len(proxied) < 100 || len(direct) < 100 {
		t.Fatalf("the driver's suite ran %d tests direct and %d through the proxy: not the suite", len(direct), len(proxied))
	}
	onlyProxy, missing, passed := compareDriverRuns(direct, proxied)
	if len(onlyProxy) > 0 {
		// This machine is small and shared: a test that fails only through
		// the proxy runs once more, on both, before it counts.
		run := "^(" + strings.Join(topLevel(onlyProxy), "|") + ")$"
		t.Logf("failed only through the proxy, running again: %s", run)
		again, _, _ := compareDriverRuns(runDriverSuite(t, goBin, s.Addr, db, "-run", run),
			runDriverSuite(t, goBin, tp.Addr, db, "-run", run))
		onlyProxy = again
	}
	t.Logf("driver suite: %d tests, %d passed through the proxy", len(direct), passed)
	if len(missing) > 0 {
		t.Errorf("tests that ran direct but not through the proxy: %s", strings.Join(missing, " "))
	}
	if len(onlyProxy) > 0 {
		t.Errorf("tests that fail only through the proxy: %s", strings.Join(onlyProxy, " "))
	}
}

// compareDriverRuns lists the tests that fail through the proxy but not
// direct, the tests that ran direct only, and counts the proxy's passes.
func compareDriverRuns(direct, proxied map[string]string) (onlyProxy, missing []string, passed int) {
	for name, res := range direct {
		pres, ok := proxied[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case pres == "fail" && res != "fail":
			onlyProxy = append(onlyProxy, name)
		case pres == "pass":
			passed++
		}
	}
	sort.Strings(onlyProxy)
	sort.Strings(missing)
	return onlyProxy, missing, passed
}

// topLevel returns the distinct top-level test names of names (a subtest
// runs with its parent).
func topLevel(names []string) []string {
	var out []string
	for _, n := range names {
		n, _, _ = strings.Cut(n, "/")
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// runDriverSuite runs the driver's tests against addr and returns each
// test's outcome: pass, fail or skip.
func runDriverSuite(t *testing.T, goBin, addr, db string, extra ...string) map[string]string {
	t.Helper()
	args := append([]string{"test", "-count=1", "-json", "-skip", driverSkip}, extra...)
	cmd := exec.Command(goBin, append(args, driverModule)...)
	cmd.Env = append(os.Environ(),
		"MYSQL_TEST_USER="+dbserver.AppUser, "MYSQL_TEST_PASS="+dbserver.AppPassword,
		"MYSQL_TEST_PROT=tcp", "MYSQL_TEST_ADDR="+addr, "MYSQL_TEST_DBNAME="+db,
		"MYSQL_TEST_CONCURRENT=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // a failing suite exits 1: the outcomes say what failed
	results := map[string]string{}
	var failOutput = map[string]*strings.Builder{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			results[ev.Test] = ev.Action
		case "output":
			b := failOutput[ev.Test]
			if b == nil {
				b = &strings.Builder{}
				failOutput[ev.Test] = b
			}
			if b.Len() < 4096 {
				b.WriteString(ev.Output)
			}
		}
	}
	if len(results) == 0 {
		t.Fatalf("go test %s against %s ran nothing:\n%s", driverModule, addr, stderr.String())
	}
	for name, res := range results {
		if res == "fail" && !strings.Contains(name, "/") {
			t.Logf("against %s, %s failed:\n%s", addr, name, failOutput[name])
		}
	}
	return results
}
