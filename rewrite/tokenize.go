package rewrite

import "bytes"

// The tokenizer reads SQL text the way the connected server's lexer reads it
// (sql/sql_lex.cc of MySQL and MariaDB): comments, executable comments and
// their version rules, strings under the session's sql_mode, identifiers,
// numbers, variables and operators. It serves two purposes:
//
//   - positions: every token is a byte range of the original text, so the
//     fence can be spliced in without touching any other byte;
//   - normalization: a copy of the text of the same length in which every
//     comment, every dead executable comment and the markers of live
//     executable comments are blanked. The TiDB parser reads that copy, so
//     it sees exactly the SQL the server will execute, and the offsets of
//     the copy are the offsets of the original.
//
// Where the server's reading is uncertain (a comment nested in an
// executable comment, an unterminated comment, a version number whose
// reading changed between releases, ...), the lexer records an issue; the
// engine refuses such a statement if it matters.

// tokKind is the lexical class of a token.
type tokKind uint8

const (
	tkWord        tokKind = iota + 1 // bare identifier or keyword
	tkQuotedIdent                    // `x`, or "x" under ANSI_QUOTES
	tkString                         // 'x', or "x" without ANSI_QUOTES
	tkNString                        // N'x'
	tkHexString                      // X'..' or 0x..
	tkBitString                      // B'..' or 0b..
	tkNumber                         // 1, 1.5, .5, 1e5
	tkUserVar                        // @x, @'x', @"x", @`x`
	tkSysVar                         // @@x, @@session.x
	tkParam                          // ?
	tkOp                             // operators and punctuation: ( ) , ; . = <=> ...
)

// token is one live token: src[start:end].
type token struct {
	start, end int
	kind       tokKind
	// afterDot: a word that directly follows "ident." is always an
	// identifier, never a keyword (t.order, t.limit).
	afterDot bool
	// inExec: the token lies inside a live executable comment.
	inExec bool
}

// lexMode is what changes how the server's lexer reads text.
type lexMode struct {
	ansiQuotes  bool // sql_mode ANSI_QUOTES: "x" is an identifier
	noBackslash bool // sql_mode NO_BACKSLASH_ESCAPES
	server      Server
}

// lexer produces the live tokens of src one at a time. It does not
// allocate; when norm is set, it also blanks comments there.
type lexer struct {
	src  []byte
	pos  int
	mode lexMode
	norm []byte // same length as src; nil = do not normalize

	execStart int  // start of the live executable comment we are in, or -1
	sepDot    bool // the next token is the '.' of "ident.ident"
	identSep  bool // the next token follows "ident." directly
	issue     string
	issuePos  int
	sawHigh   bool // a byte >= 0x80 outside strings and comments
}

func newLexer(src []byte, mode lexMode, norm []byte) lexer {
	return lexer{src: src, mode: mode, norm: norm, execStart: -1, issuePos: -1}
}

// uncertain records the first reason the server's reading of the text is
// not certain.
func (lx *lexer) uncertain(pos int, why string) {
	if lx.issue == "" {
		lx.issue = why
		lx.issuePos = pos
	}
}

func (lx *lexer) blank(from, to int) {
	if from >= 2 && lx.src[from-1] == '-' && lx.src[from-2] == '-' {
		// "--/**/x" is minus minus x to the server, but blanking the
		// comment would make it a "-- " comment for the parser.
		lx.uncertain(from, "'--' directly followed by a comment")
	}
	if lx.norm == nil {
		return
	}
	for i := from; i < to && i < len(lx.norm); i++ {
		// Keep line breaks so that parser error positions stay readable.
		if lx.norm[i] != '\n' {
			lx.norm[i] = ' '
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// isIdentByte: the bytes of a bare identifier (ident_map of the utf8
// character sets: letters, digits, _, $ and every byte >= 0x80).
func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHexDigit(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (lx *lexer) peek(i int) byte {
	if lx.pos+i < len(lx.src) {
		return lx.src[lx.pos+i]
	}
	return 0
}

// next returns the next live token; ok is false at the end of the text.
func (lx *lexer) next() (t token, ok bool) {
	if !lx.skip() {
		return token{}, false
	}
	start := lx.pos
	t = token{start: start, inExec: lx.execStart >= 0}
	if lx.sepDot {
		lx.sepDot = false
		lx.identSep = true
		lx.pos++
		t.kind = tkOp
		t.end = lx.pos
		return t, true
	}
	sep := lx.identSep
	lx.identSep = false
	c := lx.src[lx.pos]
	switch {
	case sep && isIdentByte(c):
		// After "ident." the server scans an identifier, digits included.
		lx.scanIdentBytes()
		t.kind = tkWord
		t.afterDot = true
		lx.checkIdentSep()
	case c == '\'':
		lx.scanString('\'')
		t.kind = tkString
	case c == '"':
		if lx.mode.ansiQuotes {
			lx.scanQuoted('"')
			t.kind = tkQuotedIdent
		} else {
			lx.scanString('"')
			t.kind = tkString
		}
	case c == '`':
		lx.scanQuoted('`')
		t.kind = tkQuotedIdent
	case c == '@':
		t.kind = lx.scanVariable()
	case c == '?':
		lx.pos++
		t.kind = tkParam
	case isDigit(c):
		t.kind = lx.scanNumberOrIdent()
	case c == '.' && isDigit(lx.peek(1)):
		lx.pos++
		lx.scanFraction()
		t.kind = tkNumber
	case (c == 'N' || c == 'n') && lx.peek(1) == '\'':
		lx.pos++
		lx.scanString('\'')
		t.kind = tkNString
	case (c == 'X' || c == 'x') && lx.peek(1) == '\'':
		lx.scanQuotedDigits(isHexDigit)
		t.kind = tkHexString
	case (c == 'B' || c == 'b') && lx.peek(1) == '\'':
		lx.scanQuotedDigits(func(c byte) bool { return c == '0' || c == '1' })
		t.kind = tkBitString
	case isIdentByte(c):
		lx.scanIdentBytes()
		t.kind = tkWord
		lx.checkIdentSep()
	case c == '\\' && lx.peek(1) == 'N':
		// \N is NULL.
		lx.pos += 2
		t.kind = tkWord
	default:
		lx.scanOperator()
		t.kind = tkOp
		if c == '.' && lx.pos < len(lx.src) && isIdentByte(lx.src[lx.pos]) {
			// After '.', the server reads a directly following word as
			// an identifier, never as a keyword.
			lx.identSep = true
		}
		if c == ';' && lx.execStart >= 0 {
			lx.uncertain(start, "a ';' inside an executable comment")
		}
		if c == 0 {
			lx.uncertain(start, "a NUL byte in the statement")
		}
	}
	if c >= 0x80 && (t.kind == tkWord) {
		lx.sawHigh = true
	}
	t.end = lx.pos
	return t, true
}

// skip passes whitespace and comments; it reports whether a token follows.
func (lx *lexer) skip() bool {
	for lx.pos < len(lx.src) {
		c := lx.src[lx.pos]
		switch {
		case isSpace(c):
			lx.pos++
		case c == '#':
			lx.lineComment()
		case c == '-' && lx.peek(1) == '-' && lx.mode.server.Flavor == TiDB:
			// TiDB: "--" then a Unicode space (of the byte as a rune:
			// U+0085 and U+00A0 count), or the end of the text.
			n := lx.peek(2)
			if lx.pos+2 >= len(lx.src) || isSpace(n) || n == 0x85 || n == 0xa0 {
				lx.lineComment()
			} else {
				return true
			}
		case c == '-' && lx.peek(1) == '-':
			// MySQL, MariaDB: "--" then a space or control character
			// (my_isspace, my_iscntrl), or the end of the text.
			n := lx.peek(2)
			if lx.pos+2 >= len(lx.src) || isSpace(n) || n < 0x20 || n == 0x7f {
				lx.lineComment()
			} else if n >= 0x80 {
				// Whether this byte is a space or control character
				// depends on the client character set.
				lx.uncertain(lx.pos, "'--' followed by a non-ASCII byte")
				return true
			} else {
				return true
			}
		case c == '/' && lx.peek(1) == '*':
			lx.blockComment()
		case c == '*' && lx.peek(1) == '/' && lx.execStart >= 0:
			// The end of a live executable comment: blank the marker.
			lx.blank(lx.pos, lx.pos+2)
			lx.pos += 2
			lx.execStart = -1
		default:
			return true
		}
	}
	if lx.execStart >= 0 {
		lx.uncertain(lx.execStart, "an unterminated executable comment")
		lx.execStart = -1
	}
	return false
}

func (lx *lexer) lineComment() {
	start := lx.pos
	for lx.pos < len(lx.src) && lx.src[lx.pos] != '\n' {
		lx.pos++
	}
	lx.blank(start, lx.pos)
}

// blockComment handles "/*" at lx.pos: a plain comment, an optimizer hint
// (a comment to us), or an executable comment, live or dead.
func (lx *lexer) blockComment() {
	start := lx.pos
	if lx.execStart >= 0 {
		// The servers differ (and changed over releases) on comments
		// nested in a live executable comment.
		lx.uncertain(start, "a comment nested inside an executable comment")
	}
	p := start + 2
	maria := false
	bang := false
	switch lx.mode.server.Flavor {
	case MariaDB:
		if p < len(lx.src) && lx.src[p] == '!' {
			bang, p = true, p+1
		} else if p+1 < len(lx.src) && lx.src[p] == 'M' && lx.src[p+1] == '!' {
			bang, maria, p = true, true, p+2
		}
	case TiDB:
		if p < len(lx.src) && lx.src[p] == '!' {
			bang, p = true, p+1
		} else if p+1 < len(lx.src) && lx.src[p] == 'T' && lx.src[p+1] == '!' {
			lx.uncertain(start, "a TiDB feature comment /*T! (its content runs only on TiDB versions that know the feature)")
		}
	default:
		if p < len(lx.src) && lx.src[p] == '!' {
			bang, p = true, p+1
		}
	}
	if !bang {
		lx.skipComment(start, start+2, false)
		return
	}
	digits := 0
	for digits < 6 && p+digits < len(lx.src) && isDigit(lx.src[p+digits]) {
		digits++
	}
	if digits < 5 {
		// Not a version comment: always live, the content starts right
		// after the '!' (digits included).
		lx.openExec(start, p)
		return
	}
	live, n := lx.versionLive(start, p, digits, maria)
	if live {
		lx.openExec(start, p+n)
		return
	}
	// A dead versioned comment may hold one level of nested comment.
	lx.skipComment(start, p+n, true)
}

// versionLive decides whether a versioned executable comment whose digits
// start at p is live on the server, and how many digits the version has.
func (lx *lexer) versionLive(start, p, digits int, maria bool) (bool, int) {
	v := func(n int) uint32 {
		var x uint32
		for i := 0; i < n; i++ {
			x = x*10 + uint32(lx.src[p+i]-'0')
		}
		return x
	}
	srv := lx.mode.server
	if srv.Version == 0 {
		lx.uncertain(start, "a versioned executable comment while the server version is unknown")
	}
	switch srv.Flavor {
	case MariaDB:
		// MariaDB: 5 or 6 digits; MySQL 5.7+ versions (50700-99999) are
		// ignored unless the comment is MariaDB's own /*M!.
		n := 5
		if digits == 6 {
			n = 6
		}
		ver := v(n)
		return ver <= srv.Version && (ver < 50700 || ver > 99999 || maria), n
	case TiDB:
		// TiDB runs every /*! comment; it skips five version digits.
		return true, 5
	default:
		// MySQL 8.1+: six digits if a whitespace follows them, else five.
		// 5.7 reads five digits; late 8.0 releases may read six.
		n := 5
		sixth := digits == 6 && p+6 < len(lx.src) && isSpace(lx.src[p+6])
		switch {
		case sixth && srv.Version >= 80100:
			n = 6
		case sixth && srv.Version >= 80000:
			lx.uncertain(start, "a six-digit version comment, read differently by MySQL 8.0 releases")
		}
		return v(n) <= srv.Version, n
	}
}

// openExec enters a live executable comment whose content starts at content.
func (lx *lexer) openExec(start, content int) {
	if lx.execStart >= 0 {
		lx.uncertain(start, "an executable comment nested inside another")
	}
	lx.blank(start, content)
	lx.execStart = start
	lx.pos = content
}

// skipComment blanks a comment that started at start, scanning from p for
// its end. nest: one level of nested /* */ is allowed (dead version
// comments).
func (lx *lexer) skipComment(start, p int, nest bool) {
	depth := 0
	for p < len(lx.src) {
		c := lx.src[p]
		if nest && depth == 0 && c == '/' && p+1 < len(lx.src) && lx.src[p+1] == '*' {
			depth = 1
			p += 2
			continue
		}
		if c == '*' && p+1 < len(lx.src) && lx.src[p+1] == '/' {
			p += 2
			if depth == 0 {
				lx.blank(start, p)
				lx.pos = p
				return
			}
			depth = 0
			continue
		}
		p++
	}
	lx.uncertain(start, "an unterminated comment")
	lx.blank(start, len(lx.src))
	lx.pos = len(lx.src)
}

// scanString reads a quoted string starting at lx.pos (the opening quote).
// The quote and the backslash are found with bytes.IndexByte: strings are
// most of a long statement's bytes. Each search starts where the last one
// ended or at a byte past it, so the scan stays linear.
func (lx *lexer) scanString(q byte) {
	start := lx.pos
	src := lx.src
	p := lx.pos + 1
	qi := -1 // the next q at or after p while qi >= p; len(src): none
	for p < len(src) {
		if qi < p {
			qi = len(src)
			if k := bytes.IndexByte(src[p:], q); k >= 0 {
				qi = p + k
			}
		}
		if !lx.mode.noBackslash {
			if j := bytes.IndexByte(src[p:qi], '\\'); j >= 0 {
				p += j + 2
				continue
			}
		}
		if qi >= len(src) {
			break
		}
		p = qi
		if p+1 < len(src) && src[p+1] == q {
			p += 2
			continue
		}
		lx.pos = p + 1
		return
	}
	lx.uncertain(start, "an unterminated string")
	lx.pos = len(src)
}

// scanQuoted reads a quoted identifier (`x` or "x"); the quote doubles.
func (lx *lexer) scanQuoted(q byte) {
	start := lx.pos
	src := lx.src
	p := lx.pos + 1
	for p < len(src) {
		k := bytes.IndexByte(src[p:], q)
		if k < 0 {
			break
		}
		p += k
		if p+1 < len(src) && src[p+1] == q {
			p += 2
			continue
		}
		lx.pos = p + 1
		return
	}
	lx.uncertain(start, "an unterminated quoted identifier")
	lx.pos = len(src)
}

// scanQuotedDigits reads X'..' or B'..'.
func (lx *lexer) scanQuotedDigits(ok func(byte) bool) {
	start := lx.pos
	p := lx.pos + 2
	for p < len(lx.src) && ok(lx.src[p]) {
		p++
	}
	if p < len(lx.src) && lx.src[p] == '\'' {
		lx.pos = p + 1
		return
	}
	// The server rejects the statement; scan like a string so that the
	// rest is not misread.
	lx.uncertain(start, "a malformed hexadecimal or bit literal")
	lx.pos = start + 1
	lx.scanString('\'')
}

func (lx *lexer) scanIdentBytes() {
	for lx.pos < len(lx.src) && isIdentByte(lx.src[lx.pos]) {
		lx.pos++
	}
}

// checkIdentSep: an identifier directly followed by '.' and an identifier
// byte makes the server read the next word as an identifier.
func (lx *lexer) checkIdentSep() {
	if lx.pos+1 < len(lx.src) && lx.src[lx.pos] == '.' && isIdentByte(lx.src[lx.pos+1]) {
		lx.sepDot = true
	}
}

// scanVariable reads @x, @'x', @@x, @@session.x ...
func (lx *lexer) scanVariable() tokKind {
	p := lx.pos + 1
	if p < len(lx.src) && lx.src[p] == '@' {
		p++
		p = lx.scanVarName(p, true)
		lx.pos = p
		return tkSysVar
	}
	if p >= len(lx.src) {
		lx.pos = p
		return tkOp
	}
	switch c := lx.src[p]; {
	case c == '\'':
		lx.pos = p
		lx.scanString('\'')
	case c == '"':
		lx.pos = p
		if lx.mode.ansiQuotes {
			lx.scanQuoted('"')
		} else {
			lx.scanString('"')
		}
	case c == '`':
		lx.pos = p
		lx.scanQuoted('`')
	case isIdentByte(c) || c == '.':
		for p < len(lx.src) && (isIdentByte(lx.src[p]) || lx.src[p] == '.') {
			p++
		}
		lx.pos = p
	default:
		lx.pos = p
		return tkOp
	}
	return tkUserVar
}

// scanVarName reads a system variable name after "@@": a word or quoted
// identifier, optionally after "global." / "session." / "local.".
func (lx *lexer) scanVarName(p int, allowScope bool) int {
	if p < len(lx.src) && lx.src[p] == '`' {
		save := lx.pos
		lx.pos = p
		lx.scanQuoted('`')
		p = lx.pos
		lx.pos = save
	} else {
		for p < len(lx.src) && isIdentByte(lx.src[p]) {
			p++
		}
	}
	if allowScope && p+1 < len(lx.src) && lx.src[p] == '.' && (isIdentByte(lx.src[p+1]) || lx.src[p+1] == '`') {
		return lx.scanVarName(p+1, false)
	}
	return p
}

// scanNumberOrIdent reads what starts with a digit: a number, a hex or bit
// number, or an identifier that starts with digits (1abc).
func (lx *lexer) scanNumberOrIdent() tokKind {
	start := lx.pos
	if lx.src[start] == '0' && (lx.peek(1) == 'x' || lx.peek(1) == 'b') {
		hex := lx.peek(1) == 'x'
		p := start + 2
		for p < len(lx.src) && (hex && isHexDigit(lx.src[p]) || !hex && (lx.src[p] == '0' || lx.src[p] == '1')) {
			p++
		}
		if p > start+2 && (p >= len(lx.src) || !isIdentByte(lx.src[p])) {
			lx.pos = p
			if hex {
				return tkHexString
			}
			return tkBitString
		}
	}
	p := start
	for p < len(lx.src) && isDigit(lx.src[p]) {
		p++
	}
	if p < len(lx.src) && isIdentByte(lx.src[p]) {
		c := lx.src[p]
		if c == 'e' || c == 'E' {
			q := p + 1
			if q < len(lx.src) && (lx.src[q] == '+' || lx.src[q] == '-') {
				q++
			}
			if q < len(lx.src) && isDigit(lx.src[q]) {
				for q < len(lx.src) && isDigit(lx.src[q]) {
					q++
				}
				lx.pos = q
				return tkNumber
			}
		}
		// An identifier that starts with digits.
		lx.pos = p
		lx.scanIdentBytes()
		lx.checkIdentSep()
		return tkWord
	}
	lx.pos = p
	if p < len(lx.src) && lx.src[p] == '.' {
		lx.pos++
		lx.scanFraction()
	}
	return tkNumber
}

// scanFraction reads the digits after a decimal point and an exponent.
func (lx *lexer) scanFraction() {
	for lx.pos < len(lx.src) && isDigit(lx.src[lx.pos]) {
		lx.pos++
	}
	if lx.pos < len(lx.src) && (lx.src[lx.pos] == 'e' || lx.src[lx.pos] == 'E') {
		q := lx.pos + 1
		if q < len(lx.src) && (lx.src[q] == '+' || lx.src[q] == '-') {
			q++
		}
		if q < len(lx.src) && isDigit(lx.src[q]) {
			for q < len(lx.src) && isDigit(lx.src[q]) {
				q++
			}
			lx.pos = q
		}
	}
}

// scanOperator reads one operator or punctuation token.
func (lx *lexer) scanOperator() {
	c, n := lx.src[lx.pos], lx.peek(1)
	l := 1
	switch c {
	case '<':
		if n == '=' && lx.peek(2) == '>' {
			l = 3
		} else if n == '=' || n == '>' || n == '<' {
			l = 2
		}
	case '>':
		if n == '=' || n == '>' {
			l = 2
		}
	case '!':
		if n == '=' {
			l = 2
		}
	case '&':
		if n == '&' {
			l = 2
		}
	case '|':
		if n == '|' {
			l = 2
		}
	case ':':
		if n == '=' {
			l = 2
		}
	case '-':
		if n == '>' {
			l = 2
			if lx.peek(2) == '>' {
				l = 3
			}
		}
	}
	lx.pos += l
}

// scanStatement is the first, counting pass over the statement that starts
// at pos: the offset of its terminating ';' (or len(src)), how many live
// tokens it has and how deep its parentheses nest. It neither allocates
// nor blanks, so that the limits (limits.go) are checked before anything is
// kept per token.
func scanStatement(src []byte, pos int, mode lexMode) (end, count, depth int) {
	lx := newLexer(src, mode, nil)
	lx.pos = pos
	open := 0
	for {
		t, ok := lx.next()
		if !ok {
			return len(src), count, depth
		}
		if t.kind == tkOp && t.end-t.start == 1 {
			switch src[t.start] {
			case ';':
				return t.start, count, depth
			case '(':
				open++
				depth = max(depth, open)
			case ')':
				open--
			}
		}
		count++
	}
}

// scanRest is scanStatement to the end of src, ';' tokens included: a
// compound statement or stored program runs up to where the server's
// grammar ends it, which only its tokens tell.
func scanRest(src []byte, pos int, mode lexMode) (count, depth int) {
	lx := newLexer(src, mode, nil)
	lx.pos = pos
	open := 0
	for {
		t, ok := lx.next()
		if !ok {
			return count, depth
		}
		if t.kind == tkOp && t.end-t.start == 1 {
			switch src[t.start] {
			case '(':
				open++
				depth = max(depth, open)
			case ')':
				open--
			}
		}
		count++
	}
}

// lexStatement lexes one statement from pos: its tokens, the offset of its
// terminating ';' (or len(src)), and the first lexing issue. count is the
// number of tokens scanStatement found: the slice is allocated once, at
// that size.
func lexStatement(src []byte, pos int, mode lexMode, norm []byte, count int) ([]token, int, string, int) {
	lx := newLexer(src, mode, norm)
	lx.pos = pos
	var toks []token
	if count > 0 {
		toks = make([]token, 0, count)
	}
	for {
		t, ok := lx.next()
		if !ok {
			return toks, len(src), lx.issue, lx.issuePos
		}
		if t.kind == tkOp && t.end-t.start == 1 && src[t.start] == ';' {
			return toks, t.start, lx.issue, lx.issuePos
		}
		toks = append(toks, t)
	}
}
