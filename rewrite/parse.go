package rewrite

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
// KB to build, so each goroutine borrows one.
var parsers = sync.Pool{New: func() any { return parser.New() }}

// maxPooledText: a parser that read a longer text is dropped, not pooled.
// Its value stack grew to the text's deepest nesting and stays that size
// (measured: 40,000 NOTs left 8 MB in it), and a pooled parser lives as
// long as it keeps being used.
const maxPooledText = 16 << 10

// parseOne parses one statement of normalized text (comments blanked)
// under the given lexing mode. The AST's structure is all the rewriter uses;
// positions come from its own tokens.
func parseOne(text string, mode lexMode) (n ast.StmtNode, err error) {
	p := parsers.Get().(*parser.Parser)
	defer func() {
		// The parser's light value package panics on some literals (huge
		// decimals): such a statement counts as unreadable. The parser is
		// not reused after a panic.
		if r := recover(); r != nil {
			n, err = nil, errPanic
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
	if mode.ansiQuotes {
		m |= mysql.ModeANSIQuotes
	}
	if mode.noBackslash {
		m |= mysql.ModeNoBackslashEscapes
	}
	p.SetSQLMode(m)
	p.SetMariaDB(mode.server.Flavor == MariaDB)
	stmts, _, err := p.Parse(text, "", "")
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		return nil, errNotOne
	}
	return stmts[0], nil
}

type parseError string

func (e parseError) Error() string { return string(e) }

const (
	errNotOne = parseError("not exactly one statement")
	errPanic  = parseError("the parser failed on this statement")
)
