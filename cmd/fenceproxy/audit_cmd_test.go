package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/proxy/audit"
)

// auditStory is a database with the lease and audit tables, a proxy with its
// own account protecting db.invoices, and one stale write already made
// through it.
type auditStory struct {
	dsn string // the app user's, on the database directly
	db  string
}

func newAuditStory(t *testing.T) auditStory {
	t.Helper()
	return newAuditStoryWith(t, "invoice:acme", "")
}

// newAuditStoryWith is newAuditStory with the stale write's @fence_lease
// set to leaseName (the lease held and taken over is invoice:acme), from a
// session sending the connection attributes attrs (the driver's
// connectionAttributes, "" for none).
func newAuditStoryWith(t *testing.T, leaseName, attrs string) auditStory {
	t.Helper()
	srv := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, srv)
	root := dbtest.Open(t, srv.RootDSN(db))
	ctx := context.Background()
	if err := lease.CreateSchema(ctx, root, db+".fenced_job_leases"); err != nil {
		t.Fatal(err)
	}
	user := "fp_cli_" + db[len(db)-8:]
	for _, q := range []string{
		"CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL)",
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'cli-Pw-1'",
		"GRANT SELECT, INSERT, DELETE ON `" + db + "`.fenced_audit TO '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON `" + db + "`.fenced_job_leases TO '" + user + "'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { root.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	t.Setenv("FP_CLI_AUDIT_PW", "cli-Pw-1")
	cfg, err := policy.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\ninstance_id: cli-test\nbackend:\n  address: "+srv.Addr+
		"\n  user: "+user+"\n  password_env: FP_CLI_AUDIT_PW\ntables:\n  - name: "+db+".invoices\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, cfg.Policy(1), proxy.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })

	store, err := lease.NewStore(root, db+".fenced_job_leases")
	if err != nil {
		t.Fatal(err)
	}
	l, err := store.Acquire(ctx, "invoice:acme", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dsn := dbserver.AppUser + ":" + dbserver.AppPassword + "@tcp(" + ln.Addr().String() + ")/" + db
	if attrs != "" {
		dsn += "?connectionAttributes=" + url.QueryEscape(attrs)
	}
	app := dbtest.Open(t, dsn)
	c, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET @fence_lease = ?, @fence_owner = ?, @fence_token = ?", leaseName, l.Owner, l.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Exec("UPDATE fenced_job_leases SET fence_token = fence_token + 1 WHERE lease_name = 'invoice:acme'"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ExecContext(ctx, "INSERT INTO invoices (customer) VALUES ('stale')"); err != nil {
		t.Fatal(err)
	} else if n, _ := r.RowsAffected(); n != 0 {
		t.Fatalf("stale write affected %d rows", n)
	}
	return auditStory{dsn: srv.DSN(dbserver.AppUser, dbserver.AppPassword, db), db: db}
}

// TestAuditCommandFindsAStaleWrite: `fenceproxy audit` shows the rejected
// write within 2 seconds, as JSON lines with the file's fields and as a
// table; filters and exit codes.
func TestAuditCommandFindsAStaleWrite(t *testing.T) {
	st := newAuditStory(t)
	var r cliResult
	deadline := time.Now().Add(2 * time.Second)
	for {
		r = cli(t, "audit", "--dsn", st.dsn, "--json")
		if r.code == exitOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantCode(t, r, exitOK, "audit within 2s of the stale write")
	recs := jsonLines(t, r.stdout)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), r.stdout)
	}
	rec := recs[0]
	if rec.Reason != audit.StaleToken || rec.Lease != "invoice:acme" || rec.Table != st.db+".invoices" || rec.Outcome != "zero_rows" ||
		rec.PresentedToken == nil || *rec.PresentedToken != 1 || rec.CurrentToken == nil || *rec.CurrentToken != 2 ||
		rec.Instance != "cli-test" || rec.ConnID == 0 || rec.ClientHost != "127.0.0.1" || time.Since(rec.Time) > time.Minute {
		t.Fatalf("record: %+v", rec)
	}

	t.Run("table", func(t *testing.T) {
		r := cli(t, "audit", "--dsn", st.dsn, "--since", "1h")
		wantCode(t, r, exitOK, "audit as a table")
		t.Logf("fenceproxy audit --since 1h:\n%s", r.stdout)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "TIME (UTC)") || !strings.Contains(lines[1], "stale_token") ||
			!strings.Contains(lines[1], "1/2") || !strings.Contains(lines[1], "invoice:acme") {
			t.Fatalf("table:\n%s", r.stdout)
		}
	})
	for _, tt := range []struct {
		name  string
		flags []string
		code  int
	}{
		{"lease matches", []string{"--lease", "invoice:acme"}, exitOK},
		{"other lease", []string{"--lease", "invoice:other"}, exitRefused},
		{"qualified table", []string{"--table", strings.ToUpper(st.db) + ".INVOICES"}, exitOK},
		{"bare table", []string{"--table", "invoices"}, exitOK},
		{"other table", []string{"--table", "notes"}, exitRefused},
		{"reason matches", []string{"--reason", "stale_token"}, exitOK},
		{"other reason", []string{"--reason", "expired"}, exitRefused},
		{"until before the write", []string{"--since", "2h", "--until", "1h"}, exitRefused},
		{"since an absolute time", []string{"--since", time.Now().UTC().Add(-time.Hour).Format("2006-01-02 15:04")}, exitOK},
		{"since after the write", []string{"--since", time.Now().UTC().Add(time.Hour).Format(time.RFC3339)}, exitRefused},
		{"unknown reason", []string{"--reason", "stale"}, exitUsage},
		{"bad since", []string{"--since", "yesterday"}, exitUsage},
		{"until before since", []string{"--since", "1h", "--until", "2h"}, exitUsage},
		{"no audit table in that schema", []string{"--schema", "mysql"}, exitDB},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"audit", "--dsn", st.dsn, "--json"}, tt.flags...)
			r := cli(t, args...)
			wantCode(t, r, tt.code, strings.Join(tt.flags, " "))
			if tt.code == exitOK && len(jsonLines(t, r.stdout)) != 1 {
				t.Fatalf("stdout: %s", r.stdout)
			}
			if n := strings.Count(r.stderr, "no audit records match"); tt.code == exitRefused && n != 1 {
				t.Errorf("'no audit records match' said %d times: %q", n, r.stderr)
			}
		})
	}
	t.Run("nothing matches, as a table", func(t *testing.T) {
		r := cli(t, "audit", "--dsn", st.dsn, "--lease", "invoice:other")
		wantCode(t, r, exitRefused, "audit with nothing to show")
		if r.stdout != "" || r.stderr != "fenceproxy audit: no audit records match\n" {
			t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
		}
	})
	t.Run("database down", func(t *testing.T) {
		r := cli(t, "audit", "--dsn", "u:p@tcp(127.0.0.1:1)/x", "--timeout", "2s")
		wantCode(t, r, exitDB, "audit against a closed port")
	})
}

func jsonLines(t *testing.T, s string) []audit.Record {
	t.Helper()
	var out []audit.Record
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestAuditCommandEscapesForgedValues: a stale write through the proxy
// whose lease name and program_name connection attribute carry line breaks
// and terminal escape sequences is recorded as it was, and `fenceproxy
// audit` prints it as one table row with every control character escaped:
// the values cannot add rows, move the cursor or recolour the terminal.
func TestAuditCommandEscapesForgedValues(t *testing.T) {
	forgedLease := "job\n2026-01-01 00:00:00  stale_token  x\x1b[1A\x1b[2K"
	forgedLease = strings.NewReplacer(`\n`, "\n", `\x1b`, "\x1b").Replace(forgedLease)
	st := newAuditStoryWith(t, forgedLease, "program_name:inv\noicer\x1b]0;pwned\x07\u202e")
	var r cliResult
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = cli(t, "audit", "--dsn", st.dsn, "--json")
		if r.code == exitOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantCode(t, r, exitOK, "audit of the forged write")
	recs := jsonLines(t, r.stdout)
	if len(recs) != 1 || recs[0].Lease != forgedLease || !strings.Contains(recs[0].Program, "\x1b]0;pwned") {
		t.Fatalf("the record does not hold the values as sent: %+v", recs)
	}
	r = cli(t, "audit", "--dsn", st.dsn, "--since", "1h")
	wantCode(t, r, exitOK, "audit as a table")
	t.Logf("fenceproxy audit:\n%s", r.stdout)
	assertTerminalSafe(t, r.stdout, 2)
	if !strings.Contains(r.stdout, `job\n2026-01-01`) || !strings.Contains(r.stdout, `\x1b[1A`) || !strings.Contains(r.stdout, `inv\noicer\x1b]0;pwned\x07\u202e`) {
		t.Errorf("the lease is not shown escaped:\n%s", r.stdout)
	}
}
