package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestDoctorAccounts: on a server of its own, set up as the documentation
// says (the proxy's account with its grants, an app account with
// table-level grants and only SELECT on the lease table, guard triggers
// installed), doctor exits 0; each way of granting an account a way
// around the fence, at each grant level and through roles, is one
// finding that names the account, and accounts that cannot log in are
// not findings.
func TestDoctorAccounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := dbserver.Start(ctx, dbserver.Options{})
	if err != nil {
		dbtest.Unavailable(t, err)
	}
	t.Cleanup(func() { srv.Close() })
	root := dbtest.Open(t, srv.RootDSN(""))
	exec := func(t *testing.T, qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := root.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec(t, "CREATE DATABASE appdb",
		"CREATE TABLE appdb.invoices (id INT PRIMARY KEY, amount INT)",
		"CREATE TABLE appdb.runs (id INT PRIMARY KEY, status VARCHAR(20))",
		"CREATE USER 'fenceproxy'@'%' IDENTIFIED BY 'px-Pw1'")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("px-Pw1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, _ := mysql.ParseDSN(srv.RootDSN(""))
	// A fresh server's accounts: root at every host it has (trusted in the
	// config, by bare name) and the harness's administrator (--trust).
	var existing []string
	rows, err := root.QueryContext(ctx, "SELECT CONCAT(User, '@', Host) FROM mysql.user WHERE User NOT IN ('fenceproxy', 'mariadb.sys')")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		rows.Scan(&a)
		existing = append(existing, a)
	}
	rows.Close()
	t.Logf("accounts of a fresh server: %v", existing)
	trusted, _ := json.Marshal([]string{rc.User})
	cfg := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	yml := "backend:\n  address: " + srv.Addr + "\n  user: fenceproxy\n  password_file: " + pw + "\n" +
		"fencing:\n  database_guard: triggers\n" +
		"tables:\n  - name: appdb.invoices\n  - name: appdb.runs\n    lease: admin:runs\n" +
		"doctor:\n  trusted_accounts: " + string(trusted) + "\n"
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "init", "--dsn", srv.RootDSN(""), "--config", cfg)
	wantCode(t, r, 0, "init --config")
	exec(t,
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO 'fenceproxy'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON appdb.fenced_job_leases TO 'fenceproxy'@'%'",
		"GRANT SELECT, INSERT, DELETE ON appdb.fenced_audit TO 'fenceproxy'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-Pw1'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON appdb.invoices TO 'app'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON appdb.runs TO 'app'@'%'",
		"GRANT SELECT ON appdb.fenced_job_leases TO 'app'@'%'",
		// Cannot log in: not findings, whatever they hold.
		"CREATE USER 'gone'@'%' IDENTIFIED BY 'x' ACCOUNT LOCK",
		"GRANT ALL ON *.* TO 'gone'@'%'",
		"CREATE USER 'nopass'@'localhost' IDENTIFIED VIA mysql_native_password USING 'invalid'",
		"GRANT ALL ON *.* TO 'nopass'@'localhost'",
	)
	trust := []string{"--trust", dbserver.AppUser + "@%"}
	doctorRun := func(t *testing.T, extra ...string) (cliResult, doctorReport) {
		t.Helper()
		r := cli(t, append(append([]string{"doctor", "--config", cfg, "--json"}, trust...), extra...)...)
		var rep doctorReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("stdout is not the JSON report: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		return r, rep
	}
	privFindings := func(rep doctorReport) []string {
		var out []string
		for _, f := range rep.Findings {
			if strings.HasPrefix(f, "privilege: ") {
				out = append(out, f)
			}
		}
		return out
	}

	t.Run("correctly set up: exit 0", func(t *testing.T) {
		r, rep := doctorRun(t)
		if r.code != exitOK {
			t.Fatalf("exit %d on a correctly set up server, findings:\n%s", r.code, strings.Join(rep.Findings, "\n"))
		}
		all := strings.Join(rep.Info, "\n")
		for _, w := range []string{"not findings, these accounts cannot log in: ", "'gone'@'%' (locked)",
			"'nopass'@'localhost' (no valid authentication method)", "'fenceproxy'@'%' (the account doctor runs as)"} {
			if !strings.Contains(all, w) {
				t.Errorf("info lacks %q:\n%s", w, all)
			}
		}
		// Run as root, the proxy's account is trusted as backend.user.
		r, rep = doctorRun(t, "--dsn", srv.RootDSN(""))
		if r.code != exitOK {
			t.Fatalf("as root: exit %d, findings:\n%s", r.code, strings.Join(rep.Findings, "\n"))
		}
		if all := strings.Join(rep.Info, "\n"); !strings.Contains(all, "privilege: 'fenceproxy'@'%' can create objects that write protected tables unfenced (in every schema): EVENT, TRIGGER on *.* (trusted: the proxy's own account (backend.user))") {
			t.Errorf("info lacks the proxy's account:\n%s", all)
		}
	})

	tests := []struct {
		name  string
		setup []string
		want  []string // each a privilege finding (substring); every privilege finding must match one
	}{
		{"global", []string{"CREATE USER 'g'@'%'", "GRANT INSERT ON *.* TO 'g'@'%'"},
			[]string{"privilege: 'g'@'%' can write the lease table appdb.fenced_job_leases: INSERT on *.*; it can forge a lease"}},
		{"schema", []string{"CREATE USER 's'@'%'", "GRANT INSERT, UPDATE ON appdb.* TO 's'@'%'"},
			[]string{"privilege: 's'@'%' can write the lease table appdb.fenced_job_leases: INSERT, UPDATE on appdb.*"}},
		{"schema pattern", []string{"CREATE USER 'p'@'%'", "GRANT DELETE ON `app%`.* TO 'p'@'%'"},
			[]string{"privilege: 'p'@'%' can write the lease table appdb.fenced_job_leases: DELETE on app%.*"}},
		{"table", []string{"CREATE USER 'tb'@'10.0.%'", "GRANT UPDATE ON appdb.fenced_job_leases TO 'tb'@'10.0.%'"},
			[]string{"privilege: 'tb'@'10.0.%' can write the lease table appdb.fenced_job_leases: UPDATE on appdb.fenced_job_leases"}},
		{"column", []string{"CREATE USER 'c'@'%'", "GRANT UPDATE (fence_token) ON appdb.fenced_job_leases TO 'c'@'%'"},
			[]string{"privilege: 'c'@'%' can write the lease table appdb.fenced_job_leases: UPDATE on appdb.fenced_job_leases (column fence_token)"}},
		{"default role", []string{"CREATE USER 'dr'@'%'", "CREATE ROLE r_lease", "GRANT UPDATE ON appdb.fenced_job_leases TO r_lease",
			"GRANT r_lease TO 'dr'@'%'", "SET DEFAULT ROLE r_lease FOR 'dr'@'%'"},
			[]string{"privilege: 'dr'@'%' can write the lease table appdb.fenced_job_leases: UPDATE on appdb.fenced_job_leases (through role r_lease, its default role)"}},
		{"nested role", []string{"CREATE USER 'nr'@'%'", "CREATE ROLE r_in", "CREATE ROLE r_out", "GRANT INSERT ON appdb.* TO r_in",
			"GRANT r_in TO r_out", "GRANT r_out TO 'nr'@'%'"},
			[]string{"privilege: 'nr'@'%' can write the lease table appdb.fenced_job_leases: INSERT on appdb.* (through role r_in, which it can SET ROLE to, granted through r_out)"}},
		{"objects in a protected schema", []string{"CREATE USER 'o'@'%'", "GRANT TRIGGER, ALTER, CREATE VIEW, CREATE ROUTINE, EVENT, DROP ON appdb.* TO 'o'@'%'"},
			[]string{"privilege: 'o'@'%' can create objects that write protected tables unfenced (in appdb): ALTER, CREATE ROUTINE, CREATE VIEW, DROP, EVENT, TRIGGER on appdb.*"}},
		{"trigger on one table", []string{"CREATE USER 'tt'@'%'", "GRANT TRIGGER ON appdb.invoices TO 'tt'@'%'"},
			[]string{"privilege: 'tt'@'%' can create objects that write protected tables unfenced (in appdb): TRIGGER on appdb.invoices"}},
		{"global objects", []string{"CREATE USER 'go'@'%'", "GRANT CREATE VIEW, SUPER ON *.* TO 'go'@'%'"},
			[]string{"privilege: 'go'@'%' can create objects that write protected tables unfenced (in every schema): CREATE VIEW, SUPER on *.*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec(t, tt.setup...)
			t.Cleanup(func() {
				for _, q := range tt.setup {
					f := strings.Fields(q)
					if len(f) >= 3 && f[0] == "CREATE" && (f[1] == "USER" || f[1] == "ROLE") {
						root.Exec("DROP " + f[1] + " IF EXISTS " + f[2])
					}
				}
			})
			r, rep := doctorRun(t)
			wantCode(t, r, exitRefused, "doctor with "+tt.name)
			got := privFindings(rep)
			for _, w := range tt.want {
				found := false
				for _, f := range got {
					found = found || strings.Contains(f, w)
				}
				if !found {
					t.Errorf("no finding %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("%d privilege findings, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			// Trusted, the same account is information and doctor exits 0.
			account := strings.Trim(strings.Fields(tt.setup[0])[2], "'")
			user, host, _ := strings.Cut(account, "'@'")
			r, rep = doctorRun(t, "--trust", user+"@"+host)
			if r.code != exitOK {
				t.Errorf("with --trust %s@%s: exit %d, findings:\n%s", user, host, r.code, strings.Join(rep.Findings, "\n"))
			}
		})
	}

	t.Run("an account that cannot read the grant tables", func(t *testing.T) {
		exec(t, "CREATE USER 'lowpriv'@'%' IDENTIFIED BY 'lp-Pw1'",
			"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON appdb.* TO 'lowpriv'@'%'",
			"CREATE USER 'hidden'@'%'", "GRANT UPDATE ON appdb.fenced_job_leases TO 'hidden'@'%'")
		t.Cleanup(func() { root.Exec("DROP USER IF EXISTS 'lowpriv'@'%', 'hidden'@'%'") })
		r, rep := doctorRun(t, "--dsn", "lowpriv:lp-Pw1@tcp("+srv.Addr+")/")
		wantCode(t, r, exitRefused, "doctor as an account that cannot read mysql.*")
		all := strings.Join(rep.Findings, "\n")
		for _, w := range []string{"privilege: lowpriv@% cannot read mysql.columns_priv, mysql.db, mysql.tables_priv, mysql.user, the role tables",
			"so the privileges of other accounts were not checked there", "GRANT SELECT ON mysql.*"} {
			if !strings.Contains(all, w) {
				t.Errorf("findings lack %q:\n%s", w, all)
			}
		}
		if strings.Contains(all, "'hidden'") {
			t.Errorf("an account it cannot see was reported: %s", all)
		}
	})
}

var _ = sql.ErrNoRows

// TestDoctorAccountsOnTiDB: TiDB leaves information_schema's
// SCHEMA_PRIVILEGES and TABLE_PRIVILEGES empty; doctor reads the grant
// tables too, and finds a schema grant, a table grant through a default
// role and a column grant.
func TestDoctorAccountsOnTiDB(t *testing.T) {
	srv := dbtest.SharedTiDB(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	suffix := db[len(db)-6:]
	s, role, dr, c := "tds_"+suffix, "tdrole_"+suffix, "tdr_"+suffix, "tdc_"+suffix
	for _, q := range []string{
		"CREATE TABLE jobs (id INT PRIMARY KEY)",
		"CREATE TABLE fenced_job_leases (lease_name VARCHAR(191) PRIMARY KEY, owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL)",
		"CREATE USER '" + s + "'@'%'", "GRANT INSERT ON `" + db + "`.* TO '" + s + "'@'%'",
		"CREATE ROLE '" + role + "'", "GRANT UPDATE ON `" + db + "`.fenced_job_leases TO '" + role + "'",
		"CREATE USER '" + dr + "'@'%'", "GRANT '" + role + "' TO '" + dr + "'@'%'", "SET DEFAULT ROLE '" + role + "' TO '" + dr + "'@'%'",
		"CREATE USER '" + c + "'@'%'", "GRANT UPDATE (fence_token) ON `" + db + "`.fenced_job_leases TO '" + c + "'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		root.Exec("DROP USER IF EXISTS '" + s + "'@'%', '" + dr + "'@'%', '" + c + "'@'%'")
		root.Exec("DROP ROLE IF EXISTS '" + role + "'")
	})
	cfg := filepath.Join(t.TempDir(), "fenceproxy.yaml")
	if err := os.WriteFile(cfg, []byte("backend:\n  address: "+srv.Addr+"\n  engine: tidb\ntables:\n  - name: "+db+".jobs\ncatalog: {refresh: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "doctor", "--config", cfg, "--dsn", srv.RootDSN(""), "--json")
	wantCode(t, r, exitRefused, "doctor on TiDB")
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	all := strings.Join(rep.Findings, "\n")
	lt := db + ".fenced_job_leases"
	for _, w := range []string{
		"privilege: '" + s + "'@'%' can write the lease table " + lt + ": INSERT on " + db + ".*",
		"privilege: '" + dr + "'@'%' can write the lease table " + lt + ": UPDATE on " + lt + " (through role " + role + ", its default role)",
		"privilege: '" + c + "'@'%' can write the lease table " + lt + ": UPDATE on " + lt + " (column fence_token)",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("findings lack %q:\n%s", w, all)
		}
	}
}
