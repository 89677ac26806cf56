package rewrite

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/policy"
)

// Each of these tries to get a write to a protected table past the
// rewriter. Every one must be fenced or refused, never forwarded.

type bypassCase struct {
	name string
	sql  string
	srv  Server
	sess *Session
	prep bool
}

func bypassCases() []bypassCase {
	app := appSession()
	ansi := &Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off}
	unknownModes := &Session{Schema: "app"}
	noSchema := &Session{ANSIQuotes: Off, NoBackslashEscapes: Off}
	other := &Session{Schema: "other", ANSIQuotes: Off, NoBackslashEscapes: Off}
	unsafe := &Session{Schema: "app", ANSIQuotes: Off, NoBackslashEscapes: Off, UnsafeCharset: true}
	c := func(name, sql string) bypassCase { return bypassCase{name: name, sql: sql, srv: maria, sess: app} }
	with := func(b bypassCase, srv Server, s *Session) bypassCase {
		if srv != (Server{}) {
			b.srv = srv
		}
		if s != nil {
			b.sess = s
		}
		return b
	}
	return []bypassCase{
		// Comments and hints around keywords and names.
		c("comments between all tokens", "UPDATE/**/invoices/**/SET/**/paid=1/**/WHERE/**/id=1"),
		c("dash comment between keyword and name", "UPDATE -- x\ninvoices SET paid=1"),
		c("hash comment between keyword and name", "DELETE #x\nFROM invoices"),
		c("comments around the dot", "UPDATE app/*x*/./*y*/invoices SET paid=1"),
		c("spaces around the dot", "DELETE FROM app . invoices WHERE id = 1"),
		c("optimizer hint", "UPDATE /*+ NO_INDEX_MERGE(invoices) */ invoices SET paid = 1"),
		c("hint-looking comment in insert", "INSERT /*+ x */ INTO invoices VALUES (1)"),
		c("trailing comment without newline", "DELETE FROM invoices -- WHERE id = 1"),
		c("comment that looks like a closing exec", "UPDATE invoices SET paid = 1 /* */ */ WHERE id = 1"),
		c("crlf line breaks", "UPDATE invoices\r\nSET paid = 1\r\nWHERE id = 1\r\n"),
		// Executable comments of every kind and version.
		c("whole statement in bang comment", "/*!UPDATE invoices SET paid=1*/"),
		c("keyword in versioned comment", "/*!40000 UPDATE*/ invoices SET paid=1"),
		c("table name in versioned comment", "UPDATE /*!40000 invoices*/ SET paid=1"),
		c("mariadb M comment", "/*M!UPDATE invoices SET paid = 1*/"),
		c("mariadb M versioned comment", "/*M!100000 DELETE FROM invoices */"),
		c("mariadb six-digit version", "/*!100000 DELETE FROM invoices */"),
		c("join hidden in exec comment", "UPDATE x /*!40000 JOIN invoices i ON i.id = x.id */ SET /*!40000 i.paid = 1, */ x.a = 1"),
		c("or hidden in exec comment", "UPDATE invoices SET paid = 1 WHERE id = 1 /*!40000 OR 1=1 */"),
		c("where hidden in dead comment", "UPDATE invoices SET paid = 1 /*!99999 WHERE id = 1 */"),
		c("string holding a comment end", "UPDATE invoices SET note = '*/' /*!40000 WHERE id = 1 */"),
		c("nested comment in exec", "/*!40000 UPDATE invoices /* x */ SET paid = 1 */"),
		with(c("mysql live versioned", "/*!80000 UPDATE invoices SET paid = 1 */"), mysql8, nil),
		with(c("mysql M comment is a comment, write outside", "UPDATE invoices SET paid = 1 /*M! WHERE id = 1 */"), mysql8, nil),
		with(c("mysql six-digit version", "/*!100000 UPDATE invoices SET paid = 1 */ UPDATE invoices SET paid = 2"), mysql84, nil),
		with(c("tidb bang comment", "/*!99999 DELETE FROM invoices */"), tidb, nil),
		with(c("tidb feature comment", "/*T![x] DELETE FROM invoices */"), tidb, nil),
		// Case and quoting.
		c("upper case", "UPDATE INVOICES SET PAID = 1"),
		c("mixed case schema", "DELETE FROM App.InVoIcEs"),
		c("backquoted", "UPDATE `invoices` SET paid = 1"),
		c("backquoted schema and table", "DELETE FROM `APP`.`INVOICES`"),
		with(c("ansi double quotes", `UPDATE "invoices" SET "paid" = 1`), Server{}, ansi),
		with(c("ansi unknown double quotes", `UPDATE "invoices" SET paid = 1`), Server{}, unknownModes),
		c("turkish dotted I quoted", "UPDATE `\xc4\xb0nvoices` SET paid = 1"),
		c("turkish dotted I bare", "UPDATE \xc4\xb0nvoices SET paid = 1"),
		c("latin-5 dotted I bare", "UPDATE \xddnvoices SET paid = 1"),
		c("long s quoted", "DELETE FROM `invoice\xc5\xbf`"),
		// Aliases.
		c("alias with AS", "UPDATE invoices AS i SET i.paid = 1"),
		c("alias without AS", "UPDATE invoices i SET paid = 1"),
		c("delete by alias", "DELETE i FROM invoices i"),
		c("delete using alias", "DELETE FROM i USING invoices AS i"),
		c("alias named like another table", "DELETE x FROM invoices AS x JOIN staging ON staging.id = x.id"),
		// Multi-statements.
		c("after a select", "SELECT 1; UPDATE invoices SET paid=1"),
		c("after a string with semicolon", "SELECT ';'; DELETE FROM invoices"),
		c("after a comment with semicolon", "SELECT 1/*;*/; DELETE FROM invoices"),
		c("after an escaped quote", `SELECT 'a\';'; DELETE FROM invoices`),
		c("after a backquoted semicolon", "SELECT 1 AS `;`; DELETE FROM invoices"),
		c("three statements", "SELECT 1; SELECT 2; UPDATE invoices SET paid = 1; SELECT 3"),
		c("second write in same packet", "UPDATE invoices SET paid = 1 WHERE id = 1; DELETE FROM invoices WHERE id = 2"),
		c("use then write", "USE app; UPDATE invoices SET paid = 1"),
		with(c("use from other schema then write", "USE app; DELETE FROM invoices"), Server{}, other),
		with(c("use in exec comment then write", "/*!USE app*/; DELETE FROM invoices"), Server{}, noSchema),
		c("use backquoted", "USE `app`; DELETE FROM invoices"),
		c("sql_mode switch then quoted write", `SET sql_mode='ANSI_QUOTES'; UPDATE "invoices" SET "paid"=1`),
		c("sql_mode from variable then write", "SET sql_mode=@m; DELETE FROM invoices"),
		c("charset switch then write", "SET NAMES gbk; DELETE FROM invoices"),
		// SQL-level PREPARE and dynamic SQL.
		c("prepare from literal", "PREPARE s FROM 'UPDATE invoices SET paid = 1'"),
		c("prepare from concatenated literals", "PREPARE s FROM 'UPDATE inv' 'oices SET paid = 1'"),
		c("prepare with escapes", `PREPARE s FROM 'UPDATE \inv\oices SET paid = 1'`),
		c("prepare with introducer", "PREPARE s FROM _latin1'DELETE FROM invoices'"),
		c("prepare from variable", "PREPARE s FROM @q"),
		c("prepare from hex", "PREPARE s FROM x'44454c4554452046524f4d20696e766f69636573'"),
		c("prepare from concat", "PREPARE s FROM CONCAT('DELETE FROM inv', 'oices')"),
		c("execute immediate literal", "EXECUTE IMMEDIATE 'DELETE FROM invoices'"),
		c("execute immediate concat", "EXECUTE IMMEDIATE CONCAT('DELETE FROM inv', 'oices')"),
		c("execute immediate variable", "EXECUTE IMMEDIATE @q"),
		c("prepare in exec comment", "/*!PREPARE s FROM @q*/"),
		c("prepare inside prepare text", "PREPARE s FROM 'PREPARE t FROM @q'"),
		c("compound statement with prepare", "BEGIN NOT ATOMIC PREPARE s FROM @q; EXECUTE s; END"),
		c("compound statement write", "BEGIN NOT ATOMIC DELETE FROM invoices; END"),
		c("procedure with prepare", "CREATE PROCEDURE p() BEGIN PREPARE s FROM @q; EXECUTE s; END"),
		c("event with write", "CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO DELETE FROM invoices"),
		c("trigger writing protected", "CREATE TRIGGER t AFTER INSERT ON x FOR EACH ROW DELETE FROM invoices"),
		// Clock and zone settings do not matter: the fence is there.
		c("set timestamp then write", "SET timestamp = 1; UPDATE invoices SET paid = 1"),
		c("set @@timestamp then write", "SET @@timestamp = 2000000000; DELETE FROM invoices"),
		c("set time_zone then write", "SET time_zone = '+14:00'; UPDATE invoices SET paid = 1"),
		c("set statement timestamp", "SET STATEMENT timestamp=1 FOR UPDATE invoices SET paid = 1"),
		// CTEs.
		c("cte then delete", "WITH x AS (SELECT 1) DELETE FROM invoices"),
		c("cte named like the table, qualified target", "WITH invoices AS (SELECT 1 AS id) DELETE FROM app.invoices WHERE id IN (SELECT id FROM invoices)"),
		c("cte named like the table, unqualified target", "WITH invoices AS (SELECT 1 AS id) DELETE FROM invoices"),
		c("cte then update join", "WITH x AS (SELECT 1 AS id) UPDATE invoices JOIN x ON x.id = invoices.id SET invoices.paid = 1"),
		with(c("insert with cte", "INSERT INTO invoices WITH x AS (SELECT 1) SELECT * FROM x"), mysql8, nil),
		// The protected table as a second table.
		c("update second table comma", "UPDATE x, invoices SET invoices.paid = 1"),
		c("update second table join alias", "UPDATE x JOIN invoices AS i ON i.id = x.id SET i.paid = 1"),
		c("update nested join", "UPDATE x JOIN (y JOIN invoices ON invoices.id = y.id) ON y.id = x.id SET invoices.paid = 1"),
		c("update second table unqualified column", "UPDATE x JOIN invoices ON invoices.id = x.id SET paid = 1"),
		c("delete second target", "DELETE x, invoices FROM x JOIN invoices ON invoices.id = x.id"),
		c("delete second target using", "DELETE FROM x, invoices USING x JOIN invoices ON invoices.id = x.id"),
		c("delete second target qualified", "DELETE x, app.invoices FROM x JOIN app.invoices ON invoices.id = x.id"),
		// Insert forms.
		c("insert values", "INSERT INTO invoices VALUES (1)"),
		c("insert without into", "INSERT invoices VALUES (1)"),
		c("insert set", "INSERT invoices SET id = 1"),
		c("insert select", "INSERT INTO invoices SELECT * FROM staging"),
		c("insert select from itself", "INSERT INTO invoices SELECT * FROM invoices"),
		c("insert aggregate", "INSERT INTO invoices (n) SELECT COUNT(*) FROM staging"),
		c("replace select", "REPLACE invoices SELECT * FROM staging"),
		c("insert odku", "INSERT INTO invoices (id) VALUES (1) ON DUPLICATE KEY UPDATE paid = 1"),
		c("insert ignore qualified", "INSERT IGNORE INTO app.invoices (id) VALUES (1), (2)"),
		with(c("insert table", "INSERT INTO invoices TABLE staging"), mysql8, nil),
		with(c("insert row alias", "INSERT INTO invoices (id) VALUES (1) AS n ON DUPLICATE KEY UPDATE id = n.id"), mysql8, nil),
		// Other statements that would change the table.
		c("truncate", "TRUNCATE invoices"),
		c("drop", "DROP TABLE invoices"),
		c("rename away", "RENAME TABLE invoices TO x"),
		c("rename onto", "RENAME TABLE x TO invoices"),
		c("alter", "ALTER TABLE invoices ENGINE=InnoDB"),
		c("temporary shadow", "CREATE TEMPORARY TABLE invoices LIKE staging"),
		c("load data", "LOAD DATA LOCAL INFILE 'x' REPLACE INTO TABLE invoices"),
		c("handler", "HANDLER invoices OPEN AS h"),
		c("drop database", "DROP DATABASE app"),
		c("view over table", "CREATE OR REPLACE VIEW v AS SELECT * FROM invoices"),
		c("explain analyze", "EXPLAIN ANALYZE DELETE FROM invoices"),
		c("analyze statement (MariaDB runs it)", "ANALYZE DELETE FROM invoices"),
		c("delete returning", "DELETE FROM invoices RETURNING id"),
		c("binlog", "BINLOG 'AAAA'"),
		// Lease functions mixed with writes.
		c("lease call and write", "SELECT fence_acquire('x', 1); DELETE FROM invoices"),
		c("lease call inside write", "UPDATE invoices SET paid = fence_renew(1)"),
		// sql_mode and charset games.
		with(c("unknown backslash mode changes the split", `SELECT 'a\'; DELETE FROM invoices; -- '`), Server{}, unknownModes),
		with(c("unknown ansi mode changes the split", `SELECT "a\"; DELETE FROM invoices; -- "`), Server{}, unknownModes),
		with(c("gbk trail backslash hides a statement", "SELECT '\xbf\\'; DELETE FROM invoices; -- '"), Server{}, unsafe),
		with(c("gbk trail backslash hides a use", "SELECT '\xbf\\'; USE app; -- '"), Server{}, unsafe),
		// Binary protocol.
		{name: "prepared update", sql: "UPDATE invoices SET paid = ? WHERE id = ?", srv: maria, sess: app, prep: true},
		{name: "prepared insert", sql: "INSERT INTO invoices (id, note) VALUES (?, ?)", srv: maria, sess: app, prep: true},
		{name: "prepared multi statement", sql: "SELECT ?; DELETE FROM invoices", srv: maria, sess: app, prep: true},
		// Odd bytes.
		c("nul byte", "DELETE FROM invoices\x00"),
		c("trailing semicolons", "DELETE FROM invoices;;"),
		c("no-space keywords", "DELETE`x`FROM`invoices`AS`x`"),
	}
}

func TestBypassAttempts(t *testing.T) {
	// The shape cache is on and the text cache off: each attempt is decided
	// twice, the second time from its shape's plan where it has one.
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 4096})
	for _, bc := range bypassCases() {
		t.Run(bc.name, func(t *testing.T) {
			sess := *bc.sess
			var d Decision
			for run := 1; run <= 2; run++ {
				first := d
				if bc.prep {
					d = e.Prepare([]byte(bc.sql), bc.srv, &sess)
				} else {
					d = e.Query([]byte(bc.sql), bc.srv, &sess)
				}
				if diff := diffDecisions(d, first); run == 2 && diff != "" {
					t.Fatalf("the second decision differs:\n%s", diff)
				}
			}
			switch d.Action {
			case Forward:
				// Sent verbatim is right only for a write the proxy guards.
				if !guardedWrites(d) {
					t.Fatalf("forwarded unchanged: %q", bc.sql)
				}
				t.Logf("guarded: %s", bc.sql)
			case Answer:
				t.Fatalf("answered: %q", bc.sql)
			case Refuse:
				if d.Refusal == nil || d.Refusal.Reason == "" {
					t.Fatalf("refusal without a reason")
				}
				t.Logf("refused: %s", d.Refusal.Error())
			case Send:
				out := string(d.SQL)
				lock := "LOCK IN SHARE MODE)"
				if bc.srv.Flavor == TiDB {
					lock = "FOR UPDATE)"
				}
				if !strings.Contains(out, "fence_l.owner_token = @fence_owner") || !strings.Contains(out, lock) {
					t.Fatalf("sent without a fence: %s", out)
				}
				writes := 0
				for _, s := range d.Stmts {
					if s.Kind == Write || s.Kind == Prepare && s.Fence != nil {
						writes++
						if !strings.Contains(out[s.Span[0]:s.Span[1]], "fence_l.fence_token = @fence_token") {
							t.Errorf("write statement without its fence: %q", out[s.Span[0]:s.Span[1]])
						}
					}
				}
				if writes == 0 {
					t.Errorf("sent, but no statement is marked as a protected write: %+v", d.Stmts)
				}
				t.Logf("sent: %s", out)
			}
		})
	}
}

// guardedWrites: a decision that forwards the client's text is safe only if
// it marks a protected write that the proxy guards (and nothing unguarded
// would be forwarded).
func guardedWrites(d Decision) bool {
	n := 0
	for _, s := range d.Stmts {
		f := s.Fence
		if s.Kind == Prepare && s.Prepared != nil {
			f = s.Prepared.Fence
		}
		if f == nil {
			continue
		}
		if !f.Guard {
			return false
		}
		n++
	}
	return n > 0
}

// Statements that would move the fence they are checked against, or stall
// a lease by locking its row: each must be refused, under every protocol,
// also when its shape was seen before. The fenced form of these would be
// no defence (the fence reads what the statement assigned; a locked lease
// row makes the holder wait), so "fenced" does not count here.
func TestFenceCannotBeMovedOrBlocked(t *testing.T) {
	e := New(testPolicy(t), Options{CacheEntries: -1, ShapeEntries: 4096})
	custom, err := policy.NewPolicy(1, policy.Fencing{Variables: policy.Variables{Lease: "job_l", Owner: "job_o", Token: "job_t"}},
		[]policy.Table{{Name: "app.invoices"}})
	if err != nil {
		t.Fatal(err)
	}
	ec := New(custom, Options{CacheEntries: -1, ShapeEntries: 4096})
	const moved, locks, reads = "assigns", "locks rows of a lease table", "other than by a plain SELECT"
	cases := []struct {
		name, sql, why string
		prep           bool
		e              *Engine
	}{
		{name: "issue repro", why: moved, sql: "UPDATE invoices SET paid = 1 WHERE id=1 AND (@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'x')) AND (@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'x')) IS NOT NULL"},
		{name: "same shape other literal", why: moved, sql: "UPDATE invoices SET paid = 2 WHERE id=3 AND (@fence_token := (SELECT fence_token FROM fenced_job_leases WHERE lease_name = 'y')) AND (@fence_owner := (SELECT owner_token FROM fenced_job_leases WHERE lease_name = 'y')) IS NOT NULL"},
		{name: "lease variable", why: moved, sql: "DELETE FROM invoices WHERE (@fence_lease := 'other') IS NOT NULL"},
		{name: "mixed case", why: moved, sql: "UPDATE invoices SET paid = (@Fence_Token := 9)"},
		{name: "backquoted", why: moved, sql: "UPDATE invoices SET paid = (@`fence_token` := 9)"},
		{name: "single quoted", why: moved, sql: "UPDATE invoices SET paid = (@'fence_token' := 9)"},
		{name: "double quoted", why: moved, sql: `UPDATE invoices SET paid = (@"fence_token" := 9)`},
		{name: "escaped letter in quoted name", why: moved, sql: `UPDATE invoices SET paid = (@'fence_t\oken' := 9)`},
		{name: "not ascii", why: moved, sql: "UPDATE invoices SET paid = (@`fence_\xe2\x84\xaaoken` := 9)"},
		{name: "executable comment", why: moved, sql: "UPDATE invoices SET paid = 1 WHERE @fence_token /*!:= 5 */"},
		{name: "mariadb executable comment", why: moved, sql: "UPDATE invoices SET paid = 1 WHERE @fence_token /*M!100000 := 5 */"},
		{name: "comment before operator", why: moved, sql: "UPDATE invoices SET paid = 1 WHERE (@fence_token/* x */:= 5)"},
		{name: "insert select list", why: moved, sql: "INSERT INTO invoices (id) SELECT @fence_token := 5"},
		{name: "insert values", why: moved, sql: "INSERT INTO invoices (id) VALUES (@fence_owner := 'o')"},
		{name: "replace", why: moved, sql: "REPLACE INTO invoices (id) VALUES (@fence_token := 1)"},
		{name: "odku", why: moved, sql: "INSERT INTO invoices (id) VALUES (1) ON DUPLICATE KEY UPDATE paid = (@fence_token := 2)"},
		{name: "multi-table update", why: moved, sql: "UPDATE staging s JOIN invoices i ON i.id = s.id SET i.paid = (@fence_token := s.v)"},
		{name: "cte", why: moved, sql: "WITH x AS (SELECT @fence_token := 5 AS v) UPDATE invoices SET paid = 1 WHERE id IN (SELECT v FROM x)"},
		{name: "second statement of a packet", why: moved, sql: "SELECT 1; DELETE FROM invoices WHERE (@fence_token := 5)"},
		{name: "binary protocol", why: moved, prep: true, sql: "UPDATE invoices SET paid = ? WHERE (@fence_token := ?) > 0"},
		{name: "sql prepare", why: moved, sql: "PREPARE s FROM 'UPDATE invoices SET paid = 1 WHERE (@fence_token := 5) > 0'"},
		{name: "execute immediate", why: moved, sql: "EXECUTE IMMEDIATE 'UPDATE invoices SET paid = 1 WHERE (@fence_token := 5) > 0'"},
		{name: "configured variable names", why: moved, e: ec, sql: "UPDATE invoices SET paid = 1 WHERE (@JOB_T := 5) > 0"},
		{name: "compound statement", why: "compound", sql: "BEGIN NOT ATOMIC SET @fence_token = 5; UPDATE invoices SET paid = 1; END"},
		{name: "stored function with configured names", why: "stored program", e: ec, sql: "CREATE FUNCTION f() RETURNS INT BEGIN SET @job_t = 5; RETURN 1; END"},

		{name: "for update", why: locks, sql: "SELECT * FROM fenced_job_leases FOR UPDATE"},
		{name: "for update qualified quoted", why: locks, sql: "SELECT * FROM `APP` . `FENCED_JOB_LEASES` WHERE lease_name = 'x' FOR UPDATE"},
		{name: "for update nowait", why: locks, sql: "SELECT 1 FROM fenced_job_leases FOR UPDATE NOWAIT"},
		{name: "for update wait", why: locks, sql: "SELECT 1 FROM fenced_job_leases FOR UPDATE WAIT 1"},
		{name: "skip locked", why: locks, sql: "SELECT 1 FROM fenced_job_leases FOR UPDATE SKIP LOCKED"},
		{name: "share mode", why: locks, sql: "select 1 from fenced_job_leases lock in share mode"},
		{name: "for share mysql", why: locks, sql: "SELECT 1 FROM fenced_job_leases FOR SHARE"},
		{name: "subquery", why: locks, sql: "SELECT * FROM staging WHERE EXISTS (SELECT 1 FROM fenced_job_leases FOR UPDATE)"},
		{name: "derived table", why: locks, sql: "SELECT * FROM (SELECT * FROM fenced_job_leases FOR UPDATE) d"},
		{name: "in executable comment", why: locks, sql: "SELECT * FROM fenced_job_leases /*!50000 FOR UPDATE */"},
		{name: "whole statement in comment", why: locks, sql: "/*!SELECT * FROM fenced_job_leases FOR UPDATE */"},
		{name: "binary protocol lock", why: locks, prep: true, sql: "SELECT * FROM fenced_job_leases WHERE lease_name = ? FOR UPDATE"},
		{name: "prepare literal lock", why: locks, sql: "PREPARE s FROM 'SELECT * FROM fenced_job_leases FOR UPDATE'"},
		{name: "execute immediate lock", why: locks, sql: "EXECUTE IMMEDIATE 'SELECT * FROM fenced_job_leases FOR UPDATE'"},
		{name: "other schema's lease table", why: locks, sql: "SELECT * FROM billing.fenced_job_leases FOR UPDATE"},
		{name: "after use", why: locks, sql: "USE billing; SELECT * FROM fenced_job_leases FOR UPDATE"},
		{name: "insert select", why: reads, sql: "INSERT INTO staging SELECT * FROM fenced_job_leases"},
		{name: "create table select", why: reads, sql: "CREATE TABLE s2 SELECT * FROM fenced_job_leases"},
		{name: "multi-table update", why: reads, sql: "UPDATE staging, fenced_job_leases l SET staging.v = l.fence_token"},
		{name: "delete in subquery", why: reads, sql: "DELETE FROM staging WHERE id IN (SELECT fence_token FROM fenced_job_leases)"},
		{name: "set subquery", why: reads, sql: "SET @t = (SELECT fence_token FROM fenced_job_leases LIMIT 1)"},
		{name: "lock tables", why: "LOCK TABLES of a lease table", sql: "LOCK TABLES fenced_job_leases READ"},
		{name: "lock tables quoted", why: "LOCK TABLES of a lease table", sql: "LOCK TABLE `app`.`Fenced_Job_Leases` AS l WRITE"},
		{name: "flush tables", why: reads, sql: "FLUSH TABLES fenced_job_leases WITH READ LOCK"},
		{name: "optimize", why: reads, sql: "OPTIMIZE TABLE fenced_job_leases"},
		{name: "flush for export", why: "mentions", sql: "FLUSH TABLES app.fenced_job_leases FOR EXPORT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng := e
			if tc.e != nil {
				eng = tc.e
			}
			for run := 1; run <= 2; run++ {
				sess := *appSession()
				var d Decision
				if tc.prep {
					d = eng.Prepare([]byte(tc.sql), maria, &sess)
				} else {
					d = eng.Query([]byte(tc.sql), maria, &sess)
				}
				if d.Action != Refuse {
					t.Fatalf("run %d: not refused (action %d): %s", run, d.Action, d.SQL)
				}
				if !strings.Contains(d.Refusal.Reason, tc.why) {
					t.Fatalf("run %d: refused for another reason: %s", run, d.Refusal.Error())
				}
			}
		})
	}
	// What stays allowed.
	for _, sql := range []string{
		"SELECT * FROM fenced_job_leases",
		"SELECT fence_token, owner_token INTO @fence_token, @fence_owner FROM fenced_job_leases WHERE lease_name = 'x'",
		"SET @fence_token = 5; UPDATE invoices SET paid = 1",
		"UPDATE invoices SET paid = (@n := @n + 1)",
		"SHOW CREATE TABLE fenced_job_leases",
		"DESCRIBE fenced_job_leases",
		"EXPLAIN SELECT * FROM fenced_job_leases",
		"SELECT * FROM staging FOR UPDATE",
		"LOCK TABLES invoices WRITE",
	} {
		sess := *appSession()
		if d := e.Query([]byte(sql), maria, &sess); d.Action == Refuse {
			t.Errorf("%q refused: %s", sql, d.Refusal.Error())
		}
	}
}
