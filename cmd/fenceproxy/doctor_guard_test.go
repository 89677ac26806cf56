package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

func TestDoctorDatabaseGuard(t *testing.T) {
	srv := dbtest.Shared(t)
	app, fence := dbtest.NewDatabase(t, srv), dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(app))
	for _, q := range []string{"CREATE TABLE runs (id INT PRIMARY KEY)", "CREATE TABLE jobs (id INT PRIMARY KEY)"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	dsn := srv.RootDSN("")
	doctor := func(cfg string) doctorReport {
		t.Helper()
		r := cli(t, "doctor", "--config", cfg, "--dsn", dsn, "--json")
		var rep doctorReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("doctor: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		return rep
	}
	guardLines := func(list []string) []string {
		var out []string
		for _, l := range list {
			if strings.HasPrefix(l, "database_guard: ") {
				out = append(out, l)
			}
		}
		return out
	}
	has := func(list []string, s string) bool {
		for _, l := range list {
			if strings.Contains(l, s) {
				return true
			}
		}
		return false
	}

	off := guardConfig(t, srv, app, fence, "off", "")
	if f := guardLines(doctor(off).Findings); len(f) != 1 || !strings.Contains(f[0], "database_guard: off on ") ||
		!strings.Contains(f[0], "fenceproxy init --config") {
		t.Fatalf("guard off: findings %q", f)
	}

	on := guardConfig(t, srv, app, fence, "triggers", "  database_guard_exempt: [migrator, \"ops@10.%\"]\n")
	rep := doctor(on)
	if f := guardLines(rep.Findings); !has(f, app+".runs: guard triggers INSERT: missing; UPDATE: missing; DELETE: missing") ||
		!has(f, fence+".fenced_job_leases does not exist") {
		t.Fatalf("before init: findings %q", f)
	}
	if !has(rep.Info, "exempt account migrator writes without a fence") || !has(rep.Info, "exempt account ops@10.% writes") {
		t.Fatalf("exempt accounts not listed: %q", rep.Info)
	}
	wantCode(t, cli(t, "init", "--dsn", dsn, "--config", on), 0, "init")
	rep = doctor(on)
	if f := guardLines(rep.Findings); len(f) != 0 {
		t.Fatalf("after init: findings %q", f)
	}
	if !has(rep.Info, app+".jobs: guard triggers run as root@") {
		t.Fatalf("the definer is not reported: %q", rep.Info)
	}
	bu, _ := triggerOrder(t, root, app, "jobs", "BEFORE", "UPDATE")
	if _, err := root.Exec("CREATE TRIGGER jobs_first BEFORE UPDATE ON jobs FOR EACH ROW PRECEDES " + bu[0] + " SET @x = 1"); err != nil {
		t.Fatal(err)
	}
	bd, _ := triggerOrder(t, root, app, "runs", "BEFORE", "DELETE")
	if _, err := root.Exec("DROP TRIGGER " + bd[0]); err != nil {
		t.Fatal(err)
	}
	f := guardLines(doctor(on).Findings)
	if len(f) != 2 || !has(f, app+".runs: guard triggers DELETE: missing") || !has(f, app+".jobs: another BEFORE UPDATE trigger runs before the guard") {
		t.Fatalf("findings %q", f)
	}
}
