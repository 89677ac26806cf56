// Package sqlread reads SQL text the way the connected server reads it. It
// is fenceproxy's one SQL reader: the rewriter, the catalog (stored program
// bodies, view definitions) and the proxy read statements through it, so
// that no two parts of fenceproxy can disagree about what a text says. It
// is pure: no I/O.
//
// The tokenizer follows the server's lexer (sql/sql_lex.cc of MySQL and
// MariaDB, and TiDB's parser): comments, executable comments and their
// version rules, strings under the session's sql_mode, identifiers,
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
// reading changed between releases, ...), the lexer records an issue;
// callers refuse (or count as unreadable) such a text if it matters.
package sqlread

import "bytes"

// Flavor is the server family, learned from the handshake's version string.
type Flavor uint8

const (
	MySQL Flavor = iota
	MariaDB
	TiDB
)

func (f Flavor) String() string {
	switch f {
	case MariaDB:
		return "mariadb"
	case TiDB:
		return "tidb"
	}
	return "mysql"
}

// Mode is what changes how the server's lexer reads text.
type Mode struct {
	ANSIQuotes  bool // sql_mode ANSI_QUOTES: "x" is an identifier
	NoBackslash bool // sql_mode NO_BACKSLASH_ESCAPES
	Flavor      Flavor
	// Version: major*10000 + minor*100 + patch (101119 for 10.11.19); 0 =
	// unknown, which makes every versioned executable comment an issue.
	Version uint32
}

// Kind is the lexical class of a token.
type Kind uint8

const (
	Word        Kind = iota + 1 // bare identifier or keyword
	QuotedIdent                 // `x`, or "x" under ANSI_QUOTES
	String                      // 'x', or "x" without ANSI_QUOTES
	NString                     // N'x'
	HexString                   // X'..' or 0x..
	BitString                   // B'..' or 0b..
	Number                      // 1, 1.5, .5, 1e5
	UserVar                     // @x, @'x', @"x", @`x`
	SysVar                      // @@x, @@session.x
	Param                       // ?
	Op                          // operators and punctuation: ( ) , ; . = <=> ...
)

// Token is one live token: src[Start:End].
type Token struct {
	Start, End int
	Kind       Kind
	// AfterDot: a word that directly follows "ident." is always an
	// identifier, never a keyword (t.order, t.limit), and may start with
	// digits (t.1e5).
	AfterDot bool
	// InExec: the token lies inside a live executable comment.
	InExec bool
}

// IsOp reports whether t is the one-byte operator c of src.
func (t Token) IsOp(src []byte, c byte) bool {
	return t.Kind == Op && t.End-t.Start == 1 && src[t.Start] == c
}

// Lexer produces the live tokens of src one at a time. It does not
// allocate; when norm is set, it also blanks comments there.
type Lexer struct {
	src  []byte
	pos  int
	mode Mode
	norm []byte // same length as src; nil = do not normalize

	execStart int  // start of the live executable comment we are in, or -1
	sepDot    bool // the next token is the '.' of "ident.ident"
	identSep  bool // the next token follows "ident." directly
	issue     string
	issuePos  int
}

// NewLexer reads src from offset from on; token offsets are offsets of
// src. norm, if not nil, is a copy of src (same length) in which the lexer
// blanks what it skips.
func NewLexer(src []byte, from int, mode Mode, norm []byte) Lexer {
	return Lexer{src: src, pos: from, mode: mode, norm: norm, execStart: -1, issuePos: -1}
}

// Issue is the first reason the server's reading of the text read so far
// is not certain, or "".
func (lx *Lexer) Issue() string { return lx.issue }

// IssuePos is the offset Issue is about (-1 when there is none).
func (lx *Lexer) IssuePos() int { return lx.issuePos }

// Pos is the offset the lexer reads next.
func (lx *Lexer) Pos() int { return lx.pos }

func (lx *Lexer) uncertain(pos int, why string) {
	if lx.issue == "" {
		lx.issue = why
		lx.issuePos = pos
	}
}

func (lx *Lexer) blank(from, to int) {
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

func IsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// IsIdentByte: the bytes of a bare identifier (ident_map of the utf8
// character sets: letters, digits, _, $ and every byte >= 0x80).
func IsIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

func IsHexDigit(c byte) bool {
	return IsDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (lx *Lexer) peek(i int) byte {
	if lx.pos+i < len(lx.src) {
		return lx.src[lx.pos+i]
	}
	return 0
}

// Next returns the next live token; ok is false at the end of the text.
func (lx *Lexer) Next() (t Token, ok bool) {
	if !lx.skip() {
		return Token{}, false
	}
	start := lx.pos
	t = Token{Start: start, InExec: lx.execStart >= 0}
	if lx.sepDot {
		lx.sepDot = false
		lx.identSep = true
		lx.pos++
		t.Kind = Op
		t.End = lx.pos
		return t, true
	}
	sep := lx.identSep
	lx.identSep = false
	c := lx.src[lx.pos]
	switch {
	case sep && IsIdentByte(c):
		// After "ident." the server scans an identifier, digits included.
		lx.scanIdentBytes()
		t.Kind = Word
		t.AfterDot = true
		lx.checkIdentSep()
	case c == '\'':
		lx.scanString('\'')
		t.Kind = String
	case c == '"':
		if lx.mode.ANSIQuotes {
			lx.scanQuoted('"')
			t.Kind = QuotedIdent
		} else {
			lx.scanString('"')
			t.Kind = String
		}
	case c == '`':
		lx.scanQuoted('`')
		t.Kind = QuotedIdent
	case c == '@':
		t.Kind = lx.scanVariable()
	case c == '?':
		lx.pos++
		t.Kind = Param
	case IsDigit(c):
		t.Kind = lx.scanNumberOrIdent()
	case c == '.' && IsDigit(lx.peek(1)):
		lx.pos++
		lx.scanFraction()
		t.Kind = Number
	case (c == 'N' || c == 'n') && lx.peek(1) == '\'':
		lx.pos++
		lx.scanString('\'')
		t.Kind = NString
	case (c == 'X' || c == 'x') && lx.peek(1) == '\'':
		lx.scanQuotedDigits(IsHexDigit)
		t.Kind = HexString
	case (c == 'B' || c == 'b') && lx.peek(1) == '\'':
		lx.scanQuotedDigits(func(c byte) bool { return c == '0' || c == '1' })
		t.Kind = BitString
	case IsIdentByte(c):
		lx.scanIdentBytes()
		t.Kind = Word
		lx.checkIdentSep()
	case c == '\\' && lx.peek(1) == 'N':
		// \N is NULL.
		lx.pos += 2
		t.Kind = Word
	default:
		lx.scanOperator()
		t.Kind = Op
		if c == '.' && lx.pos < len(lx.src) && IsIdentByte(lx.src[lx.pos]) {
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
	t.End = lx.pos
	return t, true
}

// skip passes whitespace and comments; it reports whether a token follows.
func (lx *Lexer) skip() bool {
	for lx.pos < len(lx.src) {
		c := lx.src[lx.pos]
		switch {
		case IsSpace(c):
			lx.pos++
		case c == '#':
			lx.lineComment()
		case c == '-' && lx.peek(1) == '-' && lx.mode.Flavor == TiDB:
			// TiDB: "--" then a Unicode space (of the byte as a rune:
			// U+0085 and U+00A0 count), or the end of the text.
			n := lx.peek(2)
			if lx.pos+2 >= len(lx.src) || IsSpace(n) || n == 0x85 || n == 0xa0 {
				lx.lineComment()
			} else {
				return true
			}
		case c == '-' && lx.peek(1) == '-':
			// MySQL, MariaDB: "--" then a space or control character
			// (my_isspace, my_iscntrl), or the end of the text.
			n := lx.peek(2)
			if lx.pos+2 >= len(lx.src) || IsSpace(n) || n < 0x20 || n == 0x7f {
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

func (lx *Lexer) lineComment() {
	start := lx.pos
	for lx.pos < len(lx.src) && lx.src[lx.pos] != '\n' {
		lx.pos++
	}
	lx.blank(start, lx.pos)
}

// blockComment handles "/*" at lx.pos: a plain comment, an optimizer hint
// (a comment to us), or an executable comment, live or dead.
func (lx *Lexer) blockComment() {
	start := lx.pos
	if lx.execStart >= 0 {
		// The servers differ (and changed over releases) on comments
		// nested in a live executable comment.
		lx.uncertain(start, "a comment nested inside an executable comment")
	}
	p := start + 2
	maria := false
	bang := false
	switch lx.mode.Flavor {
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
	for digits < 6 && p+digits < len(lx.src) && IsDigit(lx.src[p+digits]) {
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
func (lx *Lexer) versionLive(start, p, digits int, maria bool) (bool, int) {
	v := func(n int) uint32 {
		var x uint32
		for i := 0; i < n; i++ {
			x = x*10 + uint32(lx.src[p+i]-'0')
		}
		return x
	}
	srv := lx.mode
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
		sixth := digits == 6 && p+6 < len(lx.src) && IsSpace(lx.src[p+6])
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
func (lx *Lexer) openExec(start, content int) {
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
func (lx *Lexer) skipComment(start, p int, nest bool) {
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
func (lx *Lexer) scanString(q byte) {
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
		if !lx.mode.NoBackslash {
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
func (lx *Lexer) scanQuoted(q byte) {
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
func (lx *Lexer) scanQuotedDigits(ok func(byte) bool) {
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

func (lx *Lexer) scanIdentBytes() {
	for lx.pos < len(lx.src) && IsIdentByte(lx.src[lx.pos]) {
		lx.pos++
	}
}

// checkIdentSep: an identifier directly followed by '.' and an identifier
// byte makes the server read the next word as an identifier.
func (lx *Lexer) checkIdentSep() {
	if lx.pos+1 < len(lx.src) && lx.src[lx.pos] == '.' && IsIdentByte(lx.src[lx.pos+1]) {
		lx.sepDot = true
	}
}

// scanVariable reads @x, @'x', @@x, @@session.x ...
func (lx *Lexer) scanVariable() Kind {
	p := lx.pos + 1
	if p < len(lx.src) && lx.src[p] == '@' {
		p++
		p = lx.scanVarName(p, true)
		lx.pos = p
		return SysVar
	}
	if p >= len(lx.src) {
		lx.pos = p
		return Op
	}
	switch c := lx.src[p]; {
	case c == '\'':
		lx.pos = p
		lx.scanString('\'')
	case c == '"':
		lx.pos = p
		if lx.mode.ANSIQuotes {
			lx.scanQuoted('"')
		} else {
			lx.scanString('"')
		}
	case c == '`':
		lx.pos = p
		lx.scanQuoted('`')
	case IsIdentByte(c) || c == '.':
		for p < len(lx.src) && (IsIdentByte(lx.src[p]) || lx.src[p] == '.') {
			p++
		}
		lx.pos = p
	default:
		lx.pos = p
		return Op
	}
	return UserVar
}

// scanVarName reads a system variable name after "@@": a word or quoted
// identifier, optionally after "global." / "session." / "local.".
func (lx *Lexer) scanVarName(p int, allowScope bool) int {
	if p < len(lx.src) && lx.src[p] == '`' {
		save := lx.pos
		lx.pos = p
		lx.scanQuoted('`')
		p = lx.pos
		lx.pos = save
	} else {
		for p < len(lx.src) && IsIdentByte(lx.src[p]) {
			p++
		}
	}
	if allowScope && p+1 < len(lx.src) && lx.src[p] == '.' && (IsIdentByte(lx.src[p+1]) || lx.src[p+1] == '`') {
		return lx.scanVarName(p+1, false)
	}
	return p
}

// scanNumberOrIdent reads what starts with a digit: a number, a hex or bit
// number, or an identifier that starts with digits (1abc).
func (lx *Lexer) scanNumberOrIdent() Kind {
	start := lx.pos
	if lx.src[start] == '0' && (lx.peek(1) == 'x' || lx.peek(1) == 'b') {
		hex := lx.peek(1) == 'x'
		p := start + 2
		for p < len(lx.src) && (hex && IsHexDigit(lx.src[p]) || !hex && (lx.src[p] == '0' || lx.src[p] == '1')) {
			p++
		}
		if p > start+2 && (p >= len(lx.src) || !IsIdentByte(lx.src[p])) {
			lx.pos = p
			if hex {
				return HexString
			}
			return BitString
		}
	}
	p := start
	for p < len(lx.src) && IsDigit(lx.src[p]) {
		p++
	}
	if p < len(lx.src) && IsIdentByte(lx.src[p]) {
		c := lx.src[p]
		if c == 'e' || c == 'E' {
			q := p + 1
			if q < len(lx.src) && (lx.src[q] == '+' || lx.src[q] == '-') {
				q++
			}
			if q < len(lx.src) && IsDigit(lx.src[q]) {
				for q < len(lx.src) && IsDigit(lx.src[q]) {
					q++
				}
				lx.pos = q
				return Number
			}
		}
		// An identifier that starts with digits.
		lx.pos = p
		lx.scanIdentBytes()
		lx.checkIdentSep()
		return Word
	}
	lx.pos = p
	if p < len(lx.src) && lx.src[p] == '.' {
		lx.pos++
		lx.scanFraction()
	}
	return Number
}

// scanFraction reads the digits after a decimal point and an exponent.
func (lx *Lexer) scanFraction() {
	for lx.pos < len(lx.src) && IsDigit(lx.src[lx.pos]) {
		lx.pos++
	}
	if lx.pos < len(lx.src) && (lx.src[lx.pos] == 'e' || lx.src[lx.pos] == 'E') {
		q := lx.pos + 1
		if q < len(lx.src) && (lx.src[q] == '+' || lx.src[q] == '-') {
			q++
		}
		if q < len(lx.src) && IsDigit(lx.src[q]) {
			for q < len(lx.src) && IsDigit(lx.src[q]) {
				q++
			}
			lx.pos = q
		}
	}
}

// scanOperator reads one operator or punctuation token.
func (lx *Lexer) scanOperator() {
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

// ScanStatement is the first, counting pass over the statement that starts
// at pos: the offset of its terminating ';' (or len(src)), how many live
// tokens it has and how deep its parentheses nest. It neither allocates
// nor blanks, so that a caller's limits are checked before anything is
// kept per token.
func ScanStatement(src []byte, pos int, mode Mode) (end, count, depth int) {
	lx := NewLexer(src, pos, mode, nil)
	open := 0
	for {
		t, ok := lx.Next()
		if !ok {
			return len(src), count, depth
		}
		if t.Kind == Op && t.End-t.Start == 1 {
			switch src[t.Start] {
			case ';':
				return t.Start, count, depth
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

// ScanRest is ScanStatement to the end of src, ';' tokens included: a
// compound statement or stored program runs up to where the server's
// grammar ends it, which only its tokens tell.
func ScanRest(src []byte, pos int, mode Mode) (count, depth int) {
	lx := NewLexer(src, pos, mode, nil)
	open := 0
	for {
		t, ok := lx.Next()
		if !ok {
			return count, depth
		}
		if t.Kind == Op && t.End-t.Start == 1 {
			switch src[t.Start] {
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

// LexStatement lexes one statement from pos: its tokens, the offset of its
// terminating ';' (or len(src)), and the first lexing issue. count is the
// number of tokens ScanStatement found: the slice is allocated once, at
// that size.
func LexStatement(src []byte, pos int, mode Mode, norm []byte, count int) ([]Token, int, string, int) {
	lx := NewLexer(src, pos, mode, norm)
	var toks []Token
	if count > 0 {
		toks = make([]Token, 0, count)
	}
	for {
		t, ok := lx.Next()
		if !ok {
			return toks, len(src), lx.issue, lx.issuePos
		}
		if t.Kind == Op && t.End-t.Start == 1 && src[t.Start] == ';' {
			return toks, t.Start, lx.issue, lx.issuePos
		}
		toks = append(toks, t)
	}
}
