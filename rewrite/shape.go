package rewrite

import (
	"bytes"
	"encoding/binary"
	"sort"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// The shape cache. Applications that inline their values send a new text
// for every statement (UPDATE t SET k = k + 1 WHERE id = 123, then ... id =
// 456), so the text cache never hits and every protected write would be
// parsed, fenced and verified again. Statements that differ only in their
// literal values have the same shape; for a shape whose decision cannot
// depend on those values, the first statement's decision is a plan for all
// of them: the same Action, the same Stmts, and, for Send, the same fence
// spliced at the same places between the same tokens, with each new
// statement's literals copied through byte for byte.
//
// The key is the packet's text with every literal token (number, string,
// N'', hex or bit literal; a character set introducer is a word and stays)
// replaced by a marker of its form (integer, decimal, float, quote
// character, X'' or 0x, ...), everything else verbatim: keywords, names and
// their quoting, operators, comments, spacing. Next to it, as for the text
// cache, everything else the decision depends on: schema, the session's
// sql_mode flags, server, COM_QUERY versus COM_STMT_PREPARE.
//
// A plan is stored only when the full path itself vouches that its decision
// ignored the literals' values (stmtRes.valueBlind), and a statement is
// looked up only when its own literals have forms whose reading cannot
// depend on their values. Everything else takes the full path, which is
// always right. Where a literal's value or bytes reach the decision, and
// what keeps each out of the shape cache:
//
//   - slow: with an unsafe client character set, a byte >= 0x80 followed
//     by @ [ \ ] ^ ` { | } ~ refuses the packet, inside strings too. No
//     shapes for such sessions.
//   - slow, fastAll: a '"' or '\' anywhere, inside strings too, makes an
//     unknown ANSI_QUOTES or NO_BACKSLASH_ESCAPES matter (two readings).
//     A text is looked up or stored only if each flag has one reading for
//     that very text.
//   - the lexer: an unterminated string, a malformed X'' or B'' literal
//     (its bytes decide) are issues that refuse. Each text is lexed whole
//     at lookup; any issue sends it to the full path.
//   - the fast path scans raw bytes, literals included, for protected names;
//     it runs before the shape cache, and the full path's verdict does not
//     use its result.
//   - lease functions (arguments are values the proxy uses, the column
//     name is the call's text), PREPARE and EXECUTE IMMEDIATE (the literal
//     is SQL), EXECUTE, DEALLOCATE, USE, SET (sql_mode and character set
//     values; an unparsed SET is searched as raw text): not value-blind.
//   - a name that is not valid UTF-8, an unparsed statement, compound
//     statements and stored programs: the raw text, literals included, is
//     searched for protected names, lease functions and keywords. Not
//     value-blind.
//   - whether the parser reads the statement at all, and the tree it
//     builds: the TiDB lexer errs on integers beyond 64 bits (read as
//     decimals, which LIMIT rejects), decimals too long for its decimal
//     type (the value package may panic), floats beyond float64, X''
//     literals with an odd number of digits, and reads invalid UTF-8 in
//     strings by its own rules. Only literals of the forms literalForm
//     accepts are shape literals: integers that fit 64 bits (those that
//     fit a signed one and the others apart: the parser gives them
//     different kinds, and ORDER BY turns only the signed ones into column
//     positions), decimals D.D of at most 30 bytes, floats with at most 17
//     mantissa and 2 exponent digits, strings of valid UTF-8, X'' with an
//     even number of digits; a literal directly followed by a name byte,
//     '.' or a quote, or preceded by '.', is not one either (the parser's
//     lexer could split it differently).
//   - grammar actions that look at a literal's value: ORDER BY / GROUP BY
//     1 (becomes a column position), LIKE ... ESCAPE 'c' (length checked),
//     type lengths and precisions (CAST(x AS DECIMAL(n)), FLOAT(n) turns
//     into DOUBLE), adjacent strings 'a' 'b' (the tree records the first
//     one's length), window frame bounds, LEAD/LAG offsets, FETCH FIRST n,
//     string aliases, GROUP_CONCAT SEPARATOR, DATE '...', JSON -> paths.
//     In all of them the literal does not become a value expression at its
//     own offset; literalsAreValues requires every literal to be exactly
//     that, of the kind its form gives (or an integer LIMIT / OFFSET
//     count, which the grammar takes whatever its value), so such
//     statements are not value-blind. Where the literal does become a
//     plain value (the Literal rule), the grammar checks only the
//     introducer's name, which is part of the key.
//   - verify compares the restored original with the restored fenced
//     statement: a literal restores the same on both sides, whatever its
//     value.
//   - the audit digest (parser.Normalize): it keeps an integer after ORDER
//     BY / GROUP BY verbatim (checked when the plan is made, by digesting
//     the statement with every literal changed), keeps a string whose value
//     is '*', skips to ')' after a string 'index' that follows FORCE / USE
//     / IGNORE (such strings are not shape literals), and reads backslash
//     escapes even under NO_BACKSLASH_ESCAPES (under it, a string with a
//     backslash is not a shape literal).
//   - the splice: edits are placed at token boundaries and never cover a
//     literal (newShapePlan checks it, or stores nothing).
//   - EXPLAIN of a write, MariaDB's DELETE / INSERT ... RETURNING and
//     ANALYZE, DDL and every other statement kind: not analysed here, so
//     not value-blind. What is: UPDATE, DELETE, INSERT, REPLACE, SELECT
//     (and UNION ...), BEGIN, COMMIT, ROLLBACK, CALL. Refusals and lease
//     calls are never stored; plans hold only statements of kind Write,
//     Other and Call.

// Literal forms: the key's marker for each literal. Distinct bytes.
const (
	formInt   = 'i' // 123 (fits int64)
	formUint  = 'u' // 18446744073709551615 (fits uint64, not int64)
	formDec   = 'd' // 1.5
	formFloat = 'f' // 1e5, 1.5E-3
	formHex0x = 'h' // 0x1F (X'1F' and x'1f' use 'X' and 'x')
	formBit0b = 'z' // 0b101 (B'101' and b'101' use 'B' and 'b')
	// Strings use their opening quote (' or "), N'' strings 'N' or 'n'.
)

// litSpan is one literal token: src[start:end].
type litSpan struct{ start, end int }

// shapeScan is a packet read for the shape cache: its key and its
// literals. Pooled: lookups do not allocate.
type shapeScan struct {
	key  []byte
	lits []litSpan
	ends []int // scratch: where each literal ends in a built text
}

var shapeScratch = sync.Pool{New: func() any { return new(shapeScan) }}

// maxScratch: larger buffers are not kept in the pool.
const maxScratch = 16 << 10

func releaseShapeScan(sc *shapeScan) {
	if cap(sc.key) > maxScratch {
		sc.key = nil
	}
	if cap(sc.lits) > maxScratch || cap(sc.ends) > maxScratch {
		sc.lits, sc.ends = nil, nil
	}
	shapeScratch.Put(sc)
}

// shapeTrace is what the full path records for the shape cache.
type shapeTrace struct {
	blind bool   // the decision ignored every literal's value (restResult.blind)
	edits []edit // the splice, in the client's text
}

// readShape reads the packet for the shape cache: nil if it has no shape
// (no shape cache, nothing protected, an unsafe character set, a text the
// session may read two ways, ...). Release the result with
// releaseShapeScan.
func (e *Engine) readShape(sql []byte, srv Server, s *Session) *shapeScan {
	if e.shapes == nil || !e.hasTables() || s.UnsafeCharset || len(sql) > maxCachedLen {
		return nil
	}
	ansi := readings(s.ANSIQuotes, sql, '"')
	nbe := readings(s.NoBackslashEscapes, sql, '\\')
	if len(ansi) != 1 || len(nbe) != 1 {
		return nil
	}
	sc := shapeScratch.Get().(*shapeScan)
	if !sc.read(sql, lexMode{ansiQuotes: ansi[0], noBackslash: nbe[0], server: srv}) {
		releaseShapeScan(sc)
		return nil
	}
	return sc
}

// shapeDecision answers for the packet sql, read into sc, from the shape
// cache.
func (e *Engine) shapeDecision(sql []byte, sc *shapeScan, ctx *cacheCtx) (Decision, bool) {
	p, ok := e.shapes.get(sc.key, ctx)
	if !ok {
		return Decision{}, false
	}
	return p.decision(sql, sc)
}

// read lexes the whole packet and builds its key: for each literal, the
// length of the text before it (uvarint), that text and the literal's
// form; then the rest. It reports false if the packet has no literal, a
// lexing issue, or a literal that is not a shape literal.
func (sc *shapeScan) read(sql []byte, mode lexMode) bool {
	sc.key = sc.key[:0]
	sc.lits = sc.lits[:0]
	lx := newLexer(sql, mode, nil)
	last := 0
	for {
		t, ok := lx.Next()
		if !ok {
			break
		}
		form, lit := literalForm(sql, t, mode.noBackslash)
		if !lit {
			continue
		}
		if form == 0 || t.Start > 0 && sql[t.Start-1] == '.' || t.End < len(sql) && !endsLiteral(sql[t.End]) {
			return false
		}
		sc.key = binary.AppendUvarint(sc.key, uint64(t.Start-last))
		sc.key = append(sc.key, sql[last:t.Start]...)
		sc.key = append(sc.key, form)
		sc.lits = append(sc.lits, litSpan{start: t.Start, end: t.End})
		last = t.End
	}
	if lx.Issue() != "" || len(sc.lits) == 0 {
		return false
	}
	sc.key = binary.AppendUvarint(sc.key, uint64(len(sql)-last))
	sc.key = append(sc.key, sql[last:]...)
	return true
}

// endsLiteral: a byte that may directly follow a shape literal. After a
// name byte, '.' or a quote, the parser's lexer may read the literal and
// what follows as one token, or split them elsewhere.
func endsLiteral(c byte) bool {
	return !sqlread.IsIdentByte(c) && c != '.' && c != '\'' && c != '"' && c != '`'
}

// literalForm classifies a token: literal reports whether it is a literal
// value token at all; form is its marker, or 0 if it is a literal the shape
// cache does not take (see the list above).
func literalForm(src []byte, t sqlread.Token, noBackslash bool) (form byte, literal bool) {
	b := src[t.Start:t.End]
	switch t.Kind {
	case sqlread.Number:
		return numberForm(b), true
	case sqlread.String:
		if len(b) < 2 || b[len(b)-1] != b[0] || !plainString(b[1:len(b)-1], noBackslash) {
			return 0, true
		}
		return b[0], true
	case sqlread.NString:
		if len(b) < 3 || b[1] != '\'' || b[len(b)-1] != '\'' || !plainString(b[2:len(b)-1], noBackslash) {
			return 0, true
		}
		return b[0], true
	case sqlread.HexString:
		if b[0] == '0' {
			if len(b) < 3 || !allBytes(b[2:], sqlread.IsHexDigit) {
				return 0, true
			}
			return formHex0x, true
		}
		if len(b) < 3 || b[1] != '\'' || b[len(b)-1] != '\'' {
			return 0, true
		}
		if d := b[2 : len(b)-1]; !allBytes(d, sqlread.IsHexDigit) || len(d)%2 != 0 {
			return 0, true
		}
		return b[0], true
	case sqlread.BitString:
		bit := func(c byte) bool { return c == '0' || c == '1' }
		if b[0] == '0' {
			if len(b) < 3 || !allBytes(b[2:], bit) {
				return 0, true
			}
			return formBit0b, true
		}
		if len(b) < 3 || b[1] != '\'' || b[len(b)-1] != '\'' || !allBytes(b[2:len(b)-1], bit) {
			return 0, true
		}
		return b[0], true
	}
	return 0, false
}

func allBytes(b []byte, ok func(byte) bool) bool {
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}

// numberForm: D (fitting 64 bits), D.D (at most 30 bytes), or D[.D]e[+-]D
// (at most 17 mantissa digits, 1 or 2 exponent digits); 0 for anything else
// (.5, 1., 1.e5, longer numbers).
func numberForm(b []byte) byte {
	i := 0
	for i < len(b) && sqlread.IsDigit(b[i]) {
		i++
	}
	whole := i
	if whole == 0 {
		return 0
	}
	if i == len(b) {
		return integerForm(b)
	}
	frac := 0
	if b[i] == '.' {
		i++
		j := i
		for i < len(b) && sqlread.IsDigit(b[i]) {
			i++
		}
		if frac = i - j; frac == 0 {
			return 0
		}
		if i == len(b) {
			if len(b) <= 30 {
				return formDec
			}
			return 0
		}
	}
	if b[i] != 'e' && b[i] != 'E' {
		return 0
	}
	i++
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		i++
	}
	j := i
	for i < len(b) && sqlread.IsDigit(b[i]) {
		i++
	}
	if exp := i - j; exp == 0 || exp > 2 || i != len(b) || whole+frac > 17 {
		return 0
	}
	return formFloat
}

// integerForm: the parser reads digits that fit an int64 as one, those
// that fit a uint64 as that, longer ones as a decimal (which LIMIT and
// other integer-only places reject).
func integerForm(b []byte) byte {
	var v uint64
	for _, c := range b {
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0
		}
		v = v*10 + d
	}
	if v <= 1<<63-1 {
		return formInt
	}
	return formUint
}

// plainString: the body of a string literal whose reading by the parser
// and the digester cannot depend on its bytes: valid UTF-8, no backslash
// under NO_BACKSLASH_ESCAPES (the digester would still read escapes), and
// a value that does not fold to '*' or 'index' (words the digester acts on).
func plainString(body []byte, noBackslash bool) bool {
	if !utf8.Valid(body) {
		return false
	}
	if noBackslash && bytes.IndexByte(body, '\\') >= 0 {
		return false
	}
	return !foldsTo(body, "*") && !foldsTo(body, "index")
}

// foldsTo reports whether a string body, with its backslashes dropped (an
// escape yields its own character, a control character, or keeps the
// backslash), lower-cases rune by rune to word, as the digester's
// strings.ToLower would: a superset of the bodies whose value folds to
// word.
func foldsTo(body []byte, word string) bool {
	k := 0
	for i := 0; i < len(body); {
		if body[i] == '\\' {
			i++
			continue
		}
		r, n := utf8.DecodeRune(body[i:])
		i += n
		if k >= len(word) || unicode.ToLower(r) != rune(word[k]) {
			return false
		}
		k++
	}
	return k == len(word)
}

// Literal positions in the parser's tree.

// conflict marks an offset at which the tree holds more than one value.
const conflict = 0xff

// valuePositions records the kind of every value expression by the offset
// the parser recorded for it, except the counts of LIMIT / OFFSET, which
// the parser records with no offset: those it counts.
type valuePositions struct {
	at     map[int]byte
	limits map[*test_driver.ValueExpr]bool
}

func (v *valuePositions) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.Limit:
		for _, e := range []ast.ExprNode{x.Count, x.Offset} {
			if c, ok := e.(*test_driver.ValueExpr); ok && (c.Kind() == test_driver.KindUint64 || c.Kind() == test_driver.KindInt64) {
				v.limits[c] = true
			}
		}
	case *test_driver.ValueExpr:
		if v.limits[x] {
			break
		}
		p := x.OriginTextPosition()
		if _, dup := v.at[p]; dup {
			v.at[p] = conflict
		} else {
			v.at[p] = x.Kind()
		}
	}
	return n, false
}

func (v *valuePositions) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// kindFits: the value kind the parser gives a literal of this form.
func kindFits(form, kind byte) bool {
	switch form {
	case formInt:
		return kind == test_driver.KindInt64
	case formUint:
		return kind == test_driver.KindUint64
	case formDec:
		return kind == test_driver.KindMysqlDecimal
	case formFloat:
		return kind == test_driver.KindFloat64
	case '\'', '"', 'N', 'n':
		return kind == test_driver.KindString || kind == test_driver.KindBytes
	case formHex0x, formBit0b, 'X', 'x', 'B', 'b':
		return kind == test_driver.KindBinaryLiteral || kind == test_driver.KindMysqlBit
	}
	return false
}

// literalsAreValues reports, while tracing, whether the parser made every
// literal of the statement a plain value expression: a value at the
// literal's own offset (at its character set introducer's, for an
// introduced literal), of the kind its form gives. The parser records for
// an expression the offset of the first token of the rule that produced
// it, so a literal that some rule consumed otherwise (a length, an ESCAPE
// character, an alias, a column position, a frame bound, the second of two
// adjacent strings) has no value at its offset, and the statement is not
// value-blind. The grammar itself is deterministic in the token types,
// which the literal forms fix; the plain values are the only place where
// the values go, and verify sees of them only the kind.
func (in *stmtIn) literalsAreValues(n ast.Node) bool {
	if in.pc.trace == nil {
		return false
	}
	v := valuePositions{at: map[int]byte{}, limits: map[*test_driver.ValueExpr]bool{}}
	n.Accept(&v)
	limits := 0
	for i, t := range in.toks {
		form, lit := literalForm(in.pc.src, t, in.st.mode.noBackslash)
		if !lit {
			continue
		}
		off := t.Start - in.start
		if form == 0 || off <= 0 {
			return false
		}
		k, ok := v.at[off]
		if !ok && i > 0 && in.introducer(i-1) {
			k, ok = v.at[in.toks[i-1].Start-in.start]
		}
		if ok && kindFits(form, k) {
			continue
		}
		if !ok && form == formInt && in.limitOperand(i) {
			limits++
			continue
		}
		return false
	}
	// Every integer in a LIMIT position is one of the tree's LIMIT counts
	// (an integer there is nothing else in the grammar, and the grammar
	// takes any integer there).
	return limits == len(v.limits)
}

// limitOperand: token i stands where LIMIT n, LIMIT m, n or OFFSET n put
// an integer.
func (in *stmtIn) limitOperand(i int) bool {
	switch {
	case in.kw(i-1, "limit"), in.kw(i-1, "offset"):
		return true
	case in.op(i-1, ","):
		return i >= 3 && in.kw(i-3, "limit") && (in.toks[i-2].Kind == sqlread.Number || in.toks[i-2].Kind == sqlread.Param)
	}
	return false
}

// introducer: token i may be a character set introducer (_utf8mb4 'x').
func (in *stmtIn) introducer(i int) bool {
	t := in.toks[i]
	return t.Kind == sqlread.Word && !t.AfterDot && t.End-t.Start > 1 && in.pc.src[t.Start] == '_'
}

// writeIgnoresValues reports, while tracing, whether the verdict on a
// parsed UPDATE / DELETE / INSERT / REPLACE ignored its literals' values:
// the literals are plain values, and the audit digest does not keep any.
func (in *stmtIn) writeIgnoresValues(n ast.StmtNode, res *stmtRes) bool {
	if !in.literalsAreValues(n) {
		return false
	}
	if f := res.stmt.Fence; f != nil {
		for _, t := range f.Targets {
			if t.Template != nil {
				return false // an inserted row's lease is read from its values
			}
		}
	}
	return res.stmt.Fence == nil || in.digestIgnoresLiterals(res.stmt.Fence.Digest)
}

// digestIgnoresLiterals digests the statement once more with every literal
// changed (same length, same form, every byte different) and compares: the
// digester replaces a literal by '?' unless it keeps the literal itself
// (an integer after ORDER BY / GROUP BY), and which it does depends on the
// tokens around it, not on the value.
func (in *stmtIn) digestIgnoresLiterals(digest string) bool {
	probe := []byte(in.normText())
	for _, t := range in.toks {
		form, lit := literalForm(in.pc.src, t, in.st.mode.noBackslash)
		if !lit {
			continue
		}
		if form == 0 {
			return false
		}
		changeLiteral(probe[t.Start-in.start:t.End-in.start], form)
	}
	return parser.Normalize(string(probe), "ON") == digest
}

// changeLiteral rewrites a shape literal in place into another literal of
// the same form and length, every value byte changed.
func changeLiteral(b []byte, form byte) {
	digits := func(d []byte) {
		for i, c := range d {
			if sqlread.IsDigit(c) {
				d[i] = '0' + (c-'0'+1)%10
			}
		}
	}
	hexes := func(d []byte) {
		for i, c := range d {
			if c == '9' {
				d[i] = 'a'
			} else if c == 'f' || c == 'F' {
				d[i] = '0'
			} else {
				d[i] = c + 1
			}
		}
	}
	bits := func(d []byte) {
		for i, c := range d {
			d[i] = '0' + '1' - c
		}
	}
	text := func(d []byte) {
		for i, c := range d {
			if c == 'x' {
				d[i] = 'y'
			} else {
				d[i] = 'x'
			}
		}
	}
	switch form {
	case formInt, formUint, formDec, formFloat:
		digits(b)
	case '\'', '"':
		text(b[1 : len(b)-1])
	case 'N', 'n':
		text(b[2 : len(b)-1])
	case formHex0x:
		hexes(b[2:])
	case 'X', 'x':
		hexes(b[2 : len(b)-1])
	case formBit0b:
		bits(b[2:])
	case 'B', 'b':
		bits(b[2 : len(b)-1])
	}
}

// Plans.

// shapePos is a position in a statement of the shape: off bytes after the
// end of literal lit-1 (after the start of the text when lit is 0).
type shapePos struct{ lit, off int32 }

// shapePlan reproduces a decision for every packet of one shape.
type shapePlan struct {
	action Action
	// text is the sent text without the literals (Send); literal i goes at
	// text offset cuts[i].
	text []byte
	cuts []int32
	// stmts is Decision.Stmts with the spans to be placed: spans[i] are
	// the positions of stmts[i].Span in the sent text (Send) or the
	// client's text (Forward).
	stmts []Stmt
	spans [][2]shapePos
}

// newShapePlan makes the plan of the decision d on the packet sql, whose
// literals are lits and which the full path spliced with edits; nil if the
// decision is not one a plan can reproduce.
func newShapePlan(sql []byte, lits []litSpan, d Decision, edits []edit) *shapePlan {
	p := &shapePlan{action: d.Action}
	out := sql
	switch {
	case d.Refusal != nil || d.Call != nil:
		return nil
	case d.Action == Forward && len(edits) == 0:
	case d.Action == Send && len(edits) > 0:
		out = d.SQL
	default:
		return nil
	}
	for i := range d.Stmts {
		if k := d.Stmts[i].Kind; k != Other && k != Write && k != Call || d.Stmts[i].Prepared != nil {
			return nil
		}
	}
	// Where each literal is in the sent text: shifted by every edit that
	// ends at or before its start. An edit that reaches into a literal
	// would make the plan's text depend on it.
	es := make([]edit, len(edits))
	copy(es, edits)
	sort.SliceStable(es, func(i, j int) bool { return es[i].pos < es[j].pos })
	at := make([]litSpan, len(lits))
	delta, k := 0, 0
	for i, l := range lits {
		for k < len(es) && es[k].end <= l.start {
			delta += len(es[k].text) - (es[k].end - es[k].pos)
			k++
		}
		if k < len(es) && es[k].pos < l.end {
			return nil
		}
		s := l.start + delta
		n := l.end - l.start
		if s < 0 || s+n > len(out) || !bytes.Equal(out[s:s+n], sql[l.start:l.end]) {
			return nil
		}
		at[i] = litSpan{start: s, end: s + n}
	}
	if d.Action == Send {
		p.cuts = make([]int32, len(at))
		prev := 0
		for i, l := range at {
			p.text = append(p.text, out[prev:l.start]...)
			p.cuts[i] = int32(len(p.text))
			prev = l.end
		}
		p.text = append(p.text, out[prev:]...)
	}
	if d.Stmts != nil {
		p.stmts = append([]Stmt(nil), d.Stmts...)
		p.spans = make([][2]shapePos, len(d.Stmts))
		for i, st := range d.Stmts {
			for j, q := range st.Span {
				pos, ok := shapePosOf(at, q)
				if !ok {
					return nil
				}
				p.spans[i][j] = pos
			}
		}
	}
	return p
}

// shapePosOf expresses the offset q of a text whose literals are at as a
// shapePos; false if q lies inside a literal.
func shapePosOf(at []litSpan, q int) (shapePos, bool) {
	k := sort.Search(len(at), func(i int) bool { return at[i].end > q })
	if k < len(at) && at[k].start < q {
		return shapePos{}, false
	}
	base := 0
	if k > 0 {
		base = at[k-1].end
	}
	return shapePos{lit: int32(k), off: int32(q - base)}, true
}

// decision applies the plan to the packet sql read into sc; false if sc
// does not fit the plan (it always does for a packet of the plan's key).
func (p *shapePlan) decision(sql []byte, sc *shapeScan) (Decision, bool) {
	d := Decision{Action: p.action}
	lits := sc.lits
	var ends []int
	if p.action == Send {
		if len(p.cuts) != len(lits) {
			return Decision{}, false
		}
		n := len(p.text)
		for _, l := range lits {
			n += l.end - l.start
		}
		out := make([]byte, 0, n)
		ends = sc.ends[:0]
		prev := 0
		for i, l := range lits {
			out = append(out, p.text[prev:p.cuts[i]]...)
			out = append(out, sql[l.start:l.end]...)
			ends = append(ends, len(out))
			prev = int(p.cuts[i])
		}
		out = append(out, p.text[prev:]...)
		sc.ends = ends
		d.SQL = out
	}
	if p.stmts != nil {
		// Literal ends in the text the spans refer to.
		end := func(i int) int {
			if ends != nil {
				return ends[i]
			}
			return lits[i].end
		}
		place := func(q shapePos) (int, bool) {
			if q.lit == 0 {
				return int(q.off), true
			}
			if int(q.lit) > len(lits) {
				return 0, false
			}
			return end(int(q.lit)-1) + int(q.off), true
		}
		stmts := make([]Stmt, len(p.stmts))
		copy(stmts, p.stmts)
		for i := range stmts {
			a, ok1 := place(p.spans[i][0])
			b, ok2 := place(p.spans[i][1])
			if !ok1 || !ok2 {
				return Decision{}, false
			}
			stmts[i].Span = [2]int{a, b}
		}
		d.Stmts = stmts
	}
	return d, true
}
