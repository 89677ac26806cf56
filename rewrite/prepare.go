package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// SQL-level prepared statements. PREPARE s FROM 'text' and MariaDB's
// EXECUTE IMMEDIATE 'text' carry a statement inside a string literal: the
// inner text is decided like a COM_STMT_PREPARE, and a fenced inner
// statement replaces the literal, re-quoted. A statement prepared from
// anything but literals (a variable, an expression) cannot be checked and is
// refused while the policy protects any table.

// maxNesting bounds dynamic SQL inside dynamic SQL: measured on MariaDB
// 10.11, EXECUTE IMMEDIATE and PREPARE inside either are errors (1295), so
// fenceproxy reads one level and refuses a second.
const maxNesting = 1

// stringSource is a statement source written as string literals: an
// optional character set introducer and one or more adjacent literals.
type stringSource struct {
	first, last int // token indexes of the first and last literal
	replaceFrom int // byte offset where the re-quoted literal goes
	text        string
}

// introducers whose conversion of an ASCII literal to the connection's
// character set keeps its bytes: measured on MariaDB 10.11, _filename
// decodes @XXXX sequences ('@0075pdate' is "update"), _swe7 reads `, @,
// [, \, ], ^, {, |, } and ~ as letters, and _ucs2, _utf16, _utf16le and
// _utf32 read the bytes as other characters altogether.
var identityIntroducers = map[string]bool{
	"_utf8mb4": true, "_utf8mb3": true, "_utf8": true, "_latin1": true, "_ascii": true, "_binary": true,
}

// literalSource reads string literals starting at token i; ok is false if
// the tokens there are not literals. next is the index after them. why
// says why a literal source cannot be read as the server reads it (an
// introducer fenceproxy does not model), "" if it can.
func (in *stmtIn) literalSource(i int) (src stringSource, next int, ok bool, why string) {
	j := i
	if j < len(in.toks) && in.toks[j].Kind == sqlread.Word && !in.toks[j].AfterDot {
		w := in.text(j)
		if len(w) > 1 && w[0] == '_' && j+1 < len(in.toks) && in.toks[j+1].Kind == sqlread.String {
			if !identityIntroducers[lowerASCII(string(w))] {
				why = "the character set introducer " + quoteForMessage(string(w)) + " makes the server convert " +
					"the text in a way fenceproxy does not model"
			}
			j++ // a character set introducer: kept as it is
		}
	}
	if j >= len(in.toks) {
		return src, i, false, why
	}
	var b strings.Builder
	src.first = j
	switch in.toks[j].Kind {
	case sqlread.NString:
		src.replaceFrom = in.toks[j].Start + 1 // keep the N
		b.WriteString(sqlread.UnquoteString(in.pc.src[in.toks[j].Start+1:in.toks[j].End], in.st.mode.noBackslash))
		j++
	case sqlread.String:
		src.replaceFrom = in.toks[j].Start
	default:
		return src, i, false, why
	}
	for j < len(in.toks) && in.toks[j].Kind == sqlread.String {
		b.WriteString(sqlread.UnquoteString(in.text(j), in.st.mode.noBackslash))
		j++
	}
	src.last = j - 1
	src.text = b.String()
	return src, j, true, why
}

// quoteString writes s as a single-quoted literal that reads back as s
// under the given NO_BACKSLASH_ESCAPES setting; ok is false if it cannot.
func quoteString(s string, noBackslash bool) (string, bool) {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			b.WriteString("''")
		case c == '\\' && !noBackslash:
			b.WriteString(`\\`)
		case c == 0:
			if noBackslash {
				return "", false
			}
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String(), true
}

// stmtName reads a prepared statement name at token i, folded as the
// server compares names (StmtName). ok is false when there is no name
// there, or one whose key fenceproxy cannot know (bytes >= 0x80 in a
// client character set other than UTF-8, a character outside the BMP).
func (in *stmtIn) stmtName(i int) (string, bool) {
	name, ok := in.identAt(i)
	if !ok {
		return "", false
	}
	return StmtName(name, in.st.utf8)
}

// nameRefusal refuses a statement whose prepared statement name has no key.
func (in *stmtIn) nameRefusal(what string) stmtRes {
	r := in.refuse("", "fenceproxy cannot read the prepared statement name of this "+what+" as the server "+
		"compares names (it has bytes that are not UTF-8 of the Basic Multilingual Plane, or the client "+
		"character set is not utf8mb4); use an ASCII name")
	r.refusal.CharsetUnknown = !in.st.utf8
	return r
}

// prepareStmt: PREPARE name FROM source.
func (in *stmtIn) prepareStmt() stmtRes {
	e := in.pc.e
	if _, ok := in.identAt(1); ok && in.kw(2, "from") {
		if _, ok := in.stmtName(1); !ok && e.hasTables() {
			return in.nameRefusal("PREPARE")
		}
	}
	name, ok := in.stmtName(1)
	if !ok || !in.kw(2, "from") {
		if e.hasTables() {
			return in.refuse("", "fenceproxy cannot read this PREPARE statement; write PREPARE name FROM 'statement'")
		}
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	src, next, ok, why := in.literalSource(3)
	if why != "" && in.mustReadSource() {
		return in.refuse("", "PREPARE "+why+"; prepare from a plain string literal")
	}
	if !ok || next != len(in.toks) {
		if !in.mustReadSource() {
			return stmtRes{stmt: Stmt{Kind: Prepare, Name: name}, matters: true}
		}
		return in.refuse("", "PREPARE from a variable or an expression cannot be checked for writes to protected "+
			"tables; prepare from a string literal (PREPARE "+name+" FROM 'UPDATE ...') or use the binary protocol")
	}
	inner, r := in.innerDecision(src)
	if r != nil {
		return *r
	}
	res := stmtRes{stmt: Stmt{Kind: Prepare, Name: name}, matters: true}
	res.edits = inner.edits
	if inner.stmt != nil {
		res.stmt.Prepared = inner.stmt
		res.stmt.Fence = inner.stmt.Fence
	}
	return res
}

// mustReadSource reports whether the statement text of a PREPARE or
// EXECUTE IMMEDIATE that is not a plain string literal is refused: while
// anything is protected, and for shadow mode's reading (Engine.Shadow)
// when the statement mentions a fence key, which may be a fence comment
// in the text the server will log and run.
func (in *stmtIn) mustReadSource() bool {
	e := in.pc.e
	return e.hasTables() || e.strict && hasFenceKey(in.raw())
}

// innerResult is the verdict on the statement inside a literal.
type innerResult struct {
	edits []edit
	stmt  *Stmt // the inner statement, when it matters
}

// innerDecision decides on the statement held by a literal source.
func (in *stmtIn) innerDecision(src stringSource) (innerResult, *stmtRes) {
	e := in.pc.e
	if in.pc.depth >= maxNesting {
		r := in.refuse("", "dynamic SQL inside dynamic SQL is refused (the server does not run it either)")
		return innerResult{}, &r
	}
	text := []byte(src.text)
	if e.hasTables() && hasHigh(text) {
		r := in.refuse("", "the statement text has bytes >= 0x80, which the server converts from the client's "+
			"character set to the connection's before it reads them; fenceproxy reads dynamic SQL only when it "+
			"is ASCII (write other characters as escapes the statement itself decodes, or use the binary protocol)")
		return innerResult{}, &r
	}
	if in.st.unsafe && e.mustRead() && hasTrailPair(text) {
		r := in.refuse("", "the statement text has a non-ASCII byte followed by one of @ [ \\ ] ^ ` { | } ~, "+
			"which the client character set may read differently; use utf8mb4")
		return innerResult{}, &r
	}
	sess := Session{Schema: in.st.schema, UnsafeCharset: in.st.unsafe, Oracle: in.st.oracle, NamesUTF8: in.st.utf8}
	d := e.decideText(text, sess, in.st.mode, true, in.pc.depth+1, nil)
	var out innerResult
	switch d.Action {
	case Refuse:
		r := stmtRes{refusal: &Refusal{Table: d.Refusal.Table, Reason: "in the prepared statement text: " + d.Refusal.Reason}}
		return out, &r
	case Answer:
		r := in.refuse("", "the lease functions cannot be prepared or executed as dynamic SQL; call them directly: SELECT "+
			d.Call.Func.String()+"(...)")
		return out, &r
	case Send:
		q, ok := quoteString(string(d.SQL), in.st.mode.noBackslash)
		if !ok {
			r := in.refuse("", "the fenced statement cannot be quoted under NO_BACKSLASH_ESCAPES (it holds a NUL byte)")
			return out, &r
		}
		out.edits = []edit{{pos: src.replaceFrom, end: in.toks[src.last].End, text: q}}
	}
	if len(d.Stmts) > 0 && (d.Stmts[0].Kind != Other || d.Stmts[0].Locks != LocksKept) {
		s := d.Stmts[0]
		out.stmt = &s
	}
	return out, nil
}

// executeStmt: EXECUTE name [USING ...].
func (in *stmtIn) executeStmt() stmtRes {
	name, ok := in.stmtName(1)
	if !ok {
		if in.pc.e.hasTables() {
			return in.nameRefusal("EXECUTE")
		}
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	return stmtRes{stmt: Stmt{Kind: Execute, Name: name}, matters: true}
}

// executeImmediate: MariaDB's EXECUTE IMMEDIATE source [USING ...]; the
// inner statement runs now, so its effect is this statement's.
func (in *stmtIn) executeImmediate() stmtRes {
	src, next, ok, why := in.literalSource(2)
	if why != "" && in.mustReadSource() {
		return in.refuse("", "EXECUTE IMMEDIATE "+why+"; use a plain string literal")
	}
	if !ok || next != len(in.toks) && !in.kw(next, "using") {
		if !in.mustReadSource() {
			return stmtRes{stmt: Stmt{Kind: Other}}
		}
		return in.refuse("", "EXECUTE IMMEDIATE of a variable or an expression cannot be checked for writes to "+
			"protected tables; use a string literal (EXECUTE IMMEDIATE 'UPDATE ...')")
	}
	inner, r := in.innerDecision(src)
	if r != nil {
		return *r
	}
	res := stmtRes{stmt: Stmt{Kind: Other}, edits: inner.edits}
	if inner.stmt != nil {
		res.stmt = *inner.stmt
		res.matters = true
	}
	return res
}

// deallocateStmt: DEALLOCATE PREPARE name, DROP PREPARE name.
func (in *stmtIn) deallocateStmt() stmtRes {
	name, ok := in.stmtName(2)
	if !ok || !in.kw(1, "prepare") {
		if in.pc.e.hasTables() {
			return in.nameRefusal("DEALLOCATE PREPARE")
		}
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	return stmtRes{stmt: Stmt{Kind: Deallocate, Name: name}, matters: true}
}
