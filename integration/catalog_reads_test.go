package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// TestCatalogReadsBodiesAsTheServer: stored programs, created directly on
// the server, whose bodies the catalog's former lexer read otherwise than
// the server does, so that a table whose trigger writes a protected table
// through them was not fenced. Each write through the proxy comes from a
// stale session (rtEnv) and must change no protected table.
func TestCatalogReadsBodiesAsTheServer(t *testing.T) {
	e := newRedteamEnv(t)
	root := dbtest.Open(t, withParam(e.srv.RootDSN(e.db), "multiStatements=true"))
	for _, q := range []string{
		// Names of digits and hex letters: numbers to the former lexer,
		// routine names to the server (measured on MariaDB 10.11).
		"CREATE PROCEDURE `123abc`() UPDATE invoices SET amount = amount + 1",
		"CREATE PROCEDURE `1e5`() UPDATE invoices SET amount = amount + 1",
		"CREATE FUNCTION `12ab`() RETURNS INT MODIFIES SQL DATA BEGIN UPDATE invoices SET amount = amount + 1; RETURN 1; END",
		"CREATE PROCEDURE p_digits() CALL 123abc()",
		"CREATE TABLE dn1 (id INT)", "CREATE TABLE dn2 (id INT)", "CREATE TABLE dn3 (id INT)", "CREATE TABLE dn4 (id INT)",
		"CREATE TRIGGER dn1_bi BEFORE INSERT ON dn1 FOR EACH ROW CALL 123abc()",
		"CREATE TRIGGER dn2_bi BEFORE INSERT ON dn2 FOR EACH ROW CALL " + e.db + ".1e5()",
		"CREATE TRIGGER dn3_bi BEFORE INSERT ON dn3 FOR EACH ROW SET @x = 12ab()",
		// "--" then DEL is a comment to the server; the former lexer read
		// the quote in it as the start of a string.
		"CREATE TRIGGER dn4_bi BEFORE INSERT ON dn4 FOR EACH ROW BEGIN SET @a = 1; --\x7f '\nUPDATE invoices SET amount = amount + 1; -- '\nEND",
	} {
		mustExec(t, root, q)
	}
	// The server runs them as written (else the attempts prove nothing).
	before := queryString(t, root, "SELECT SUM(amount) FROM invoices")
	mustExec(t, root, "INSERT INTO dn4 VALUES (0)")
	if after := queryString(t, root, "SELECT SUM(amount) FROM invoices"); after == before {
		t.Fatalf("the trigger behind '--' and DEL did not write invoices (%s)", after)
	}
	awaitCatalog(t, e.fencedEnv)
	runAttacks(t, e, []rtAttack{
		one("trigger calling a procedure named 123abc", "INSERT INTO dn1 VALUES (1)"),
		one("trigger calling a qualified procedure named 1e5", "INSERT INTO dn2 VALUES (1)"),
		one("trigger calling a function named 12ab", "INSERT INTO dn3 VALUES (1)"),
		one("trigger writing after a comment of '--' and DEL", "INSERT INTO dn4 VALUES (1)"),
		one("procedure calling a procedure named 123abc", "CALL p_digits()"),
	})
}

// TestCatalogRefreshAfterDDLAsTheServerReadsIt: a statement that creates a
// schema object, in any form the server reads as one (after comments, in
// an executable comment as mysqldump writes it, after another statement),
// makes the proxy read the catalog again before the connection's next
// command; the periodic refresh (10 minutes here) plays no part.
func TestCatalogRefreshAfterDDLAsTheServerReadsIt(t *testing.T) {
	e := newFencedEnv(t, envOptions{account: true, extra: "catalog:\n  refresh: 10m\n"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.proxy.Proxy.WaitCatalog(ctx, 0); err != nil {
		t.Fatal(err)
	}
	c := e.session(t, "multiStatements=true")
	for _, f := range []struct{ name, sql string }{
		{"after a -- comment", "-- made by the migration tool\nCREATE VIEW rv1 AS SELECT 1 AS x"},
		{"after a # comment", "# note\nCREATE VIEW rv2 AS SELECT 1 AS x"},
		{"in an executable comment", "/*!50001 CREATE VIEW rv3 AS SELECT 1 AS x */"},
		{"in MariaDB's executable comment", "/*M! CREATE VIEW rv4 AS SELECT 1 AS x */"},
		{"after another statement", "SELECT 1; CREATE VIEW rv5 AS SELECT 1 AS x"},
	} {
		t.Run(f.name, func(t *testing.T) {
			view := f.sql[strings.Index(f.sql, "VIEW ")+5:][:3]
			if _, err := c.ExecContext(ctx, f.sql); err != nil {
				t.Fatal(err)
			}
			// The next command waits for the refresh.
			if _, err := c.ExecContext(ctx, "DO 1"); err != nil {
				t.Fatal(err)
			}
			st, _ := e.proxy.Proxy.CatalogState()
			if st.Snapshot == nil {
				t.Fatal("no catalog")
			}
			for _, v := range st.Snapshot.Views {
				if v.Name == view {
					return
				}
			}
			t.Fatalf("the catalog does not know the view %s created by %q", view, f.sql)
		})
	}
}

// TestStatementDigestHidesLiteralsAsTheServerReadsThem: the audit digest
// of a stale write and of a refused statement, under NO_BACKSLASH_ESCAPES,
// where 'x\' ends a string: the digester's own lexer (backslash escapes
// on) read the next literal as a name and put it into the record.
func TestStatementDigestHidesLiteralsAsTheServerReadsThem(t *testing.T) {
	e := newRedteamEnv(t)
	ctx := context.Background()
	c := e.session(t)
	mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
	mustExec(t, c, "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
	before := len(e.auditRecords(t))
	res, err := c.ExecContext(ctx, `UPDATE invoices SET customer = 'x\', period = 'topsecret1' WHERE id = 1`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("the stale write changed %d rows", n)
	}
	if _, err := c.ExecContext(ctx, `CREATE TRIGGER tr_nbe BEFORE INSERT ON invoices FOR EACH ROW SET NEW.customer = 'x\', NEW.period = 'topsecret2'`); err == nil {
		t.Fatal("a trigger on a protected table was created")
	}
	recs := e.auditRecords(t)[before:]
	if len(recs) != 2 {
		t.Fatalf("want 2 audit records (the stale write, the refusal), got %+v", recs)
	}
	for _, r := range recs {
		if strings.Contains(r.Digest, "topsecret") || r.Digest == "" {
			t.Errorf("audit record %s: digest %q", r.Reason, r.Digest)
		}
	}
}
