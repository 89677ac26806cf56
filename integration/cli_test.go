package integration

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// cliScript exercises what the command-line client prints: result tables,
// NULLs, affected rows, warnings, errors (with --force, the script goes on),
// multiple statements on a line, transactions and a stored procedure with
// two result sets.
const cliScript = `CREATE TEMPORARY TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20), n DECIMAL(10,2));
INSERT INTO t (v, n) VALUES ('a', 1.5), ('b', NULL), ('ü', -2);
SELECT * FROM t ORDER BY id;
UPDATE t SET n = n * 2 WHERE n IS NOT NULL;
UPDATE t SET v = v;
INSERT IGNORE INTO t (id, v) VALUES (1, 'dup');
SHOW WARNINGS;
SELECT 1/0, CAST('12abc' AS SIGNED);
SELECT * FROM no_such_table;
SELEKT 1;
SELECT LAST_INSERT_ID(), ROW_COUNT();
DELETE FROM t WHERE id = 2;
SELECT COUNT(*), SUM(n) FROM t;
SET @x = 5; SELECT @x, @x * 2 AS twice;
SELECT NULL, '', 'tab	here', X'41', 18446744073709551615, -1.5e-300;
USE no_such_database;
BEGIN;
INSERT INTO t (v) VALUES ('rolled back');
ROLLBACK;
SELECT * FROM t ORDER BY id;
SELECT * FROM seq_1_to_3;
CALL two_sets();
SELECT 'done';
`

var cliTiming = regexp.MustCompile(`\(\d+\.\d+ sec\)`)

// TestMariaDBCommandLineClient runs the real mariadb client with one script
// directly and through the proxy, in batch mode and in verbose table mode,
// and requires identical output, errors and exit status (timings masked).
func TestMariaDBCommandLineClient(t *testing.T) {
	cli, err := exec.LookPath("mariadb")
	if err != nil {
		if cli, err = exec.LookPath("mysql"); err != nil {
			t.Skip("no mariadb/mysql command-line client on PATH")
		}
	}
	s := dbtest.Shared(t)
	db := dbtest.NewDatabase(t, s)
	root := dbtest.Open(t, s.RootDSN(db))
	mustExec(t, root, "CREATE PROCEDURE two_sets() BEGIN SELECT 1 AS a, 'one' AS b; SELECT 2 AS c; END")
	tp := startProxy(t, s.Addr, "")
	modes := []struct {
		name string
		args []string
	}{
		{"batch", []string{"--batch"}},
		{"verbose table", []string{"--table", "-vvv", "--show-warnings"}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			run := func(addr string) (stdout, stderr string, code int) {
				host, port, _ := net.SplitHostPort(addr)
				args := append([]string{"--no-defaults", "--protocol=TCP", "-h", host, "-P", port,
					"-u", dbserver.AppUser, "-p" + dbserver.AppPassword, "--default-character-set=utf8mb4", "--force"},
					mode.args...)
				args = append(args, db)
				cmd := exec.Command(cli, args...)
				cmd.Stdin = strings.NewReader(cliScript)
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatalf("%s: %v", cli, err)
				}
				if ee != nil {
					code = ee.ExitCode()
				}
				return cliTiming.ReplaceAllString(out.String(), "(T sec)"), errOut.String(), code
			}
			dOut, dErr, dCode := run(s.Addr)
			pOut, pErr, pCode := run(tp.Addr)
			if dOut != pOut {
				t.Errorf("stdout differs:\n--- direct\n%s\n--- proxy\n%s", dOut, pOut)
			}
			if dErr != pErr || dCode != pCode {
				t.Errorf("errors differ: direct (exit %d)\n%s\nproxy (exit %d)\n%s", dCode, dErr, pCode, pErr)
			}
			// The script did what it is meant to show.
			for _, want := range []string{"Duplicate entry", "done"} {
				if !strings.Contains(dOut, want) {
					t.Errorf("output lacks %q:\n%s", want, dOut)
				}
			}
			for _, want := range []string{"ERROR 1146", "ERROR 1064", "ERROR 1049"} {
				if !strings.Contains(dErr, want) {
					t.Errorf("errors lack %q:\n%s", want, dErr)
				}
			}
			if mode.name == "verbose table" {
				for _, want := range []string{"Query OK, 3 rows affected", "Warning (Code 1062)", "2 rows in set"} {
					if !strings.Contains(dOut, want) {
						t.Errorf("verbose output lacks %q:\n%s", want, dOut)
					}
				}
			}
		})
	}
}
