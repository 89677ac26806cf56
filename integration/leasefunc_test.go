package integration

import (
	"context"
	"database/sql"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// scanToken reads one nullable token.
func scanToken(t *testing.T, row *sql.Row) sql.NullInt64 {
	t.Helper()
	var tok sql.NullInt64
	if err := row.Scan(&tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestLeaseFunctions exercises the SQL lease functions over both protocols:
// text (no arguments: COM_QUERY) and binary (arguments: COM_STMT_PREPARE
// and EXECUTE, answered by the proxy with a statement id of its own).
func TestLeaseFunctions(t *testing.T) {
	for _, proto := range []string{"text", "binary"} {
		t.Run(proto, func(t *testing.T) {
			e := newFencedEnv(t, envOptions{})
			ctx := context.Background()
			a, b := e.session(t), e.session(t)
			acquire := func(c *sql.Conn, name string, ttl float64) sql.NullInt64 {
				t.Helper()
				if proto == "binary" {
					return scanToken(t, c.QueryRowContext(ctx, "SELECT fence_acquire(?, ?)", name, ttl))
				}
				return scanToken(t, c.QueryRowContext(ctx, "SELECT fence_acquire('"+name+"', "+strconv.FormatFloat(ttl, 'f', -1, 64)+")"))
			}
			tok := acquire(a, "invoice:acme", 30)
			if !tok.Valid || tok.Int64 != 1 {
				t.Fatalf("first acquire: %v", tok)
			}
			if got := acquire(b, "invoice:acme", 30); got.Valid {
				t.Fatalf("acquire of a held lease: %v, want NULL", got)
			}
			// fence_acquire set the session's fence: writes pass.
			if r := mustExec(t, a, "INSERT INTO invoices (customer, period, amount, token) VALUES ('acme', '2026-10', 1, @fence_token)"); rowsAffected(r) != 1 {
				t.Fatal("write under an acquired lease was rejected")
			}
			var lname, owner, until sql.NullString
			var token sql.NullInt64
			var held int
			if err := a.QueryRowContext(ctx, "SELECT fence_status()").Scan(&lname, &owner, &token, &until, &held); err != nil {
				t.Fatal(err)
			}
			if lname.String != "invoice:acme" || token.Int64 != 1 || held != 1 || len(owner.String) != 16 || !until.Valid {
				t.Fatalf("fence_status: %v %v %v %v %v", lname, owner, token, until, held)
			}
			renew := "SELECT fence_renew(30)"
			if proto == "binary" {
				renew = "SELECT fence_renew(?)"
			}
			var ok int
			args := []any{}
			if proto == "binary" {
				args = append(args, 30)
			}
			if err := a.QueryRowContext(ctx, renew, args...).Scan(&ok); err != nil || ok != 1 {
				t.Fatalf("fence_renew: %d %v", ok, err)
			}
			if err := a.QueryRowContext(ctx, "SELECT fence_release()").Scan(&ok); err != nil || ok != 1 {
				t.Fatalf("fence_release: %d %v", ok, err)
			}
			if err := a.QueryRowContext(ctx, "SELECT fence_release()").Scan(&ok); err != nil || ok != 0 {
				t.Fatalf("second fence_release: %d %v", ok, err)
			}
			if r := mustExec(t, a, "UPDATE invoices SET amount = 2"); rowsAffected(r) != 0 {
				t.Fatal("write after release passed")
			}
			if got := acquire(b, "invoice:acme", 30); !got.Valid || got.Int64 != 2 {
				t.Fatalf("acquire after release: %v, want token 2", got)
			}
			if err := a.QueryRowContext(ctx, renew, args...).Scan(&ok); err != nil || ok != 0 {
				t.Fatalf("renew by the old owner: %d %v", ok, err)
			}
		})
	}
}

func TestLeaseFunctionShapes(t *testing.T) {
	e := newFencedEnv(t, envOptions{})
	ctx := context.Background()
	c := e.session(t)
	rows, err := c.QueryContext(ctx, "select /* hi */ FENCE_ACQUIRE( 'shapes' , 5 ) ;")
	if err != nil {
		t.Fatalf("odd case, spacing and comments: %v", err)
	}
	cols, _ := rows.ColumnTypes()
	rows.Close()
	if len(cols) != 1 || cols[0].Name() != "FENCE_ACQUIRE( 'shapes' , 5 )" {
		t.Fatalf("column: %v", cols)
	}
	for _, q := range []string{
		"SELECT fence_acquire('x', 5), 1",
		"SELECT fence_acquire('x', 5) FROM DUAL WHERE 1",
		"SELECT 1; SELECT fence_acquire('x', 5)",
		"SELECT * FROM invoices WHERE id = fence_acquire('x', 5)",
	} {
		if _, err := c.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "fenceproxy") {
			t.Errorf("%q: want a refusal from the proxy, got %v", q, err)
		}
	}
	mustExec(t, c, "BEGIN")
	if _, err := c.ExecContext(ctx, "SELECT fence_acquire('in-tx', 5)"); err == nil || !strings.Contains(err.Error(), "outside a transaction") {
		t.Fatalf("acquire inside a transaction: %v", err)
	}
	mustExec(t, c, "ROLLBACK")
	mustExec(t, c, "SET autocommit = 0")
	if tok := scanToken(t, c.QueryRowContext(ctx, "SELECT fence_acquire('autocommit-off', 5)")); !tok.Valid {
		t.Fatal("acquire with autocommit=0 failed")
	}
	// The acquisition must be committed, not pending in a transaction.
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM fenced_job_leases WHERE lease_name = 'autocommit-off'"); got != "1" {
		t.Fatal("lease change left uncommitted under autocommit=0")
	}
}

// TestLeaseFunctionsWithProxyAccount: with backend.user, lease changes run
// on the proxy's own account, so the app user needs only SELECT on the
// lease table.
func TestLeaseFunctionsWithProxyAccount(t *testing.T) {
	s := dbtest.Shared(t)
	db, root := newLeaseDB(t, s)
	for _, q := range []string{
		"CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40) NOT NULL, period CHAR(7) NOT NULL, amount DECIMAL(10,2) NOT NULL, token BIGINT UNSIGNED, UNIQUE KEY (customer, period))",
		"CREATE USER 'fp_limited'@'%' IDENTIFIED BY 'limited-Pw1'",
		"GRANT SELECT ON `" + db + "`.fenced_job_leases TO 'fp_limited'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + db + "`.invoices TO 'fp_limited'@'%'",
		"CREATE USER 'fp_proxy'@'%' IDENTIFIED BY 'proxy-Pw1'",
		"GRANT SELECT, INSERT, UPDATE ON `" + db + "`.fenced_job_leases TO 'fp_proxy'@'%'",
	} {
		mustExec(t, root, q)
	}
	t.Cleanup(func() {
		root.Exec("DROP USER IF EXISTS 'fp_limited'@'%'")
		root.Exec("DROP USER IF EXISTS 'fp_proxy'@'%'")
	})
	t.Setenv("FP_TEST_PROXY_PW", "proxy-Pw1")
	tp := startProxy(t, s.Addr, "tables:\n  - name: "+db+".invoices\n", "user: fp_proxy", "password_env: FP_TEST_PROXY_PW")
	app := dbtest.Open(t, tp.DSN("fp_limited", "limited-Pw1", db))
	c, err := app.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(context.Background(), "UPDATE fenced_job_leases SET leased_until = NOW()"); err == nil {
		t.Fatal("the limited app user can write the lease table directly")
	}
	tok := scanToken(t, c.QueryRowContext(context.Background(), "SELECT fence_acquire('invoice:acme', 30)"))
	if !tok.Valid || tok.Int64 != 1 {
		t.Fatalf("acquire through the proxy's account: %v", tok)
	}
	if r := mustExec(t, c, "INSERT INTO invoices (customer, period, amount) VALUES ('acme', '2026-10', 1)"); rowsAffected(r) != 1 {
		t.Fatal("fenced write under the acquired lease failed")
	}
}

// TestLeaseFunctionsFromMariadbCLI: the mariadb command-line client.
func TestLeaseFunctionsFromMariadbCLI(t *testing.T) {
	cli, err := exec.LookPath("mariadb")
	if err != nil {
		t.Skip("mariadb client not installed")
	}
	e := newFencedEnv(t, envOptions{})
	host, port := splitHostPort(t, e.proxy.Addr)
	out, err := exec.Command(cli, "--protocol=TCP", "-h", host, "-P", port, "-u", dbserver.AppUser, "-p"+dbserver.AppPassword,
		"-N", "-B", e.db, "-e",
		"SELECT fence_acquire('cli', 5); INSERT INTO invoices (customer, period, amount) VALUES ('cli', '2026-10', 1); SELECT held FROM (SELECT 1 AS held) x; SELECT fence_release();").CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != "1 1 1" {
		t.Fatalf("mariadb output %q", out)
	}
	if got := queryString(t, e.root, "SELECT COUNT(*) FROM invoices WHERE customer = 'cli'"); got != "1" {
		t.Fatal("the CLI's fenced insert did not land")
	}
}
