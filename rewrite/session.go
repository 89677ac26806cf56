package rewrite

import (
	"strings"

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
		if at == InPacket {
			s.NoBackslashEscapes = st.NoBackslashEscapes
		}
		e.ModeUnknown = st.ANSIQuotes == Unknown || st.NoBackslashEscapes == Unknown
	}
	if st.Kind == SetCharset || st.Kind == SetSQLMode && st.SetsCharset {
		e.Charset = true
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
	b := in.pc.src[t.start:t.end]
	switch t.kind {
	case tkWord:
		return string(b), true
	case tkQuotedIdent:
		return unquoteIdent(b), true
	}
	return "", false
}

// unquoteIdent strips `x` or "x" quotes and undoubles the quote.
func unquoteIdent(b []byte) string {
	if len(b) < 2 {
		return string(b)
	}
	q := b[0]
	inner := b[1 : len(b)-1]
	return strings.ReplaceAll(string(inner), string([]byte{q, q}), string(q))
}

// setStmt: a SET the parser read.
func (in *stmtIn) setStmt(n *ast.SetStmt) stmtRes {
	var st Stmt
	mode, cs := false, false
	for _, v := range n.Variables {
		switch {
		case v.Name == ast.SetNames || v.Name == ast.SetCharset:
			cs = true
			st.UnsafeCharset = unsafeCharsetValue(v.Value)
		case v.IsSystem && !v.IsGlobal && !v.IsInstance && strings.EqualFold(v.Name, "sql_mode"):
			mode = true
			st.ANSIQuotes, st.NoBackslashEscapes = sqlModeValue(v.Value)
		case v.IsSystem && !v.IsGlobal && !v.IsInstance && strings.EqualFold(v.Name, "character_set_client"):
			cs = true
			st.UnsafeCharset = unsafeCharsetValue(v.Value)
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
	mode := containsFold(raw, "sql_mode")
	cs := containsFold(raw, "character_set_client") || containsWordFold(raw, "names") ||
		containsWordFold(raw, "charset") || containsWordFold(raw, "character")
	switch {
	case mode:
		return stmtRes{stmt: Stmt{Kind: SetSQLMode, ANSIQuotes: Unknown, NoBackslashEscapes: Unknown,
			SetsCharset: cs, UnsafeCharset: cs}, matters: true}
	case cs:
		return stmtRes{stmt: Stmt{Kind: SetCharset, UnsafeCharset: true}, matters: true}
	}
	return stmtRes{stmt: Stmt{Kind: Other}}
}

// sqlModeValue reads the ANSI_QUOTES and NO_BACKSLASH_ESCAPES parts of a
// literal sql_mode value; anything else is Unknown.
func sqlModeValue(v ast.ExprNode) (ansi, nbe Tri) {
	var s string
	switch x := v.(type) {
	case ast.ValueExpr:
		str, ok := x.GetValue().(string)
		if !ok {
			return Unknown, Unknown
		}
		s = str
	case *ast.ColumnNameExpr:
		if x.Name.Table.L != "" {
			return Unknown, Unknown
		}
		s = x.Name.Name.O
	default:
		return Unknown, Unknown
	}
	ansi, nbe = Off, Off
	for _, m := range strings.Split(s, ",") {
		switch strings.ToUpper(strings.TrimSpace(m)) {
		case "ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL":
			ansi = On
		case "NO_BACKSLASH_ESCAPES":
			nbe = On
		}
	}
	return ansi, nbe
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

// unsafeCharsetValue: a character set value the proxy cannot vouch for.
func unsafeCharsetValue(v ast.ExprNode) bool {
	var s string
	switch x := v.(type) {
	case ast.ValueExpr:
		str, ok := x.GetValue().(string)
		if !ok {
			return true
		}
		s = str
	case *ast.ColumnNameExpr:
		if x.Name.Table.L != "" {
			return true
		}
		s = x.Name.Name.O
	default:
		return true
	}
	return UnsafeCharsetName(s)
}

// UnsafeCharsetName reports whether a session whose client character set is
// named so must be read with UnsafeCharset: one of the sets that can hide
// quote bytes, or a name this package does not know.
func UnsafeCharsetName(name string) bool {
	s := strings.ToLower(strings.TrimSpace(name))
	return unsafeCharsets[s] || !safeCharsets[s]
}

// containsWordFold reports whether word (lower-case ASCII) occurs in text as
// a whole word, ASCII case-insensitively (the servers match keywords so).
func containsWordFold(text []byte, word string) bool {
	for i := 0; i+len(word) <= len(text); i++ {
		if i > 0 && isIdentByte(text[i-1]) {
			continue
		}
		if !eqFold(text[i:i+len(word)], word) {
			continue
		}
		if j := i + len(word); j < len(text) && isIdentByte(text[j]) {
			continue
		}
		return true
	}
	return false
}
