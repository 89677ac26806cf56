package integration

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// The red team's attempts: an app account (ALL privileges, as the
// harness's app user has) that talks to the proxy with the catalog on (the
// proxy's own account) and wants a stale write to land in a protected
// table. Each attempt runs in a session of its own with a stale fence (the
// lease is held by another owner at a later token) and must change nothing
// in the protected tables and the lease table: refused, rejected, or 0
// rows. Attempts that landed on main before a fix say so in their name's
// comment; those still open are skipped with "KNOWN BYPASS".

// rtAttack is one attempt: setup runs directly as root first, then the
// statements through the proxy, all in one COM_QUERY unless each is set.
type rtAttack struct {
	name   string
	setup  []string // direct, as root, in the env's database
	stmts  []string
	each   bool     // one COM_QUERY per statement (else joined by newlines)
	params []string // more DSN parameters of the session
	after  []string // direct, as root, after the check
	open   bool     // a known bypass: skipped unless RT_UNSKIP is set
}

// rtEnv is a fencedEnv with the objects the attacks use, created directly
// on the server and seen by the catalog before the first attempt.
type rtEnv struct {
	*fencedEnv
	stale lease.Lease // what the stale session presents
}

func newRedteamEnv(t *testing.T) *rtEnv {
	t.Helper()
	e := newFencedEnv(t, envOptions{account: true})
	db := e.db
	root := dbtest.Open(t, withParam(e.srv.RootDSN(db), "multiStatements=true"))
	for _, q := range []string{
		"INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'globex', '2026-10', 20)",
		"INSERT INTO reconciliation_runs (id, status) VALUES (1, 'done')",
		"INSERT INTO notes (id, body) VALUES (1, 'n')",
		// Writers the operator made: the catalog refuses their calls.
		"CREATE PROCEDURE bump() UPDATE invoices SET amount = amount + 1",
		"CREATE FUNCTION bumpf() RETURNS INT MODIFIES SQL DATA BEGIN UPDATE invoices SET amount = amount + 1; RETURN 1; END",
		// A view over a protected table, a table whose triggers write one,
		// a parent whose foreign key cascades into one.
		"CREATE VIEW v_inv AS SELECT * FROM invoices",
		"CREATE TABLE trg_t (id INT PRIMARY KEY, v INT)",
		"CREATE TRIGGER trg_t_bi BEFORE INSERT ON trg_t FOR EACH ROW UPDATE invoices SET amount = amount + 1",
		"CREATE TRIGGER trg_t_bd BEFORE DELETE ON trg_t FOR EACH ROW UPDATE invoices SET amount = amount + 100",
		"INSERT INTO trg_t VALUES (1, 1)",
		"CREATE TABLE parent2 (id INT PRIMARY KEY, c VARCHAR(10))",
		"INSERT INTO parent2 VALUES (1, 'a'), (2, 'b'), (3, 'c')",
		"ALTER TABLE invoices ADD CONSTRAINT fk_rt_parent2 FOREIGN KEY (id) REFERENCES parent2 (id) ON DELETE CASCADE ON UPDATE CASCADE",
		"CREATE SEQUENCE seq1",
		"CREATE TABLE plain (id INT PRIMARY KEY, v INT) PARTITION BY HASH (id) PARTITIONS 2",
		"CREATE TABLE swap LIKE invoices",
		"CREATE TABLE other_invoices (id INT PRIMARY KEY, amount INT)",
	} {
		mustExec(t, root, q)
	}
	// The stale session's fence: the lease was taken over since.
	old := e.acquire(t, "invoice:acme", time.Minute)
	e.setToken(t, "invoice:acme", old.Token)
	e.acquire(t, "invoice:acme", time.Hour)
	e.acquire(t, "admin:reconciliation", time.Hour)
	awaitCatalog(t, e)
	return &rtEnv{fencedEnv: e, stale: old}
}

// awaitCatalog waits for a catalog refresh that started after the call.
func awaitCatalog(t *testing.T, e *fencedEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.proxy.Proxy.WaitCatalog(ctx, e.proxy.Proxy.CatalogChecks()+1); err != nil {
		t.Fatal(err)
	}
}

// protected is everything a stale write must not change: the protected
// tables, the lease table, and the events of the schema (an event runs on
// the server, where the proxy never sees its statements).
func (e *rtEnv) protected(t *testing.T) string {
	t.Helper()
	return tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs") + "--\n" +
		tableDump(t, e.root, "(SELECT lease_name, HEX(owner_token), fence_token FROM fenced_job_leases WHERE lease_name IN ('invoice:acme', 'admin:reconciliation')) AS l") + "--\n" +
		tableDump(t, e.root, "(SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = '"+e.db+"') AS ev")
}

func (e *rtEnv) run(t *testing.T, a rtAttack) {
	t.Helper()
	rootMulti := dbtest.Open(t, withParam(e.srv.RootDSN(e.db), "multiStatements=true"))
	for _, q := range a.setup {
		mustExec(t, rootMulti, q)
	}
	for _, q := range a.after {
		t.Cleanup(func() { rootMulti.Exec(q) })
	}
	want := e.protected(t)
	c := e.session(t, append([]string{"multiStatements=true", "allowAllFiles=true"}, a.params...)...)
	mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
	stmts := []string{strings.Join(a.stmts, "\n")}
	if a.each {
		stmts = a.stmts
	}
	var outcome []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range stmts {
		if _, err := c.ExecContext(ctx, q); err != nil {
			outcome = append(outcome, err.Error())
		} else {
			outcome = append(outcome, "ok")
		}
	}
	if got := e.protected(t); got != want {
		t.Fatalf("a stale session changed a protected table (outcomes %q):\nbefore\n%s\nafter\n%s", outcome, want, got)
	}
}

func runAttacks(t *testing.T, e *rtEnv, attacks []rtAttack) {
	t.Helper()
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) { e.run(t, a) })
	}
}

// one is an attack of one COM_QUERY.
func one(name, q string) rtAttack { return rtAttack{name: name, stmts: []string{q}} }

// each is an attack of one COM_QUERY per statement.
func each(name string, stmts ...string) rtAttack {
	return rtAttack{name: name, stmts: stmts, each: true}
}

// TestRedteamStatements: every statement kind's sub-forms and odd
// spellings, through the proxy with a stale fence.
func TestRedteamStatements(t *testing.T) {
	e := newRedteamEnv(t)
	db := e.db
	runAttacks(t, e, []rtAttack{
		one("plain", "UPDATE invoices SET amount=0"),
		one("version comment", "/*!50000 UPDATE invoices SET amount=0 */"),
		one("MariaDB version comment", "/*M!100000 UPDATE invoices SET amount=0 */"),
		one("dead version comment before", "/*!110000 SELECT 1; */ UPDATE invoices SET amount=0"),
		one("dead MariaDB comment word", "/*M!999999 SELECT */ UPDATE invoices SET amount=0"),
		one("statement separator in a version comment", "SELECT 1 /*!50000 ; UPDATE invoices SET amount=0 */"),
		one("versionless comment", "/*!UPDATE invoices SET amount=0*/"),
		one("keyword in a comment", "/*! UPDATE */ invoices SET amount=0"),
		one("empty comments as spaces", "UPDATE/**/invoices/**/SET/**/amount=0"),
		one("tab", "UPDATE\tinvoices SET amount=0"),
		one("OR 1 in a MariaDB comment", "UPDATE invoices SET amount=0 WHERE 1 /*M!100000 OR 1 */"),
		one("backquote inside a quoted name", "UPDATE `invoi``ces` SET amount=0"),
		one("schema quoted apart", "UPDATE "+db+".`invoices` SET amount=0"),
		one("space before the dot", "UPDATE "+db+" .invoices SET amount=0"),
		one("alias glued to the name", "UPDATE `"+db+"`.`invoices`i SET i.amount=0"),
		one("empty executable comment", "update/*!*/invoices set amount=0"),
		one("DELETE LOW_PRIORITY", "DELETE LOW_PRIORITY FROM invoices"),
		one("DELETE PARTITION", "DELETE FROM invoices PARTITION (p0)"),
		one("INSERT RETURNING", "INSERT INTO invoices (customer,period,amount) VALUES ('x','2026-11',1) RETURNING id"),
		one("REPLACE RETURNING", "REPLACE INTO invoices (customer,period,amount) VALUES ('x','2026-11',1) RETURNING id"),
		one("DELETE RETURNING", "DELETE FROM invoices RETURNING id"),
		one("INSERT DELAYED", "INSERT DELAYED INTO invoices (customer,period,amount) VALUES ('x','2026-11',1)"),
		one("INSERT HIGH_PRIORITY IGNORE", "INSERT HIGH_PRIORITY IGNORE INTO invoices (customer,period,amount) VALUES ('x','2026-11',1)"),
		one("INSERT VALUE", "INSERT INTO invoices VALUE ('9','x','2026-11',1,NULL)"),
		one("INSERT without INTO, SET form", "INSERT invoices SET customer='x',period='2026-11',amount=1"),
		one("INSERT TABLE", "INSERT INTO invoices (customer,period,amount) TABLE notes"),
		one("ON DUPLICATE KEY UPDATE VALUE()", "INSERT INTO invoices (customer,period,amount) VALUES ('acme','2026-10',1) ON DUPLICATE KEY UPDATE amount=VALUE(amount)"),
		one("INSERT parenthesized SELECT", "INSERT INTO invoices (customer,period,amount) (SELECT 'x','2026-11',1)"),
		one("INSERT WITH", "INSERT INTO invoices (customer,period,amount) WITH q AS (SELECT 'x','2026-11',1) SELECT * FROM q"),
		one("WITH INSERT", "WITH q AS (SELECT 1) INSERT INTO invoices (customer,period,amount) VALUES ('x','2026-11',1)"),
		one("WITH RECURSIVE DELETE", "WITH RECURSIVE q AS (SELECT 1) DELETE FROM invoices"),
		one("parenthesized UPDATE", "(UPDATE invoices SET amount=0)"),
		one(`\G`, `UPDATE invoices SET amount=0 \G`),
		one(`\g`, `UPDATE invoices SET amount=0 \g`),
		one("HANDLER", "HANDLER invoices OPEN; HANDLER invoices READ FIRST"),
		one("HANDLER alias named like the protected table", "HANDLER notes OPEN AS invoices; HANDLER invoices READ FIRST"),
		each("LOCK TABLES WRITE", "LOCK TABLES invoices WRITE", "UPDATE invoices SET amount=0", "UNLOCK TABLES"),
		each("LOCK TABLES with the lease table", "LOCK TABLES invoices AS i WRITE, fenced_job_leases READ", "UPDATE invoices i SET i.amount=0", "UNLOCK TABLES"),
		one("LOCK TABLES in one packet", "LOCK TABLES notes WRITE, invoices WRITE; UPDATE invoices SET amount=0; UNLOCK TABLES"),
		each("SAVEPOINT", "SAVEPOINT a", "UPDATE invoices SET amount=0"),
		one("SAVEPOINT rollback", "SAVEPOINT s; UPDATE invoices SET amount=0; ROLLBACK TO SAVEPOINT s"),
		one("SET STATEMENT sql_mode", "SET STATEMENT sql_mode='' FOR UPDATE invoices SET amount=0"),
		one("SET STATEMENT max_statement_time", "SET STATEMENT max_statement_time=0 FOR DELETE FROM invoices"),
		one("SET STATEMENT foreign_key_checks", "SET STATEMENT foreign_key_checks=0 FOR DELETE FROM invoices"),
		one("SET STATEMENT ANSI_QUOTES", `SET STATEMENT sql_mode='ANSI_QUOTES' FOR UPDATE "invoices" SET amount=0`),
		one("SET STATEMENT NO_BACKSLASH_ESCAPES", `SET STATEMENT sql_mode='NO_BACKSLASH_ESCAPES' FOR SELECT 'a\'; UPDATE invoices SET amount=0; -- '`),
		one("SET STATEMENT character_set_client", "SET STATEMENT character_set_client=gbk FOR SELECT '\xbf\\'; UPDATE invoices SET amount=0; -- '"),
		one("SET STATEMENT timestamp", "SET STATEMENT timestamp=1 FOR UPDATE invoices SET amount=0"),
		one("SET STATEMENT time_zone", "SET STATEMENT time_zone='-10:00' FOR UPDATE invoices SET amount=0"),
		one("SET STATEMENT EXECUTE IMMEDIATE", "SET STATEMENT sql_safe_updates=0 FOR EXECUTE IMMEDIATE 'UPDATE invoices SET amount=0'"),
		one("SET STATEMENT of a fence variable", "SET STATEMENT @fence_token=5 FOR UPDATE invoices SET amount=0"),
		one("SET STATEMENT checks off", "SET STATEMENT foreign_key_checks=0, unique_checks=0, check_constraint_checks=0 FOR UPDATE invoices SET amount=0"),
		one("SET STATEMENT sql_mode ORACLE block", "SET STATEMENT sql_mode='ORACLE' FOR BEGIN UPDATE invoices SET amount=0; END"),
		each("ANSI_QUOTES", "SET sql_mode='ANSI_QUOTES'", `UPDATE "invoices" SET amount=0`),
		each("ANSI_QUOTES string hiding a statement", "SET sql_mode='ANSI_QUOTES'", `UPDATE invoices SET amount=0 WHERE customer = "a' OR 1; UPDATE invoices SET amount=0; -- "`),
		each("NO_BACKSLASH_ESCAPES string hiding a statement", "SET sql_mode='NO_BACKSLASH_ESCAPES'", `UPDATE invoices SET amount=0 WHERE customer = 'a\'; UPDATE invoices SET amount=0; -- '`),
		each("sql_mode from a variable", "SET @m='NO_BACKSLASH_ESCAPES'", "SET sql_mode=@m", `SELECT 'a\'; UPDATE invoices SET amount=0; -- '`),
		each("SESSION sql_mode from a variable", "SET @m='ANSI_QUOTES'", "SET SESSION sql_mode=@m", `SELECT "a'; UPDATE invoices SET amount=0; -- "`),
		each("sql_mode from CONCAT", "SET @@session.sql_mode=CONCAT('ANSI','_QUOTES')", `SELECT "a'; UPDATE invoices SET amount=0; -- "`),
		each("sql_mode from a subquery", "SET sql_mode=(SELECT 'NO_BACKSLASH_ESCAPES')", `SELECT 'a\'; UPDATE invoices SET amount=0; -- '`),
		each("sql_mode second in SET", "SET @x:=1, sql_mode='NO_BACKSLASH_ESCAPES'", `SELECT 'a\'; UPDATE invoices SET amount=0; -- '`),
		one("ORACLE block", "SET sql_mode=ORACLE; BEGIN UPDATE invoices SET amount=0; END"),
		one("ORACLE DECLARE block", "SET sql_mode=ORACLE; DECLARE x INT; BEGIN UPDATE invoices SET amount=0; END"),
		one("ORACLE then a write", "SET sql_mode='ORACLE'; SELECT 1 FROM dual; UPDATE invoices SET amount=0"),
		one("ORACLE from a variable", "SET @m='ORACLE'; SET sql_mode=@m; BEGIN UPDATE invoices SET amount=0; END"),
		one("ORACLE procedure without CALL, mode from a variable", "SET @m='ORACLE'; SET sql_mode=@m; BEGIN bump; END"),
		one("ORACLE procedure without CALL", "SET sql_mode=ORACLE; BEGIN bump; END"),
		one("ORACLE qualified procedure without CALL", "SET sql_mode=ORACLE; BEGIN "+db+".bump; END"),
		one("ORACLE quoted procedure without CALL", `SET sql_mode=ORACLE; BEGIN "bump"; END`),
		one("ORACLE qualified quoted procedure call", `SET sql_mode=ORACLE; BEGIN `+db+`."bump"(); END`),
		one("ORACLE DECLARE BEGIN", "SET sql_mode=ORACLE; DECLARE BEGIN bump(); END"),
		one("ORACLE labelled block", "SET sql_mode=ORACLE; <<l>> BEGIN bump; END"),
		one("ORACLE exception handler", "SET sql_mode=ORACLE; BEGIN NULL; EXCEPTION WHEN OTHERS THEN bump; END"),
		one("EXECUTE IMMEDIATE", "EXECUTE IMMEDIATE 'UPDATE invoices SET amount=0'"),
		one("EXECUTE IMMEDIATE latin1", "EXECUTE IMMEDIATE _latin1'UPDATE invoices SET amount=0'"),
		one("EXECUTE IMMEDIATE N", "EXECUTE IMMEDIATE N'UPDATE invoices SET amount=0'"),
		one("EXECUTE IMMEDIATE adjacent literals", "EXECUTE IMMEDIATE 'UPDATE invoices SET ' 'amount=0'"),
		one("EXECUTE IMMEDIATE binary", "EXECUTE IMMEDIATE _binary'UPDATE invoices SET amount=0'"),
		one("EXECUTE IMMEDIATE parenthesized", "EXECUTE IMMEDIATE ('UPDATE invoices SET amount=0')"),
		one("EXECUTE IMMEDIATE placeholder", "EXECUTE IMMEDIATE ?"),
		one("EXECUTE IMMEDIATE system variable", "EXECUTE IMMEDIATE @@session.init_connect"),
		one("EXECUTE IMMEDIATE USING", "EXECUTE IMMEDIATE 'UPDATE invoices SET amount=0' USING 1"),
		one("EXECUTE IMMEDIATE filename introducer", "EXECUTE IMMEDIATE _filename'@0064elete@0020from@0020invoices'"),
		one("EXECUTE IMMEDIATE hex", "EXECUTE IMMEDIATE X'44454c4554452046524f4d20696e766f69636573'"),
		one("PREPARE and EXECUTE", "PREPARE s FROM 'UPDATE invoices SET amount=0'; EXECUTE s"),
		each("PREPARE then EXECUTE", "PREPARE s FROM 'UPDATE invoices SET amount=0'", "EXECUTE s"),
		each("PREPARE under two spellings", "PREPARE `s` FROM 'SELECT 1'", "PREPARE S FROM 'UPDATE invoices SET amount=0'", "EXECUTE `s`"),
		each("PREPARE accented names", "PREPARE `é` FROM 'UPDATE invoices SET amount=0'", "EXECUTE `è`"),
		each("re-PREPARE after DROP PREPARE", "PREPARE s FROM 'SELECT 1'", "DROP PREPARE s", "PREPARE s FROM 'UPDATE invoices SET amount=0'", "EXECUTE s"),
		each("failed re-PREPARE", "PREPARE s FROM 'UPDATE invoices SET amount=0'", "PREPARE s FROM 'SELECT 1 FROM nosuchtable'", "EXECUTE s"),
		each("EXECUTE USING", "PREPARE s FROM 'UPDATE invoices SET amount=0 WHERE id=?'", "SET @a=1", "EXECUTE s USING @a"),
		each("EXECUTE USING DEFAULT", "PREPARE s FROM 'UPDATE invoices SET amount=? WHERE id=1'", "EXECUTE s USING DEFAULT"),
		each("EXECUTE USING IGNORE", "PREPARE s FROM 'UPDATE invoices SET amount=? WHERE id=1'", "EXECUTE s USING IGNORE"),
		each("PREPARE from a variable", "SET @q='UPDATE invoices SET amount=0'", "PREPARE s FROM @q", "EXECUTE s"),
		one("XA two phase", "XA START 'x'; UPDATE invoices SET amount=0; XA END 'x'; XA PREPARE 'x'; XA COMMIT 'x'"),
		one("XA one phase", "XA BEGIN 'y'; INSERT INTO invoices (customer,period,amount) VALUES ('x','2026-12',1); XA END 'y'; XA COMMIT 'y' ONE PHASE"),
		one("NUL at the end", "UPDATE invoices SET amount=0\x00"),
		one("NUL between statements", "UPDATE invoices SET amount=0 \x00; UPDATE invoices SET amount=0"),
		one("NUL after SELECT", "SELECT 1\x00; UPDATE invoices SET amount=0"),
		one("NUL in a string", "SELECT '\x00'; UPDATE invoices SET amount=0"),
		one("NUL in a comment", "SELECT 1 /* \x00 */; UPDATE invoices SET amount=0"),
		one("NUL in a dash comment", "SELECT 1 -- \x00\nUPDATE invoices SET amount=0"),
		one("NUL in a hash comment", "SELECT 1 # \x00\n; UPDATE invoices SET amount=0"),
		one("NUL in a quoted name", "UPDATE `invoices\x00` SET amount=0"),
		one("vertical tab", "UPDATE invoices\x0bSET amount=0"),
		one("form feed", "UPDATE\x0cinvoices SET amount=0"),
		one("non-breaking space", "UPDATE\u00a0invoices SET amount=0"),
		one("carriage returns", "UPDATE\rinvoices\rSET amount=0"),
		one("vertical tab before a statement", "SELECT 1;\x0bUPDATE invoices SET amount=0"),
		one("form feed before a statement", "SELECT 1;\x0cUPDATE invoices SET amount=0"),
		one("non-breaking space before a statement", "SELECT 1;\u00a0UPDATE invoices SET amount=0"),
		one("NUL before a statement", "SELECT 1;\x00UPDATE invoices SET amount=0"),
		one("64-letter name", "UPDATE `"+strings.Repeat("a", 64)+"` SET amount=0; UPDATE invoices SET amount=0"),
		one("300-letter name", "UPDATE "+strings.Repeat("a", 300)+" SET amount=0; UPDATE invoices SET amount=0"),
		one("64 accented letters", "UPDATE `"+strings.Repeat("é", 64)+"` SET x=0; UPDATE invoices SET amount=0"),
		one("300-letter alias", "UPDATE "+db+".`invoices` AS `"+strings.Repeat("x", 300)+"` SET amount=0"),
		one("NEXTVAL then a write", "SELECT NEXTVAL(seq1); UPDATE invoices SET amount=0"),
		one("EXCHANGE PARTITION", "ALTER TABLE plain EXCHANGE PARTITION p0 WITH TABLE invoices"),
		one("EXCHANGE PARTITION with a copy", "ALTER TABLE swap EXCHANGE PARTITION p0 WITH TABLE invoices"),
		one("TRUNCATE PARTITION elsewhere, then DELETE", "ALTER TABLE plain TRUNCATE PARTITION p0; DELETE FROM invoices"),
		one("TRUNCATE PARTITION", "ALTER TABLE invoices TRUNCATE PARTITION p0"),
		one("DELETE HISTORY", "DELETE HISTORY FROM invoices"),
		one("DELETE HISTORY BEFORE", "DELETE HISTORY FROM invoices BEFORE SYSTEM_TIME NOW()"),
		one("UPDATE FOR PORTION OF", "UPDATE invoices FOR PORTION OF p FROM '2000-01-01' TO '2100-01-01' SET amount=0"),
		one("DELETE FOR PORTION OF", "DELETE FROM invoices FOR PORTION OF p FROM '2000-01-01' TO '2100-01-01'"),
		one("RENAME swap", "RENAME TABLE swap TO swap2, invoices TO swap, swap2 TO invoices"),
		one("CREATE OR REPLACE TABLE", "CREATE OR REPLACE TABLE invoices (id INT)"),
		one("CREATE TABLE IF NOT EXISTS SELECT", "CREATE TABLE IF NOT EXISTS invoices SELECT 99 AS id, 'z' AS customer, '2026-12' AS period, 1 AS amount, NULL AS token"),
		one("CREATE TABLE IF NOT EXISTS IGNORE SELECT", "CREATE TABLE IF NOT EXISTS "+db+".invoices (id INT) IGNORE SELECT 99 AS id"),
		one("CREATE TABLE IF NOT EXISTS REPLACE SELECT", "CREATE TABLE IF NOT EXISTS "+db+".invoices (id INT) REPLACE SELECT 1 AS id, 'z' AS customer, '2026-12' AS period, 1 AS amount, NULL AS token"),
		one("copy away and rename", "INSERT INTO swap SELECT * FROM invoices; DROP TABLE IF EXISTS x; RENAME TABLE invoices TO x"),
		one("OPTIMIZE", "OPTIMIZE TABLE invoices"),
		one("REPAIR", "REPAIR TABLE invoices"),
		one("ANALYZE TABLE PERSISTENT", "ANALYZE TABLE invoices PERSISTENT FOR ALL"),
		one("FLUSH FOR EXPORT", "FLUSH TABLES invoices FOR EXPORT"),
		one("FLUSH WITH READ LOCK", "FLUSH TABLES invoices WITH READ LOCK; UNLOCK TABLES"),
		one("DISCARD TABLESPACE", "ALTER TABLE invoices DISCARD TABLESPACE"),
		one("ALTER FORCE", "ALTER TABLE invoices FORCE"),
		one("ALTER RENAME onto the protected name", "ALTER TABLE "+db+".swap RENAME TO "+db+".invoices"),
		one("CREATE TRIGGER on the protected table", "CREATE TRIGGER tx BEFORE UPDATE ON invoices FOR EACH ROW SET NEW.amount = 0"),
		one("view WITH CHECK OPTION over a copy", "CREATE VIEW vv AS SELECT * FROM swap WITH CHECK OPTION; UPDATE vv SET amount=0"),
		one("LOAD DATA LOCAL", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE invoices"),
		one("LOAD DATA LOCAL SET", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE "+db+".invoices (@a) SET id=99, customer='x', period='2026-12', amount=1"),
		one("LOAD XML LOCAL", "LOAD XML LOCAL INFILE '/etc/hostname' INTO TABLE invoices"),
		one("ANALYZE UPDATE", "ANALYZE UPDATE invoices SET amount = 0"),
		one("EXPLAIN ANALYZE UPDATE", "EXPLAIN ANALYZE UPDATE invoices SET amount = 0"),
		one("backslash quote in a string", "UPDATE invoices SET amount = 0 WHERE customer = 'a\\'; UPDATE invoices SET amount = 0; -- '"),
	})
}

// TestRedteamLexer: a byte after "--" that the server may or may not take
// for the space that makes a comment, followed by a write the comment
// would hide. Every byte, and the Unicode spaces.
func TestRedteamLexer(t *testing.T) {
	e := newRedteamEnv(t)
	var attacks []rtAttack
	cands := []string{"\u00a0", "\u2028", "\u3000", "\u0085", "\u200b", "\ufeff"}
	for b := 0; b < 256; b++ {
		if b != '\n' {
			cands = append(cands, string([]byte{byte(b)}))
		}
	}
	for _, c := range cands {
		attacks = append(attacks,
			one(fmt.Sprintf("%q column", c), "SELECT 1 --"+c+"c FROM (SELECT 2 AS `"+c+"c`) d; UPDATE invoices SET amount=0"),
			one(fmt.Sprintf("%q number", c), "SELECT 1 --"+c+"1; UPDATE invoices SET amount=0"))
	}
	runAttacks(t, e, attacks)
}

// TestRedteamCatalog: routines, views, triggers and foreign keys the
// catalog knows, called or written in every position; stored programs
// created through the proxy to call them.
func TestRedteamCatalog(t *testing.T) {
	e := newRedteamEnv(t)
	db := e.db
	bodyNBE := `BEGIN SELECT 'x\' , 1 ; UPDATE invoices SET amount = 0 ; SELECT 1 ; -- ' ;` + "\nEND"
	runAttacks(t, e, []rtAttack{
		one("CALL", "CALL bump()"),
		one("function", "SELECT bumpf()"),
		one("event calling a writer", "CREATE EVENT ev1 ON SCHEDULE AT CURRENT_TIMESTAMP DO CALL "+db+".bump()"),
		one("event calling a writing function", "CREATE EVENT ev2 ON SCHEDULE AT CURRENT_TIMESTAMP DO SELECT "+db+".bumpf()"),
		one("event writing", "CREATE EVENT ev3 ON SCHEDULE AT CURRENT_TIMESTAMP DO UPDATE invoices SET amount=0"),
		each("event from another schema", "USE mysql", "CREATE EVENT "+db+".ev4 ON SCHEDULE AT CURRENT_TIMESTAMP DO UPDATE invoices SET amount=0"),
		each("procedure from another schema", "USE mysql", "CREATE PROCEDURE "+db+".p5() UPDATE invoices SET amount=0", "CALL "+db+".p5()"),
		each("trigger from another schema", "USE mysql", "CREATE TRIGGER "+db+".tr6 BEFORE INSERT ON "+db+".notes FOR EACH ROW UPDATE invoices SET amount=0", "INSERT INTO "+db+".notes (body) VALUES ('x')"),
		each("trigger calling a writer", "CREATE TRIGGER tr7 BEFORE INSERT ON notes FOR EACH ROW CALL "+db+".bump()", "INSERT INTO notes (body) VALUES ('x')"),
		one("trigger and write in one packet", "CREATE TRIGGER tr8 BEFORE INSERT ON notes FOR EACH ROW CALL "+db+".bump(); INSERT INTO notes (body) VALUES ('x')"),
		each("trigger calling a writing function", "CREATE TRIGGER tr9 BEFORE INSERT ON notes FOR EACH ROW SET @x = "+db+".bumpf()", "INSERT INTO notes (body) VALUES ('x')"),
		each("procedure calling a writer", "CREATE PROCEDURE p10() CALL "+db+".bump()", "CALL p10()"),
		each("view calling a writing function", "CREATE VIEW v11 AS SELECT * FROM notes WHERE bumpf() = 1", "SELECT * FROM v11"),
		each("generated column", "CREATE TABLE t12 (id INT, g INT AS ("+db+".bumpf()))", "INSERT INTO t12 (id) VALUES (1)"),
		each("DEFAULT expression", "CREATE TABLE t13 (id INT, g INT DEFAULT ("+db+".bumpf()))", "INSERT INTO t13 (id) VALUES (1)"),
		each("CHECK constraint", "CREATE TABLE t14 (id INT, CHECK ("+db+".bumpf() = 1))", "INSERT INTO t14 (id) VALUES (1)"),
		one("function in WHERE", "SELECT * FROM notes WHERE "+db+".bumpf()"),
		one("quoted function", "SELECT `bumpf`()"),
		one("spaced qualified function", "SELECT "+db+" . bumpf ()"),
		one("function in capitals", "SELECT BUMPF()"),
		one("quoted qualified function", "SELECT `"+db+"`.`bumpf`()"),
		one("DO", "DO bumpf()"),
		one("SET", "SET @x = bumpf()"),
		one("SELECT INTO", "SELECT 1 INTO @x FROM notes WHERE bumpf()"),
		one("HANDLER READ WHERE", "HANDLER notes OPEN; HANDLER notes READ FIRST WHERE bumpf()=1; HANDLER notes CLOSE"),
		one("nested in a built-in", "SELECT JSON_VALUE(bumpf(), '$')"),
		one("after SHOW", "SHOW CREATE TABLE notes; SELECT bumpf()"),
		one("scalar subquery", "SET @q = (SELECT bumpf())"),
		one("EXISTS", "SELECT 1 FROM DUAL WHERE EXISTS (SELECT bumpf())"),
		one("CALL without parentheses", "CALL "+db+".bump"),
		one("quoted CALL", "CALL `bump`"),
		one("CALL in capitals", "CALL BUMP()"),
		one("CALL quoted qualified", "CALL "+db+".`bump`()"),
		one("accented CALL", "CALL bÜmp()"),
		one("EXPLAIN", "EXPLAIN SELECT bumpf()"),
		one("ANALYZE SELECT", "ANALYZE SELECT bumpf()"),
		one("EXPLAIN FORMAT=JSON", "EXPLAIN FORMAT=JSON SELECT bumpf()"),
		one("DESCRIBE", "DESCRIBE SELECT bumpf()"),
		one("VALUES", "VALUES (bumpf())"),
		one("parenthesized", "(SELECT bumpf())"),
		one("CTE", "WITH x AS (SELECT bumpf()) SELECT * FROM x"),
		one("JSON_TABLE", "SELECT * FROM JSON_TABLE(CONCAT('[',bumpf(),']'), '$[*]' COLUMNS (a INT PATH '$')) j"),
		one("after CHECK TABLE", "CHECK TABLE notes; SELECT bumpf()"),
		one("SIGNAL", "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = bumpf()"),
		one("compound", "BEGIN NOT ATOMIC SELECT bumpf(); END"),
		one("DECLARE DEFAULT", "BEGIN NOT ATOMIC DECLARE x INT DEFAULT bumpf(); END"),
		one("handler body", "BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET @a = bumpf(); SIGNAL SQLSTATE '45000'; END"),
		one("IF", "IF bumpf() THEN SELECT 1; END IF"),
		one("CASE", "CASE WHEN bumpf() THEN SELECT 1; ELSE SELECT 2; END CASE"),
		one("FOR cursor", "BEGIN NOT ATOMIC FOR r IN (SELECT bumpf()) DO SELECT 1; END FOR; END"),
		one("KILL", "KILL bumpf()"),
		one("GET_LOCK", "DO GET_LOCK(bumpf(), 0)"),
		one("LIMIT", "SELECT * FROM notes LIMIT bumpf()"),
		one("CREATE TEMPORARY TABLE SELECT", "CREATE TEMPORARY TABLE tt AS SELECT bumpf() AS x"),
		one("CREATE TABLE AS SELECT", "CREATE TABLE t15 AS SELECT bumpf() AS x"),
		one("CREATE TABLE SELECT", "CREATE TABLE t16 SELECT bumpf() AS x"),
		one("INSERT SELECT", "INSERT INTO notes (body) SELECT bumpf()"),
		one("UPDATE SET", "UPDATE notes SET body = bumpf()"),
		one("DELETE WHERE", "DELETE FROM notes WHERE bumpf()"),
		one("ALTER ADD DEFAULT", "ALTER TABLE notes ADD COLUMN z INT DEFAULT (bumpf())"),
		one("ALTER ADD CHECK", "ALTER TABLE notes ADD CONSTRAINT c CHECK (bumpf() > 0)"),
		one("WINDOW", "SELECT * FROM notes WINDOW w AS (ORDER BY bumpf())"),
		one("FOR UPDATE", "SELECT bumpf() FROM notes FOR UPDATE"),
		one("INTO OUTFILE", "SELECT 1 INTO OUTFILE '/nonexistent/x' FROM notes WHERE bumpf()"),
		each("event with an accented CALL", "CREATE EVENT ev5 ON SCHEDULE AT CURRENT_TIMESTAMP DO CALL "+db+".bÜmp()"),
		each("event with an accented function", "CREATE EVENT ev6 ON SCHEDULE AT CURRENT_TIMESTAMP DO SET @x = "+db+".bümpf()"),
		each("trigger with an accented CALL", "CREATE TRIGGER tr10 BEFORE INSERT ON notes FOR EACH ROW CALL "+db+".bÜmp()", "INSERT INTO notes (body) VALUES ('x')"),
		each("procedure with an accented CALL", "CREATE PROCEDURE p11() CALL "+db+".bÜmp()", "CALL p11()"),
		each("procedure with spaces before (", "CREATE PROCEDURE p12() CALL "+db+".bump   ()", "CALL p12()"),
		// A body read under one sql_mode at CREATE and stored under another
		// (measured: SET STATEMENT sql_mode ... FOR CREATE PROCEDURE stores
		// the body with the statement's mode and parses it under the
		// session's): the write hides in a string for the session's mode.
		one("SET STATEMENT NO_BACKSLASH_ESCAPES FOR CREATE PROCEDURE", "SET STATEMENT sql_mode='NO_BACKSLASH_ESCAPES' FOR CREATE PROCEDURE sm2() "+bodyNBE),
		each("SET STATEMENT NO_BACKSLASH_ESCAPES FOR CREATE PROCEDURE, then CALL", "SET STATEMENT sql_mode='NO_BACKSLASH_ESCAPES' FOR CREATE PROCEDURE sm3() "+bodyNBE, "CALL sm3()"),
		one("SET STATEMENT NO_BACKSLASH_ESCAPES FOR CREATE EVENT", "SET STATEMENT sql_mode='NO_BACKSLASH_ESCAPES' FOR CREATE EVENT sme ON SCHEDULE AT CURRENT_TIMESTAMP DO "+bodyNBE),
		// Through the view, the trigger table and the cascading parent.
		one("REPLACE into a cascading parent", "REPLACE INTO parent2 VALUES (1,'z')"),
		one("ON DUPLICATE KEY UPDATE of a cascading key", "INSERT INTO parent2 VALUES (1,'z') ON DUPLICATE KEY UPDATE id=id+10"),
		one("LOAD DATA REPLACE into a cascading parent", "LOAD DATA LOCAL INFILE '/etc/hostname' REPLACE INTO TABLE parent2"),
		one("multi-table DELETE of a cascading parent", "DELETE p FROM parent2 p"),
		one("DELETE LIMIT of a cascading parent", "DELETE FROM parent2 ORDER BY id LIMIT 1"),
		one("UPDATE of a cascading key", "UPDATE parent2 SET id=id+10"),
		one("TRUNCATE a cascading parent", "TRUNCATE parent2"),
		one("DROP a cascading parent", "DROP TABLE parent2"),
		{name: "foreign_key_checks off, DELETE of a cascading parent", stmts: []string{"SET foreign_key_checks=0; DELETE FROM parent2"},
			after: []string{"INSERT IGNORE INTO parent2 VALUES (1,'a'),(2,'b'),(3,'c')"}},
		one("LOAD DATA into a trigger table", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE trg_t"),
		one("LOAD DATA REPLACE into a trigger table", "LOAD DATA LOCAL INFILE '/etc/hostname' REPLACE INTO TABLE trg_t"),
		one("LOAD XML into a trigger table", "LOAD XML LOCAL INFILE '/etc/hostname' INTO TABLE trg_t"),
		one("LOAD DATA into a view", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE v_inv (id, amount)"),
		one("REPLACE into a trigger table", "REPLACE INTO trg_t VALUES (1,1)"),
		one("ON DUPLICATE KEY UPDATE of a trigger table", "INSERT INTO trg_t VALUES (1,1) ON DUPLICATE KEY UPDATE v=2"),
		one("INSERT SELECT into a trigger table", "INSERT INTO trg_t SELECT 5,5"),
		one("INSERT into a view", "INSERT INTO v_inv (customer, period, amount) VALUES ('v','2026-12',1)"),
		one("UPDATE a view", "UPDATE v_inv SET amount=0"),
		one("DELETE a view", "DELETE FROM v_inv"),
		one("multi-table UPDATE of a view", "UPDATE notes, v_inv SET v_inv.amount=0"),
		one("REPLACE into a view", "REPLACE INTO v_inv (id, customer, period, amount) VALUES (1,'acme','2026-10',0)"),
		one("HANDLER a view", "HANDLER v_inv OPEN"),
		one("HANDLER a trigger table", "HANDLER trg_t OPEN; HANDLER trg_t READ FIRST; HANDLER trg_t CLOSE"),
		one("temporary table named like a trigger table", "CREATE TEMPORARY TABLE trg_t (id INT PRIMARY KEY, v INT); INSERT INTO trg_t VALUES (1,1)"),
		one("temporary table named like a view", "CREATE TEMPORARY TABLE v_inv (id INT); UPDATE v_inv SET id=1"),
		one("LOCK TABLES of a trigger table", "LOCK TABLES trg_t WRITE; INSERT INTO trg_t VALUES (7,7); UNLOCK TABLES"),
	})
}

// TestRedteamCharsets: the gbk/big5/sjis quote-hiding payloads after every
// way of setting the client character set, and with it at the handshake.
func TestRedteamCharsets(t *testing.T) {
	e := newRedteamEnv(t)
	inj := "SELECT '\xbf\\'; UPDATE invoices SET amount=0; -- '"
	inj2 := "UPDATE notes SET body='\xbf\\' WHERE 1; UPDATE invoices SET amount=0; -- '"
	setters := []string{"", "SET NAMES gbk", "SET CHARACTER SET gbk", "SET CHARSET gbk", "SET character_set_client=gbk",
		"SET @@character_set_client='gbk'", "SET @@session.character_set_client=gbk", "SET SESSION character_set_client = 'gbk'",
		"SET NAMES 'gbk' COLLATE 'gbk_bin'", "/*!50000 SET NAMES gbk */", "/*M!100000 SET NAMES gbk */",
		"SET NAMES big5", "SET NAMES sjis", "SET NAMES cp932", "SET NAMES gb18030", "SET character_set_client=(SELECT 'gbk')",
		"SET @x=1, NAMES gbk", "SET character_set_client=28", "SET collation_connection=gbk_bin, character_set_client=gbk",
		"EXECUTE IMMEDIATE 'SET NAMES gbk'", "PREPARE sn FROM 'SET NAMES gbk'; EXECUTE sn", "SET sql_mode=DEFAULT, character_set_client=gbk",
		"SET @@local.character_set_client='gbk'", "SET LOCAL character_set_client='gbk'", "SET character_set_client=_latin1'gbk'",
		"SET character_set_client='GBK'", "SET character_set_client=`gbk`", `SET character_set_client="gbk"`,
		"SET character_set_client=0x67626b", "SET NAMES _utf8'gbk'", "SET NAMES binary", "SET @@character_set_client:=gbk",
		"SET collation_connection=swe7_swedish_ci", "SET character_set_connection=ucs2"}
	var attacks []rtAttack
	for _, handshake := range []string{"", "collation=gbk_chinese_ci", "collation=big5_chinese_ci", "charset=gbk"} {
		for _, s := range setters {
			for i, q := range []string{inj, inj2} {
				a := rtAttack{name: fmt.Sprintf("%s/%s/%d", handshake, s, i), each: true}
				if handshake != "" {
					a.params = []string{handshake}
				}
				if s != "" {
					a.stmts = append(a.stmts, s)
				}
				a.stmts = append(a.stmts, q)
				attacks = append(attacks, a)
				if s != "" && !strings.Contains(s, "EXECUTE") {
					attacks = append(attacks, rtAttack{name: a.name + "/one packet", params: a.params, stmts: []string{s + "; " + q}})
				}
			}
		}
		attacks = append(attacks, rtAttack{name: handshake + "/character_set_client from a variable", params: []string{handshake}, each: true,
			stmts: []string{"SET @c='gbk'", "SET character_set_client=@c", inj}})
	}
	for i := range attacks {
		if len(attacks[i].params) == 1 && attacks[i].params[0] == "" {
			attacks[i].params = nil
		}
	}
	runAttacks(t, e, attacks)
}

// TestRedteamLeaseTable: the lease table itself, through the proxy, and
// the lease functions with odd arguments.
func TestRedteamLeaseTable(t *testing.T) {
	e := newRedteamEnv(t)
	db := e.db
	runAttacks(t, e, []rtAttack{
		one("UPDATE", "UPDATE fenced_job_leases SET owner_token='me', fence_token=1"),
		one("INSERT ON DUPLICATE KEY UPDATE", "INSERT INTO fenced_job_leases VALUES ('invoice:acme','me',1,NOW()+INTERVAL 1 HOUR) ON DUPLICATE KEY UPDATE owner_token='me', fence_token=1"),
		one("REPLACE", "REPLACE INTO fenced_job_leases VALUES ('invoice:acme','me',1,NOW()+INTERVAL 1 HOUR)"),
		one("DELETE", "DELETE FROM fenced_job_leases"),
		one("INSERT", "INSERT INTO fenced_job_leases VALUES ('x','me',1,NOW()+INTERVAL 1 HOUR)"),
		one("multi-table UPDATE", "UPDATE notes, fenced_job_leases SET fenced_job_leases.owner_token='me'"),
		one("multi-table DELETE", "DELETE fenced_job_leases FROM fenced_job_leases JOIN notes"),
		one("TRUNCATE", "TRUNCATE fenced_job_leases"),
		one("in capitals", "UPDATE "+db+".FENCED_JOB_LEASES SET owner_token='me'"),
		one("HANDLER", "HANDLER fenced_job_leases OPEN"),
		one("FOR UPDATE", "SELECT * FROM fenced_job_leases FOR UPDATE"),
		one("LOAD DATA REPLACE", "LOAD DATA LOCAL INFILE '/etc/hostname' REPLACE INTO TABLE fenced_job_leases"),
		one("CREATE TABLE LIKE", "CREATE TABLE lt2 LIKE fenced_job_leases"),
		one("ALTER", "ALTER TABLE fenced_job_leases ENGINE=InnoDB"),
		one("temporary table of its name", "CREATE TEMPORARY TABLE fenced_job_leases (lease_name VARCHAR(191) PRIMARY KEY, owner_token VARBINARY(64), fence_token BIGINT UNSIGNED, leased_until TIMESTAMP(3)); UPDATE invoices SET amount=0"),
		one("fence_acquire of a held lease", "SELECT fence_acquire('invoice:acme', 10)"),
		one("fence_acquire in capitals", "SELECT fence_acquire('INVOICE:ACME', 10)"),
		one("fence_acquire with a trailing space", "SELECT fence_acquire('invoice:acme ', 10)"),
		one("fence_acquire with a negative ttl", "SELECT fence_acquire('invoice:acme', -10)"),
		one("fence_release of another's lease", "SELECT fence_release()"),
		one("fence_renew of another's lease", "SELECT fence_renew(100)"),
		each("a lease of my own, then the stale lease's name", "SELECT fence_acquire('mine2', 100)", "SET @fence_lease='invoice:acme'", "UPDATE invoices SET amount=0"),
		each("owner in capitals", "SET @fence_owner='OTHER', @fence_token=5", "UPDATE invoices SET amount=0"),
		each("token as a string with a suffix", "SET @fence_token=CONCAT(@fence_token, 'abc')", "UPDATE invoices SET amount=0"),
		each("token plus a fraction", "SET @fence_token=@fence_token + 0.4", "UPDATE reconciliation_runs SET status='x'"),
		each("token as a double just below the next", "SET @fence_token=@fence_token + 0.9999999999999999999", "UPDATE reconciliation_runs SET status='x'"),
	})
}

// TestRedteamSessionVariables: the session variables the fence depends
// on, set before a stale write, and the valid fence's writes under them
// behave as directly.
func TestRedteamSessionVariables(t *testing.T) {
	e := newRedteamEnv(t)
	setters := []string{"SET time_zone='-12:00'", "SET time_zone='+14:00'", "SET timestamp=UNIX_TIMESTAMP()-86400", "SET @@timestamp=1",
		"SET autocommit=0", "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
		"SET tx_read_only=1", "SET SESSION TRANSACTION READ ONLY", "SET innodb_lock_wait_timeout=1", "SET sql_safe_updates=1",
		"SET foreign_key_checks=0", "SET unique_checks=0", "SET check_constraint_checks=0", "SET sql_select_limit=0",
		"SET max_join_size=1", "SET sql_big_selects=0", "SET optimizer_switch='derived_merge=off'", "SET sql_auto_is_null=1",
		"SET big_tables=1", "SET div_precision_increment=0", "SET sql_mode='ONLY_FULL_GROUP_BY,STRICT_ALL_TABLES'",
		"SET sql_mode='PAD_CHAR_TO_FULL_LENGTH'", "SET sql_mode='EMPTY_STRING_IS_NULL'", "SET sql_mode='NO_ZERO_DATE,NO_ZERO_IN_DATE'",
		"SET sql_mode='SIMULTANEOUS_ASSIGNMENT'", "SET sql_mode='HIGH_NOT_PRECEDENCE'", "SET sql_mode='PIPES_AS_CONCAT'",
		"SET sql_mode='MSSQL'", "SET sql_mode='POSTGRESQL'", "SET sql_mode='TIME_ROUND_FRACTIONAL'", "SET collation_connection=utf8mb4_bin",
		"SET character_set_connection=latin1", "SET names latin1", "SET lc_time_names='de_DE'", "SET default_week_format=7",
		"SET updatable_views_with_limit=NO", "SET low_priority_updates=1", "SET max_statement_time=0.000001",
		"SET sql_log_bin=0", "SET rand_seed1=1, rand_seed2=2", "SET @fence_lease = NULL", "SET @fence_lease = 'invoice:acme '",
		"SET @fence_lease = 'INVOICE:ACME'", "SET @fence_lease = _latin1'invoice:acme' COLLATE latin1_bin",
		"SET @fence_owner = CONVERT(@fence_owner USING utf8mb4) COLLATE utf8mb4_general_ci"}
	var attacks []rtAttack
	for _, s := range setters {
		for _, w := range []string{"UPDATE invoices SET amount=0", "UPDATE reconciliation_runs SET status='x'",
			"INSERT INTO invoices (customer, period, amount) VALUES ('x', '2026-12', 1)", "DELETE FROM invoices",
			"REPLACE INTO reconciliation_runs (id, status) VALUES (1, 'r')"} {
			attacks = append(attacks, each(s+"/"+w, s, w))
		}
	}
	runAttacks(t, e, attacks)
}

// TestRedteamPreparedAfterChanges: statements prepared (SQL PREPARE and
// COM_STMT_PREPARE) while their target writes nothing protected, executed
// after a view, procedure or function they use was redefined on the
// server (and the catalog saw it), or after a reload protects their table.
func TestRedteamPreparedAfterChanges(t *testing.T) {
	e := newRedteamEnv(t)
	ctx := context.Background()
	root := e.root
	type change struct {
		name, before, after string
		prepare             string // the statement, prepared both ways
		args                []any
	}
	for _, ch := range []change{
		{"view", "CREATE OR REPLACE VIEW v_later AS SELECT id, body FROM notes",
			"CREATE OR REPLACE VIEW v_later AS SELECT id, amount AS body FROM invoices", "UPDATE v_later SET body=0", nil},
		{"procedure", "CREATE OR REPLACE PROCEDURE later() SELECT 1",
			"CREATE OR REPLACE PROCEDURE later() UPDATE invoices SET amount=0", "CALL later()", nil},
		{"function", "CREATE OR REPLACE FUNCTION laterf() RETURNS INT RETURN 1",
			"CREATE OR REPLACE FUNCTION laterf() RETURNS INT MODIFIES SQL DATA BEGIN UPDATE invoices SET amount=0; RETURN 1; END", "SELECT laterf()", nil},
	} {
		t.Run(ch.name, func(t *testing.T) {
			mustExec(t, root, ch.before)
			awaitCatalog(t, e.fencedEnv)
			want := e.protected(t)
			c := e.session(t)
			mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
			st, err := c.PrepareContext(ctx, ch.prepare)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			mustExec(t, c, "PREPARE s FROM '"+ch.prepare+"'")
			mustExec(t, root, ch.after)
			awaitCatalog(t, e.fencedEnv)
			_, errBin := st.ExecContext(ctx)
			_, errSQL := c.ExecContext(ctx, "EXECUTE s")
			if got := e.protected(t); got != want {
				t.Fatalf("executions after the change (%v, %v) changed a protected table:\n%s\n%s", errBin, errSQL, want, got)
			}
			if errBin == nil || errSQL == nil {
				t.Fatalf("want both executions refused, got %v and %v", errBin, errSQL)
			}
		})
	}
	t.Run("reload", func(t *testing.T) {
		mustExec(t, root, "UPDATE notes SET body = 'orig'")
		c := e.session(t)
		mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
		mustExec(t, c, "PREPARE s FROM 'UPDATE notes SET body=''sql'''")
		st, err := c.PrepareContext(ctx, "UPDATE notes SET body=?")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		cfg := e.proxy.Config
		yml := "tables:\n  - name: " + e.db + ".reconciliation_runs\n    lease: admin:reconciliation\n  - name: " + e.db + ".invoices\n  - name: " + e.db + ".notes\n" +
			"audit:\n  file: " + cfg.Audit.File + "\n"
		e.proxy.reload(t, yml)
		_, errSQL := c.ExecContext(ctx, "EXECUTE s")
		_, errBin := st.ExecContext(ctx, "bin")
		_, errImm := c.ExecContext(ctx, "EXECUTE IMMEDIATE 'UPDATE notes SET body=''imm'''")
		if got := queryString(t, root, "SELECT GROUP_CONCAT(DISTINCT body) FROM notes"); got != "orig" {
			t.Fatalf("after the reload protects notes, stale writes to it (%v, %v, %v) left %q", errSQL, errBin, errImm, got)
		}
	})
}

// TestRedteamCatalogWindow: objects created or redefined directly on the
// server, used through the proxy before the catalog's next refresh.
func TestRedteamCatalogWindow(t *testing.T) {
	e := newRedteamEnv(t)
	for _, a := range []rtAttack{
		{name: "new procedure, CALL at once", setup: []string{"CREATE PROCEDURE bump3() UPDATE invoices SET amount=amount+1"}, stmts: []string{"CALL bump3()"}},
		{name: "new function, called at once", setup: []string{"CREATE FUNCTION bumpf2() RETURNS INT MODIFIES SQL DATA BEGIN UPDATE invoices SET amount=amount+1; RETURN 1; END"}, stmts: []string{"SELECT bumpf2()"}},
		{name: "new view, written at once", setup: []string{"CREATE VIEW v_new AS SELECT * FROM invoices"}, stmts: []string{"UPDATE v_new SET amount=0"}},
		{name: "new trigger on a known table", setup: []string{"CREATE TRIGGER tr_new BEFORE INSERT ON notes FOR EACH ROW UPDATE invoices SET amount=amount+1"},
			stmts: []string{"INSERT INTO notes (body) VALUES ('x')"}, after: []string{"DROP TRIGGER IF EXISTS tr_new"}, open: true},
		{name: "known procedure redefined", setup: []string{"CREATE OR REPLACE PROCEDURE later2() SELECT 1", "DO SLEEP(3)", "CREATE OR REPLACE PROCEDURE later2() UPDATE invoices SET amount=amount+1"},
			stmts: []string{"CALL later2()"}, open: true},
	} {
		t.Run(a.name, func(t *testing.T) {
			// The first three held once a write or call naming an object
			// the catalog never saw waited for a catalog read
			// (TestCatalogFreshness); they were still skipped here.
			if a.open && os.Getenv("RT_UNSKIP") == "" {
				t.Skip("KNOWN BYPASS: a new trigger on a table the catalog knows, or a new body under a name it knows, is fenced only from " +
					"the catalog's next refresh (catalog.refresh, 2 s by default): the write names nothing the catalog has not seen " +
					"(docs/sessions.md, Catalog freshness; fencing.database_guard: triggers closes it)")
			}
			e.run(t, a)
		})
	}
}

// TestRedteamOperatorMistakes: configurations and server changes that
// looked safe and were not.
func TestRedteamOperatorMistakes(t *testing.T) {
	t.Run("lease table with a DATETIME expiry", func(t *testing.T) {
		// Landed on main before the lease table's definition was checked
		// at start: SET time_zone (no privilege needed) made an expired
		// lease read as held, and a stale UPDATE and INSERT landed.
		e := newFencedEnv(t, envOptions{account: true})
		mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
		mustExec(t, e.root, "ALTER TABLE fenced_job_leases MODIFY leased_until DATETIME(3) NOT NULL")
		l := e.acquire(t, "invoice:acme", 200*time.Millisecond)
		e.awaitExpired(t, l.Name)
		check, err := proxyCheckSchema(t, e)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(check, "leased_until is datetime(3), want timestamp(3)") {
			t.Fatalf("the start-up check accepts a DATETIME leased_until: %q", check)
		}
	})
	t.Run("protected table renamed on the server", func(t *testing.T) {
		e := newFencedEnv(t, envOptions{account: true})
		table := map[string]string{"table": e.db + ".invoices"}
		if got := series(t, e.proxy.Reg, "fenceproxy_protected_table_missing", table); got != 0 {
			t.Fatalf("fenceproxy_protected_table_missing = %v before the rename", got)
		}
		mustExec(t, e.root, "RENAME TABLE invoices TO invoices_moved")
		eventually(t, 30*time.Second, "fenceproxy_protected_table_missing to say so", func() bool {
			return series(t, e.proxy.Reg, "fenceproxy_protected_table_missing", table) == 1
		})
		mustExec(t, e.root, "RENAME TABLE invoices_moved TO invoices")
		eventually(t, 30*time.Second, "fenceproxy_protected_table_missing to clear", func() bool {
			return series(t, e.proxy.Reg, "fenceproxy_protected_table_missing", table) == 0
		})
	})
}

// proxyCheckSchema runs serve's start-up check of e's config with the
// proxy's account and returns its problems, one a line.
func proxyCheckSchema(t *testing.T, e *fencedEnv) (string, error) {
	t.Helper()
	cfg := e.proxy.Config
	pw, err := os.ReadFile(cfg.Backend.PasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/", cfg.Backend.User, strings.TrimSpace(string(pw)), e.srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := proxy.CheckSchema(context.Background(), db, cfg)
	if err != nil {
		return "", err
	}
	var lines []string
	for _, e := range rep.Errors {
		lines = append(lines, e.Error())
	}
	return strings.Join(lines, "\n"), nil
}
