package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// The rewriter reads SQL with fenceproxy's one tokenizer (internal/sqlread),
// under the session's reading mode.

// lexMode is how a statement of the session reads: the lexer's mode and
// the server, whose family also decides the fence shape.
type lexMode struct {
	ansiQuotes  bool // sql_mode ANSI_QUOTES: "x" is an identifier
	noBackslash bool // sql_mode NO_BACKSLASH_ESCAPES
	server      Server
}

// lex is the tokenizer's mode for m.
func (m lexMode) lex() sqlread.Mode {
	return sqlread.Mode{ANSIQuotes: m.ansiQuotes, NoBackslash: m.noBackslash, Flavor: m.server.Flavor, Version: m.server.Version}
}

// newLexer reads src from its start under mode; norm as for sqlread.NewLexer.
func newLexer(src []byte, mode lexMode, norm []byte) sqlread.Lexer {
	return sqlread.NewLexer(src, 0, mode.lex(), norm)
}
