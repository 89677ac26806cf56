package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Session effects: USE, and SET of sql_mode (ANSI_QUOTES,
// NO_BACKSLASH_ESCAPES change how the lexer reads later statements) and of
// the client character set (some multibyte sets can hide quotes and
// backslashes). Later statements of the same packet are read with the
// updated session, and the proxy applies the effects once the server has
// executed the statements.

// EffectAt says when a statement's session effect is applied: the two
// places differ in what they know, and the difference is this input.
type EffectAt uint8

const (
	// InPacket: while the rewriter reads the later statements of the same
	// packet, before the server ran anything. NO_BACKSLASH_ESCAPES comes
	// from the statement (no status flags yet), and an unsafe character
	// set stays unsafe for the rest of the packet: the rest was checked
	// for hidden quotes and backslashes once, under the unsafe one.
	InPacket EffectAt = iota
	// AfterResult: the server executed the statement successfully.
	// NO_BACKSLASH_ESCAPES is left alone: the OK's status flags said it
	// already. The character set becomes what the statement set, safe or
	// not.
	AfterResult
)

// Effect is what applying a statement did that its caller acts on.
type Effect struct {
	// ModeUnknown: sql_mode was set to a value the rewriter cannot read
	// (ANSIQuotes or NoBackslashEscapes Unknown in the session now). In a
	// packet the caller reads the rest under every reading it allows.
	ModeUnknown bool
	// Charset: the client character set was set; UnsafeCharset says what
	// the session now believes of it.
	Charset bool
}

// Apply records in s what st, a statement that ran, changed in the
// session: the current schema, sql_mode's ANSI_QUOTES and
// NO_BACKSLASH_ESCAPES, the client character set. It is the one place
// both the rewriter (between the statements of a packet) and the proxy
// (after the server's results) apply session effects.
func (s *Session) Apply(st *Stmt, at EffectAt) Effect {
	var e Effect
	switch st.Kind {
	case Use:
		s.Schema = st.Schema
	case SetSQLMode:
		s.ANSIQuotes = st.ANSIQuotes
		s.Oracle = st.Oracle
		if at == InPacket {
			s.NoBackslashEscapes = st.NoBackslashEscapes
		}
		e.ModeUnknown = st.ANSIQuotes == Unknown || st.NoBackslashEscapes == Unknown
	case Execute:
		if at == InPacket {
			// What the prepared statement does to the session is the
			// proxy's to know (it applies it after the result), not the
			// packet's: the rest of the packet is read under every
			// sql_mode and as in an unsafe character set.
			s.ANSIQuotes, s.NoBackslashEscapes, s.Oracle = Unknown, Unknown, Unknown
			s.UnsafeCharset, s.NamesUTF8 = true, false
			e.ModeUnknown, e.Charset = true, true
		}
	}
	if st.Kind == SetCharset || st.Kind == SetSQLMode && st.SetsCharset {
		e.Charset = true
		s.NamesUTF8 = st.NamesUTF8
		s.ASCIIRemap = st.ASCIIRemap
		if at == AfterResult || st.UnsafeCharset {
			s.UnsafeCharset = st.UnsafeCharset
		}
	}
	return e
}

// useStmt: USE db. A USE fenceproxy cannot read is refused: a wrong idea of
// the current schema would misplace unqualified table names.
func (in *stmtIn) useStmt() stmtRes {
	if len(in.toks) == 2 {
		if name, ok := in.identAt(1); ok {
			return stmtRes{stmt: Stmt{Kind: Use, Schema: name}, matters: true}
		}
	}
	if in.pc.e.hasTables() {
		return in.refuse("", "fenceproxy cannot read this USE statement; write USE schema_name")
	}
	return stmtRes{stmt: Stmt{Kind: Other}}
}

// identAt returns the identifier at token i: a bare word or a quoted
// identifier, unquoted.
func (in *stmtIn) identAt(i int) (string, bool) {
	if i >= len(in.toks) {
		return "", false
	}
	t := in.toks[i]
	b := in.pc.src[t.Start:t.End]
	switch t.Kind {
	case sqlread.Word:
		return string(b), true
	case sqlread.QuotedIdent:
		return sqlread.UnquoteIdent(b), true
	}
	return "", false
}

// setStmt: a SET the parser read.
func (in *stmtIn) setStmt(n *ast.SetStmt) stmtRes {
	var st Stmt
	mode, cs := false, false
	for _, v := range n.Variables {
		local := v.IsSystem && !v.IsGlobal && !v.IsInstance
		if v.IsSystem && !local && in.pc.e.hasTables() {
			return in.refuse("", globalSetReason)
		}
		switch {
		case v.Name == ast.SetNames || v.Name == ast.SetCharset:
			cs = true
			name, known := charsetValue(v.Value)
			st.UnsafeCharset = !known || UnsafeCharsetName(name)
			st.NamesUTF8 = known && utf8Charset(name)
			st.ASCIIRemap = !known || !asciiCharset(name)
			if r, bad := in.charsetRefusal(name, known, "the client character set"); bad {
				return r
			}
		case local && strings.EqualFold(v.Name, "sql_mode"):
			mode = true
			st.ANSIQuotes, st.NoBackslashEscapes, st.Oracle = sqlModeValue(v.Value)
		case local && strings.EqualFold(v.Name, "character_set_client"):
			cs = true
			name, known := charsetValue(v.Value)
			st.UnsafeCharset = !known || UnsafeCharsetName(name)
			st.NamesUTF8 = known && utf8Charset(name)
			st.ASCIIRemap = !known || !asciiCharset(name)
			if r, bad := in.charsetRefusal(name, known, "the client character set"); bad {
				return r
			}
		case local && (strings.EqualFold(v.Name, "character_set_connection") ||
			strings.EqualFold(v.Name, "collation_connection")):
			// The server converts dynamic SQL (PREPARE, EXECUTE
			// IMMEDIATE) to this character set before it reads it.
			name, known := charsetValue(v.Value)
			if r, bad := in.charsetRefusal(collationCharset(name), known, "the connection character set"); bad {
				return r
			}
		}
	}
	switch {
	case mode:
		st.Kind = SetSQLMode
		st.SetsCharset = cs
	case cs:
		st.Kind = SetCharset
	default:
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	return stmtRes{stmt: st, matters: true}
}

// setUnparsed: a SET the parser cannot read (SET STATEMENT ... FOR, MariaDB
// forms, unknown character sets). Whatever it does to sql_mode or the
// character set is unknown.
func (in *stmtIn) setUnparsed() stmtRes {
	raw := in.raw()
	if in.pc.e.hasTables() && in.setsBeyondSession() {
		return in.refuse("", globalSetReason)
	}
	if in.pc.e.hasTables() {
		// A character set the proxy cannot read later statements in,
		// named anywhere in it.
		for i := range in.toks {
			k := in.toks[i].Kind
			if k != sqlread.Word && k != sqlread.QuotedIdent && k != sqlread.String {
				continue
			}
			name := strings.ToLower(in.identName(i))
			if k == sqlread.String {
				name = strings.ToLower(sqlread.UnquoteIdent(in.text(i)))
			}
			cs := collationCharset(name)
			if nonASCIICharsets[cs] {
				if r, bad := in.charsetRefusal(cs, true, "a character set"); bad {
					return r
				}
			}
		}
	}
	mode := containsFold(raw, "sql_mode")
	cs := containsFold(raw, "character_set_client") || containsWordFold(raw, "names") ||
		containsWordFold(raw, "charset") || containsWordFold(raw, "character")
	switch {
	case mode:
		return stmtRes{stmt: Stmt{Kind: SetSQLMode, ANSIQuotes: Unknown, NoBackslashEscapes: Unknown, Oracle: Unknown,
			SetsCharset: cs, UnsafeCharset: cs, ASCIIRemap: cs}, matters: true}
	case cs:
		return stmtRes{stmt: Stmt{Kind: SetCharset, UnsafeCharset: true, ASCIIRemap: true}, matters: true}
	}
	return stmtRes{stmt: Stmt{Kind: Other}}
}

// globalSetReason refuses a SET of a system variable beyond the session
// (GLOBAL, PERSIST, PERSIST_ONLY, INSTANCE, @@global.x): the session scope
// is the only one relayed. A global value outlives the session and acts
// where the proxy never reads a statement: init_connect runs its SQL at
// every later login of an account without SUPER (the proxy's own, which
// may write the lease table, and the apps', where SET NAMES gbk would
// change how the server reads what the proxy reads as utf8mb4), and
// event_scheduler, sql_mode or character_set_* change what later sessions
// and events do. Measured on MariaDB 10.11: SET GLOBAL init_connect =
// 'UPDATE db.fenced_job_leases ...' through the proxy wrote the lease
// table at the proxy account's next login.
const globalSetReason = "fenceproxy relays SET of session variables only: a GLOBAL (PERSIST, INSTANCE) " +
	"value outlives the session and acts where fenceproxy reads no statement (init_connect runs SQL at later " +
	"logins, the proxy's own among them); run it directly on the server"

// setsBeyondSession: a SET the parser could not read names a scope other
// than the session's (a word GLOBAL, PERSIST, PERSIST_ONLY or INSTANCE, or
// a system variable written @@global.x, @@persist.x ...). The allowed
// scopes are listed; any other qualifier of an @@ variable counts too.
func (in *stmtIn) setsBeyondSession() bool {
	for i := range in.toks {
		t := in.toks[i]
		switch t.Kind {
		case sqlread.Word:
			switch strings.ToLower(string(in.text(i))) {
			case "global", "persist", "persist_only", "instance":
				return true
			}
		case sqlread.SysVar:
			name := strings.ToLower(string(in.text(i)))
			name = strings.TrimPrefix(name, "@@")
			scope, rest := name, ""
			if dot := strings.IndexByte(name, '.'); dot >= 0 {
				scope, rest = name[:dot], name[dot:]
			}
			switch scope = strings.Trim(scope, "`"); {
			case rest != "" && scope != "session" && scope != "local":
				return true // @@global.x, and any scope not listed
			case rest == "" && (scope == "global" || scope == "persist" || scope == "persist_only" || scope == "instance"):
				return true // @@global . x, spaced
			}
		}
	}
	return false
}

// sqlModeValue reads the ANSI_QUOTES, NO_BACKSLASH_ESCAPES and ORACLE parts
// of a literal sql_mode value; anything else is Unknown.
func sqlModeValue(v ast.ExprNode) (ansi, nbe, oracle Tri) {
	var s string
	switch x := v.(type) {
	case ast.ValueExpr:
		str, ok := x.GetValue().(string)
		if !ok {
			return Unknown, Unknown, Unknown
		}
		s = str
	case *ast.ColumnNameExpr:
		if x.Name.Table.L != "" {
			return Unknown, Unknown, Unknown
		}
		s = x.Name.Name.O
	default:
		return Unknown, Unknown, Unknown
	}
	ansi, nbe, oracle = Off, Off, Off
	for _, m := range strings.Split(s, ",") {
		switch strings.ToUpper(strings.TrimSpace(m)) {
		case "ORACLE":
			ansi, oracle = On, On
		case "ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "POSTGRESQL":
			ansi = On
		case "NO_BACKSLASH_ESCAPES":
			nbe = On
		}
	}
	return ansi, nbe, oracle
}

// unsafeCharsets may carry '\' or other ASCII bytes as the second byte of a
// character.
var unsafeCharsets = map[string]bool{"big5": true, "cp932": true, "gbk": true, "sjis": true, "gb18030": true}

// safeCharsets: every other character set the servers know.
var safeCharsets = map[string]bool{
	"armscii8": true, "ascii": true, "binary": true, "cp1250": true, "cp1251": true, "cp1256": true,
	"cp1257": true, "cp850": true, "cp852": true, "cp866": true, "dec8": true, "eucjpms": true, "euckr": true,
	"gb2312": true, "geostd8": true, "greek": true, "hebrew": true, "hp8": true, "keybcs2": true,
	"koi8r": true, "koi8u": true, "latin1": true, "latin2": true, "latin5": true, "latin7": true,
	"macce": true, "macroman": true, "swe7": true, "tis620": true, "ujis": true, "utf8": true,
	"utf8mb3": true, "utf8mb4": true,
}

// charsetValue reads a literal character set (or collation) name; known
// is false for anything else (DEFAULT, an expression).
func charsetValue(v ast.ExprNode) (string, bool) {
	switch x := v.(type) {
	case ast.ValueExpr:
		str, ok := x.GetValue().(string)
		if !ok {
			return "", false
		}
		return strings.ToLower(strings.TrimSpace(str)), true
	case *ast.ColumnNameExpr:
		if x.Name.Table.L != "" {
			return "", false
		}
		n := strings.ToLower(x.Name.Name.O)
		return n, n != "default"
	}
	return "", false
}

// collationCharset is the character set of a collation name
// (utf8mb4_general_ci: utf8mb4), or the name itself.
func collationCharset(name string) string {
	if i := strings.IndexByte(name, '_'); i > 0 {
		return name[:i]
	}
	return name
}

// utf8Charset: a character set whose bytes are UTF-8.
func utf8Charset(name string) bool {
	return name == "utf8mb4" || name == "utf8mb3" || name == "utf8"
}

// charsetRefusal refuses setting a client or connection character set
// that does not read ASCII as ASCII (swe7 reads `, @, [, \, ], ^, {, |, }
// and ~ as letters; ucs2, utf16, utf16le and utf32 are not byte-oriented)
// or one whose name is not known, while the policy protects a table: the
// proxy could not read what the session sends afterwards.
func (in *stmtIn) charsetRefusal(name string, known bool, what string) (stmtRes, bool) {
	if !in.pc.e.hasTables() || !known || asciiCharset(name) {
		return stmtRes{}, false
	}
	return in.refuse("", "setting "+what+" to "+quoteForMessage(name)+" is refused through fenceproxy: it does not "+
		"read ASCII bytes as ASCII (or fenceproxy does not know it), so fenceproxy could not read later "+
		"statements as the server does; use utf8mb4"), true
}

// nonASCIICharsets: the character sets the servers know that do not read
// ASCII bytes as ASCII.
var nonASCIICharsets = map[string]bool{"swe7": true, "ucs2": true, "utf16": true, "utf16le": true, "utf32": true}

// asciiCharset: a character set in which every ASCII byte is that ASCII
// character (every one the servers know but swe7 and the UCS/UTF-16/32
// sets).
func asciiCharset(name string) bool {
	return safeCharsets[name] && name != "swe7" || unsafeCharsets[name]
}

// UnsafeCharsetName reports whether a session whose client character set is
// named so must be read with UnsafeCharset: one of the sets that can hide
// quote bytes, or a name this package does not know.
func UnsafeCharsetName(name string) bool {
	s := strings.ToLower(strings.TrimSpace(name))
	return unsafeCharsets[s] || !asciiCharset(s)
}

// RemapsASCIIName reports whether a client character set named so is not
// known to read ASCII bytes as ASCII (Session.ASCIIRemap).
func RemapsASCIIName(name string) bool {
	return !asciiCharset(strings.ToLower(strings.TrimSpace(name)))
}

// UTF8CharsetName reports whether a client character set named so is
// utf8mb3 or utf8mb4 (Session.NamesUTF8).
func UTF8CharsetName(name string) bool {
	return utf8Charset(strings.ToLower(strings.TrimSpace(name)))
}

// containsWordFold reports whether word (lower-case ASCII) occurs in text as
// a whole word, ASCII case-insensitively (the servers match keywords so).
func containsWordFold(text []byte, word string) bool {
	for i := 0; i+len(word) <= len(text); i++ {
		if i > 0 && sqlread.IsIdentByte(text[i-1]) {
			continue
		}
		if !eqFold(text[i:i+len(word)], word) {
			continue
		}
		if j := i + len(word); j < len(text) && sqlread.IsIdentByte(text[j]) {
			continue
		}
		return true
	}
	return false
}

// setStatement decides on MariaDB's SET STATEMENT var = value [, ...] FOR
// statement. Measured on MariaDB 10.11: the statement after FOR has its
// usual effects (SET NAMES, USE, PREPARE ... last after it), the
// variables are set only while it runs, and the whole text was read under
// the session's sql_mode before any of it ran (SET STATEMENT
// sql_mode='ANSI_QUOTES' FOR SELECT "a" returns the string a). So the
// statement is decided as if it stood alone; refused are the statements
// whose effect on the session would interleave with the variables' reset
// (sql_mode, character sets, PREPARE), and statements that read text at
// run time (PREPARE, EXECUTE IMMEDIATE, EXECUTE) under a sql_mode or
// character set the variables change.
func (in *stmtIn) setStatement() stmtRes {
	e := in.pc.e
	d := in.depths()
	f := -1
	for j := 2; j < len(in.toks); j++ {
		if d[j] == 0 && in.kw(j, "for") {
			f = j
			break
		}
	}
	if f < 0 || f+1 >= len(in.toks) {
		if e.hasTables() {
			return in.refuse("", "fenceproxy cannot read this SET STATEMENT; write SET STATEMENT var = value FOR statement")
		}
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	reading := "" // a variable that changes how text is read at run time
	for j := 2; j < f; j++ {
		t := in.toks[j]
		if d[j] != 0 || !(t.Kind == sqlread.Word || t.Kind == sqlread.SysVar) || !(in.op(j+1, "=") || in.op(j+1, ":=")) {
			continue
		}
		name := strings.ToLower(in.identName(j))
		name = strings.TrimPrefix(name, "@@")
		name = strings.TrimPrefix(strings.TrimPrefix(name, "session."), "local.")
		if name == "sql_mode" || strings.HasPrefix(name, "character_set_") || strings.HasPrefix(name, "collation_") {
			reading = name
		}
	}
	if e.hasTables() {
		if r, ok := in.forwardTokens(); ok {
			return r
		}
	}
	if r, ok := in.catalogRefusal(); ok {
		return r
	}
	inner := *in
	inner.toks = in.toks[f+1:]
	inner.start = in.toks[f+1].Start
	if (inner.kw(0, "lock") || inner.kw(0, "flush")) && e.hasTables() {
		return in.refuse("", "send LOCK TABLES and FLUSH TABLES without SET STATEMENT, so that fenceproxy can "+
			"track the table locks and add the lease table when a protected table is locked")
	}
	res := inner.decide()
	if res.refusal != nil || !e.hasTables() {
		return res
	}
	dynamic := inner.kw(0, "prepare") || inner.kw(0, "execute") || inner.isCompound()
	switch {
	case res.call != nil:
		return in.refuse("", "call the lease functions without SET STATEMENT")
	case res.stmt.Kind == SetSQLMode || res.stmt.Kind == SetCharset || res.stmt.Kind == Prepare:
		return in.refuse("", "SET STATEMENT ... FOR a statement that changes sql_mode, the character set or a "+
			"prepared statement is refused: fenceproxy follows such statements only when they stand alone")
	case reading != "" && dynamic:
		return in.refuse("", "SET STATEMENT "+reading+" = ... FOR a statement that reads SQL text when it runs "+
			"(PREPARE, EXECUTE, EXECUTE IMMEDIATE, a compound statement) is refused: the text would be read under "+
			"a setting fenceproxy did not read it with")
	}
	res.valueBlind = false
	return res
}
