package integration

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/integration/dbserver"
	"github.com/fenceproxy/fenceproxy/integration/dbtest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// The second red team's attempts: the same threat (an app account through
// the proxy with the catalog on, holding a stale fence) over what the first
// suite (redteam_test.go) does not try: global variables, operator-made
// packages and dynamic SQL in routines, events altered in place, UDF
// libraries, lease-table swaps, protocol commands between a fence and a
// write, a lease expiring inside a transaction, and the engines' own
// statements and variables. Every attempt stays as a test whether it
// landed or not; those that landed before a fix say so in a comment.

// rt2Extra is the server state beyond the protected tables that a stale
// session must not change either: the bodies of events (an event runs on
// the server, unseen by the proxy) and the global variables that make the
// server run SQL on its own (init_connect runs for every later login of a
// non-SUPER account, the proxy's own among them).
func (e *rtEnv) rt2Extra(t *testing.T) string {
	t.Helper()
	return tableDump(t, e.root, "(SELECT EVENT_NAME, EVENT_DEFINITION, STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = '"+e.db+"') AS ev") + "--\n" +
		queryString(t, e.root, "SELECT @@GLOBAL.init_connect") + "--\n" +
		queryString(t, e.root, "SELECT @@GLOBAL.sql_mode")
}

// run2 is run with the catalog refreshed after the setup (the operator's
// objects are known, as in a deployment) and the extra state checked.
func (e *rtEnv) run2(t *testing.T, a rtAttack) {
	t.Helper()
	rootMulti := dbtest.Open(t, withParam(e.srv.RootDSN(e.db), "multiStatements=true"))
	for _, q := range a.setup {
		mustExec(t, rootMulti, q)
	}
	for _, q := range a.after {
		t.Cleanup(func() { rootMulti.Exec(q) })
	}
	if len(a.setup) > 0 {
		awaitCatalog(t, e.fencedEnv)
	}
	want, wantExtra := e.protected(t), e.rt2Extra(t)
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
	if got := e.rt2Extra(t); got != wantExtra {
		t.Fatalf("a stale session changed an event or a global that runs SQL (outcomes %q):\nbefore\n%s\nafter\n%s", outcome, wantExtra, got)
	}
}

// TestRedteam2Statements: statement kinds and stored programs.
func TestRedteam2Statements(t *testing.T) {
	e := newRedteamEnv(t)
	db := e.db
	// An operator's package (sql_mode=ORACLE) whose procedure and function
	// write a protected table; a procedure and an event that run the SQL
	// they are given.
	pkg := []string{
		"SET sql_mode=ORACLE; CREATE PACKAGE pk AS PROCEDURE p; FUNCTION f RETURN INT; END; " +
			"CREATE PACKAGE BODY pk AS PROCEDURE p AS BEGIN UPDATE invoices SET amount=amount+1; END; " +
			"FUNCTION f RETURN INT AS BEGIN UPDATE invoices SET amount=amount+1; RETURN 1; END; END; SET sql_mode=DEFAULT",
		// Stored programs and a view calling the package's routines (under
		// sql_mode=ORACLE, where pk.f() is the package's function).
		"SET sql_mode=ORACLE; CREATE VIEW v_pk AS SELECT pk.f() AS x FROM DUAL; SET sql_mode=DEFAULT",
		"CREATE TABLE notes_pk (id INT PRIMARY KEY)",
		"SET sql_mode=ORACLE; CREATE TRIGGER trg_pk BEFORE INSERT ON notes_pk FOR EACH ROW BEGIN pk.p; END; SET sql_mode=DEFAULT",
		"SET sql_mode=ORACLE; CREATE TRIGGER trg_pk2 BEFORE DELETE ON notes_pk FOR EACH ROW DECLARE x INT; BEGIN x := pk.f(); END; SET sql_mode=DEFAULT",
		"SET sql_mode=ORACLE; CREATE PROCEDURE callpk AS BEGIN pk.p; END; SET sql_mode=DEFAULT",
		"SET sql_mode=ORACLE; CREATE PROCEDURE callpk2 AS BEGIN CALL pk.p(); END; SET sql_mode=DEFAULT",
		"SET sql_mode=ORACLE; CREATE FUNCTION fpk RETURN INT AS BEGIN RETURN pk.f(); END; SET sql_mode=DEFAULT",
		"INSERT INTO notes_pk VALUES (1)",
		"CREATE PROCEDURE dyn(q TEXT) BEGIN PREPARE s FROM q; EXECUTE s; END",
		"CREATE PROCEDURE dyn2(q TEXT) EXECUTE IMMEDIATE q",
		"CREATE PROCEDURE dyn3() EXECUTE IMMEDIATE CONCAT('UPDATE ', 'invoices SET amount=0')",
		"CREATE EVENT ev_pre ON SCHEDULE EVERY 1 DAY STARTS CURRENT_TIMESTAMP + INTERVAL 1 DAY DISABLE DO SELECT 1",
		"CREATE TABLE lease_swap LIKE fenced_job_leases",
		"CREATE TABLE inv_other_schema_copy LIKE invoices",
		"CREATE TABLE plain2 (id INT PRIMARY KEY, v INT) PARTITION BY HASH (id) PARTITIONS 2",
	}
	rootMulti := dbtest.Open(t, withParam(e.srv.RootDSN(e.db), "multiStatements=true"))
	for _, q := range pkg {
		mustExec(t, rootMulti, q)
	}
	awaitCatalog(t, e.fencedEnv)
	runAttacks2(t, e, []rtAttack{
		// Packages (sql_mode=ORACLE), operator-made.
		{name: "package procedure, operator-made", stmts: []string{"CALL pk.p()"}},
		// Landed before the fix: the catalog read pk.f( as schema pk's
		// function f, which it had never seen (and found absent), while
		// under sql_mode=ORACLE the server runs package pk's function f.
		one("package procedure, ORACLE", "SET sql_mode=ORACLE; CALL pk.p()"),
		one("package procedure, ORACLE, spaced", "SET sql_mode=ORACLE; CALL pk . p ()"),
		one("package function in a write's WHERE", "SET sql_mode=ORACLE; UPDATE notes SET body='x' WHERE pk.f() = 1"),
		one("package function quoted", "SET sql_mode=ORACLE; SELECT `pk`.`f`() FROM DUAL"),
		one("package function in capitals", "SET sql_mode=ORACLE; SELECT PK.F() FROM DUAL"),
		one("package function in a compound statement", "SET sql_mode=ORACLE; BEGIN SELECT pk.f() INTO @x FROM DUAL; END"),
		one("view calling the package's function", "SELECT * FROM v_pk"),
		one("view calling the package's function, ORACLE", "SET sql_mode=ORACLE; SELECT * FROM v_pk"),
		one("trigger calling the package's procedure", "INSERT INTO notes_pk VALUES (2)"),
		one("trigger calling the package's function", "DELETE FROM notes_pk"),
		one("procedure calling the package's procedure", "CALL callpk()"),
		one("procedure calling the package's procedure by CALL", "CALL callpk2()"),
		one("function calling the package's function", "SELECT fpk()"),
		one("package procedure by SET STATEMENT sql_mode", "SET STATEMENT sql_mode='ORACLE' FOR CALL pk.p()"),
		one("package function by SET STATEMENT sql_mode", "SET STATEMENT sql_mode='ORACLE' FOR SELECT pk.f() FROM DUAL"),
		{name: "package procedure without CALL", stmts: []string{"SET sql_mode=ORACLE; BEGIN pk.p; END"}},
		// Landed before the fix (see the package procedure, ORACLE above).
		{name: "package function", stmts: []string{"SET sql_mode=ORACLE; SELECT pk.f() FROM DUAL"}},
		{name: "package function qualified", stmts: []string{"SET sql_mode=ORACLE; SELECT " + db + ".pk.f() FROM DUAL"}},
		{name: "package procedure qualified", stmts: []string{"CALL " + db + ".pk.p()"}},
		// Packages created through the proxy.
		one("package created through the proxy, called in the same packet",
			"SET sql_mode=ORACLE; CREATE PACKAGE pk2 AS PROCEDURE p; END; CREATE PACKAGE BODY pk2 AS PROCEDURE p AS BEGIN UPDATE invoices SET amount=0; END; END; CALL pk2.p()"),
		each("package body created through the proxy, then CALL",
			"SET sql_mode=ORACLE", "CREATE PACKAGE pk3 AS PROCEDURE p; END",
			"CREATE PACKAGE BODY pk3 AS PROCEDURE p AS BEGIN UPDATE invoices SET amount=0; END; END", "CALL pk3.p()"),
		// Dynamic SQL inside routines.
		{name: "procedure running its argument (PREPARE)", stmts: []string{"CALL dyn('UPDATE invoices SET amount=0')"}},
		{name: "procedure running its argument (EXECUTE IMMEDIATE)", stmts: []string{"CALL dyn2('UPDATE invoices SET amount=0')"}},
		{name: "procedure running a CONCAT", stmts: []string{"CALL dyn3()"}},
		{name: "procedure running its argument from a variable", each: true, stmts: []string{"SET @q='UPDATE fenced_job_leases SET fence_token=fence_token+100'", "CALL dyn(@q)"}},
		each("procedure with dynamic SQL created through the proxy", "CREATE PROCEDURE dyn4(q TEXT) EXECUTE IMMEDIATE q", "CALL dyn4('UPDATE invoices SET amount=0')"),
		one("event running a CONCAT", "CREATE EVENT ev_dyn ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL 1 HOUR DO EXECUTE IMMEDIATE CONCAT('UPDATE ', '"+db+".invoices SET amount=0')"),
		// An event altered in place: its body, its schedule, its schema.
		{name: "ALTER EVENT body", stmts: []string{"ALTER EVENT ev_pre DO UPDATE " + db + ".invoices SET amount=0"}},
		{name: "ALTER EVENT body calling a writer", stmts: []string{"ALTER EVENT ev_pre ON SCHEDULE AT CURRENT_TIMESTAMP ENABLE DO CALL " + db + ".bump()"}},
		{name: "ALTER EVENT RENAME with a new body", stmts: []string{"ALTER EVENT ev_pre RENAME TO ev_pre2 DO UPDATE " + db + ".invoices SET amount=0"}, after: []string{"DROP EVENT IF EXISTS ev_pre2"}},
		// Stored aggregate functions.
		one("aggregate function created and called in one packet",
			"CREATE AGGREGATE FUNCTION agg(x INT) RETURNS INT BEGIN DECLARE n INT DEFAULT 0; DECLARE CONTINUE HANDLER FOR NOT FOUND RETURN n; "+
				"LOOP FETCH GROUP NEXT ROW; UPDATE invoices SET amount=0; SET n = n + 1; END LOOP; END; SELECT agg(id) FROM notes"),
		each("aggregate function, then called",
			"CREATE AGGREGATE FUNCTION agg2(x INT) RETURNS INT BEGIN DECLARE n INT DEFAULT 0; DECLARE CONTINUE HANDLER FOR NOT FOUND RETURN n; "+
				"LOOP FETCH GROUP NEXT ROW; UPDATE invoices SET amount=0; SET n = n + 1; END LOOP; END", "SELECT agg2(id) FROM notes"),
		// UDF libraries: server code, like INSTALL SONAME.
		one("CREATE FUNCTION SONAME", "CREATE FUNCTION sys_exec RETURNS INTEGER SONAME 'lib_mysqludf_sys.so'"),
		one("CREATE AGGREGATE FUNCTION SONAME", "CREATE AGGREGATE FUNCTION udf_agg RETURNS INTEGER SONAME 'ha_example.so'"),
		one("CREATE OR REPLACE FUNCTION SONAME", "CREATE OR REPLACE FUNCTION sys_eval RETURNS STRING SONAME 'udf_example.so'"),
		// Tables swapped, replaced or exchanged.
		{name: "RENAME swapping the lease table", setup: []string{"DELETE FROM lease_swap", "INSERT INTO lease_swap SELECT * FROM fenced_job_leases", "UPDATE lease_swap SET owner_token = X'00'"},
			stmts: []string{"RENAME TABLE fenced_job_leases TO lease_old, lease_swap TO fenced_job_leases"}},
		{name: "EXCHANGE PARTITION with the lease table", stmts: []string{"ALTER TABLE plain2 EXCHANGE PARTITION p0 WITH TABLE fenced_job_leases"}},
		{name: "EXCHANGE PARTITION, protected table first", stmts: []string{"ALTER TABLE invoices EXCHANGE PARTITION p0 WITH TABLE inv_other_schema_copy"}},
		one("CREATE OR REPLACE TABLE LIKE", "CREATE OR REPLACE TABLE invoices LIKE swap"),
		one("CREATE OR REPLACE TABLE SELECT", "CREATE OR REPLACE TABLE "+db+".invoices SELECT * FROM swap"),
		one("CREATE OR REPLACE TABLE of the lease table", "CREATE OR REPLACE TABLE fenced_job_leases SELECT 'invoice:acme' AS lease_name"),
		one("CREATE OR REPLACE SEQUENCE over the protected table", "CREATE OR REPLACE SEQUENCE invoices"),
		one("CREATE OR REPLACE VIEW over the protected table", "CREATE OR REPLACE VIEW invoices AS SELECT 1"),
		one("REPLACE SELECT", "REPLACE INTO invoices SELECT * FROM swap"),
		one("INSERT SELECT RETURNING", "INSERT INTO invoices (customer, period, amount) SELECT 'z', '2026-12', 1 RETURNING id"),
		one("INSERT IGNORE ... SELECT from the lease table", "INSERT IGNORE INTO fenced_job_leases SELECT 'new', owner_token, fence_token, leased_until FROM fenced_job_leases"),
		one("SETVAL of the lease table", "SELECT SETVAL(fenced_job_leases, 100)"),
		one("NEXTVAL in a write", "INSERT INTO invoices (id, customer, period, amount) VALUES (NEXTVAL(seq1) + 100, 'z', '2026-12', 1)"),
		one("LOAD XML into the lease table", "LOAD XML LOCAL INFILE '/etc/hostname' REPLACE INTO TABLE fenced_job_leases"),
		one("DELETE RETURNING a subquery of the lease table", "DELETE FROM invoices WHERE id > 0 RETURNING (SELECT fence_token FROM fenced_job_leases LIMIT 1)"),
		one("UPDATE with a subquery of the lease table", "UPDATE invoices SET amount=0 WHERE (SELECT COUNT(*) FROM fenced_job_leases) > 0"),
		one("UPDATE of the lease table joined to a derived table", "UPDATE fenced_job_leases l JOIN (SELECT 1 AS x) d SET l.fence_token = l.fence_token + 10"),
		one("UPDATE with a window function", "UPDATE invoices SET amount=0 WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) r FROM invoices) d)"),
		one("UPDATE with a recursive CTE", "UPDATE invoices SET amount=(WITH RECURSIVE r AS (SELECT 1 AS n UNION SELECT n + 1 FROM r WHERE n < 3) SELECT MAX(n) FROM r)"),
		one("WITH RECURSIVE UPDATE", "WITH RECURSIVE r AS (SELECT 1 AS n) UPDATE invoices SET amount=0"),
		one("INSERT DELAYED RETURNING", "INSERT DELAYED INTO invoices (customer, period, amount) VALUES ('z', '2026-12', 1) RETURNING id"),
		one("MERGE table over the protected table", "CREATE TABLE mrg (id INT, customer VARCHAR(40), period CHAR(7), amount DECIMAL(10,2), token BIGINT UNSIGNED) ENGINE=MERGE UNION=(invoices) INSERT_METHOD=LAST; INSERT INTO mrg VALUES (50, 'z', '2026-12', 1, NULL)"),
		one("DROP DATABASE", "DROP DATABASE IF EXISTS "+db),
		one("DROP SCHEMA quoted", "DROP SCHEMA `"+db+"`"),
		// XA forms.
		one("XA JOIN", "XA START 'j'; XA END 'j'; XA START 'j' JOIN; UPDATE invoices SET amount=0; XA END 'j'; XA COMMIT 'j' ONE PHASE"),
		one("XA RESUME", "XA START 'r'; XA END 'r' SUSPEND; XA START 'r' RESUME; UPDATE invoices SET amount=0; XA END 'r'; XA COMMIT 'r' ONE PHASE"),
		one("XA with a bqual and format id", "XA START 'g','b',7; DELETE FROM invoices; XA END 'g','b',7; XA PREPARE 'g','b',7; XA COMMIT 'g','b',7"),
		one("XA RECOVER then COMMIT", "XA RECOVER; XA COMMIT 'nosuch'; UPDATE invoices SET amount=0"),
		// Savepoints around the proxy's own statements.
		one("ROLLBACK TO SAVEPOINT after the fence", "START TRANSACTION; SAVEPOINT a; UPDATE invoices SET amount=0; ROLLBACK TO SAVEPOINT a; UPDATE invoices SET amount=0; COMMIT"),
		one("RELEASE SAVEPOINT then write", "BEGIN; SAVEPOINT a; RELEASE SAVEPOINT a; DELETE FROM invoices; COMMIT"),
		// Temporary tables and schemas.
		each("temporary table named like the protected one in another schema",
			"USE mysql", "CREATE TEMPORARY TABLE invoices (id INT)", "USE "+db, "UPDATE invoices SET amount=0"),
		each("temporary lease table in another schema, then a qualified write",
			"USE mysql", "CREATE TEMPORARY TABLE fenced_job_leases LIKE "+db+".fenced_job_leases",
			"INSERT INTO fenced_job_leases SELECT * FROM "+db+".fenced_job_leases", "UPDATE fenced_job_leases SET owner_token=@fence_owner, fence_token=@fence_token",
			"UPDATE "+db+".invoices SET amount=0"),
		// Character sets and literals.
		one("sjis literal hiding a statement", "SET NAMES sjis; SELECT '\x83\\'; UPDATE invoices SET amount=0; -- '"),
		one("cp932 literal hiding a statement", "SET NAMES cp932; SELECT '\x81\\'; UPDATE invoices SET amount=0; -- '"),
		one("big5 introducer on a literal", "SELECT _big5'\xa5\\'; UPDATE invoices SET amount=0; -- '"),
		one("sjis introducer on a literal", "SELECT _sjis'\x83\\'; UPDATE invoices SET amount=0; -- '"),
		each("utf16 client", "SET character_set_client=utf16", "UPDATE invoices SET amount=0"),
		each("utf32 NAMES", "SET NAMES utf32", "UPDATE invoices SET amount=0"),
		each("hex lease name", "SET @fence_lease = X'696e766f6963653a61636d65'", "UPDATE invoices SET amount=0"),
		each("bit lease name", "SET @fence_lease = b'0110100101101110'", "UPDATE invoices SET amount=0"),
		each("N lease name", "SET @fence_lease = N'invoice:acme'", "DELETE FROM invoices"),
		// Session variables that change how SQL is read, set through
		// EXECUTE IMMEDIATE (dynamic SQL).
		each("sql_mode through EXECUTE IMMEDIATE", "EXECUTE IMMEDIATE 'SET sql_mode=''NO_BACKSLASH_ESCAPES'''", `SELECT 'a\'; UPDATE invoices SET amount=0; -- '`),
		each("sql_mode from the global value", "SET sql_mode=@@GLOBAL.sql_mode", "UPDATE invoices SET amount=0"),
		each("old_mode", "SET old_mode='UTF8_IS_UTF8MB3'", "SET NAMES utf8", "UPDATE invoices SET amount=0"),
		// Global variables (the harness's app account has SUPER).
		{name: "GLOBAL sql_mode ANSI_QUOTES, then a new session", stmts: []string{"SET GLOBAL sql_mode='ANSI_QUOTES'"},
			after: []string{"SET GLOBAL sql_mode=DEFAULT"}},
		{name: "GLOBAL init_connect", stmts: []string{"SET GLOBAL init_connect='UPDATE " + db + ".invoices SET amount=0'"},
			after: []string{"SET GLOBAL init_connect=''"}},
		{name: "GLOBAL init_connect, @@ form", stmts: []string{"SET @@global.init_connect='SET NAMES gbk'"},
			after: []string{"SET GLOBAL init_connect=''"}},
		{name: "GLOBAL init_connect in SET STATEMENT", stmts: []string{"SET STATEMENT max_statement_time=0 FOR SET GLOBAL init_connect='SET NAMES gbk'"},
			after: []string{"SET GLOBAL init_connect=''"}},
		{name: "GLOBAL init_connect in EXECUTE IMMEDIATE", stmts: []string{"EXECUTE IMMEDIATE 'SET GLOBAL init_connect=''SET NAMES gbk'''"},
			after: []string{"SET GLOBAL init_connect=''"}},
		{name: "GLOBAL init_connect in a compound statement", stmts: []string{"BEGIN NOT ATOMIC SET GLOBAL init_connect='SET NAMES gbk'; END"},
			after: []string{"SET GLOBAL init_connect=''"}},
		{name: "GLOBAL event_scheduler then an event", stmts: []string{"SET GLOBAL event_scheduler=ON; CREATE EVENT ev_x ON SCHEDULE AT CURRENT_TIMESTAMP DO CALL " + db + ".bump()"}},
		// The server's own tables of stored programs, written directly:
		// mysql.proc keeps the body the server runs (body) apart from the
		// one information_schema shows (body_utf8).
		{name: "mysql.proc body rewritten", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"UPDATE mysql.proc SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'",
				"CALL harmless()"}},
		{name: "mysql.proc new row", each: true,
			stmts: []string{"INSERT INTO mysql.proc SELECT '" + db + "', 'planted', type, 'planted', language, sql_data_access, is_deterministic, security_type, param_list, returns, " +
				"'UPDATE " + db + ".invoices SET amount = amount + 1', definer, created, modified, sql_mode, comment, character_set_client, collation_connection, db_collation, 'SELECT 1', aggregate " +
				"FROM mysql.proc WHERE db = '" + db + "' AND name = 'bump'", "CALL planted()"}},
		{name: "mysql.event body rewritten", setup: []string{"CREATE EVENT IF NOT EXISTS ev_mysql ON SCHEDULE EVERY 1 DAY STARTS CURRENT_TIMESTAMP + INTERVAL 1 DAY DISABLE DO SELECT 1"},
			stmts: []string{"UPDATE mysql.event SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1', status = 'ENABLED', execute_at = NULL WHERE db = '" + db + "' AND name = 'ev_mysql'"}},
		{name: "mysql.proc through USE", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"USE mysql", "UPDATE proc SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'",
				"USE " + db, "CALL harmless()"}},
		{name: "mysql.proc quoted and spaced", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"UPDATE `mysql` . `proc` SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'",
				"CALL harmless()"}},
		{name: "mysql.proc in EXECUTE IMMEDIATE", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"EXECUTE IMMEDIATE 'UPDATE mysql.proc SET body = ''UPDATE " + db + ".invoices SET amount = amount + 1'' WHERE db = ''" + db + "'' AND name = ''harmless'''",
				"CALL harmless()"}},
		{name: "mysql.proc in a compound statement", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"BEGIN NOT ATOMIC UPDATE mysql.proc SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'; END",
				"CALL harmless()"}},
		{name: "mysql.proc by a procedure", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"CREATE PROCEDURE rewriter() UPDATE mysql.proc SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'",
				"CALL rewriter()", "CALL harmless()"}},
		{name: "mysql.proc by a multi-table UPDATE", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"UPDATE notes, mysql.proc SET mysql.proc.body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE mysql.proc.db = '" + db + "' AND mysql.proc.name = 'harmless'",
				"CALL harmless()"}},
		{name: "mysql.proc renamed over", setup: []string{"CREATE OR REPLACE PROCEDURE harmless() SELECT 1"}, each: true,
			stmts: []string{"CREATE TABLE proc_copy LIKE mysql.proc", "INSERT INTO proc_copy SELECT * FROM mysql.proc",
				"UPDATE proc_copy SET body = 'UPDATE " + db + ".invoices SET amount = amount + 1' WHERE db = '" + db + "' AND name = 'harmless'",
				"RENAME TABLE mysql.proc TO proc_old, proc_copy TO mysql.proc", "CALL harmless()"},
			after: []string{"RENAME TABLE mysql.proc TO " + db + ".proc_bad, " + db + ".proc_old TO mysql.proc"}},
		one("mysql.func row", "INSERT INTO mysql.func VALUES ('sys_exec', 2, 'lib_mysqludf_sys.so', 'function')"),
		one("mysql.servers row", "INSERT INTO mysql.servers (Server_name, Host, Db, Username, Password, Port, Socket, Wrapper, Owner) VALUES ('loop', '127.0.0.1', '"+db+"', 'x', 'y', 3306, '', 'mysql', '')"),
		one("mysql.proc via REPLACE", "REPLACE INTO mysql.proc SELECT * FROM mysql.proc WHERE db = '"+db+"' AND name = 'bump'"),
		one("mysql.proc via LOAD DATA", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE mysql.proc"),
		each("FLUSH TABLES WITH READ LOCK, then UNLOCK and write", "FLUSH TABLES WITH READ LOCK", "UNLOCK TABLES", "UPDATE invoices SET amount=0"),
		each("LOCK TABLES WRITE on the lease table", "LOCK TABLES fenced_job_leases WRITE", "UPDATE fenced_job_leases SET fence_token=fence_token+100", "UNLOCK TABLES"),
		one("HANDLER on the lease table via an alias", "HANDLER notes OPEN AS fenced_job_leases; HANDLER fenced_job_leases READ FIRST; HANDLER fenced_job_leases CLOSE; UPDATE invoices SET amount=0"),
		one("BACKUP LOCK then a write", "BACKUP LOCK invoices; UPDATE invoices SET amount=0; BACKUP UNLOCK"),
		one("KILL then write", "KILL QUERY 0; UPDATE invoices SET amount=0"),
	})
}

func runAttacks2(t *testing.T, e *rtEnv, attacks []rtAttack) {
	t.Helper()
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) { e.run2(t, a) })
	}
}

// TestRedteam2InitConnect: SET GLOBAL init_connect through the proxy makes
// the server run SQL at every later login of an account without SUPER:
// the proxy's own account (which may write the lease table) when it
// reconnects, and the apps' accounts, whose init_connect statements the
// proxy never sees (a write, or SET NAMES gbk under a session the proxy
// reads as utf8mb4).
func TestRedteam2InitConnect(t *testing.T) {
	e := newRedteamEnv(t)
	t.Cleanup(func() { e.root.Exec("SET GLOBAL init_connect=''") })
	want := e.protected(t)
	c := e.session(t, "multiStatements=true")
	mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
	_, err := c.ExecContext(context.Background(),
		"SET GLOBAL init_connect='UPDATE "+e.db+".fenced_job_leases SET owner_token=X''00'', fence_token=fence_token+100'")
	// A non-SUPER account's login through the proxy, and the proxy's own
	// logins: kill the proxy account's connections so that it reconnects.
	mustExec(t, e.root, "CREATE USER IF NOT EXISTS 'rt2_plain'@'%' IDENTIFIED BY 'rt2-Pw1'")
	mustExec(t, e.root, "GRANT SELECT ON *.* TO 'rt2_plain'@'%'")
	t.Cleanup(func() { e.root.Exec("DROP USER IF EXISTS 'rt2_plain'@'%'") })
	plain, perr := sql.Open("mysql", e.proxy.DSN("rt2_plain", "rt2-Pw1", e.db))
	if perr != nil {
		t.Fatal(perr)
	}
	plain.Exec("SELECT 1") // its login runs init_connect, if set
	plain.Close()
	user := proxyUser(t, e)
	rows, qerr := e.root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", user)
	if qerr != nil {
		t.Fatal(qerr)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		e.root.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
	}
	awaitCatalog(t, e.fencedEnv)
	awaitCatalog(t, e.fencedEnv)
	if got := e.protected(t); got != want {
		t.Fatalf("SET GLOBAL init_connect through the proxy (%v) wrote the lease table at the proxy's next login:\n%s\n%s", err, want, got)
	}
	if err == nil {
		t.Fatalf("SET GLOBAL init_connect through the proxy was relayed")
	}
}

// proxyUser is the proxy's own account name (backend.user).
func proxyUser(t *testing.T, e *rtEnv) string {
	t.Helper()
	return e.proxy.Config.Backend.User
}

// TestRedteam2ProtocolCommands: protocol commands between a fence and a
// write.
func TestRedteam2ProtocolCommands(t *testing.T) {
	e := newProtoEnv(t)
	mustExec(t, e.root, "CREATE TABLE notes2 (id INT PRIMARY KEY, v INT)")
	other := dbtest.NewDatabase(t, e.srv)
	otherRoot := dbtest.Open(t, e.srv.RootDSN(other))
	mustExec(t, otherRoot, "CREATE TABLE invoices (id INT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(40), period CHAR(7), amount DECIMAL(10,2))")
	o := wireOptions{DeprecateEOF: true}
	attempts := []struct {
		name string
		run  func(t *testing.T, w *wireConn)
	}{
		{"COM_CHANGE_USER mid-transaction after a valid write", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.valid)
			w.mustQuery(t, "BEGIN")
			w.mustQuery(t, staleUpdate)
			if _, err := w.changeUser(dbserver.AppUser, dbserver.AppPassword, e.db); err != nil {
				t.Fatal(err)
			}
			w.mustQuery(t, e.stale)
			w.query(staleInsert)
			w.query("COMMIT")
		}},
		{"COM_CHANGE_USER, then a write with no fence", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.valid)
			w.changeUser(dbserver.AppUser, dbserver.AppPassword, e.db)
			w.query(staleUpdate)
		}},
		{"COM_RESET_CONNECTION between PREPARE and EXECUTE", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.valid)
			id, _ := w.prepare(t, staleUpdate)
			w.resetConnection()
			w.mustQuery(t, e.stale)
			w.send(executePacket(id, 0, nil))
			w.readResults(false)
		}},
		{"COM_RESET_CONNECTION inside a transaction after a valid write", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.valid)
			w.mustQuery(t, "START TRANSACTION")
			w.mustQuery(t, staleUpdate)
			w.resetConnection()
			w.query(staleInsert)
			w.query("COMMIT")
		}},
		{"COM_STMT_SEND_LONG_DATA splitting a parameter", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			id, _ := w.prepare(t, "INSERT INTO invoices (customer, period, amount) VALUES (?, '2026-12', 1)")
			w.send(stmtCmd(comStmtSendLongData, id, append([]byte{0, 0}, "mall"...)...))
			w.send(stmtCmd(comStmtSendLongData, id, append([]byte{0, 0}, "ory"...)...))
			w.send(executePacket(id, 0, []stmtParam{longDataParam()}))
			w.readResults(false)
		}},
		{"COM_STMT_SEND_LONG_DATA to a parameter the statement lacks", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			id, _ := w.prepare(t, "UPDATE invoices SET amount = ?")
			w.send(stmtCmd(comStmtSendLongData, id, append([]byte{9, 0}, "0"...)...))
			w.send(executePacket(id, 0, []stmtParam{intParam(0)}))
			w.readResults(false)
		}},
		{"COM_STMT_RESET after long data", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			id, _ := w.prepare(t, "UPDATE invoices SET customer = ?")
			w.send(stmtCmd(comStmtSendLongData, id, append([]byte{0, 0}, "x"...)...))
			w.send(stmtCmd(comStmtReset, id))
			w.readOne()
			w.send(executePacket(id, 0, []stmtParam{longDataParam()}))
			w.readResults(false)
		}},
		{"cursor on a write", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			id, _ := w.prepare(t, "UPDATE invoices SET amount = ?")
			w.send(executePacket(id, 1, []stmtParam{intParam(0)}))
			w.readResults(true)
			w.send(stmtCmd(comStmtFetch, id, 10, 0, 0, 0))
			w.readOne()
		}},
		{"COM_SET_OPTION multi-statements on, without the capability", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send([]byte{comSetOption, 0, 0})
			w.readOne()
			w.query("SELECT 1; " + staleUpdate)
		}},
		{"COM_SET_OPTION toggled off then on", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send([]byte{comSetOption, 1, 0})
			w.readOne()
			w.query("SELECT 1; " + staleUpdate)
			w.send([]byte{comSetOption, 0, 0})
			w.readOne()
			w.query("DO 1; " + staleInsert)
		}},
		{"COM_INIT_DB to another schema with the same table name, then back", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comInitDB}, other...))
			w.readOne()
			w.query(staleUpdate)
			w.send(append([]byte{comInitDB}, e.db...))
			w.readOne()
			w.query(staleUpdate)
		}},
		{"COM_INIT_DB with a trailing NUL", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comInitDB}, other...))
			w.readOne()
			w.send(append(append([]byte{comInitDB}, e.db...), 0))
			w.readOne()
			w.query(staleUpdate)
		}},
		{"COM_INIT_DB quoted", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comInitDB}, other...))
			w.readOne()
			w.send(append([]byte{comInitDB}, "`"+e.db+"`"...))
			w.readOne()
			w.query(staleUpdate)
		}},
		{"COM_FIELD_LIST of the protected table, then a write", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comFieldList}, "invoices\x00%"...))
			w.readRows()
			w.query(staleUpdate)
		}},
		{"query attributes prefix", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comQuery, 0, 1}, staleUpdate...))
			w.readResults(false)
			w.send(append([]byte{comQuery, 0x01, 0x01, 0x00, 0x01, 0xfe, 0x00, 'a', 0x01, 'b'}, staleUpdate...))
			w.readResults(false)
		}},
		{"pipelined prepare and execute", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{comStmtPrepare}, staleUpdate...))
			w.send(executePacket(0xffffffff, 0, nil))
			w.readPrepare()
			w.readResults(false)
		}},
		{"COM_BINLOG_DUMP does not hang the proxy", func(t *testing.T, w *wireConn) {
			w.mustQuery(t, e.stale)
			w.send(append([]byte{0x12, 4, 0, 0, 0, 0, 0, 0x63, 0, 0, 0}, "nosuch-bin.000001"...))
			w.readOne()
		}},
	}
	attempts = append(attempts, struct {
		name string
		run  func(t *testing.T, w *wireConn)
	}{"cursor on DELETE RETURNING", func(t *testing.T, w *wireConn) {
		// Measured: MariaDB 10.11 itself crashes on this (directly, without
		// the proxy too: COM_STMT_EXECUTE with CURSOR_TYPE_READ_ONLY of a
		// prepared DELETE ... RETURNING), so it is run only on request; the
		// server's restart rolls the DELETE back.
		if os.Getenv("RT2_SERVER_CRASH") == "" {
			t.Skip("KNOWN SERVER CRASH (not a bypass): MariaDB 10.11 crashes on a cursor over DELETE ... RETURNING, directly as through the proxy; set RT2_SERVER_CRASH=1 to run")
		}
		w.mustQuery(t, e.stale)
		id, _ := w.prepare(t, "DELETE FROM invoices WHERE id > ? RETURNING id")
		w.send(executePacket(id, 1, []stmtParam{intParam(0)}))
		w.readResults(true)
		w.send(stmtCmd(comStmtFetch, id, 10, 0, 0, 0))
		w.readRows()
	}})
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			want := e.invoices(t)
			oo := o
			if strings.Contains(a.name, "without the capability") || strings.Contains(a.name, "toggled") {
				oo.ClearCaps = capMultiStatements
			}
			if strings.Contains(a.name, "query attributes") {
				oo.ExtraCaps = 1 << 27
			}
			w := e.conn(t, false, oo)
			a.run(t, w)
			e.unchanged(t, want, a.name)
			// The proxy still answers a new session.
			e.conn(t, false, o).mustQuery(t, "SELECT 1")
		})
	}
}

// TestRedteam2ExpiryInsideTransaction: a valid fence's transaction, its
// lease expiring by database time between two writes of the transaction:
// the second write must match 0 rows even though the first passed.
func TestRedteam2ExpiryInsideTransaction(t *testing.T) {
	e := newFencedEnv(t, envOptions{account: true})
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10)")
	for _, shape := range []string{"UPDATE invoices SET amount = amount + 1", "DELETE FROM invoices WHERE id = 1"} {
		t.Run(shape, func(t *testing.T) {
			l := e.acquire(t, "invoice:acme", 3*time.Second)
			c := e.session(t)
			setFence(t, c, l)
			ctx := context.Background()
			mustExec(t, c, "START TRANSACTION")
			r, err := c.ExecContext(ctx, "UPDATE invoices SET period = period WHERE id = 1")
			if err != nil {
				t.Fatal(err)
			}
			_ = r
			// Expired by database time: the proxy's read of it never locks.
			eventually(t, 20*time.Second, "the lease to expire", func() bool {
				return queryString(t, e.root, "SELECT leased_until < SYSDATE(3) FROM fenced_job_leases WHERE lease_name = 'invoice:acme'") == "1"
			})
			want := tableDump(t, e.root, "invoices")
			res, err := c.ExecContext(ctx, shape)
			var n int64
			if err == nil {
				n, _ = res.RowsAffected()
			}
			mustExec(t, c, "COMMIT")
			if got := tableDump(t, e.root, "invoices"); got != want || n != 0 {
				t.Fatalf("a write after the lease expired inside its transaction changed %d rows (%v):\n%s\n%s", n, err, want, got)
			}
		})
	}
}

// engAttack is one attempt on an engine: statements through the proxy, one
// COM_QUERY each, from a session with a stale fence.
type engAttack struct {
	name  string
	stmts []string
}

// runEngineAttacks runs attacks on eng's fenced environment (the catalog
// on): the stale fence's lease was taken over since; invoices,
// reconciliation_runs and the lease table must not change.
func runEngineAttacks(t *testing.T, eng string, attacks []engAttack) {
	e := newFencedEnv(t, envOptions{account: true, engine: eng})
	mustExec(t, e.root, "INSERT INTO invoices (id, customer, period, amount) VALUES (1, 'acme', '2026-10', 10), (2, 'globex', '2026-10', 20)")
	mustExec(t, e.root, "INSERT INTO reconciliation_runs (id, status) VALUES (1, 'done')")
	old := e.acquire(t, "invoice:acme", time.Minute)
	e.setToken(t, "invoice:acme", old.Token)
	e.acquire(t, "invoice:acme", time.Hour)
	e.acquire(t, "admin:reconciliation", time.Hour)
	dump := func() string {
		e.sync(t)
		return tableDump(t, e.root, "invoices") + "--\n" + tableDump(t, e.root, "reconciliation_runs") + "--\n" +
			tableDump(t, e.root, "(SELECT lease_name, HEX(owner_token), fence_token FROM fenced_job_leases) AS l")
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			want := dump()
			c := e.session(t, "multiStatements=true")
			mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", old.Owner, old.Token))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var outcome []string
			for _, q := range a.stmts {
				q = strings.ReplaceAll(q, "$DB", e.db)
				if _, err := c.ExecContext(ctx, q); err != nil {
					outcome = append(outcome, err.Error())
				} else {
					outcome = append(outcome, "ok")
				}
			}
			t.Logf("outcomes %q", outcome)
			if got := dump(); got != want {
				t.Fatalf("a stale session on %s changed a protected table (outcomes %q):\nbefore\n%s\nafter\n%s", eng, outcome, want, got)
			}
		})
	}
}

// TestRedteam2TiDB: TiDB's own statements and session variables.
func TestRedteam2TiDB(t *testing.T) {
	const upd, ins = "UPDATE invoices SET amount = 0", "INSERT INTO invoices (customer, period, amount) VALUES ('mallory', '2026-12', 1)"
	runEngineAttacks(t, engTiDB, []engAttack{
		{"BATCH ON DELETE", []string{"BATCH ON id LIMIT 1 DELETE FROM invoices"}},
		{"BATCH UPDATE", []string{"BATCH LIMIT 1 UPDATE invoices SET amount = 0"}},
		{"BATCH DRY RUN", []string{"BATCH ON id LIMIT 1 DRY RUN DELETE FROM invoices"}},
		{"non-transactional INSERT SELECT", []string{"BATCH ON id LIMIT 1 INSERT INTO invoices (customer, period, amount) SELECT CONCAT(customer, 'x'), period, 0 FROM invoices"}},
		{"FLASHBACK TABLE", []string{"FLASHBACK TABLE invoices TO invoices_back"}},
		{"FLASHBACK DATABASE", []string{"FLASHBACK DATABASE nosuch TO nosuch2"}},
		{"RECOVER TABLE", []string{"RECOVER TABLE invoices"}},
		{"IMPORT INTO", []string{"IMPORT INTO invoices FROM '/etc/hostname'"}},
		{"LOAD DATA", []string{"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE invoices"}},
		{"tidb_constraint_check_in_place", []string{"SET tidb_constraint_check_in_place = 1", ins}},
		{"tidb_constraint_check_in_place_pessimistic off", []string{"SET tidb_constraint_check_in_place_pessimistic = 0", "BEGIN", ins, "COMMIT"}},
		{"optimistic transaction", []string{"SET tidb_txn_mode = 'optimistic'", "BEGIN", upd, "COMMIT"}},
		{"BEGIN OPTIMISTIC", []string{"BEGIN OPTIMISTIC", upd, ins, "COMMIT"}},
		{"tidb_dml_type bulk", []string{"SET tidb_dml_type = 'bulk'", upd, ins}},
		{"tidb_snapshot", []string{"SET tidb_snapshot = DATE_FORMAT(NOW() - INTERVAL 1 HOUR, '%Y-%m-%d %H:%i:%s')", upd}},
		{"tidb_read_staleness", []string{"SET tidb_read_staleness = -5", upd}},
		{"tidb_low_resolution_tso", []string{"SET tidb_low_resolution_tso = 1", upd, ins}},
		{"async commit and 1PC off", []string{"SET tidb_enable_async_commit = 0, tidb_enable_1pc = 0", upd}},
		{"READ COMMITTED", []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "BEGIN", upd, "COMMIT"}},
		{"stale read transaction", []string{"START TRANSACTION READ ONLY AS OF TIMESTAMP NOW() - INTERVAL 5 SECOND", upd, "COMMIT"}},
		{"SET TRANSACTION AS OF", []string{"SET TRANSACTION READ ONLY AS OF TIMESTAMP NOW() - INTERVAL 5 SECOND", upd}},
		{"tidb_replica_read", []string{"SET tidb_replica_read = 'closest-replicas'", upd}},
		{"ADMIN", []string{"ADMIN CHECK TABLE invoices", upd}},
		{"SPLIT TABLE", []string{"SPLIT TABLE invoices BETWEEN (0) AND (100) REGIONS 2", upd}},
		{"SET GLOBAL tidb_multi_statement_mode", []string{"SET GLOBAL tidb_multi_statement_mode = 'ON'"}},
		// TiDB's session migration statement sets sql_mode behind a SET
		// the proxy does not read as one of sql_mode.
		{"SET SESSION_STATES NO_BACKSLASH_ESCAPES", []string{`SET SESSION_STATES '{"current-db":"$DB","sys-vars":{"sql_mode":"NO_BACKSLASH_ESCAPES"}}'`,
			`SELECT 'a\'; UPDATE invoices SET amount = 0; -- '`}},
		{"SET SESSION_STATES after the proxy learned sql_mode", []string{`SELECT 'x\'y'`,
			`SET SESSION_STATES '{"current-db":"$DB","sys-vars":{"sql_mode":"NO_BACKSLASH_ESCAPES"}}'`, `SELECT 'a\'; UPDATE invoices SET amount = 0; -- '`}},
		{"SET SESSION_STATES with a JSON escape in the name", []string{"SELECT 'x\\'y'",
			`SET SESSION_STATES '{"current-db":"$DB","sys-vars":{"sql\\u005fmode":"NO_BACKSLASH_ESCAPES"}}'`, `SELECT 'a\'; UPDATE invoices SET amount = 0; -- '`}},
		{"SET SESSION_STATES gbk by a JSON escape", []string{"SELECT 'x\\'y'",
			`SET SESSION_STATES '{"current-db":"$DB","sys-vars":{"character\\u005fset\\u005fclient":"gbk"}}'`, "SELECT '\xbf\\'; UPDATE invoices SET amount = 0; -- '"}},
		{"SET SESSION_STATES ANSI_QUOTES", []string{`SET SESSION_STATES '{"current-db":"$DB","sys-vars":{"sql_mode":"ANSI_QUOTES"}}'`,
			`UPDATE "invoices" SET amount = 0`}},
		{"SET CONFIG", []string{"SET CONFIG tikv `split.qps-threshold` = 1000", upd}},
		{"SET BINDING", []string{"SET BINDING DISABLED FOR SELECT * FROM invoices", upd}},
		{"SET RESOURCE GROUP", []string{"SET RESOURCE GROUP default", upd}},
	})
}

// TestRedteam2Galera: Galera's session variables (wsrep_on=0 writes
// without replication or certification).
func TestRedteam2Galera(t *testing.T) {
	const upd, ins = "UPDATE invoices SET amount = 0", "INSERT INTO invoices (customer, period, amount) VALUES ('mallory', '2026-12', 1)"
	runEngineAttacks(t, engGalera, []engAttack{
		{"wsrep_on off", []string{"SET SESSION wsrep_on = 0", upd, ins}},
		{"wsrep_on off in a transaction", []string{"SET SESSION wsrep_on = OFF", "BEGIN", upd, "DELETE FROM invoices", "COMMIT"}},
		{"wsrep_on off by SET STATEMENT", []string{"SET STATEMENT wsrep_on = 0 FOR " + upd}},
		{"wsrep_sync_wait off", []string{"SET wsrep_sync_wait = 0", upd}},
		{"streaming replication", []string{"SET wsrep_trx_fragment_unit = 'statements', wsrep_trx_fragment_size = 1", "BEGIN", upd, ins, "COMMIT"}},
		{"dirty reads", []string{"SET wsrep_dirty_reads = 1", upd}},
		{"RSU then ALTER", []string{"SET SESSION wsrep_OSU_method = 'RSU'", "ALTER TABLE invoices ADD COLUMN z INT", upd}},
		{"wsrep_on off, then the lease table", []string{"SET SESSION wsrep_on = 0", "UPDATE fenced_job_leases SET fence_token = fence_token + 100"}},
		{"SET GLOBAL wsrep_desync", []string{"SET GLOBAL wsrep_desync = ON", upd}},
	})
}

// TestRedteam2DatabaseGuard: with fencing.database_guard: triggers, a stale
// session goes for the guard triggers themselves, then writes.
func TestRedteam2DatabaseGuard(t *testing.T) {
	s := dbtest.Shared(t)
	e := newGuardEnv(t, s, lease.InnoDB)
	tp := startProxy(t, s.Addr, guardProxyYAML(e, "zero_rows", "2s"), guardProxyAccount(t, e)...)
	ctx := context.Background()
	var guard string
	if err := e.root.QueryRow("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = 'items' AND EVENT_MANIPULATION = 'UPDATE'", e.app).Scan(&guard); err != nil {
		t.Fatal(err)
	}
	triggers := func() string {
		return tableDump(t, e.root, "(SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = '"+e.app+"') AS tr")
	}
	for _, a := range []engAttack{
		{"DROP TRIGGER of the guard", []string{"DROP TRIGGER " + guard, "UPDATE items SET v = 'stale' WHERE id = 1"}},
		{"DROP TRIGGER qualified", []string{"DROP TRIGGER IF EXISTS `" + e.app + "`.`" + guard + "`", "UPDATE items SET v = 'stale' WHERE id = 1"}},
		{"CREATE OR REPLACE TRIGGER over the guard", []string{"CREATE OR REPLACE TRIGGER " + guard + " BEFORE UPDATE ON other FOR EACH ROW SET NEW.v = NEW.v", "UPDATE items SET v = 'stale' WHERE id = 1"}},
		{"a trigger that precedes the guard", []string{"CREATE TRIGGER pre BEFORE UPDATE ON other FOR EACH ROW PRECEDES " + guard + " SET @fence_owner = NULL", "UPDATE items SET v = 'stale' WHERE id = 1"}},
		{"RENAME the guarded table away and back", []string{"RENAME TABLE items TO items_x", "RENAME TABLE items_x TO items", "UPDATE items SET v = 'stale' WHERE id = 1"}},
		{"guard exempt by a definer procedure", []string{"CREATE DEFINER = CURRENT_USER PROCEDURE gp() SQL SECURITY DEFINER UPDATE items SET v = 'stale'", "CALL gp()"}},
		{"foreign_key_checks off", []string{"SET foreign_key_checks = 0", "DELETE FROM items WHERE id = 1"}},
		{"sql_log_bin off", []string{"SET sql_log_bin = 0", "UPDATE items SET v = 'stale' WHERE id = 1"}},
	} {
		t.Run(a.name, func(t *testing.T) {
			want, wantTr := e.dump(t), triggers()
			c := guardSession(t, tp, e, fenceStale)
			var outcome []string
			for _, q := range a.stmts {
				if _, err := c.ExecContext(ctx, q); err != nil {
					outcome = append(outcome, err.Error())
				} else {
					outcome = append(outcome, "ok")
				}
			}
			if got := e.dump(t); got != want {
				t.Fatalf("a stale session changed a guarded table (outcomes %q):\n%s\n%s", outcome, want, got)
			}
			if got := triggers(); got != wantTr {
				t.Fatalf("a stale session changed the guard triggers (outcomes %q):\n%s\n%s", outcome, wantTr, got)
			}
		})
	}
}

// TestRedteam2ProxyAccount: a stale session takes privileges away from the
// proxy's own account (the app account may administer accounts), so that
// the catalog, reading information_schema with it, stops seeing the
// triggers, views and routine bodies that write protected tables; then it
// uses them.
func TestRedteam2ProxyAccount(t *testing.T) {
	for _, blind := range []string{
		"REVOKE TRIGGER ON *.* FROM %s",
		"REVOKE SELECT ON *.* FROM %s",
		"REVOKE SHOW VIEW ON *.* FROM %s",
		"REVOKE ALL PRIVILEGES, GRANT OPTION FROM %s",
		"REVOKE SELECT, SHOW VIEW, TRIGGER, EVENT ON *.* FROM %s",
		"DROP USER %s",
		"ALTER USER %s ACCOUNT LOCK",
		"RENAME USER %s TO 'rt2_renamed'@'%%'",
		"SET PASSWORD FOR %s = PASSWORD('rt2-other')",
		"ALTER USER %s WITH MAX_QUERIES_PER_HOUR 1",
	} {
		t.Run(strings.Fields(blind)[0]+" "+strings.Fields(blind)[1]+" "+strings.Fields(blind)[2], func(t *testing.T) {
			e := newRedteamEnv(t)
			acct := "'" + e.proxy.Config.Backend.User + "'@'%'"
			t.Cleanup(func() {
				e.root.Exec("DROP USER IF EXISTS 'rt2_renamed'@'%'")
			})
			want := e.protected(t)
			c := e.session(t, "multiStatements=true")
			mustExec(t, c, fmt.Sprintf("SET @fence_lease = 'invoice:acme', @fence_owner = X'%x', @fence_token = %d", e.stale.Owner, e.stale.Token))
			ctx := context.Background()
			_, berr := c.ExecContext(ctx, fmt.Sprintf(blind, acct))
			t.Logf("%s: %v", blind, berr)
			// Make the proxy log in again and read its catalog.
			rows, err := e.root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", e.proxy.Config.Backend.User)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for rows.Next() {
				var id int64
				rows.Scan(&id)
				ids = append(ids, id)
			}
			rows.Close()
			for _, id := range ids {
				e.root.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e.proxy.Proxy.WaitCatalog(wctx, e.proxy.Proxy.CatalogChecks()+2)
			cancel()
			var outcomes []string
			for _, q := range []string{"INSERT INTO trg_t VALUES (9, 9)", "CALL bump()", "SELECT bumpf()", "UPDATE v_inv SET amount = 0",
				"DELETE FROM parent2 WHERE id = 2"} {
				if _, err := c.ExecContext(ctx, q); err != nil {
					outcomes = append(outcomes, err.Error())
				} else {
					outcomes = append(outcomes, "ok")
				}
			}
			if got := e.protected(t); got != want {
				t.Fatalf("after %q through the proxy (%v), stale writes through the catalog's objects landed (%q):\n%s\n%s",
					blind, berr, outcomes, want, got)
			}
		})
	}
}
