package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// cliResult is one run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{code, out.String(), errb.String()}
}

// connState is the state /connections gives the connection whose backend
// connection id is id.
func connState(t *testing.T, admin, token string, id uint32) proxy.ConnInfo {
	t.Helper()
	_, body := adminDo(t, "GET", "http://"+admin+"/connections", token)
	for _, ci := range decodeLines[proxy.ConnInfo](t, body) {
		if ci.BackendConnID == id {
			return ci
		}
	}
	return proxy.ConnInfo{}
}

func backendID(t *testing.T, c *sql.Conn) uint32 {
	t.Helper()
	var id uint32
	if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAdminRuntimeEndpointsAndCLI runs the binary and drives it with
// `fenceproxy admin`, which reads the admin address and token from the
// same config: status; config with the running values, no secret, and
// the keys changed in the file marked pending (reload, restart) until a
// SIGHUP applies what it can; pause with hold (no new connection served,
// /readyz 503, statements held at transaction boundaries while an open
// transaction runs to its COMMIT), resume; a pause that ends at its
// deadline; connections and kill. Also: the bearer scheme in any case,
// /audit refusing an unknown parameter, /leases' seconds rounded.
func TestAdminRuntimeEndpointsAndCLI(t *testing.T) {
	s := dbtest.Shared(t)
	o := newOpsDB(t, s)
	bin := buildFenceproxy(t)
	const token = "runtime-Token-7"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	cfgText := func(listen, admin, idle string) string {
		return "listen: " + listen + "\nadmin: " + admin + "\nadmin_auth: {token_file: " + tokenFile + "}\n" +
			"backend:\n  address: " + s.Addr + "\n" + o.backendExtra + o.tablesYAML() + "timeouts:\n  idle: " + idle + "\n"
	}
	sp := startServe(t, bin, func(listen, admin string) string { return cfgText(listen, admin, "1h") })
	cli := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, bin, append([]string{"admin", "--config", sp.path}, args...)...)
	}
	ok := func(r cliResult, what string) cliResult {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
		}
		return r
	}

	r := ok(cli("status"), "admin status")
	if !strings.Contains(r.stdout, "connections: 0") || !strings.Contains(r.stdout, "not paused") || !strings.Contains(r.stdout, sp.path) {
		t.Errorf("admin status:\n%s", r.stdout)
	}

	// config: the running values; the proxy account's password is not in it.
	r = ok(cli("config"), "admin config")
	if !strings.Contains(r.stdout, "listen: \""+sp.addr+"\"") || !strings.Contains(r.stdout, "timeouts.idle: \"1h0m0s\"") ||
		strings.Contains(r.stdout, "pending") {
		t.Errorf("admin config:\n%s", r.stdout)
	}
	if _, body := adminDo(t, "GET", "http://"+sp.admin+"/config", token); strings.Contains(body, "ops-Pw-1") || strings.Contains(body, token) {
		t.Error("GET /config shows a secret")
	}
	// The file changes: listen (restart) and timeouts.idle (reload).
	newListen := closedPort(t)
	os.WriteFile(sp.path, []byte(cfgText(newListen, sp.admin, "30m")), 0o600)
	r = ok(cli("config", "--pending"), "admin config --pending")
	t.Logf("fenceproxy admin config --pending:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "listen: \""+sp.addr+"\"    # pending restart: the file has \""+newListen+"\"") ||
		!strings.Contains(r.stdout, "timeouts.idle: \"1h0m0s\"    # pending reload: the file has \"30m0s\"") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("admin config --pending after editing the file:\n%s", r.stdout)
	}
	sp.hup(t, 1)
	r = ok(cli("config", "--pending"), "admin config --pending after SIGHUP")
	if !strings.Contains(r.stdout, "listen: \""+sp.addr+"\"    # pending restart") || strings.Contains(r.stdout, "timeouts.idle") {
		t.Errorf("admin config --pending after SIGHUP:\n%s", r.stdout)
	}
	// Each reload says what still waits for a restart.
	sp.hup(t, 2)
	eventually(t, 10*time.Second, "the restart warning of the second reload", func() bool {
		return strings.Count(sp.stderr(), "changed settings take effect only after a restart") >= 2
	})

	// Sessions: A idle outside a transaction, B inside one.
	open := func() (*sql.DB, *sql.Conn) {
		db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+sp.addr+")/"+o.db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return db, c
	}
	_, a := open()
	_, b := open()
	aID, bID := backendID(t, a), backendID(t, b)
	mustExec(t, b, "BEGIN")
	mustExec(t, b, "INSERT INTO runs (id, status) VALUES (1, 'x')")

	r = ok(cli("pause", "--hold", "--timeout", "1m"), "admin pause --hold")
	if !strings.Contains(r.stdout, "paused since") || !strings.Contains(r.stdout, "holding statements") || !strings.Contains(r.stdout, "1 connection in a transaction") {
		t.Errorf("admin pause: %s", r.stdout)
	}
	if code, body := adminDo(t, "GET", "http://"+sp.admin+"/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "paused") {
		t.Errorf("/readyz while paused: %d %s", code, body)
	}
	// A new client is not served while paused.
	connected := make(chan error, 1)
	go func() {
		db, err := sql.Open("mysql", dbserver.AppUser+":"+dbserver.AppPassword+"@tcp("+sp.addr+")/?timeout=30s&readTimeout=30s")
		if err == nil {
			defer db.Close()
			err = db.Ping()
		}
		connected <- err
	}()
	// A's statement is held; B's transaction goes on to its end.
	aDone := make(chan error, 1)
	go func() {
		_, err := a.ExecContext(context.Background(), "DO 1")
		aDone <- err
	}()
	eventually(t, 10*time.Second, "A's statement held", func() bool { return connState(t, sp.admin, token, aID).State == "held" })
	mustExec(t, b, "INSERT INTO runs (id, status) VALUES (2, 'y')")
	mustExec(t, b, "COMMIT")
	bDone := make(chan error, 1)
	go func() {
		_, err := b.ExecContext(context.Background(), "DO 2")
		bDone <- err
	}()
	eventually(t, 10*time.Second, "B's next statement held", func() bool { return connState(t, sp.admin, token, bID).State == "held" })
	r = ok(cli("status"), "admin status while paused")
	t.Logf("fenceproxy admin status:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "2 commands held") || !strings.Contains(r.stdout, "0 connections in a transaction") {
		t.Errorf("admin status while paused:\n%s", r.stdout)
	}
	select {
	case err := <-connected:
		t.Fatalf("a new connection was served while paused: %v", err)
	case err := <-aDone:
		t.Fatalf("A's statement ran while paused: %v", err)
	default:
	}
	r = ok(cli("resume"), "admin resume")
	if !strings.Contains(r.stdout, "not paused") {
		t.Errorf("admin resume: %s", r.stdout)
	}
	for name, ch := range map[string]chan error{"the new connection": connected, "A": aDone, "B": bDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s after resume: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s still waits after resume", name)
		}
	}
	if code, _ := adminDo(t, "GET", "http://"+sp.admin+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz after resume: %d", code)
	}

	// A pause with a deadline ends by itself.
	ok(cli("pause", "--timeout", "1s"), "admin pause --timeout 1s")
	eventually(t, 10*time.Second, "the pause to end at its deadline", func() bool {
		return strings.Contains(ok(cli("status"), "status").stdout, "not paused")
	})
	if !strings.Contains(sp.stderr(), "pause deadline reached: resuming") {
		t.Error("the deadline's end is not in the log")
	}

	// connections and kill.
	r = ok(cli("connections"), "admin connections")
	if !strings.HasPrefix(r.stdout, "ID ") || !strings.Contains(r.stdout, dbserver.AppUser) || strings.Count(r.stdout, "\n") < 3 {
		t.Errorf("admin connections:\n%s", r.stdout)
	}
	id := connState(t, sp.admin, token, aID).ID
	r = ok(cli("kill", strconv.FormatUint(id, 10)), "admin kill")
	if r.stdout != "closed connection "+strconv.FormatUint(id, 10)+"\n" {
		t.Errorf("admin kill: %q", r.stdout)
	}
	if _, err := a.ExecContext(context.Background(), "DO 3"); err == nil {
		t.Error("a killed connection still works")
	}
	if r := cli("kill", "999999"); r.code != 1 || !strings.Contains(r.stderr, "no connection 999999") {
		t.Errorf("kill of no connection: %+v", r)
	}
	if r := cli("kill", "x"); r.code != 2 {
		t.Errorf("kill x: %+v", r)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("nope"), 0o600)
	if r := cli("--token-file", wrong, "status"); r.code != 1 || !strings.Contains(r.stderr, "token was refused") {
		t.Errorf("a wrong token: %+v", r)
	}
	if r := runCLI(t, bin, "admin", "--config", sp.path, "--address", closedPort(t), "status"); r.code != 3 {
		t.Errorf("an admin endpoint that is not there: %+v", r)
	}
	// JSON, as the endpoint gives it.
	var st map[string]any
	if err := json.Unmarshal([]byte(ok(cli("status", "--json"), "status --json").stdout), &st); err != nil || st["connections"] == nil {
		t.Errorf("status --json: %v %v", st, err)
	}

	// The bearer scheme in any case; the token itself is exact.
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, _ := http.NewRequest("GET", "http://"+sp.admin+"/status", nil)
		req.Header.Set("Authorization", scheme+" "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("scheme %q: %d", scheme, resp.StatusCode)
		}
	}
	if code, _ := adminDo(t, "GET", "http://"+sp.admin+"/status", strings.ToUpper(token)); code != http.StatusUnauthorized {
		t.Errorf("a token in other case: %d", code)
	}
	// /audit refuses a misspelt filter instead of returning everything.
	if code, body := adminDo(t, "GET", "http://"+sp.admin+"/audit?reasn=stale_token", token); code != http.StatusBadRequest || !strings.Contains(body, `unknown parameter "reasn"`) {
		t.Errorf("/audit?reasn=: %d %s", code, body)
	}
	// /leases: seconds rounded to the millisecond.
	if _, err := o.store.Acquire(context.Background(), "rounded", 29*time.Second+123456*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	code, body := adminDo(t, "GET", "http://"+sp.admin+"/leases", token)
	m := regexp.MustCompile(`"remaining_seconds":(-?[0-9.e+-]+)`).FindAllStringSubmatch(body, -1)
	if code != 200 || len(m) == 0 {
		t.Fatalf("/leases: %d %s", code, body)
	}
	for _, x := range m {
		if i := strings.IndexByte(x[1], '.'); i >= 0 && len(x[1])-i-1 > 3 || strings.ContainsAny(x[1], "e") {
			t.Errorf("remaining_seconds %s: not rounded to the millisecond", x[1])
		}
	}
	b.Close()
	sp.stop(t)
}
