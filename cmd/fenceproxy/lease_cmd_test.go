package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestMain stops the harness's database servers when the package's tests
// end. (One TestMain per package: tests of other commands share it.)
func TestMain(m *testing.M) { dbtest.Main(m) }

type cliResult struct {
	stdout, stderr string
	code           int
}

func cli(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return cliResult{out.String(), errb.String(), code}
}

func (r cliResult) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, r.stdout)
	}
	return m
}

func wantCode(t *testing.T, r cliResult, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
}

// cliDSN is a fresh database on the harness server, for the app user.
func cliDSN(t *testing.T) string {
	t.Helper()
	srv := dbtest.Shared(t)
	return srv.DSN(dbserver.AppUser, dbserver.AppPassword, dbtest.NewDatabase(t, srv))
}

func TestLeaseCLIStory(t *testing.T) {
	dsn := cliDSN(t)
	wantCode(t, cli(t, "init", "--dsn", dsn), exitOK, "init")
	wantCode(t, cli(t, "init", "--dsn", dsn), exitOK, "init again")

	// Worker A acquires; flags may follow the name.
	r := cli(t, "lease", "acquire", "admin:reconciliation", "--ttl", "30s", "--dsn", dsn, "--json")
	wantCode(t, r, exitOK, "acquire")
	a := r.json(t)
	owner, _ := a["owner"].(string)
	if len(owner) != 32 || a["token"] != 1.0 || a["ttl_seconds"] != 30.0 || a["owner_id"] == "" {
		t.Fatalf("acquire JSON: %v", a)
	}
	token := "1"

	// B cannot take it; the refusal says who holds it, without the secret.
	r = cli(t, "lease", "acquire", "--dsn", dsn, "--json", "--ttl", "30", "admin:reconciliation")
	wantCode(t, r, exitRefused, "acquire while held")
	held := r.json(t)
	cur, _ := held["current"].(map[string]any)
	if held["error"] != "held" || cur["owner_id"] != a["owner_id"] || cur["held"] != true || strings.Contains(r.stdout+r.stderr, owner) {
		t.Fatalf("held JSON: %v\nstderr: %s", held, r.stderr)
	}

	// Renewal by A; a stale token is lost.
	r = cli(t, "lease", "renew", "admin:reconciliation", "--dsn", dsn, "--owner", owner, "--token", token, "--ttl", "1.5")
	wantCode(t, r, exitOK, "renew")
	if !strings.Contains(r.stdout, "renewed admin:reconciliation") || strings.Contains(r.stdout, owner) {
		t.Fatalf("renew output:\n%s", r.stdout)
	}
	r = cli(t, "lease", "renew", "admin:reconciliation", "--dsn", dsn, "--owner", owner, "--token", "7", "--ttl", "30s", "--json")
	wantCode(t, r, exitRefused, "renew at a wrong token")
	if r.json(t)["error"] != "lost" {
		t.Fatalf("renew JSON: %s", r.stdout)
	}

	// show and list print an owner id, the owner only on request.
	r = cli(t, "lease", "show", "admin:reconciliation", "--dsn", dsn)
	wantCode(t, r, exitOK, "show")
	if !strings.Contains(r.stdout, "held, expires in") || !strings.Contains(r.stdout, a["owner_id"].(string)) || strings.Contains(r.stdout, owner) {
		t.Fatalf("show:\n%s", r.stdout)
	}
	r = cli(t, "lease", "show", "admin:reconciliation", "--dsn", dsn, "--show-owner", "--json")
	wantCode(t, r, exitOK, "show --show-owner")
	if s := r.json(t); s["owner"] != owner || s["token"] != 1.0 || s["held"] != true {
		t.Fatalf("show JSON: %v", s)
	}
	r = cli(t, "lease", "list", "--dsn", dsn)
	wantCode(t, r, exitOK, "list")
	if !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "admin:reconciliation") || strings.Contains(r.stdout, owner) {
		t.Fatalf("list:\n%s", r.stdout)
	}
	r = cli(t, "lease", "list", "--dsn", dsn, "--json")
	wantCode(t, r, exitOK, "list --json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0]["name"] != "admin:reconciliation" {
		t.Fatalf("list JSON: %v %s", err, r.stdout)
	}

	// Release, release again (lost), show (expired, token kept), and the
	// next acquire continues the token sequence.
	wantCode(t, cli(t, "lease", "release", "admin:reconciliation", "--dsn", dsn, "--owner", owner, "--token", token), exitOK, "release")
	r = cli(t, "lease", "release", "admin:reconciliation", "--dsn", dsn, "--owner", owner, "--token", token)
	wantCode(t, r, exitRefused, "second release")
	if !strings.Contains(r.stderr, "lost") {
		t.Fatalf("second release stderr: %s", r.stderr)
	}
	r = cli(t, "lease", "show", "admin:reconciliation", "--dsn", dsn, "--json")
	if s := r.json(t); s["held"] != false || s["token"] != 1.0 {
		t.Fatalf("show after release: %v", s)
	}
	r = cli(t, "lease", "acquire", "admin:reconciliation", "--dsn", dsn, "--ttl", "30s")
	wantCode(t, r, exitOK, "acquire after release")
	if !strings.Contains(r.stdout, "token:    2") {
		t.Fatalf("acquire output:\n%s", r.stdout)
	}

	r = cli(t, "lease", "show", "never", "--dsn", dsn, "--json")
	wantCode(t, r, exitRefused, "show of a missing lease")
	if r.json(t)["error"] != "not_found" {
		t.Fatalf("not found JSON: %s", r.stdout)
	}
}

func TestLeaseCLIEnvironment(t *testing.T) {
	dsn := cliDSN(t)
	t.Setenv(envDSN, dsn)
	t.Setenv(envOwner, "worker-7")
	wantCode(t, cli(t, "init"), exitOK, "init from $"+envDSN)
	r := cli(t, "lease", "acquire", "job", "--ttl", "1m", "--json")
	wantCode(t, r, exitOK, "acquire")
	if a := r.json(t); a["owner"] != "worker-7" {
		t.Fatalf("owner from $%s: %v", envOwner, a)
	}
	wantCode(t, cli(t, "lease", "renew", "job", "--token", "1", "--ttl", "1m"), exitOK, "renew with the owner from the environment")
	wantCode(t, cli(t, "lease", "release", "job", "--token", "1"), exitOK, "release")
}

func TestLeaseCLIUsageAndErrors(t *testing.T) {
	dsn := cliDSN(t)
	wantCode(t, cli(t, "init", "--dsn", dsn), exitOK, "init")
	t.Setenv(envDSN, "")
	t.Setenv(envOwner, "")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no subcommand prints help", []string{"lease"}, exitOK},
		{"help", []string{"lease", "--help"}, exitOK},
		{"unknown subcommand", []string{"lease", "steal", "x"}, exitUsage},
		{"no DSN", []string{"lease", "list"}, exitUsage},
		{"init without DSN", []string{"init"}, exitUsage},
		{"bad DSN", []string{"lease", "list", "--dsn", "not a dsn"}, exitUsage},
		{"missing name", []string{"lease", "acquire", "--ttl", "30s", "--dsn", dsn}, exitUsage},
		{"two names", []string{"lease", "show", "a", "b", "--dsn", dsn}, exitUsage},
		{"missing ttl", []string{"lease", "acquire", "x", "--dsn", dsn}, exitUsage},
		{"bad ttl", []string{"lease", "acquire", "x", "--ttl", "soon", "--dsn", dsn}, exitUsage},
		{"ttl too long", []string{"lease", "acquire", "x", "--ttl", "9999h", "--dsn", dsn}, exitUsage},
		{"too many decimals", []string{"lease", "acquire", "x", "--ttl", "1.0000001", "--dsn", dsn}, exitUsage},
		{"name with trailing space", []string{"lease", "acquire", "x ", "--ttl", "30s", "--dsn", dsn}, exitUsage},
		{"renew without token", []string{"lease", "renew", "x", "--owner", "o", "--ttl", "30s", "--dsn", dsn}, exitUsage},
		{"release without owner", []string{"lease", "release", "x", "--token", "1", "--dsn", dsn}, exitUsage},
		{"bad table", []string{"lease", "list", "--table", "a`b", "--dsn", dsn}, exitUsage},
		{"unknown flag", []string{"lease", "list", "--bogus", "--dsn", dsn}, exitUsage},
		{"missing table", []string{"lease", "list", "--table", "nope", "--dsn", dsn}, exitDB},
		{"unreachable server", []string{"lease", "list", "--timeout", "2s", "--dsn", "u:p@tcp(127.0.0.1:1)/db"}, exitDB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, tc.args...)
			wantCode(t, r, tc.code, strings.Join(tc.args, " "))
			if tc.code != exitOK && r.stderr == "" {
				t.Fatal("no message on stderr")
			}
		})
	}
	r := cli(t, "lease", "list", "--table", "nope", "--dsn", dsn)
	if !strings.Contains(r.stderr, "run fenceproxy init") || strings.Count(r.stderr, "lease: ") > 0 {
		t.Fatalf("missing lease table: want one prefix and the init hint, got:\n%s", r.stderr)
	}
}

func TestInitRefusesAnUnsafeTable(t *testing.T) {
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	if _, err := root.Exec(`CREATE TABLE fenced_job_leases (
		lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARCHAR(64) NOT NULL,
		fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
	) DEFAULT CHARSET=latin1`); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "init", "--dsn", srv.DSN(dbserver.AppUser, dbserver.AppPassword, db))
	wantCode(t, r, exitDB, "init over a latin1 table")
	if !strings.Contains(r.stderr, "utf8mb4_bin") || !strings.Contains(r.stderr, "owner_token") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// init over a lease table from before the write counter adds the column
// and keeps the leases.
func TestInitAddsTheWriteCounter(t *testing.T) {
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	for _, q := range []string{`CREATE TABLE fenced_job_leases (
		lease_name VARCHAR(191) NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL,
		fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		"INSERT INTO fenced_job_leases VALUES ('old', 'o', 7, SYSDATE(3) + INTERVAL 1 HOUR)",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, "init", "--dsn", srv.DSN(dbserver.AppUser, dbserver.AppPassword, db))
	wantCode(t, r, 0, "init over a table without fence_writes")
	var token, writes int
	if err := root.QueryRow("SELECT fence_token, fence_writes FROM fenced_job_leases WHERE lease_name = 'old'").Scan(&token, &writes); err != nil {
		t.Fatalf("after init: %v", err)
	}
	if token != 7 || writes != 0 {
		t.Fatalf("after init: token %d, fence_writes %d", token, writes)
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]string{"30s": "30s", "30": "30s", "1.5": "1.5s", "1m30s": "1m30s", "0.25": "250ms"} {
		d, err := parseTTL(in)
		if err != nil || d.String() != want {
			t.Errorf("parseTTL(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1s", "1.0000001", "1e3", "1.2.3", strconv.Itoa(31 * 24 * 3600)} {
		if d, err := parseTTL(in); err == nil {
			t.Errorf("parseTTL(%q) = %v, want an error", in, d)
		}
	}
}
