package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// guardConfig writes a config protecting app.runs (fixed lease) and
// app.jobs with the lease table in a schema of its own, and the proxy's
// account being root (its password in $FP_TEST_INIT_PW).
func guardConfig(t *testing.T, srv *dbserver.Server, app, fence, guard string, extra string) string {
	t.Helper()
	rc, err := mysql.ParseDSN(srv.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FP_TEST_INIT_PW", rc.Passwd)
	path := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	yml := "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: " + srv.Addr + "\n  user: " + rc.User + "\n  password_env: FP_TEST_INIT_PW\n" +
		"fencing:\n  lease_table: " + fence + ".fenced_job_leases\n  database_guard: " + guard + "\n" + extra +
		"tables:\n  - name: " + app + ".runs\n    lease: admin:runs\n  - name: " + app + ".jobs\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// triggerOrder lists a table's triggers of one timing and event in the
// order they run, and how many triggers it has in all.
func triggerOrder(t *testing.T, db *sql.DB, schema, table, timing, event string) ([]string, int) {
	t.Helper()
	have, err := lease.ReadTriggers(context.Background(), db, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tr := range have { // ordered by timing, event, ACTION_ORDER
		if tr.Timing == timing && tr.Event == event {
			out = append(out, tr.Name)
		}
	}
	return out, len(have)
}

func TestInitInstallsGuardTriggers(t *testing.T) {
	srv := dbtest.Shared(t)
	app, fence := dbtest.NewDatabase(t, srv), dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(app))
	for _, q := range []string{
		"CREATE TABLE runs (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE jobs (id INT PRIMARY KEY, v VARCHAR(20))",
		"CREATE TABLE log (msg VARCHAR(40))",
		// The user's own triggers: one BEFORE INSERT, which the guard must
		// precede, one AFTER.
		"CREATE TRIGGER jobs_own_bi BEFORE INSERT ON jobs FOR EACH ROW INSERT INTO log VALUES ('jobs_own_bi')",
		"CREATE TRIGGER jobs_own_ai AFTER INSERT ON jobs FOR EACH ROW INSERT INTO log VALUES ('jobs_own_ai')",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := guardConfig(t, srv, app, fence, "triggers", "")
	dsn := srv.RootDSN("")

	// check-config --connect: serve would refuse to start.
	r := cli(t, "check-config", "--connect", cfg)
	wantCode(t, r, exitRefused, "check-config --connect before init")
	if !strings.Contains(r.stderr, app+".runs (INSERT: missing; UPDATE: missing; DELETE: missing") ||
		!strings.Contains(r.stderr, "fenceproxy init --config "+cfg) {
		t.Fatalf("check-config before init: %s", r.stderr)
	}

	// serve refuses to start, naming the tables and init.
	r = cli(t, "serve", "--config", cfg)
	wantCode(t, r, exitRefused, "serve before init")
	if !strings.Contains(r.stderr, app+".jobs (INSERT: missing") || !strings.Contains(r.stderr, "fenceproxy init --config "+cfg) {
		t.Fatalf("serve before init: %s", r.stderr)
	}

	r = cli(t, "init", "--dsn", dsn, "--config", cfg)
	wantCode(t, r, 0, "init --config")
	for _, want := range []string{"ready: lease table " + fence + ".fenced_job_leases, audit table " + fence + ".fenced_audit",
		"lease table " + fence + ".fenced_job_leases: partitioned (PARTITION p0)", "guard triggers (innodb, definer root@",
		"  " + app + ".runs: created fence_guard_v2_bi_", "  " + app + ".jobs: created fence_guard_v2_bi_"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("init output lacks %q:\n%s", want, r.stdout)
		}
	}
	bi, n := triggerOrder(t, root, app, "jobs", "BEFORE", "INSERT")
	ai, _ := triggerOrder(t, root, app, "jobs", "AFTER", "INSERT")
	if n != 5 || len(bi) != 2 || !strings.HasPrefix(bi[0], "fence_guard_v2_bi_") || bi[1] != "jobs_own_bi" || len(ai) != 1 {
		t.Fatalf("triggers of jobs after init: %d, BEFORE INSERT %q (want the guard first, the user's kept)", n, bi)
	}
	r = cli(t, "check-config", "--connect", cfg)
	wantCode(t, r, 0, "check-config --connect after init")
	// A trigger created later without FOLLOWS/PRECEDES runs after the guard.
	if _, err := root.Exec("CREATE TRIGGER runs_later_bi BEFORE INSERT ON runs FOR EACH ROW SET @x = 1"); err != nil {
		t.Fatal(err)
	}
	if bi, _ := triggerOrder(t, root, app, "runs", "BEFORE", "INSERT"); len(bi) != 2 || bi[1] != "runs_later_bi" {
		t.Fatalf("BEFORE INSERT triggers of runs: %q, want the guard first", bi)
	}

	// Idempotent.
	r = cli(t, "init", "--dsn", dsn, "--config", cfg, "--json")
	wantCode(t, r, 0, "init --config again")
	var rep initReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tables {
		if len(tr.Created)+len(tr.Dropped) != 0 {
			t.Fatalf("init again changed %s: %+v", tr.Table, tr)
		}
	}
	if len(rep.Partitioned) != 0 {
		t.Fatalf("init again partitioned %v", rep.Partitioned)
	}

	// A guard another trigger was put before, and an outdated guard (the
	// config's exempt list changed): both replaced, the user's left.
	bu, _ := triggerOrder(t, root, app, "jobs", "BEFORE", "UPDATE")
	if _, err := root.Exec("CREATE TRIGGER jobs_first BEFORE UPDATE ON jobs FOR EACH ROW PRECEDES " + bu[0] + " SET @x = 1"); err != nil {
		t.Fatal(err)
	}
	cfg2 := guardConfig(t, srv, app, fence, "triggers", "  database_guard_exempt: [migrator]\n")
	r = cli(t, "init", "--dsn", dsn, "--config", cfg2)
	wantCode(t, r, 0, "init --config with an exempt account")
	if strings.Count(r.stdout, "dropped fence_guard_v2_") != 2 {
		t.Fatalf("init with a changed config:\n%s", r.stdout)
	}
	bu, n = triggerOrder(t, root, app, "jobs", "BEFORE", "UPDATE")
	if n != 6 || len(bu) != 2 || !strings.HasPrefix(bu[0], "fence_guard_v2_bu_") || bu[1] != "jobs_first" {
		t.Fatalf("triggers of jobs: %d, BEFORE UPDATE %q", n, bu)
	}
	r = cli(t, "check-config", "--connect", cfg)
	wantCode(t, r, exitRefused, "check-config --connect with the other exempt list")
	if !strings.Contains(r.stderr, "outdated") {
		t.Fatalf("check-config: %s", r.stderr)
	}

	// The key left out (off by default): init leaves the guards and says
	// so; an old copy of the file must not take them off.
	unset := guardConfig(t, srv, app, fence, "off", "")
	data, err := os.ReadFile(unset)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unset, []byte(strings.Replace(string(data), "  database_guard: off\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "init", "--dsn", dsn, "--config", unset)
	wantCode(t, r, 0, "init --config without database_guard")
	if !strings.Contains(r.stdout, app+".jobs: guard triggers left in place: the file does not set fencing.database_guard") {
		t.Fatalf("init without the key:\n%s", r.stdout)
	}
	if _, n := triggerOrder(t, root, app, "jobs", "", ""); n != 6 {
		t.Fatalf("after init without the key, jobs has %d triggers, want 6 (the guards kept)", n)
	}

	// Off: init removes the guards (and only them).
	off := guardConfig(t, srv, app, fence, "off", "")
	r = cli(t, "init", "--dsn", dsn, "--config", off)
	wantCode(t, r, 0, "init --config with database_guard: off")
	if _, n := triggerOrder(t, root, app, "jobs", "", ""); n != 3 {
		t.Fatalf("after init with off, jobs has %d triggers, want its own 3", n)
	}
	if _, n := triggerOrder(t, root, app, "runs", "", ""); n != 1 {
		t.Fatalf("after init with off, runs has %d triggers, want its own one", n)
	}

	// Usage.
	wantCode(t, cli(t, "init", "--dsn", dsn, "--config", cfg, "--table", "x.y"), exitUsage, "--table with --config")
}

func TestInitGuardsRefusesAMissingTable(t *testing.T) {
	srv := dbtest.Shared(t)
	app, fence := dbtest.NewDatabase(t, srv), dbtest.NewDatabase(t, srv)
	cfg := guardConfig(t, srv, app, fence, "triggers", "")
	r := cli(t, "init", "--dsn", srv.RootDSN(""), "--config", cfg)
	wantCode(t, r, exitDB, "init with a protected table that does not exist")
	if !strings.Contains(r.stderr, "protected table "+app+".runs does not exist") || !strings.Contains(r.stderr, cfg+":") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

func TestInitGuardsOnTiDB(t *testing.T) {
	srv := dbtest.SharedTiDB(t)
	app, fence := dbtest.NewDatabase(t, srv), dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(app))
	for _, q := range []string{"CREATE TABLE runs (id INT PRIMARY KEY)", "CREATE TABLE jobs (id INT PRIMARY KEY)"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := guardConfig(t, srv, app, fence, "triggers", "")
	r := cli(t, "init", "--dsn", srv.RootDSN(""), "--config", cfg)
	wantCode(t, r, exitRefused, "init --config with triggers on TiDB")
	if !strings.Contains(r.stderr, "TiDB has no triggers") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	r = cli(t, "check-config", "--connect", cfg)
	wantCode(t, r, exitRefused, "check-config --connect with triggers on TiDB")
	if !strings.Contains(r.stderr, "TiDB has no triggers") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// TestInitGuardsCreatedLater: a protected table declared created_later
// that does not exist yet neither stops init nor serve's check; init says
// to run it again, and once the migration created the table the check
// refuses until init has put its guards on.
func TestInitGuardsCreatedLater(t *testing.T) {
	srv := dbtest.Shared(t)
	app, fence := dbtest.NewDatabase(t, srv), dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(app))
	for _, q := range []string{"CREATE TABLE runs (id INT PRIMARY KEY)", "CREATE TABLE jobs (id INT PRIMARY KEY)"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := guardConfig(t, srv, app, fence, "triggers", "")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("  - name: " + app + ".later\n    created_later: true\n")
	f.Close()
	dsn := srv.RootDSN("")

	r := cli(t, "init", "--dsn", dsn, "--config", cfg)
	wantCode(t, r, 0, "init --config with a created_later table not there yet")
	if !strings.Contains(r.stdout, app+".later: not there yet (created_later); run fenceproxy init --config again") {
		t.Fatalf("init output:\n%s", r.stdout)
	}
	wantCode(t, cli(t, "check-config", "--connect", cfg), 0, "check-config --connect before the migration")
	r = cli(t, "doctor", "--config", cfg, "--dsn", dsn)
	if !strings.Contains(r.stdout, app+".later (created_later) does not exist yet") || strings.Contains(r.stdout, app+".later: guard triggers") {
		t.Fatalf("doctor before the migration:\n%s", r.stdout)
	}

	if _, err := root.Exec("CREATE TABLE later (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "check-config", "--connect", cfg)
	wantCode(t, r, exitRefused, "check-config --connect after the migration, before init")
	if !strings.Contains(r.stderr, app+".later (INSERT: missing") {
		t.Fatalf("check-config after the migration: %s", r.stderr)
	}
	r = cli(t, "doctor", "--config", cfg, "--dsn", dsn)
	if !strings.Contains(r.stdout, app+".later: guard triggers INSERT: missing") {
		t.Fatalf("doctor after the migration:\n%s", r.stdout)
	}
	r = cli(t, "init", "--dsn", dsn, "--config", cfg)
	wantCode(t, r, 0, "init --config after the migration")
	if !strings.Contains(r.stdout, "  "+app+".later: created fence_guard_v2_bi_") || strings.Contains(r.stdout, "not there yet") {
		t.Fatalf("init output:\n%s", r.stdout)
	}
	wantCode(t, cli(t, "check-config", "--connect", cfg), 0, "check-config --connect after init")
}
