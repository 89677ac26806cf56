package integration

import (
	"testing"

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
