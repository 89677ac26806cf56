package rewrite

import (
	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// parseOne parses one statement of normalized text (comments blanked)
// under the given lexing mode, with fenceproxy's one parser pool. The AST's
// structure is all the rewriter uses; positions come from its own tokens.
func parseOne(text string, mode lexMode) (ast.StmtNode, error) {
	return sqlread.Parse(text, mode.lex())
}
