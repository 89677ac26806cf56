package catalog

// A small SQL lexer for stored program bodies and view definitions as the
// server stores them. It only needs to find statement boundaries, words,
// quoted names and punctuation: strings, numbers and comments are skipped
// (the contents of executable comments /*! ... */ are code and are lexed).

type tokKind uint8

const (
	tkWord   tokKind = iota + 1 // unquoted identifier or keyword
	tkQIdent                    // `quoted` (or "quoted" under ANSI_QUOTES)
	tkString                    // a string literal
	tkNumber
	tkOp  // one byte of punctuation
	tkVar // @user or @@system variable
)

type token struct {
	kind  tokKind
	text  string // word: as written; qident: unquoted; op: the byte
	start int    // byte offset in the body
	end   int
}

type lexMode struct {
	ansiQuotes  bool
	noBackslash bool
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// lex splits text into tokens. An unterminated string, quoted name or
// comment ends the text (the rest is one token of its kind).
func lex(text string, m lexMode) []token {
	toks, _ := lexMax(text, m, 0)
	return toks
}

// lexMax is lex that gives up (ok false, no tokens) past max tokens; 0 = no
// limit.
func lexMax(text string, m lexMode, max int) (_ []token, ok bool) {
	var toks []token
	i := 0
	for i < len(text) {
		if max > 0 && len(toks) > max {
			return nil, false
		}
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '#' || c == '-' && i+2 <= len(text) && text[i+1] == '-' && (i+2 == len(text) || text[i+2] <= ' '):
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			j := i + 2
			exec := false
			if j < len(text) && text[j] == '!' {
				exec, j = true, j+1
			} else if j+1 < len(text) && (text[j] == 'M' || text[j] == 'm') && text[j+1] == '!' {
				exec, j = true, j+2
			}
			if exec {
				// /*!50100 code */: the version digits, then code up to
				// the closing "*/", which is dropped where it is met.
				for j < len(text) && text[j] >= '0' && text[j] <= '9' {
					j++
				}
				i = j
				continue
			}
			k := indexFrom(text, j, "*/")
			if k < 0 {
				i = len(text)
			} else {
				i = k + 2
			}
		case c == '*' && i+1 < len(text) && text[i+1] == '/':
			i += 2 // the end of an executable comment
		case c == '\'' || c == '"' && !m.ansiQuotes:
			j := skipQuoted(text, i, c, !m.noBackslash)
			toks = append(toks, token{kind: tkString, text: text[i:j], start: i, end: j})
			i = j
		case c == '`' || c == '"' && m.ansiQuotes:
			j := skipQuoted(text, i, c, false)
			toks = append(toks, token{kind: tkQIdent, text: unquote(text[i:j], c), start: i, end: j})
			i = j
		case c == '@':
			j := i + 1
			for j < len(text) && text[j] == '@' {
				j++
			}
			if j < len(text) && (text[j] == '`' || text[j] == '\'' || text[j] == '"') {
				j = skipQuoted(text, j, text[j], text[j] != '`' && !m.noBackslash)
			} else {
				for j < len(text) && (isIdentByte(text[j]) || text[j] == '.') {
					j++
				}
			}
			toks = append(toks, token{kind: tkVar, text: text[i:j], start: i, end: j})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(text) && (isIdentByte(text[j]) || text[j] == '.') {
				j++
			}
			kind := tkNumber
			for k := i; k < j; k++ {
				if d := text[k]; !(d >= '0' && d <= '9' || d == '.' || d == 'e' || d == 'E' || d == 'x' || d == 'X' || d == 'b' || d == 'B' || d >= 'a' && d <= 'f' || d >= 'A' && d <= 'F') {
					kind = tkWord // 1abc is a name
					break
				}
			}
			if kind == tkWord {
				// A name that starts with digits has no dots in it.
				j = i
				for j < len(text) && isIdentByte(text[j]) {
					j++
				}
			}
			toks = append(toks, token{kind: kind, text: text[i:j], start: i, end: j})
			i = j
		case isIdentByte(c):
			j := i
			for j < len(text) && isIdentByte(text[j]) {
				j++
			}
			toks = append(toks, token{kind: tkWord, text: text[i:j], start: i, end: j})
			i = j
		default:
			toks = append(toks, token{kind: tkOp, text: text[i : i+1], start: i, end: i + 1})
			i++
		}
	}
	if max > 0 && len(toks) > max {
		return nil, false
	}
	return toks, true
}

func indexFrom(s string, from int, sub string) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// skipQuoted returns the offset after the quoted text starting at i.
func skipQuoted(s string, i int, q byte, backslash bool) int {
	j := i + 1
	for j < len(s) {
		switch s[j] {
		case '\\':
			if backslash {
				j += 2
				continue
			}
		case q:
			if j+1 < len(s) && s[j+1] == q {
				j += 2
				continue
			}
			return j + 1
		}
		j++
	}
	return len(s)
}

func unquote(s string, q byte) string {
	if len(s) >= 2 && s[len(s)-1] == q {
		s = s[1 : len(s)-1]
	} else if len(s) >= 1 {
		s = s[1:]
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == q && i+1 < len(s) && s[i+1] == q {
			i++
		}
	}
	return string(out)
}

func (t token) is(kw string) bool { return t.kind == tkWord && eqFold(t.text, kw) }
func (t token) op(c byte) bool    { return t.kind == tkOp && t.text[0] == c }
func (t token) name() bool        { return t.kind == tkWord || t.kind == tkQIdent }

func eqFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x >= 'A' && x <= 'Z' {
			x += 'a' - 'A'
		}
		if y >= 'A' && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
