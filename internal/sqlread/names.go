package sqlread

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// TableNames returns every TableName in the tree under n, those of
// subqueries, CTEs and derived tables included, in the order the tree
// holds them.
func TableNames(n ast.Node) []*ast.TableName {
	if n == nil {
		return nil
	}
	var v tableNames
	n.Accept(&v)
	return v.names
}

type tableNames struct{ names []*ast.TableName }

func (v *tableNames) Enter(n ast.Node) (ast.Node, bool) {
	if tn, ok := n.(*ast.TableName); ok {
		v.names = append(v.names, tn)
	}
	return n, false
}

func (v *tableNames) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// UnquoteIdent returns the name a QuotedIdent token (`x`, or "x" under
// ANSI_QUOTES) means: without its quotes, a doubled quote read as one.
// An unterminated one (which runs to the end of the text) is the rest of
// the text.
func UnquoteIdent[T ~string | ~[]byte](b T) string {
	if len(b) == 0 {
		return ""
	}
	q := b[0]
	k := 1
	for k < len(b) && b[k] != q {
		k++
	}
	if k >= len(b)-1 {
		// No quote inside: terminated at the end, or not at all.
		return string(b[1:k])
	}
	var out strings.Builder
	out.Grow(len(b))
	for i := 1; i < len(b); i++ {
		if b[i] == q {
			if i+1 < len(b) && b[i+1] == q {
				out.WriteByte(q)
				i++
				continue
			}
			break
		}
		out.WriteByte(b[i])
	}
	return out.String()
}

// UnquoteString returns the value of a String token ('x', or "x" without
// ANSI_QUOTES) under NO_BACKSLASH_ESCAPES or not.
func UnquoteString(b []byte, noBackslash bool) string {
	if len(b) < 2 {
		return ""
	}
	q := b[0]
	inner := b[1 : len(b)-1]
	var out strings.Builder
	out.Grow(len(inner))
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if c == '\\' && !noBackslash && i+1 < len(inner) {
			i++
			switch n := inner[i]; n {
			case 'n':
				out.WriteByte('\n')
			case 't':
				out.WriteByte('\t')
			case 'r':
				out.WriteByte('\r')
			case 'b':
				out.WriteByte('\b')
			case '0':
				out.WriteByte(0)
			case 'Z':
				out.WriteByte(0x1a)
			case '%', '_':
				// Kept with the backslash, for LIKE patterns.
				out.WriteByte('\\')
				out.WriteByte(n)
			default:
				out.WriteByte(n)
			}
			continue
		}
		if c == q && i+1 < len(inner) && inner[i+1] == q {
			i++
		}
		out.WriteByte(c)
	}
	return out.String()
}
