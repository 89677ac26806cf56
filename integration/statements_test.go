package integration

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
)

// The statement half of the closed model (docs/statements.md) against the
// real server, with the catalog on: statements inside statements (dynamic
// SQL, compound statements, SET STATEMENT ... FOR, stored program
// definitions that end before the packet does), prepared statement names
// as the server folds them, routines and views named in other spellings
// and character sets, and character sets that change how later statements
// read. With a stale fence each attempt must change nothing; the statements
// the proxy models must do with a valid fence what they do directly.

// newStatementsEnv is newCatalogEnv plus routines and a view whose names are
// not ASCII, known to the catalog before it returns.
func newStatementsEnv(t *testing.T) *catalogEnv {
	t.Helper()
	// bids: a protected table whose name the _filename character set can
	// spell without one of its letters (@0062ids is bids).
	e := newCatalogEnv(t, [2]string{"bids", "bids-lease"})
	for _, q := range []string{
		"INSERT INTO bids (id, n) VALUES (1, 1)",
		"CREATE PROCEDURE `bümp`() BEGIN UPDATE jobs SET n = n + 100; END",
		"CREATE FUNCTION `bümpf`() RETURNS INT BEGIN UPDATE jobs SET n = n + 1000; RETURN 1; END",
		"CREATE VIEW `v_über` AS SELECT id, n FROM jobs",
		"CREATE TABLE plain (id INT AUTO_INCREMENT PRIMARY KEY, n INT NOT NULL DEFAULT 0)",
	} {
		mustExec(t, e.root, q)
	}
	e.await(t, "the non-ASCII routines and view", func(c *catalog.Closure) bool {
		return c.Procedure(e.db, "bümp") != nil && c.Function(e.db, "bümpf") != nil && c.Table(e.db, "v_über") != nil
	})
	return e
}

// conn opens a session with multi-statements and the given fence.
func (e *catalogEnv) conn(t *testing.T, valid bool, params ...string) *sql.Conn {
	t.Helper()
	c, err := appDB(t, e.proxy, e.db, append([]string{"multiStatements=true"}, params...)...).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := e.store.Acquire(context.Background(), "job:"+t.Name(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !valid {
		l.Token++
	}
	setFence(t, c, l)
	return c
}

func (e *catalogEnv) fullDump(t *testing.T) string {
	t.Helper()
	return e.dump(t) + "--\n" + tableDump(t, e.root, "plain") + "--\n" + tableDump(t, e.root, "bids")
}

// statementAttacks: each runs setup (errors ignored: a refused setup is
// part of the attack) and then the attempt, on one stale session.
var statementAttacks = []struct {
	name   string
	params []string // DSN parameters (charset=latin1, ...)
	setup  []string
	try    string
}{
	// Dynamic SQL text the server converts before reading it.
	{name: "execute immediate _filename", try: "EXECUTE IMMEDIATE _filename'@0075pdate jobs set n = 0'"},
	{name: "execute immediate _filename insert", try: "EXECUTE IMMEDIATE _filename'@0069nsert into jobs (n) values (1)'"},
	{name: "prepare _swe7 then execute", setup: []string{"PREPARE s FROM _swe7'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE s"},
	{name: "prepare _ucs2", try: "PREPARE s FROM _ucs2 X'0049004E0053004500520054'"},
	{name: "execute immediate _binary insert", try: "EXECUTE IMMEDIATE _binary'INSERT INTO jobs (n) VALUES (1)'"},
	{name: "execute immediate N insert", try: "EXECUTE IMMEDIATE N'INSERT INTO jobs (n) VALUES (1)'"},
	{name: "execute immediate plain insert", try: "EXECUTE IMMEDIATE 'INSERT INTO jobs (n) VALUES (1)'"},
	{name: "execute immediate hex", try: "EXECUTE IMMEDIATE X'494E5345525420494E544F206A6F627320286E292056414C5545532028312920'"},
	{name: "execute immediate from a variable", setup: []string{"SET @q = 'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE IMMEDIATE @q"},
	{name: "execute immediate concat", try: "EXECUTE IMMEDIATE CONCAT('INSERT INTO jo', 'bs (n) VALUES (1)')"},
	{name: "execute immediate non-ascii text", try: "EXECUTE IMMEDIATE 'INSERT INTO jobs (n) SELECT 1 FROM dual WHERE ''é'' = ''é'''"},
	{name: "execute immediate cascading delete", try: "EXECUTE IMMEDIATE _filename'delete from parent'"},
	{name: "execute immediate _filename hiding the table", try: "EXECUTE IMMEDIATE _filename'@0064elete@0020from@0020@0062ids'"},
	{name: "prepare _filename hiding the table", setup: []string{"PREPARE f FROM _filename'@0064elete@0020from@0020@0062ids'"},
		try: "EXECUTE f"},
	{name: "execute immediate _filename update hiding the table",
		try: "EXECUTE IMMEDIATE _filename'@0075pdate@0020@0062ids@0020set@0020n@0020@003d@00200'"},
	{name: "execute immediate _filename replace hiding the table",
		try: "EXECUTE IMMEDIATE _filename'@0072eplace@0020@0062ids@0020values@0020(1,@00207)'"},
	{name: "prepare _swe7 hiding the table", setup: []string{"PREPARE w FROM _swe7'DELETE FROM bids'"}, try: "EXECUTE w"},
	// Compound statements that run another statement.
	{name: "execute immediate compound executing s", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "EXECUTE IMMEDIATE 'BEGIN NOT ATOMIC EXECUTE s; END'"},
	{name: "compound executing s", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "BEGIN NOT ATOMIC EXECUTE s; END"},
	{name: "if executing s", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "IF 1 THEN EXECUTE s; END IF"},
	{name: "second statement of a compound executing s", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "BEGIN NOT ATOMIC SELECT 1; EXECUTE s; END"},
	{name: "compound executing set names gbk, then a gbk payload",
		setup: []string{"PREPARE g FROM 'SET NAMES gbk'", "BEGIN NOT ATOMIC EXECUTE g; END"},
		try:   "UPDATE jobs SET n = 0 WHERE id = 1 AND 'a\xbf\\' = 'x' OR 1 -- '"},
	{name: "execute set names gbk, then a gbk payload in the same packet",
		setup: []string{"PREPARE g FROM 'SET NAMES gbk'"},
		try:   "EXECUTE g; UPDATE jobs SET n = 0 WHERE id = 1 AND 'a\xbf\\' = 'x' OR 1 -- '"},
	{name: "compound with set names gbk, then a gbk payload",
		setup: []string{"BEGIN NOT ATOMIC SET NAMES gbk; END"},
		try:   "UPDATE jobs SET n = 0 WHERE id = 1 AND 'a\xbf\\' = 'x' OR 1 -- '"},
	{name: "compound writing", try: "BEGIN NOT ATOMIC INSERT INTO jobs (n) VALUES (1); END"},
	{name: "for loop writing", try: "FOR i IN 1..2 DO UPDATE jobs SET n = i; END FOR"},
	{name: "while writing", try: "WHILE (SELECT COUNT(*) FROM plain) < 1 DO INSERT INTO plain () VALUES (); DELETE FROM jobs; END WHILE"},
	{name: "repeat writing", try: "REPEAT DELETE FROM jobs; UNTIL 1 END REPEAT"},
	{name: "labelled loop writing", try: "l: LOOP DELETE FROM jobs; LEAVE l; END LOOP l"},
	{name: "case writing", try: "CASE WHEN 1 THEN UPDATE jobs SET n = 0; END CASE"},
	{name: "handler writing", try: "BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION DELETE FROM jobs; SIGNAL SQLSTATE '45000'; END"},
	{name: "compound writing through a view", try: "BEGIN NOT ATOMIC SELECT 1; UPDATE v_jobs SET n = 0; END"},
	{name: "compound inserting into a trigger table", try: "BEGIN NOT ATOMIC SELECT 1; INSERT INTO orders (x) VALUES (5); END"},
	{name: "compound deleting a cascading parent", try: "BEGIN NOT ATOMIC SELECT 1; DELETE FROM parent; END"},
	{name: "compound calling touch second", try: "BEGIN NOT ATOMIC SELECT 1; CALL touch(); END"},
	{name: "compound calling bump in a condition", try: "IF bump() THEN SELECT 1; END IF"},
	{name: "END as an alias hiding a write", try: "BEGIN NOT ATOMIC SELECT 1 END; UPDATE jobs SET n = 0; END"},
	{name: "compound then an unguarded insert in the same packet", try: "BEGIN NOT ATOMIC SELECT 1; END; INSERT INTO jobs (n) VALUES (1)"},
	// sql_mode=ORACLE.
	{name: "oracle block calling touch without CALL", setup: []string{"SET sql_mode = 'ORACLE'"}, try: "BEGIN touch; END"},
	{name: "oracle block calling bümp without CALL", setup: []string{"SET sql_mode = 'ORACLE'"}, try: "BEGIN NULL; `BÜMP`; END"},
	{name: "oracle block with execute immediate", setup: []string{"SET sql_mode = 'ORACLE'"},
		try: "BEGIN EXECUTE IMMEDIATE 'INSERT INTO jobs (n) VALUES (1)'; END"},
	{name: "oracle declare section writing", setup: []string{"SET sql_mode = 'ORACLE'"}, try: "DECLARE x INT := 0; BEGIN UPDATE jobs SET n = x; END"},
	{name: "oracle exception handler writing", setup: []string{"SET sql_mode = 'ORACLE'"},
		try: "BEGIN SELECT 1/0; EXCEPTION WHEN OTHERS THEN DELETE FROM jobs; END"},
	{name: "oracle mode from a variable, then a block", setup: []string{"SET @m = 'ORACLE'", "SET sql_mode = @m"}, try: "BEGIN touch; END"},
	// Routines and views named in other spellings and character sets.
	{name: "call bümp", try: "CALL `bümp`()"},
	{name: "call BÜMP", try: "CALL `BÜMP`()"},
	{name: "call bump with another accent", try: "CALL `bûmp`()"},
	{name: "call bümp qualified", try: "CALL `" + "%DB%" + "`.`bÜmp`()"},
	{name: "select bümpf", try: "SELECT `bÜmpf`()"},
	{name: "compound calling bümp", try: "BEGIN NOT ATOMIC SELECT 1; CALL `bümp`(); END"},
	{name: "compound setting from bümpf", try: "BEGIN NOT ATOMIC SELECT 1; SET @x = `bümpf`(); END"},
	{name: "latin1 client calls bümp", params: []string{"charset=latin1"}, try: "CALL `b\xfcmp`()"},
	{name: "latin1 client selects bümpf", params: []string{"charset=latin1"}, try: "SELECT `b\xfcmpf`()"},
	{name: "latin1 client writes v_über", params: []string{"charset=latin1"}, try: "UPDATE `v_\xfcber` SET n = 0"},
	{name: "latin1 client writes v_über bare", params: []string{"charset=latin1"}, try: "UPDATE v_\xfcber SET n = 0"},
	{name: "latin1 client compound writes v_über", params: []string{"charset=latin1"},
		try: "BEGIN NOT ATOMIC SELECT 1; UPDATE `v_\xfcber` SET n = 0; END"},
	{name: "latin1 client compound calls bümp", params: []string{"charset=latin1"}, try: "BEGIN NOT ATOMIC SELECT 1; CALL `b\xfcmp`(); END"},
	{name: "swe7 client", setup: []string{"SET NAMES swe7"}, try: "CALL b^mp()"},
	{name: "swe7 connection for dynamic sql", setup: []string{"SET character_set_connection = swe7"},
		try: "EXECUTE IMMEDIATE 'INSERT INTO jobs (n) VALUES (1)'"},
	// SET STATEMENT ... FOR.
	{name: "set statement for execute of a guarded insert", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "SET STATEMENT max_statement_time = 10 FOR EXECUTE s"},
	{name: "nested set statement for execute", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "SET STATEMENT max_statement_time = 10 FOR SET STATEMENT lock_wait_timeout = 5 FOR EXECUTE s"},
	{name: "set statement for an insert", try: "SET STATEMENT max_statement_time = 10 FOR INSERT INTO jobs (n) VALUES (1)"},
	{name: "set statement for a delete", try: "SET STATEMENT foreign_key_checks = 0 FOR DELETE FROM jobs"},
	{name: "set statement for an insert into a trigger table", try: "SET STATEMENT max_statement_time = 10 FOR INSERT INTO orders (x) VALUES (1)"},
	{name: "set statement sql_mode for execute immediate", try: "SET STATEMENT sql_mode = 'ANSI_QUOTES' FOR EXECUTE IMMEDIATE 'DELETE FROM \"jobs\"'"},
	{name: "set statement for a compound executing s", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "SET STATEMENT max_statement_time = 10 FOR BEGIN NOT ATOMIC EXECUTE s; END"},
	{name: "set statement for call touch", try: "SET STATEMENT max_statement_time = 10 FOR CALL touch()"},
	// Definitions end where the server ends them.
	{name: "procedure then execute in one packet", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "CREATE PROCEDURE p_a() SELECT 1; EXECUTE s"},
	{name: "procedure then insert in one packet", try: "CREATE PROCEDURE p_b() SELECT 1; INSERT INTO jobs (n) VALUES (1)"},
	{name: "function then delete in one packet", try: "CREATE FUNCTION f_c() RETURNS INT DETERMINISTIC RETURN 1; DELETE FROM jobs"},
	{name: "trigger then call in one packet", try: "CREATE TRIGGER plain_bi BEFORE INSERT ON plain FOR EACH ROW SET NEW.n = 1; CALL touch()"},
	{name: "event then insert in one packet", try: "CREATE EVENT ev_d ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL 1 DAY DO SELECT 1; INSERT INTO jobs (n) VALUES (1)"},
	{name: "procedure whose END is an alias, then execute", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (1)'"},
		try: "CREATE PROCEDURE p_e() BEGIN SELECT 1 END; END; EXECUTE s"},
	// Prepared statement names as the server folds them.
	{name: "prepare é, execute è", setup: []string{"PREPARE `é` FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE `è`"},
	{name: "prepare Ü, execute ü", setup: []string{"PREPARE `Ü` FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE `ü`"},
	{name: "prepare é, prepare e, execute é", setup: []string{"PREPARE `é` FROM 'INSERT INTO jobs (n) VALUES (1)'", "PREPARE e FROM 'SELECT 1'"},
		try: "EXECUTE `é`"},
	{name: "prepare S, execute s", setup: []string{"PREPARE S FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE s"},
	{name: "latin1 client prepares é, executes è", params: []string{"charset=latin1"},
		setup: []string{"PREPARE `\xe9` FROM 'INSERT INTO jobs (n) VALUES (1)'"}, try: "EXECUTE `\xe8`"},
	{name: "prepare in one packet, execute by another spelling", try: "PREPARE `é` FROM 'INSERT INTO jobs (n) VALUES (1)'; EXECUTE `È`"},
	// Kinds the proxy does not model.
	{name: "binlog", try: "BINLOG 'AAAA'"},
	{name: "install soname", try: "INSTALL SONAME 'ha_connect'"},
	{name: "create server", try: "CREATE SERVER s_x FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1', DATABASE '%DB%', USER 'root')"},
	{name: "start slave", try: "START SLAVE"},
	{name: "handler read", try: "HANDLER jobs OPEN"},
}

func TestStatementAttacks(t *testing.T) {
	e := newStatementsEnv(t)
	ctx := context.Background()
	count := 0
	for _, a := range statementAttacks {
		a := a
		count++
		t.Run(a.name, func(t *testing.T) {
			c := e.conn(t, false, a.params...)
			before, audits := e.fullDump(t), e.audits(t)
			for _, q := range a.setup {
				c.ExecContext(ctx, strings.ReplaceAll(q, "%DB%", e.db))
			}
			_, err := c.ExecContext(ctx, strings.ReplaceAll(a.try, "%DB%", e.db))
			if after := e.fullDump(t); after != before {
				t.Fatalf("%q (err %v) with a stale fence changed the tables:\nbefore\n%s\nafter\n%s", a.try, err, before, after)
			}
			_ = audits
		})
	}
	t.Logf("%d statement attacks", count)
}

// TestStatementsModelled: what the proxy models runs with a valid fence as
// it runs directly.
func TestStatementsModelled(t *testing.T) {
	e := newStatementsEnv(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		setup []string
		run   string
		rows  string // SELECT n FROM jobs ORDER BY id, after
	}{
		{name: "prepare é, execute è inserts", setup: []string{"PREPARE `é` FROM 'INSERT INTO jobs (n) VALUES (7)'"}, run: "EXECUTE `è`",
			rows: "10,20,7"},
		{name: "set statement for execute inserts", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (8)'"},
			run: "SET STATEMENT max_statement_time = 10 FOR EXECUTE s", rows: "10,20,8"},
		{name: "set statement for update", run: "SET STATEMENT max_statement_time = 10 FOR UPDATE jobs SET n = n + 1", rows: "11,21"},
		{name: "compound then insert", run: "BEGIN NOT ATOMIC SELECT 1; END; INSERT INTO jobs (n) VALUES (9)", rows: "10,20,9"},
		{name: "procedure then execute", setup: []string{"PREPARE s FROM 'INSERT INTO jobs (n) VALUES (6)'"},
			run: "CREATE OR REPLACE PROCEDURE p_ok() SELECT 1; EXECUTE s", rows: "10,20,6"},
		{name: "execute immediate insert", run: "EXECUTE IMMEDIATE 'INSERT INTO jobs (n) VALUES (5)'", rows: "10,20,5"},
		{name: "execute immediate _utf8mb4 update", run: "EXECUTE IMMEDIATE _utf8mb4'UPDATE jobs SET n = 1 WHERE id = 1'", rows: "1,20"},
		{name: "compound writing an unprotected table", run: "BEGIN NOT ATOMIC DECLARE i INT DEFAULT 0; WHILE i < 3 DO INSERT INTO plain (n) VALUES (i); SET i = i + 1; END WHILE; END",
			rows: "10,20"},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			mustExec(t, e.root, "DELETE FROM jobs WHERE id > 2")
			mustExec(t, e.root, "UPDATE jobs SET n = id * 10")
			mustExec(t, e.root, "DELETE FROM plain")
			c := e.conn(t, true)
			for _, q := range k.setup {
				mustExec(t, c, q)
			}
			if _, err := c.ExecContext(ctx, k.run); err != nil {
				t.Fatalf("%s: %v", k.run, err)
			}
			if got := queryString(t, e.root, "SELECT GROUP_CONCAT(n ORDER BY id) FROM jobs"); got != k.rows {
				t.Fatalf("%s: jobs %s, want %s", k.run, got, k.rows)
			}
		})
	}
	t.Run("the compound wrote the unprotected table", func(t *testing.T) {
		mustExec(t, e.root, "DELETE FROM plain")
		c := e.conn(t, true)
		mustExec(t, c, "BEGIN NOT ATOMIC DECLARE i INT DEFAULT 0; WHILE i < 3 DO INSERT INTO plain (n) VALUES (i); SET i = i + 1; END WHILE; END")
		if got := queryString(t, e.root, "SELECT COUNT(*) FROM plain"); got != "3" {
			t.Fatalf("plain has %s rows", got)
		}
	})
}

// TestSwe7Handshake: a client whose handshake names a swe7 collation (in
// which [ ] ^ { } ~ are letters: the server reads b^mp2 as one name) gets
// every statement refused while the policy protects a table.
func TestSwe7Handshake(t *testing.T) {
	e := newStatementsEnv(t)
	mustExec(t, e.root, "CREATE PROCEDURE `bÜmp2`() BEGIN UPDATE jobs SET n = n + 1; END")
	c, err := appDB(t, e.proxy, e.db, "collation=swe7_swedish_ci", "multiStatements=true").Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := e.fullDump(t)
	for _, q := range []string{"CALL b^mp()", "CALL b^mp2()", "SELECT 1"} {
		_, err := c.ExecContext(context.Background(), q)
		if err == nil || !strings.Contains(err.Error(), "ASCII") {
			t.Errorf("%s: %v, want refused", q, err)
		}
	}
	if after := e.fullDump(t); after != before {
		t.Fatalf("the swe7 session changed the tables:\nbefore\n%s\nafter\n%s", before, after)
	}
	// Directly, the same session reads b^mp2 as one name (the proxy's
	// lexer would read b, ^, mp2): measured, the server looks for a
	// procedure named b, 0x5E, mp2.
	d := directDB(t, dbtest.Shared(t), e.db, "collation=swe7_swedish_ci")
	if _, err := d.Exec("CALL b^mp2()"); err == nil || !strings.Contains(err.Error(), "b.005Emp2") {
		t.Fatalf("directly, CALL b^mp2(): %v; want the server to read one name", err)
	}
}
