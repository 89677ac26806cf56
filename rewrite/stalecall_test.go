package rewrite

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/catalog"
)

// staleSnapshot: testSnapshot plus a stored function that writes nothing
// protected (fmt_amount) and a loadable function (udf_known).
func staleSnapshot() *catalog.Snapshot {
	s := testSnapshot()
	s.Routines = append(s.Routines,
		catalog.Routine{Schema: "app", Name: "fmt_amount", Function: true, Body: "RETURN CONCAT(x, ' EUR')"})
	s.UDFs = []string{"udf_known"}
	return s
}

func staleEngines(t *testing.T) (stale, fresh *Engine) {
	t.Helper()
	p := testPolicy(t)
	c := catalog.Close(staleSnapshot(), ProtectedFor(p))
	stale = New(p, Options{Catalog: c, CatalogStale: "connection refused"})
	fresh = New(p, Options{Catalog: c})
	return stale, fresh
}

// unknownFunction reports whether d refuses a call of a function the
// last catalog did not know, naming it.
func unknownFunction(d Decision, name string) bool {
	return d.Action == Refuse && strings.Contains(d.Refusal.Reason, "cannot tell whether the function "+name+" writes") &&
		strings.Contains(d.Refusal.Reason, "(connection refused)")
}

// TestStaleCalls: while the catalog cannot be read, a call of a function
// that is neither built in nor known to the last catalog is refused, in
// every place a function can be called and every spelling the server
// resolves to a stored function; built-in functions, known harmless
// functions and names followed by '(' that are no calls pass. With a
// fresh catalog none of these is refused for being unknown.
func TestStaleCalls(t *testing.T) {
	stale, fresh := staleEngines(t)
	const refused, passes = true, false
	other := &Session{Schema: "other", ANSIQuotes: Off, NoBackslashEscapes: Off}
	ansi := &Session{Schema: "app", ANSIQuotes: On, NoBackslashEscapes: Off}
	cases := []struct {
		name    string
		sql     string
		fn      string // the function the refusal names
		want    bool
		sess    *Session
		srv     Server
		prepare bool
	}{
		// Where a function can be called.
		{name: "select list", sql: "SELECT newf()", fn: "app.newf", want: refused},
		{name: "where", sql: "SELECT * FROM notes WHERE id = newf(1)", fn: "app.newf", want: refused},
		{name: "set", sql: "SET @x = newf()", fn: "app.newf", want: refused},
		{name: "set system variable", sql: "SET SESSION sql_select_limit = newf()", fn: "app.newf", want: refused},
		{name: "do", sql: "DO newf()", fn: "app.newf", want: refused},
		{name: "values", sql: "INSERT INTO notes (id) VALUES (newf())", fn: "app.newf", want: refused},
		{name: "values of insert without into", sql: "INSERT notes (id) VALUES (1), (newf())", fn: "app.newf", want: refused},
		{name: "update set", sql: "UPDATE notes SET x = newf() WHERE id = 1", fn: "app.newf", want: refused},
		{name: "insert select", sql: "INSERT INTO notes (id) SELECT newf()", fn: "app.newf", want: refused},
		{name: "subquery", sql: "SELECT (SELECT newf() FROM notes LIMIT 1)", fn: "app.newf", want: refused},
		{name: "derived table", sql: "SELECT * FROM (SELECT newf() AS x) AS d", fn: "app.newf", want: refused},
		{name: "join condition", sql: "SELECT 1 FROM notes a JOIN orders b ON newf(a.id) = b.id", fn: "app.newf", want: refused},
		{name: "cte body", sql: "WITH c (a) AS (SELECT newf()) SELECT a FROM c", fn: "app.newf", want: refused},
		{name: "table value constructor", sql: "VALUES (newf())", fn: "app.newf", want: refused},
		{name: "show where", sql: "SHOW TABLES WHERE newf()", fn: "app.newf", want: refused},
		{name: "second statement", sql: "SELECT 1; SELECT newf()", fn: "app.newf", want: refused},
		{name: "create table select", sql: "CREATE TABLE nt AS SELECT newf() AS x", fn: "app.newf", want: refused},
		{name: "compound statement", sql: "BEGIN NOT ATOMIC SELECT newf(); END", fn: "app.newf", want: refused},
		{name: "compound statement, later statement", sql: "BEGIN NOT ATOMIC DECLARE x DATETIME(3); SELECT 1; SET x = newf(); END",
			fn: "app.newf", want: refused},
		{name: "compound statement, condition", sql: "BEGIN NOT ATOMIC IF (1) THEN DO 1; ELSEIF newf() THEN DO 2; END IF; END",
			fn: "app.newf", want: refused},
		// Spellings.
		{name: "schema-qualified", sql: "SELECT app.newf()", fn: "app.newf", want: refused},
		{name: "another schema", sql: "SELECT other.fmt_amount(1)", fn: "other.fmt_amount", want: refused},
		{name: "backquoted", sql: "SELECT `newf`()", fn: "app.newf", want: refused},
		{name: "backquoted parts", sql: "SELECT `app` . `newf` (1)", fn: "app.newf", want: refused},
		{name: "ansi quotes", sql: `SELECT "newf"()`, fn: "app.newf", want: refused, sess: ansi},
		{name: "space before the parenthesis", sql: "SELECT newf (1)", fn: "app.newf", want: refused},
		{name: "line break before the parenthesis", sql: "SELECT newf\n(1)", fn: "app.newf", want: refused},
		{name: "comment between name and parenthesis", sql: "SELECT newf/* x */(1)", fn: "app.newf", want: refused},
		{name: "parenthesis in a version comment", sql: "SELECT newf/*!(1)*/", fn: "app.newf", want: refused},
		{name: "name in a version comment", sql: "SELECT /*!50000 newf*/ (1)", fn: "app.newf", want: refused},
		{name: "statement in a version comment", sql: "/*!SELECT newf() */", fn: "app.newf", want: refused},
		{name: "built-in name with a space", sql: "SELECT now ()", fn: "app.now", want: refused},
		{name: "built-in name with a comment", sql: "SELECT NOW/**/()", fn: "app.NOW", want: refused},
		{name: "backquoted keyword function", sql: "SELECT `now`()", fn: "app.now", want: refused},
		{name: "package function", sql: "SELECT app.pkg.f()", fn: "app.pkg.f", want: refused},
		{name: "odbc escape", sql: "SELECT {fn newf()}", fn: "app.newf", want: refused},
		{name: "convert using", sql: "SELECT CONVERT(newf() USING utf8mb4)", fn: "app.newf", want: refused},
		{name: "introducer", sql: "SELECT _utf8mb4'x', newf()", fn: "app.newf", want: refused},
		{name: "charset argument", sql: "SELECT CHARSET(newf())", fn: "app.newf", want: refused},
		{name: "not ascii", sql: "SELECT fmt_ämount(1)", fn: "app.fmt_ämount", want: refused},
		{name: "unknown udf", sql: "SELECT udf_unknown(1)", fn: "app.udf_unknown", want: refused},
		{name: "no default schema", sql: "SELECT newf()", fn: "newf", want: refused,
			sess: &Session{ANSIQuotes: Off, NoBackslashEscapes: Off}},
		{name: "mysql", sql: "SELECT newf()", fn: "app.newf", want: refused, srv: mysql8},
		// Dynamic SQL and prepared statements.
		{name: "com_stmt_prepare", sql: "SELECT newf(?)", fn: "app.newf", want: refused, prepare: true},
		{name: "sql prepare", sql: "PREPARE s FROM 'SELECT newf()'", fn: "app.newf", want: refused},
		{name: "sql prepare with introducer", sql: "PREPARE s FROM _latin1'SELECT newf()'", fn: "app.newf", want: refused},
		{name: "execute immediate", sql: "EXECUTE IMMEDIATE 'SELECT newf()'", fn: "app.newf", want: refused},
		{name: "execute immediate using", sql: "EXECUTE IMMEDIATE 'SELECT ?' USING newf()", fn: "app.newf", want: refused},
		// What passes.
		{name: "built-ins", sql: "SELECT NOW(), CONCAT('a', 'b'), COUNT(*), IF(1, 2, 3), LEFT('ab', 1) FROM notes", want: passes},
		{name: "built-ins with write keywords", sql: "SELECT INSERT('abc', 1, 1, 'x'), REPLACE('a', 'b', 'c')", want: passes},
		{name: "native built-in with a space", sql: "SELECT concat ('a', 'b')", want: passes},
		{name: "backquoted native built-in", sql: "SELECT `concat`('a', 'b')", want: passes},
		{name: "known function", sql: "SELECT fmt_amount(1)", want: passes},
		{name: "known function qualified", sql: "SELECT app.fmt_amount(1)", want: passes, sess: other},
		{name: "known function with a space", sql: "SELECT `fmt_amount` (1)", want: passes},
		{name: "known udf", sql: "SELECT UDF_KNOWN(1)", want: passes},
		{name: "name in a comment", sql: "SELECT /* newf */ (1)", want: passes},
		{name: "compound statement of built-ins", sql: "BEGIN NOT ATOMIC DECLARE x DATETIME(3); IF (1) THEN SET x = NOW(); END IF; END",
			want: passes},
		{name: "name in a string", sql: "SELECT 'newf()'", want: passes},
		{name: "in list", sql: "SELECT * FROM notes WHERE id IN (1, 2) AND NOT EXISTS (SELECT 1)", want: passes},
		{name: "insert column list", sql: "INSERT INTO notes (id) VALUES (1)", want: passes},
		{name: "insert ignore column list", sql: "INSERT LOW_PRIORITY IGNORE notes (id) VALUES (1)", want: passes},
		{name: "qualified insert column list", sql: "INSERT INTO app.notes (id) VALUES (1)", want: passes},
		{name: "using", sql: "SELECT id FROM notes JOIN orders USING (id)", want: passes},
		{name: "cte column list", sql: "WITH RECURSIVE c (a) AS (SELECT 1) SELECT a FROM c", want: passes},
		{name: "derived column list", sql: "SELECT a FROM (SELECT 1) AS d (a)", want: passes},
		{name: "cast", sql: "SELECT CAST(1 AS DECIMAL(10, 2)), CAST(NOW() AS DATETIME(3)), CAST('a' AS CHAR(3))", want: passes},
		{name: "create table", sql: "CREATE TABLE nt (id INT, s VARCHAR(10), e ENUM('a'), d DATETIME(3), KEY k (s(5)))", want: passes},
		{name: "create index", sql: "CREATE INDEX i ON notes (x(4))", want: passes},
		{name: "alter table", sql: "ALTER TABLE notes ADD INDEX i2 (x(4))", want: passes},
		{name: "view definition", sql: "CREATE VIEW vv AS SELECT newf() AS x", want: passes},
		{name: "function definition", sql: "CREATE FUNCTION f2() RETURNS INT RETURN newf()", want: passes},
		{name: "event body", sql: "CREATE EVENT ev ON SCHEDULE EVERY 1 DAY DO SELECT newf()", want: passes},
		{name: "procedure with a column named schedule", sql: "CREATE PROCEDURE p2() SELECT schedule, newf() FROM notes", want: passes},
		{name: "fulltext search", sql: "SELECT id FROM notes WHERE MATCH (x) AGAINST ('a' IN BOOLEAN MODE)", want: passes},
		{name: "json_table", sql: "SELECT j.a FROM JSON_TABLE('[1]', '$[*]' COLUMNS (a INT PATH '$', " +
			"NESTED PATH '$' COLUMNS (b DATETIME(3) PATH '$'))) AS j", want: passes},
		{name: "json_table in a join", sql: "SELECT 1 FROM notes JOIN JSON_TABLE('[1]', '$[*]' COLUMNS (a INT PATH '$')) AS j", want: passes},
		{name: "against as a function", sql: "SELECT against('x')", fn: "app.against", want: refused},
		{name: "columns as a function", sql: "SELECT columns(1)", fn: "app.columns", want: refused},
		{name: "tidb has no stored functions", sql: "SELECT newf()", want: passes, srv: tidb},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.sess
			if s == nil {
				s = appSession()
			}
			srv := c.srv
			if srv == (Server{}) {
				srv = maria
			}
			d := decide(stale, []byte(c.sql), srv, *s, c.prepare)
			if c.want == refused && !unknownFunction(d, c.fn) {
				t.Errorf("stale: %s: %v, want the refusal of the unknown function %s", c.sql, describe(d), c.fn)
			}
			if c.want == passes && d.Action == Refuse {
				t.Errorf("stale: %s: refused: %s", c.sql, d.Refusal.Reason)
			}
			if f := decide(fresh, []byte(c.sql), srv, *s, c.prepare); f.Action == Refuse &&
				strings.Contains(f.Refusal.Reason, "cannot tell whether the function") {
				t.Errorf("fresh catalog: %s: %s", c.sql, f.Refusal.Reason)
			}
		})
	}
}

func describe(d Decision) string {
	if d.Refusal != nil {
		return "refused: " + d.Refusal.Reason
	}
	return []string{"forward", "send", "refuse", "answer"}[d.Action]
}

// TestStaleCallsWriter: a function the last catalog knew as a writer is
// refused as such, stale or fresh, in every spelling.
func TestStaleCallsWriter(t *testing.T) {
	stale, fresh := staleEngines(t)
	for _, q := range []string{"SELECT bump(1)", "SELECT app.bump (1)", "SELECT `BUMP`(1)", "DO bump(1)"} {
		for name, e := range map[string]*Engine{"stale": stale, "fresh": fresh} {
			d := e.Query([]byte(q), maria, appSession())
			if d.Action != Refuse || !strings.Contains(d.Refusal.Reason, "function app.bump writes the protected table") {
				t.Errorf("%s: %s: %s, want the writer's refusal", name, q, describe(d))
			}
		}
	}
}

// TestStaleCallsFastPath: a name followed by '(' that may call a stored
// function the catalog does not know leaves the fast path: while the
// catalog cannot be read (it is refused), and while it is current (the
// proxy reads it again: fresh.go).
func TestStaleCallsFastPath(t *testing.T) {
	stale, fresh := staleEngines(t)
	for _, c := range []struct {
		sql        string
		staleFast  bool
		freshFastV bool
	}{
		{"SELECT newf()", false, false},
		{"SELECT `newf` (1)", false, false},
		{"SELECT c FROM sbtest1 WHERE id = 1", true, true},
		{"SELECT 'newf()' FROM t", true, true},
		{"SELECT (1)", true, true},
		{"SELECT NOW(), COUNT(*) FROM t WHERE id IN (1, 2)", true, true},
		{"SELECT now (), 1", false, false},
		{"SELECT `concat`('a')", false, false},
		{"SELECT app.concat('a')", false, false},
		{"SELECT newf/**/(1)", false, false},
	} {
		if got := stale.fastAll([]byte(c.sql), maria, *appSession()); got != c.staleFast {
			t.Errorf("stale: %s: fast %v, want %v", c.sql, got, c.staleFast)
		}
		if got := fresh.fastAll([]byte(c.sql), maria, *appSession()); got != c.freshFastV {
			t.Errorf("fresh: %s: fast %v, want %v", c.sql, got, c.freshFastV)
		}
	}
}

// TestStaleCallsUnsafeCharset: under a client character set in which a
// multibyte character may swallow a backquote, the server's reading of a
// name may not be the proxy's: such text is refused, stale or not.
func TestStaleCallsUnsafeCharset(t *testing.T) {
	stale, _ := staleEngines(t)
	s := *appSession()
	s.UnsafeCharset = true
	for _, q := range []string{"SELECT `\xbf`newf`(1)", "SELECT '\xbf\\', newf(1) -- '"} {
		if d := stale.Query([]byte(q), maria, &s); d.Action != Refuse {
			t.Errorf("%q: %s, want a refusal", q, describe(d))
		}
	}
}
