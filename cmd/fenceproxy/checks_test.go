package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// TestCheckConfigReportsEverythingAtOnce: one run names every problem that
// serve would stop at, the file's own and the files' and addresses', each
// at its line and column, in file order; serve refuses the same file with
// the same list before it listens anywhere.
func TestCheckConfigReportsEverythingAtOnce(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("FP_TEST_UNSET_PASSWORD", "")
	os.Unsetenv("FP_TEST_UNSET_PASSWORD")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	path := writeConfig(t, `listen: 127.0.0.1:7033
admin: 127.0.0.1:7033
bogus_key: 1
backend:
  address: `+closed+`
  user: fenceproxy
  password_env: FP_TEST_UNSET_PASSWORD
  tls: verify-ca
  ca_file: `+missing+`/ca.pem
client_tls:
  cert_file: `+missing+`/cert.pem
  key_file: `+missing+`/key.pem
fencing:
  on_stale: sometimes
tables:
  - name: app.invoices
  - name: notqualified
audit:
  file: `+missing+`/audit.jsonl
admin_auth:
  token_file: `+missing+`/admin-token
admin_tls:
  cert_file: `+missing+`/admin-cert.pem
  key_file: `+missing+`/admin-key.pem
timeouts:
  idle: 5
`)
	want := []string{
		`:2:8: admin: "127.0.0.1:7033" and listen "127.0.0.1:7033" are the same address`,
		`:3:1: unknown key "bogus_key"`,
		`:7:17: backend.password_env: environment variable FP_TEST_UNSET_PASSWORD is not set`,
		`:9:12: backend.ca_file: ` + missing + `/ca.pem: no such file or directory`,
		`:11:14: client_tls.cert_file: ` + missing + `/cert.pem: no such file or directory`,
		`:12:13: client_tls.key_file: ` + missing + `/key.pem: no such file or directory`,
		`:14:13: fencing.on_stale: "sometimes" is not one of zero_rows, error`,
		`:17:11: tables[1].name: "notqualified": a protected table is named schema.table`,
		`:19:9: audit.file: ` + missing + `/audit.jsonl: directory ` + missing + `: no such file or directory`,
		`:21:15: admin_auth.token_file: ` + missing + `/admin-token: no such file or directory`,
		`:23:14: admin_tls.cert_file: ` + missing + `/admin-cert.pem: no such file or directory`,
		`:24:13: admin_tls.key_file: ` + missing + `/admin-key.pem: no such file or directory`,
		`:26:9: timeouts.idle: 5 is not a duration`,
	}
	dial := `:5:12: backend.address: ` + closed + `: dial tcp ` + closed + `: connect: connection refused`
	for _, cmd := range [][]string{{"check-config", path}, {"check-config", "--connect", path}, {"serve", "--config", path}} {
		r := cli(t, cmd...)
		wantCode(t, r, exitRefused, strings.Join(cmd, " "))
		want := want
		if cmd[1] == "--connect" { // and only then: the backend is dialled
			want = append(want[:2:2], append([]string{dial}, want[2:]...)...)
		} else if strings.Contains(r.stderr, "dial tcp") {
			t.Errorf("%s dialled the backend:\n%s", cmd, r.stderr)
		}
		if !strings.Contains(r.stderr, fmt.Sprintf("%d problems:", len(want))) {
			t.Errorf("%s: stderr does not count %d problems:\n%s", cmd, len(want), r.stderr)
		}
		last := -1
		for _, w := range want {
			i := strings.Index(r.stderr, path+w)
			if i < 0 {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, w, r.stderr)
				continue
			}
			if i < last {
				t.Errorf("%s: %q is out of file order", cmd, w)
			}
			last = i
		}
	}
}

// checkEnv is a database with protected tables, a view, a lease table, and
// the proxy's account with the documented grants.
type checkEnv struct {
	srv    *dbserver.Server
	db     string
	root   *sql.DB
	user   string
	pwFile string
}

// newCheckEnv: grants (nil: the documented ones) are run with %s the
// account and DB the database.
func newCheckEnv(t *testing.T, grants ...string) *checkEnv {
	t.Helper()
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	for _, q := range []string{
		"CREATE TABLE invoices (id INT PRIMARY KEY)",
		"CREATE TABLE reconciliation_runs (id INT PRIMARY KEY)",
		"CREATE VIEW v_invoices AS SELECT id FROM invoices",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.CreateSchema(context.Background(), root, db+".fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	e := &checkEnv{srv: srv, db: db, root: root, user: "fpchk_" + db[len(db)-8:]}
	if grants == nil {
		grants = []string{
			"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* TO %s",
			"GRANT SELECT, INSERT, UPDATE ON `" + db + "`.fenced_job_leases TO %s",
			"GRANT SELECT, INSERT, DELETE ON `" + db + "`.fenced_audit TO %s",
		}
	}
	acct := "'" + e.user + "'@'%'"
	for _, q := range append([]string{"CREATE USER " + acct + " IDENTIFIED BY 'chk-Pw1'"}, grants...) {
		if _, err := root.Exec(strings.ReplaceAll(strings.ReplaceAll(q, "%s", acct), "DB", db)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS " + acct) })
	e.pwFile = filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(e.pwFile, []byte("chk-Pw1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// config is a config file with the account and the given tables section.
func (e *checkEnv) config(t *testing.T, tables string) string {
	t.Helper()
	return writeConfig(t, "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+e.srv.Addr+"\n  user: "+e.user+
		"\n  password_file: "+e.pwFile+"\n"+e.subst(tables))
}

// subst fills in the placeholders DB (the database) and UPPER (its name
// in capitals), in that order: a name in capitals may contain "DB".
func (e *checkEnv) subst(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "DB", e.db), "UPPER", strings.ToUpper(e.db))
}

// TestCheckConfigConnectFindsUnprotectedTables: the operator's mistakes
// that left writes unfenced while every check said ok are caught by
// check-config --connect, with the position of the entry and a message
// naming the fix; a correct file passes.
func TestCheckConfigConnectFindsUnprotectedTables(t *testing.T) {
	e := newCheckEnv(t)
	other := dbtest.NewDatabase(t, e.srv) // a schema without a lease table
	if _, err := e.root.Exec("CREATE TABLE `" + other + "`.jobs (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	// Schemas whose lease tables look right and are not: a DATETIME expiry
	// (SET time_zone moves it: a session a few hours west sees an expired
	// lease as held, TestRedteamOperatorMistakes) and a case-insensitive
	// lease name.
	badLease := map[string]string{}
	for name, def := range map[string]string{
		"datetime": "lease_name VARCHAR(191) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until DATETIME(3) NOT NULL",
		"ci":       "lease_name VARCHAR(191) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, owner_token VARBINARY(64) NOT NULL, fence_token BIGINT UNSIGNED NOT NULL, leased_until TIMESTAMP(3) NOT NULL",
	} {
		s := dbtest.NewDatabase(t, e.srv)
		badLease[name] = s
		for _, q := range []string{"CREATE TABLE `" + s + "`.jobs (id INT PRIMARY KEY)", "CREATE TABLE `" + s + "`.fenced_job_leases (" + def + ") ENGINE=InnoDB"} {
			if _, err := e.root.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		tables string
		want   []string // in stderr; nil: exit 0
		notes  []string // in stdout
	}{
		{"correct", "tables:\n  - name: DB.invoices\n  - name: DB.reconciliation_runs\n    lease: admin:reconciliation\n", nil,
			[]string{"protected tables: all 2 checked"}},
		{"typo in the table", "tables:\n  - name: DB.invoice\n",
			[]string{":8:11: tables[0].name: DB.invoice does not exist (closest existing name: DB.invoices); fix the name, or declare the entry created_later: true"}, nil},
		{"typo in the schema", "tables:\n  - name: DB_x.invoices\n",
			[]string{":8:11: tables[0].name: DB_x.invoices does not exist (closest existing name: DB.invoices (schema DB_x does not exist))"}, nil},
		{"schema in another case", "tables:\n  - name: " + "UPPER.invoices\n",
			[]string{":8:11: tables[0].name: UPPER.invoices does not exist: the server has DB.invoices, and names are case-sensitive there (lower_case_table_names=0)"}, nil},
		{"table in another case", "tables:\n  - name: DB.Invoices\n",
			[]string{"tables[0].name: DB.Invoices does not exist: the server has DB.invoices, and names are case-sensitive there"}, nil},
		{"a view configured as a protected table", "tables:\n  - name: DB.v_invoices\n",
			[]string{":8:11: tables[0].name: DB.v_invoices is a view, not a table: protect the tables it writes"}, nil},
		{"created later, not there yet", "tables:\n  - name: DB.invoices\n  - name: DB.invoices_2027\n    created_later: true\n", nil,
			[]string{"note: DB.invoices_2027 (line 9, created_later): not there yet; it is fenced from the moment it appears (closest existing name: DB.invoices)"}},
		{"no lease table in the schema", "tables:\n  - name: " + other + ".jobs\n",
			[]string{":8:11: tables[0].name: the lease table " + other + ".fenced_job_leases (for " + other + ".jobs) does not exist: create it with `fenceproxy init --table " + other + ".fenced_job_leases`"}, nil},
		{"lease table with a DATETIME expiry", "tables:\n  - name: " + badLease["datetime"] + ".jobs\n",
			[]string{":8:11: tables[0].name: the lease table " + badLease["datetime"] + ".fenced_job_leases (for " + badLease["datetime"] + ".jobs) cannot fence: " +
				badLease["datetime"] + ".fenced_job_leases: leased_until is datetime(3), want timestamp(3) (a DATETIME moves with SET time_zone)"}, nil},
		{"lease table with a case-insensitive lease name", "tables:\n  - name: " + badLease["ci"] + ".jobs\n",
			[]string{":8:11: tables[0].name: the lease table " + badLease["ci"] + ".fenced_job_leases (for " + badLease["ci"] + ".jobs) cannot fence: " +
				badLease["ci"] + ".fenced_job_leases: lease_name is utf8mb4/utf8mb4_general_ci, want utf8mb4/utf8mb4_bin"}, nil},
		{"two mistakes, both reported", "tables:\n  - name: DB.invoice\n  - name: DB.v_invoices\n",
			[]string{"2 problems", ":8:11: tables[0].name: DB.invoice does not exist", ":9:11: tables[1].name: DB.v_invoices is a view"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := e.config(t, tt.tables)
			r := cli(t, "check-config", "--connect", path)
			if tt.want == nil {
				wantCode(t, r, exitOK, "check-config --connect")
			} else {
				wantCode(t, r, exitRefused, "check-config --connect")
			}
			for _, w := range tt.want {
				w = e.subst(w)
				if strings.HasPrefix(w, ":") {
					w = path + w
				}
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, n := range tt.notes {
				if n = strings.ReplaceAll(n, "DB", e.db); !strings.Contains(r.stdout, n) {
					t.Errorf("stdout lacks %q:\n%s", n, r.stdout)
				}
			}
		})
	}
}

// TestCheckConfigConnectAccountPrivileges: an account that cannot read the
// whole catalog (some privileges, or none beyond its tables) is refused
// with the GRANT to run; with catalog.refresh: 0s it is accepted, but a
// table it cannot see is not mistaken for one that does not exist.
func TestCheckConfigConnectAccountPrivileges(t *testing.T) {
	refusal := func(e *checkEnv, missing string) string {
		return ":5:9: backend.user: " + e.user + "@% cannot read the schema catalog: it lacks the global " + missing +
			" privilege, so writes through views, triggers, cascading foreign keys and routines could not be fenced; run GRANT " +
			missing + " ON *.* TO '" + e.user + "'@'%' (or set catalog.refresh: 0s to run without the catalog knowingly)"
	}
	tests := []struct {
		name    string
		grants  []string
		extra   string
		want    []string
		notWant string
	}{
		{"some catalog privileges", []string{"GRANT SELECT ON *.* TO %s"}, "",
			[]string{"SHOW VIEW, TRIGGER, EVENT"}, ""},
		{"only the lease table", []string{"GRANT SELECT, INSERT, UPDATE ON `DB`.fenced_job_leases TO %s"}, "",
			[]string{"SELECT, SHOW VIEW, TRIGGER, EVENT",
				":8:11: tables[0].name: DB.invoices does not exist or USER@% cannot see it (without global SELECT an account sees only the tables it has a privilege on: GRANT SELECT ON *.* TO 'USER'@'%'); fix the name"}, ""},
		{"catalog off knowingly, a table the account cannot see", []string{"GRANT SELECT, INSERT, UPDATE ON `DB`.fenced_job_leases TO %s"}, "catalog: {refresh: 0s}\n",
			[]string{":8:11: tables[0].name: DB.invoices does not exist or USER@% cannot see it"}, "cannot read the schema catalog"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCheckEnv(t, tt.grants...)
			path := e.config(t, "tables:\n  - name: DB.invoices\n"+tt.extra)
			r := cli(t, "check-config", "--connect", path)
			wantCode(t, r, exitRefused, "check-config --connect")
			for i, w := range tt.want {
				if i == 0 && !strings.HasPrefix(w, ":") {
					w = refusal(e, w)
				}
				w = strings.ReplaceAll(strings.ReplaceAll(w, "DB", e.db), "USER", e.user)
				if strings.HasPrefix(w, ":") {
					w = path + w
				}
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if tt.notWant != "" && strings.Contains(r.stderr, tt.notWant) {
				t.Errorf("stderr has %q:\n%s", tt.notWant, r.stderr)
			}
			if tt.extra == "" {
				// serve refuses to start the same way: with the account but
				// without its privileges, as without the account.
				r := cli(t, "serve", "--config", path)
				wantCode(t, r, exitRefused, "serve")
				if w := path + refusal(e, tt.want[0]); !strings.Contains(r.stderr, w) {
					t.Errorf("serve: stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// TestCheckConfigWithoutProxyAccount: the Quick start's old config (tables,
// no backend.user) is refused with what to grant and how to run without
// the catalog knowingly; with catalog.refresh: 0s it passes, saying what
// was not checked.
func TestCheckConfigWithoutProxyAccount(t *testing.T) {
	srv := dbtest.Shared(t)
	path := writeConfig(t, "backend:\n  address: "+srv.Addr+"\ntables:\n  - name: app.invoices\n")
	for _, cmd := range [][]string{{"check-config", path}, {"check-config", "--connect", path}, {"serve", "--config", path}} {
		r := cli(t, cmd...)
		wantCode(t, r, exitRefused, strings.Join(cmd, " "))
		for _, w := range []string{path + ":4:5: tables: protected tables need the proxy's own account", "backend.user",
			"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.*", "catalog.refresh: 0s to run without the catalog knowingly"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, w, r.stderr)
			}
		}
	}
	path = writeConfig(t, "backend:\n  address: "+srv.Addr+"\ntables:\n  - name: app.invoices\ncatalog: {refresh: 0s}\n")
	r := cli(t, "check-config", "--connect", path)
	wantCode(t, r, exitOK, "check-config --connect, catalog off knowingly")
	if !strings.Contains(r.stdout, "note: catalog.refresh: 0s without backend.user: no schema catalog, and the protected tables cannot be checked") ||
		!strings.Contains(r.stdout, "backend "+srv.Addr+": reachable") {
		t.Errorf("stdout: %s", r.stdout)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	bad := writeConfig(t, "backend:\n  address: "+closed+"\n")
	wantCode(t, cli(t, "check-config", bad), exitOK, "check-config without --connect does not dial")
	r = cli(t, "check-config", "--connect", bad)
	wantCode(t, r, exitRefused, "check-config --connect to a closed port")
	if !strings.Contains(r.stderr, bad+":2:12: backend.address: "+closed+": dial tcp "+closed) {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// TestServeRefusesUnprotectedTables: serve checks the same at start
// (before it listens) and on every reload, where a typo keeps the running
// config.
func TestServeRefusesUnprotectedTables(t *testing.T) {
	e := newCheckEnv(t)
	typo := e.config(t, "tables:\n  - name: DB.invoice\n")
	r := cli(t, "serve", "--config", typo)
	wantCode(t, r, exitRefused, "serve with a protected table that does not exist")
	w := typo + ":8:11: tables[0].name: " + e.db + ".invoice does not exist (closest existing name: " + e.db + ".invoices)"
	if !strings.Contains(r.stderr, w) {
		t.Fatalf("stderr lacks %q:\n%s", w, r.stderr)
	}

	path := e.config(t, "tables:\n  - name: DB.invoices\n")
	reloader, err := policy.NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := protectionChecks(ctx, reloader, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("the start-up check of a correct config: %v", err)
	}
	data, _ := os.ReadFile(typo)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reloader.Reload(); err == nil || !strings.Contains(err.Error(), e.db+".invoice does not exist (closest existing name: "+e.db+".invoices)") {
		t.Fatalf("a reload that introduces a typo: %v", err)
	}
	if got := reloader.Current().Tables[0].Name; got != e.db+".invoices" || reloader.Policy().Version != 1 {
		t.Fatalf("the refused reload was installed: %s, policy %d", got, reloader.Policy().Version)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), ".invoice\n", ".reconciliation_runs\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reloader.Reload(); err != nil || reloader.Current().Tables[0].Name != e.db+".reconciliation_runs" {
		t.Fatalf("a correct reload: %v", err)
	}
}

// TestServeWaitsForTheBackend: started before its database, serve waits
// (it neither listens unchecked nor exits) and checks once it can.
func TestServeWaitsForTheBackend(t *testing.T) {
	e := newCheckEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin: \"\"\nbackend:\n  address: "+addr+"\n  user: "+e.user+
		"\n  password_file: "+e.pwFile+"\ntables:\n  - name: "+e.db+".invoice\n")
	reloader, err := policy.NewReloader(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- protectionChecks(context.Background(), reloader, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "waiting for the backend to check the protected tables before listening") {
		if time.Now().After(deadline) {
			t.Fatalf("no waiting line in the log:\n%s", logs.String())
		}
		select {
		case err := <-done:
			t.Fatalf("returned while the backend was down: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The backend appears: a forwarder to the real server on that address.
	fwd, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer fwd.Close()
	go func() {
		for {
			c, err := fwd.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", e.srv.Addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), e.db+".invoice does not exist") {
			t.Fatalf("once the backend answered: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("still waiting after the backend came up")
	}
}
