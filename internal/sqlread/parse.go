package sqlread

import (
	"sync"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/mysql"

	// The parser's light value package: literals in the AST without the
	// full TiDB module.
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"
)

// parsers: a Parser is not safe for concurrent use and costs a few hundred
// KB to build, so each goroutine borrows one. This is fenceproxy's one
// pool of them.
var parsers = sync.Pool{New: func() any { return parser.New() }}

// maxPooledText: a parser that read a longer text is dropped, not pooled.
// Its value stack grew to the text's deepest nesting and stays that size
// (measured: 40,000 NOTs left 8 MB in it), and a pooled parser lives as
// long as it keeps being used.
const maxPooledText = 16 << 10

// Parse parses text, which must hold exactly one statement, with the TiDB
// parser under mode's sql_mode flags and grammar (MariaDB's extensions for
// Flavor MariaDB). Callers that splice positions pass text whose comments
// a Lexer blanked; the AST's own offsets are not used.
func Parse(text string, mode Mode) (n ast.StmtNode, err error) {
	p := parsers.Get().(*parser.Parser)
	defer func() {
		// The parser's light value package panics on some literals (huge
		// decimals): such a statement counts as unreadable. The parser is
		// not reused after a panic.
		if r := recover(); r != nil {
			n, err = nil, ErrPanic
			return
		}
		// The parser keeps its value stack between parses, and the next
		// parse sets text offsets on whatever expressions that stack still
		// points to: nodes of the AST returned here, which the caller goes
		// on reading (a data race when another goroutine borrows the
		// parser, and wrong offsets in the same goroutine). Reset clears
		// the stack.
		p.Reset()
		if len(text) <= maxPooledText {
			parsers.Put(p)
		}
	}()
	var m mysql.SQLMode
	if mode.ANSIQuotes {
		m |= mysql.ModeANSIQuotes
	}
	if mode.NoBackslash {
		m |= mysql.ModeNoBackslashEscapes
	}
	p.SetSQLMode(m)
	p.SetMariaDB(mode.Flavor == MariaDB)
	stmts, _, err := p.Parse(text, "", "")
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		return nil, ErrNotOne
	}
	return stmts[0], nil
}

// ParseError is an error of Parse's own (not the parser's).
type ParseError string

func (e ParseError) Error() string { return string(e) }

const (
	ErrNotOne = ParseError("not exactly one statement")
	ErrPanic  = ParseError("the parser failed on this statement")
)
