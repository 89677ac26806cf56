package catalog

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
)

// Bodies (triggers, routines, events), view definitions and SHOW CREATE
// TABLE texts are read with fenceproxy's one tokenizer (internal/sqlread):
// the server's rules for its flavor and version (comments, executable
// comments, names that start with digits) and the sql_mode each body was
// created under. Where the tokenizer cannot be sure how the server reads a
// body, the body counts as unreadable: it may write every protected table.

// token is a token of a body with the text the catalog compares: a name as
// the server reads it (a quoted one unquoted), else the token's bytes.
type token struct {
	sqlread.Token
	text string
}

// is: a keyword (a word not after "ident.", which is always a name).
func (t token) is(kw string) bool {
	return t.Kind == sqlread.Word && !t.AfterDot && eqFold(t.text, kw)
}

// op: the one-byte operator or punctuation c.
func (t token) op(c byte) bool { return t.Kind == sqlread.Op && len(t.text) == 1 && t.text[0] == c }

func (t token) name() bool { return t.Kind == sqlread.Word || t.Kind == sqlread.QuotedIdent }

// readMode is how the server reads one body.
type readMode struct {
	lex sqlread.Mode
	// oracle: sql_mode ORACLE, where a procedure is called without CALL.
	oracle bool
}

// server is the tokenizer's mode for the snapshot's server. An unknown
// server (no VERSION() read) reads as MariaDB of an unknown version: a
// body with a versioned executable comment is then unreadable.
func (s *Snapshot) server() sqlread.Mode {
	if s.Server == "" {
		return sqlread.Mode{Flavor: sqlread.MariaDB}
	}
	f, v := sqlread.ParseVersion(s.Server)
	return sqlread.Mode{Flavor: f, Version: v}
}

// lex splits text into tokens. norm is text with every comment blanked as
// the server skips it (dead executable comments whole, the markers of
// live ones), at the same offsets: what the parser reads. ok is false (no
// tokens) past max tokens (0: no limit); issue is the first reason the
// server's reading of text is not certain, or "".
func lex(text string, m sqlread.Mode, max int) (toks []token, norm, issue string, ok bool) {
	nb := []byte(text)
	lx := sqlread.NewLexer([]byte(text), 0, m, nb)
	for {
		t, more := lx.Next()
		if !more {
			return toks, string(nb), lx.Issue(), true
		}
		if max > 0 && len(toks) >= max {
			return nil, "", "", false
		}
		tk := token{Token: t, text: text[t.Start:t.End]}
		if t.Kind == sqlread.QuotedIdent {
			tk.text = sqlread.UnquoteIdent(tk.text)
		}
		toks = append(toks, tk)
	}
}

func eqFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerByte(a[i]) != lowerByte(b[i]) {
			return false
		}
	}
	return true
}

func lower(s string) string { return strings.ToLower(s) }
