package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// The closed list of statement kinds. Every statement the servers accept
// starts with one of the words below (MariaDB 10.11's sql_yacc.yy: the
// verb_clause, begin_stmt_mariadb and compound_statement rules, in both
// its default and its ORACLE grammar; MySQL 8.0/8.4's simple_statement;
// TiDB's extra statements are not listed, so they are refused). A kind is
// either modelled (its handler below decides: fenced, refused, tracked or
// relayed) or refused outright; a statement whose first word is in no row
// is refused, while the policy protects any table. That is the condition
// "the connection can reach a protected schema": the proxy cannot know
// which schemas the app's account may name, and any statement may name
// any schema, so every connection can while the policy protects a table.
//
// The fast path (fastLeading) takes only words of modelled rows, which
// TestStatementKindsClosed checks.

// kindHandling says what the proxy does with a statement of a kind.
type kindHandling uint8

const (
	// kindRelay: cannot write table data or change how later statements
	// read; relayed, after the checks every statement gets (protected
	// names, catalog routines and views, lease-table locks).
	kindRelay kindHandling = iota + 1
	// kindFence: writes rows; fenced when it writes a protected table
	// (directly or through the catalog), else relayed.
	kindFence
	// kindGuardDDL: changes schema objects; refused when it names a
	// protected table or makes a table that would write elsewhere.
	kindGuardDDL
	// kindTrack: changes the session (schema, sql_mode, character set,
	// prepared statements, table locks, transactions); the proxy follows
	// it, or refuses what it cannot follow.
	kindTrack
	// kindNested: holds or runs other statements (dynamic SQL, SET
	// STATEMENT ... FOR, compound statements, CALL); each inner
	// statement is decided as if it stood alone, or refused.
	kindNested
	// kindRefuse: refused while the policy protects a table.
	kindRefuse
)

func (h kindHandling) String() string {
	switch h {
	case kindRelay:
		return "relayed"
	case kindFence:
		return "fenced"
	case kindGuardDDL:
		return "guarded DDL"
	case kindTrack:
		return "tracked"
	case kindNested:
		return "inner statements decided"
	case kindRefuse:
		return "refused"
	}
	return "?"
}

// stmtKind is one row of the table.
type stmtKind struct {
	lead string // first word, lower case; "(" and "<<" for those tokens, ":" for a label
	// second: words that, right after lead, make another kind (START
	// SLAVE against START TRANSACTION); nil = any.
	sub     []stmtKind
	handles kindHandling
	what    string // the kind, as the docs name it
	example string // a statement of the kind (TestStatementKindsClosed runs it)
	reason  string // kindRefuse: the refusal's reason, if not the usual one
}

// statementKinds is the table. Rows with sub-kinds list the refused or
// distinct second words first; the row's own handling is for the rest.
var statementKinds = []stmtKind{
	// Reads.
	{lead: "select", handles: kindRelay, what: "SELECT (and SELECT ... INTO)", example: "SELECT 1"},
	{lead: "(", handles: kindRelay, what: "parenthesized query", example: "(SELECT 1)"},
	{lead: "values", handles: kindRelay, what: "table value constructor", example: "VALUES (1)"},
	{lead: "table", handles: kindRelay, what: "TABLE t (MySQL 8)", example: "TABLE staging"},
	{lead: "with", handles: kindFence, what: "WITH ... SELECT / UPDATE / DELETE", example: "WITH x AS (SELECT 1) SELECT * FROM x"},
	{lead: "show", handles: kindRelay, what: "SHOW", example: "SHOW TABLES"},
	{lead: "describe", handles: kindFence, what: "DESCRIBE / EXPLAIN (EXPLAIN ANALYZE runs the statement)", example: "DESCRIBE staging"},
	{lead: "desc", handles: kindFence, what: "DESC", example: "DESC staging"},
	{lead: "explain", handles: kindFence, what: "EXPLAIN", example: "EXPLAIN SELECT 1"},
	{lead: "analyze", handles: kindFence, what: "ANALYZE TABLE; MariaDB's ANALYZE of a statement runs it", example: "ANALYZE TABLE staging"},
	{lead: "help", handles: kindRelay, what: "HELP", example: "HELP 'x'"},
	{lead: "do", handles: kindRelay, what: "DO expr", example: "DO 1"},
	{lead: "check", handles: kindRelay, what: "CHECK TABLE / VIEW", example: "CHECK TABLE staging"},
	{lead: "checksum", handles: kindRelay, what: "CHECKSUM TABLE", example: "CHECKSUM TABLE staging"},
	{lead: "handler", handles: kindRelay, what: "HANDLER t OPEN / READ / CLOSE (reads)", example: "HANDLER staging OPEN"},
	{lead: "get", handles: kindRelay, what: "GET DIAGNOSTICS", example: "GET DIAGNOSTICS @n = NUMBER"},
	{lead: "signal", handles: kindRelay, what: "SIGNAL", example: "SIGNAL SQLSTATE '01000'"},
	{lead: "resignal", handles: kindRelay, what: "RESIGNAL", example: "RESIGNAL"},
	{lead: "raise", handles: kindRelay, what: "RAISE (sql_mode=ORACLE)", example: "RAISE no_data_found"},

	// Writes.
	{lead: "insert", handles: kindFence, what: "INSERT", example: "INSERT INTO staging VALUES (1)"},
	{lead: "replace", handles: kindFence, what: "REPLACE", example: "REPLACE INTO staging VALUES (1)"},
	{lead: "update", handles: kindFence, what: "UPDATE", example: "UPDATE staging SET a = 1"},
	{lead: "delete", handles: kindFence, what: "DELETE", example: "DELETE FROM staging"},
	{lead: "load", handles: kindFence, what: "LOAD DATA / LOAD XML (refused into protected tables); LOAD INDEX INTO CACHE",
		example: "LOAD INDEX INTO CACHE staging"},
	{lead: "truncate", handles: kindGuardDDL, what: "TRUNCATE", example: "TRUNCATE staging"},
	{lead: "call", handles: kindNested, what: "CALL (refused for routines the catalog finds writing protected tables)", example: "CALL p()"},

	// Schema objects.
	{lead: "create", handles: kindGuardDDL, what: "CREATE table, view, index, database, sequence, routine, trigger, event, package, user, role",
		sub: []stmtKind{
			{lead: "server", handles: kindRefuse, what: "CREATE SERVER (a connection FEDERATEDX and SPIDER tables write over)"},
		}, example: "CREATE TABLE t2 (a INT)"},
	{lead: "alter", handles: kindGuardDDL, what: "ALTER",
		sub: []stmtKind{
			{lead: "server", handles: kindRefuse, what: "ALTER SERVER"},
		}, example: "ALTER TABLE staging ADD COLUMN b INT"},
	{lead: "drop", handles: kindGuardDDL, what: "DROP (DROP PREPARE is DEALLOCATE)",
		sub: []stmtKind{
			{lead: "server", handles: kindRefuse, what: "DROP SERVER"},
		}, example: "DROP TABLE IF EXISTS t2"},
	{lead: "rename", handles: kindGuardDDL, what: "RENAME TABLE / USER", example: "RENAME TABLE t2 TO t3"},
	{lead: "optimize", handles: kindGuardDDL, what: "OPTIMIZE TABLE", example: "OPTIMIZE TABLE staging"},
	{lead: "repair", handles: kindGuardDDL, what: "REPAIR TABLE (may drop rows: refused on protected tables)", example: "REPAIR TABLE staging"},
	{lead: "cache", handles: kindRelay, what: "CACHE INDEX", example: "CACHE INDEX staging IN hot"},

	// Session and transactions.
	{lead: "use", handles: kindTrack, what: "USE", example: "USE app"},
	{lead: "set", handles: kindTrack, what: "SET (sql_mode and character sets tracked; SET STATEMENT ... FOR decided by its statement)", example: "SET @x = 1"},
	{lead: "prepare", handles: kindNested, what: "PREPARE name FROM 'text'", example: "PREPARE s FROM 'SELECT 1'"},
	{lead: "execute", handles: kindNested, what: "EXECUTE name / EXECUTE IMMEDIATE 'text'", example: "EXECUTE s"},
	{lead: "deallocate", handles: kindTrack, what: "DEALLOCATE PREPARE", example: "DEALLOCATE PREPARE s"},
	{lead: "lock", handles: kindTrack, what: "LOCK TABLES", example: "LOCK TABLES staging READ"},
	{lead: "unlock", handles: kindTrack, what: "UNLOCK TABLES", example: "UNLOCK TABLES"},
	{lead: "flush", handles: kindTrack, what: "FLUSH", example: "FLUSH STATUS"},
	{lead: "begin", handles: kindTrack, what: "BEGIN [WORK]; TiDB's BEGIN OPTIMISTIC / PESSIMISTIC; BEGIN NOT ATOMIC ... END (a compound statement)", example: "BEGIN"},
	{lead: "start", handles: kindTrack, what: "START TRANSACTION",
		sub: []stmtKind{
			{lead: "slave", handles: kindRefuse, what: "START SLAVE (applies another server's writes)"},
			{lead: "replica", handles: kindRefuse, what: "START REPLICA"},
			{lead: "all", handles: kindRefuse, what: "START ALL SLAVES"},
			{lead: "group_replication", handles: kindRefuse, what: "START GROUP_REPLICATION"},
		}, example: "START TRANSACTION"},
	{lead: "commit", handles: kindTrack, what: "COMMIT", example: "COMMIT"},
	{lead: "rollback", handles: kindTrack, what: "ROLLBACK", example: "ROLLBACK"},
	{lead: "savepoint", handles: kindTrack, what: "SAVEPOINT", example: "SAVEPOINT a"},
	{lead: "release", handles: kindTrack, what: "RELEASE SAVEPOINT", example: "RELEASE SAVEPOINT a"},
	{lead: "xa", handles: kindTrack, what: "XA (after XA START / BEGIN no protected write until the branch ends)", example: "XA RECOVER"},

	// Compound statements (MariaDB; sql_mode=ORACLE blocks).
	{lead: "if", handles: kindNested, what: "IF ... END IF", example: "IF 1 THEN SELECT 1; END IF"},
	{lead: "case", handles: kindNested, what: "CASE ... END CASE", example: "CASE WHEN 1 THEN SELECT 1; END CASE"},
	{lead: "loop", handles: kindNested, what: "LOOP ... END LOOP", example: "LOOP SIGNAL SQLSTATE '45000'; END LOOP"},
	{lead: "while", handles: kindNested, what: "WHILE ... END WHILE", example: "WHILE 0 DO SELECT 1; END WHILE"},
	{lead: "repeat", handles: kindNested, what: "REPEAT ... END REPEAT", example: "REPEAT SELECT 1; UNTIL 1 END REPEAT"},
	{lead: "for", handles: kindNested, what: "FOR ... END FOR", example: "FOR i IN 1..2 DO SELECT i; END FOR"},
	{lead: "declare", handles: kindNested, what: "DECLARE ... BEGIN ... END (sql_mode=ORACLE)", example: "DECLARE x INT; BEGIN SELECT x; END"},
	{lead: ":", handles: kindNested, what: "a labelled compound statement", example: "l: LOOP LEAVE l; END LOOP l"},
	{lead: "<<", handles: kindNested, what: "a labelled block (sql_mode=ORACLE)", example: "<<b>> BEGIN SELECT 1; END b"},

	// Administration that writes no table data.
	{lead: "grant", handles: kindRelay, what: "GRANT", example: "GRANT SELECT ON app.staging TO x"},
	{lead: "revoke", handles: kindRelay, what: "REVOKE", example: "REVOKE SELECT ON app.staging FROM x"},
	{lead: "kill", handles: kindRelay, what: "KILL", example: "KILL QUERY 1"},
	{lead: "shutdown", handles: kindRelay, what: "SHUTDOWN", example: "SHUTDOWN"},
	{lead: "purge", handles: kindRelay, what: "PURGE BINARY LOGS", example: "PURGE BINARY LOGS TO 'x'"},
	{lead: "reset", handles: kindRelay, what: "RESET QUERY CACHE / MASTER / SLAVE", example: "RESET QUERY CACHE"},
	{lead: "backup", handles: kindRelay, what: "BACKUP STAGE / LOCK", example: "BACKUP STAGE START"},

	// Refused: they write tables the SQL text does not show, or make the
	// server run code fenceproxy cannot read.
	{lead: "binlog", handles: kindRefuse, what: "BINLOG 'events' (replays row events)",
		reason: "BINLOG events cannot be checked for writes to protected tables"},
	{lead: "change", handles: kindRefuse, what: "CHANGE MASTER / REPLICATION SOURCE / REPLICATION FILTER"},
	{lead: "stop", handles: kindRefuse, what: "STOP SLAVE / REPLICA / GROUP_REPLICATION"},
	{lead: "install", handles: kindRefuse, what: "INSTALL PLUGIN / SONAME / COMPONENT (server code)"},
	{lead: "uninstall", handles: kindRefuse, what: "UNINSTALL PLUGIN / SONAME / COMPONENT"},
	{lead: "clone", handles: kindRefuse, what: "CLONE (MySQL 8: replaces the data directory)"},
	{lead: "import", handles: kindRefuse, what: "IMPORT TABLE (MySQL 8), IMPORT INTO (TiDB)"},
	{lead: "restart", handles: kindRefuse, what: "RESTART (MySQL 8)"},
}

// kindIndex finds the row for a lead word.
var kindIndex = func() map[string]*stmtKind {
	m := make(map[string]*stmtKind, len(statementKinds))
	for i := range statementKinds {
		m[statementKinds[i].lead] = &statementKinds[i]
	}
	return m
}()

// kind returns the statement's row, or nil when no row has its first word;
// lead is that word (or token) as written.
func (in *stmtIn) kind() (k *stmtKind, lead string) {
	if len(in.toks) == 0 {
		return nil, ""
	}
	t := in.toks[0]
	lead = string(in.text(0))
	switch {
	case (t.Kind == sqlread.Word || t.Kind == sqlread.QuotedIdent) && in.op(1, ":"):
		return kindIndex[":"], lead
	case t.Kind == sqlread.Op && (lead == "(" || lead == "<<"):
		return kindIndex[lead], lead
	case t.Kind != sqlread.Word:
		return nil, lead
	}
	k = kindIndex[lowerASCII(lead)]
	if k == nil {
		return nil, lead
	}
	if len(in.toks) > 1 && in.toks[1].Kind == sqlread.Word {
		second := lowerASCII(string(in.text(1)))
		for i := range k.sub {
			if k.sub[i].lead == second {
				return &k.sub[i], lead + " " + string(in.text(1))
			}
		}
	}
	return k, lead
}

// kindRefusal refuses a statement whose kind is not modelled, or is
// refused outright, while the policy protects a table.
func (in *stmtIn) kindRefusal() (stmtRes, bool) {
	if !in.pc.e.hasTables() {
		return stmtRes{}, false
	}
	k, lead := in.kind()
	switch {
	case k == nil:
		res := in.refuse("", "fenceproxy does not model statements that start with "+quoteForMessage(lead)+
			", so it cannot tell whether they write protected tables; run it directly on the server")
		// TiDB has statements of its own that the table leaves out: there
		// the refusal is no syntax error.
		res.refusal.UnknownKind = in.st.mode.server.Flavor != TiDB
		return res, true
	case k.handles == kindRefuse && k.reason != "":
		return in.refuse("", k.reason), true
	case k.handles == kindRefuse:
		return in.refuse("", k.what+" is refused through fenceproxy: it can write tables without a statement "+
			"fenceproxy could fence; run it directly on the server"), true
	}
	return stmtRes{}, false
}

// quoteForMessage shows a lead token in a message: printable ASCII as it
// is, anything else escaped, and no more than 40 bytes.
func quoteForMessage(s string) string {
	if len(s) > 40 {
		s = s[:40]
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}
