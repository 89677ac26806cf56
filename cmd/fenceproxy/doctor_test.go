package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

func TestDoctor(t *testing.T) {
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	dbtest.Engine(t, srv, "FEDERATED", "ha_federatedx")
	link, _, _ := dbtest.Link(t, srv, db)
	for _, q := range []string{
		"CREATE TABLE hist (id INT PRIMARY KEY) ENGINE=MyISAM",
		"CREATE TABLE m_hist (id INT PRIMARY KEY) ENGINE=MRG_MyISAM UNION=(hist)",
		"CREATE TABLE remote (id INT PRIMARY KEY)",
		"CREATE TABLE fx (id INT PRIMARY KEY) ENGINE=FEDERATED CONNECTION='" + link + "remote'",
		"CREATE TABLE fenced_job_leases (lease_name VARCHAR(191) PRIMARY KEY, owner_token VARCHAR(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until DATETIME(3) NOT NULL)",
		"CREATE TABLE jobs (id INT PRIMARY KEY, n INT NOT NULL DEFAULT 0)",
		"CREATE VIEW v_jobs AS SELECT id, n FROM jobs",
		"CREATE EVENT ev_reset ON SCHEDULE EVERY 1 DAY DISABLE DO UPDATE jobs SET n = 0",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	if err := os.WriteFile(cfg, []byte("backend:\n  address: "+srv.Addr+"\ntables:\n  - name: "+db+".jobs\n  - name: "+db+".hist\ncatalog: {refresh: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("findings", func(t *testing.T) {
		r := cli(t, "doctor", "--config", cfg, "--dsn", srv.RootDSN(""), "--json")
		wantCode(t, r, exitRefused, "doctor with an event writing the protected table")
		var rep doctorReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("stdout is not the JSON report: %v\n%s", err, r.stdout)
		}
		has := func(list []string, s string) bool {
			for _, l := range list {
				if strings.Contains(l, s) {
					return true
				}
			}
			return false
		}
		if !has(rep.Closure, "fence "+db+".v_jobs (view)") {
			t.Errorf("closure lacks the view: %q", rep.Closure)
		}
		if !has(rep.Closure, "fence "+db+".m_hist (merge)") {
			t.Errorf("closure lacks the MERGE table: %q", rep.Closure)
		}
		if !has(rep.Findings, "unfenceable table "+db+".fx (ENGINE=FEDERATED): every write refused") {
			t.Errorf("findings lack the FEDERATED table: %q", rep.Findings)
		}
		if !has(rep.Findings, "unfenceable event "+db+".ev_reset writes "+db+".jobs") {
			t.Errorf("findings lack the event: %q", rep.Findings)
		}
		if !has(rep.Info, "lease table "+db+".fenced_job_leases: lease_name varchar(191)") {
			t.Errorf("info lacks the lease table's columns: %q", rep.Info)
		}
		if !has(rep.Findings, "privilege: '"+dbserver.AppUser+"'@'%' can create objects that write protected tables unfenced (in every schema): ALTER, CREATE ROUTINE, CREATE VIEW, DROP, EVENT, SUPER, TRIGGER on *.*") {
			t.Errorf("findings lack the accounts with TRIGGER (the harness's app user has ALL): %q", rep.Findings)
		}
	})
	t.Run("text output", func(t *testing.T) {
		r := cli(t, "doctor", "--config", cfg, "--dsn", srv.RootDSN(""))
		wantCode(t, r, exitRefused, "doctor")
		if !strings.Contains(r.stdout, "finding: catalog: unfenceable event "+db+".ev_reset") {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("usage", func(t *testing.T) {
		wantCode(t, cli(t, "doctor"), exitUsage, "doctor without --config")
		wantCode(t, cli(t, "doctor", "--config", cfg, "--dsn", "not a dsn"), exitUsage, "doctor with a bad DSN")
	})
	t.Run("database unreachable", func(t *testing.T) {
		wantCode(t, cli(t, "doctor", "--config", cfg, "--dsn", "u:p@tcp(127.0.0.1:1)/", "--timeout", "3s"), exitDB, "doctor without a database")
	})
}
