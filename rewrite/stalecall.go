package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// While the schema catalog cannot be read, a stored function created since
// the last good read may write protected tables, and no catalog says so. A
// statement that calls a function is then relayed only if every function
// it calls is built into the server, a loadable function (UDF) the last
// catalog listed, or a stored function the last catalog knew (the writers
// among those are refused by catalogRefusal, stale or not).
//
// How the server resolves a name followed by '(' (sql_yacc.yy
// function_call_generic, measured on MariaDB 10.11 with the probes of
// integration/builtins_test.go):
//
//   - db.f(...) (any quoting): always the stored function f of db;
//   - an unquoted word that is a keyword (IN, VALUES, LEFT, DATE, ...):
//     grammar, never a stored function;
//   - COUNT, NOW, SUBSTR and the others the lexer reads as functions only
//     when '(' follows at once: with a space or a comment in between they
//     are plain names (unless sql_mode has IGNORE_SPACE, which fenceproxy
//     does not track: then such a call is refused needlessly);
//   - any other name, quoted or not, space or not: the native function of
//     that name if there is one (CONCAT, `concat`, concat (...)), else a
//     UDF, else the stored function of the default schema.
//
// builtinFlags (builtins_mariadb.go) records, per name, in which of these
// spellings the server does not look for a stored function.

const (
	callAdjacent = 1 << iota // name( unquoted, '(' right after the name
	callSpaced               // name ( unquoted, with a space or comment before '('
	callQuoted               // `name`(
)

// builtinCall reports whether the server takes name, spelled so, for
// something other than a stored function or UDF.
func builtinCall(name []byte, quoted, adjacent bool) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	var buf [64]byte
	for i, c := range name {
		if c >= 0x80 {
			return false
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	f := builtinFlags[string(buf[:len(name)])]
	switch {
	case quoted:
		return f&callQuoted != 0
	case adjacent:
		return f&callAdjacent != 0
	}
	return f&callSpaced != 0
}

// staleCalls reports whether the engine refuses calls of functions the
// last good catalog did not know: the catalog cannot be read, and the
// server has stored functions (TiDB has none).
func (e *Engine) staleCalls(srv Server) bool {
	return e.catStale != "" && srv.Flavor != TiDB
}

// checkedCalls reports whether calls of functions the catalog does not
// know are looked at: while it cannot be read (refused), and while it is
// current (the proxy reads it again first: fresh.go).
func (e *Engine) checkedCalls(srv Server) bool {
	return e.staleCalls(srv) || e.fresh && srv.Flavor != TiDB
}

// staleCallRefusal refuses the statement if it calls a function that is
// neither built in nor known to the last good catalog, while the catalog
// cannot be read.
func (in *stmtIn) staleCallRefusal() (stmtRes, bool) {
	e := in.pc.e
	if !e.checkedCalls(in.st.mode.server) {
		return stmtRes{}, false
	}
	if in.whole && in.isCompound() {
		// A compound statement's tokens, up to the server's END.
		return in.staleScan(0, len(in.toks))
	}
	if in.isCompound() {
		// The statement is the rest of the packet, up to the server's
		// END: its tokens past the first ';' count too.
		whole := *in
		whole.toks = nil
		lx := sqlread.NewLexer(in.pc.src, in.start, in.st.mode.lex(), nil)
		for {
			t, ok := lx.Next()
			if !ok {
				break
			}
			if len(whole.toks) == e.maxTokens {
				return stmtRes{refusal: e.tokensRefusal()}, true
			}
			whole.toks = append(whole.toks, t)
		}
		whole.end = len(in.pc.src)
		return whole.staleScan(0, len(whole.toks))
	}
	from, to, ok := in.callsFrom()
	if !ok {
		return stmtRes{}, false
	}
	return in.staleScan(from, to)
}

// callName is the schema and name of a call's name parts (the session's
// schema for an unqualified name; db.pkg.f as db and pkg.f).
func (in *stmtIn) callName(parts []int) (schema, name string) {
	switch len(parts) {
	case 1:
		return in.st.schema, in.identName(parts[0])
	case 2:
		return in.identName(parts[0]), in.identName(parts[1])
	}
	n := in.identName(parts[1])
	for _, p := range parts[2:] {
		n += "." + in.identName(p)
	}
	return in.identName(parts[0]), n
}

// staleScan is staleCallRefusal over the tokens [from, to).
func (in *stmtIn) staleScan(from, to int) (stmtRes, bool) {
	e := in.pc.e
	for i := from; i < to; i++ {
		if !in.isName(i) || in.op(i-1, ".") {
			continue
		}
		// The name's parts: db.f, or db.pkg.f (MariaDB's packages).
		parts := []int{i}
		j := i + 1
		for in.op(j, ".") && in.isName(j+1) {
			parts = append(parts, j+1)
			j += 2
		}
		if j >= to || !in.op(j, "(") || in.notCall(i) {
			continue
		}
		if in.kw(i-1, "call") {
			// Inside a compound statement (the statement's own CALL is
			// catalogRefusal's).
			if e.catStale == "" {
				s, n := in.callName(parts)
				if e.cat.KnownProcedure(foldName(s), foldName(n)) {
					continue
				}
				if res, ok := in.unknownObject(s, n, "procedure"); ok {
					return res, true
				}
				continue
			}
			return in.refuse("", "fenceproxy cannot read its schema catalog ("+e.catStale+"), so it cannot tell "+
				"whether this procedure writes protected tables; retry when the catalog is readable again"), true
		}
		if name, known := in.knownCall(parts, j); !known {
			if e.catStale == "" {
				s, n := in.callName(parts)
				if res, ok := in.unknownObject(s, n, "function"); ok {
					return res, true
				}
				_ = name
				continue
			}
			return in.refuse("", "fenceproxy cannot read its schema catalog ("+e.catStale+"), so it cannot tell "+
				"whether the function "+name+" writes protected tables: it is not a built-in function, and the last "+
				"catalog fenceproxy read did not have it (it may have been created since). Retry when the catalog is "+
				"readable again; a stored function the last catalog had is called as usual (qualify it with its "+
				"schema if it is another schema's), and a built-in function is known when its name is written "+
				"unquoted with the parenthesis right after it"), true
		}
	}
	return stmtRes{}, false
}

// callsFrom returns the tokens [from, to) in which a name followed by '('
// may be a function call the statement makes when it runs; ok is false
// when it makes none. A definition (CREATE PROCEDURE, FUNCTION, TRIGGER,
// EVENT, VIEW) calls nothing until it is used, and what uses it is checked
// then (an event's schedule cannot call stored functions: error 1970);
// CREATE TABLE calls functions only in its SELECT; ALTER, DROP, RENAME and
// TRUNCATE call none (the server refuses stored functions in DEFAULT,
// CHECK, generated columns and partitioning expressions: error 1901),
// while their column and index lists are full of names followed by '('.
func (in *stmtIn) callsFrom() (from, to int, ok bool) {
	n := len(in.toks)
	switch {
	case in.kw(0, "alter"), in.kw(0, "drop"), in.kw(0, "rename"), in.kw(0, "truncate"):
		return 0, 0, false
	case in.kw(0, "create"):
		if in.isStoredProgram() || in.createsView() {
			return 0, 0, false
		}
		for i := 1; i < n; i++ {
			if in.kw(i, "select") || in.kw(i, "values") {
				return i, n, true
			}
		}
		return 0, 0, false
	}
	return 0, n, true
}

// createsView: CREATE [OR REPLACE] [ALGORITHM = ...] [DEFINER = ...]
// [SQL SECURITY ...] VIEW.
func (in *stmtIn) createsView() bool {
	for i := 1; i < len(in.toks) && i < 16; i++ {
		if in.kw(i, "view") {
			return true
		}
		if in.kw(i, "table") || in.op(i, "(") && !in.kw(i-1, "current_user") {
			return false
		}
	}
	return false
}

// notCall reports whether the name at token i (its first part), followed
// by '(', is not a function call: a table with its column list (INSERT
// INTO t (...), INSERT t (...), CREATE TABLE t (...), REFERENCES t (...),
// CREATE INDEX i ON t (...)), a derived table's or a common table
// expression's column list (AS d (...), WITH c (...)), an index's column
// list, or a routine or view being defined. None of the words before such
// a name can precede a function call.
func (in *stmtIn) notCall(i int) bool {
	p := i - 1
	switch {
	case in.kw(p, "into"), in.kw(p, "table"), in.kw(p, "exists"), in.kw(p, "references"), in.kw(p, "as"),
		in.kw(p, "with"), in.kw(p, "recursive"), in.kw(p, "view"), in.kw(p, "function"), in.kw(p, "procedure"),
		in.kw(p, "index"), in.kw(p, "key"):
		return true
	case in.kw(p, "on") && in.isName(p-1) && (in.kw(p-2, "index") || in.kw(p-2, "key") || in.kw(p-2, "exists")):
		return true // CREATE INDEX i ON t (...)
	// Grammar words the server resolves as stored functions elsewhere
	// (SELECT against() looks for one), in the places only the grammar
	// puts them: MATCH (...) AGAINST (...), FROM | JOIN JSON_TABLE(...),
	// JSON_TABLE's '$' COLUMNS (...).
	case in.kw(i, "against") && in.op(p, ")"),
		in.kw(i, "json_table") && (in.kw(p, "from") || in.kw(p, "join")),
		in.kw(i, "columns") && p >= 0 && (in.toks[p].Kind == sqlread.String || in.toks[p].Kind == sqlread.NString):
		return true
	case in.kw(0, "insert") || in.kw(0, "replace"):
		// INSERT [LOW_PRIORITY | DELAYED | HIGH_PRIORITY] [IGNORE] t (...)
		k := 1
		for k < i && (in.kw(k, "low_priority") || in.kw(k, "delayed") || in.kw(k, "high_priority") || in.kw(k, "ignore")) {
			k++
		}
		return k == i
	}
	return false
}

// knownCall reports whether the call of the name made of tokens parts,
// with its '(' at token paren, is of a function the server has built in
// or the last good catalog knew; name is how to name it.
func (in *stmtIn) knownCall(parts []int, paren int) (name string, known bool) {
	e := in.pc.e
	if len(parts) == 1 {
		i := parts[0]
		n := in.identName(i)
		quoted := in.toks[i].Kind == sqlread.QuotedIdent
		if builtinCall([]byte(n), quoted, in.toks[paren].Start == in.toks[i].End) {
			return n, true
		}
		if e.cat.KnownUDF(n) {
			return n, true
		}
		if in.st.schema == "" {
			return n, false
		}
		return in.st.schema + "." + n, e.cat.KnownFunction(in.st.schema, n)
	}
	if len(parts) == 2 {
		s, n := in.identName(parts[0]), in.identName(parts[1])
		return s + "." + n, e.cat.KnownFunction(s, n)
	}
	var b []byte
	for k, p := range parts {
		if k > 0 {
			b = append(b, '.')
		}
		b = append(b, in.identName(p)...)
	}
	return string(b), false
}

// BuiltinFlags returns a copy of the built-in function list: name (lower
// case) -> the spellings (bit 0 adjacent, 1 spaced, 2 quoted) in which the
// server takes it for a built-in. For the test that checks it against a
// real server.
func BuiltinFlags() map[string]uint8 {
	out := make(map[string]uint8, len(builtinFlags))
	for k, v := range builtinFlags {
		out[k] = v
	}
	return out
}
