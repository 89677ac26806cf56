package rewrite

import (
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// INSERT ... SELECT: the fence goes into every SELECT block that produces
// rows for the insert (the leaves of the query's UNION / EXCEPT /
// INTERSECT tree, parenthesized or not), not into subqueries, derived
// tables or CTE bodies. The blocks are found in the tokens by a small
// reading of the query grammar and matched, in order, with the parser's
// leaves.

// qblock is one leaf block of a query: tokens [start, end].
type qblock struct {
	start, end int
	table      bool // TABLE t (MySQL 8)
}

// queryReader walks the query expression's tokens.
type queryReader struct {
	in     *stmtIn
	d      []int
	blocks []qblock
	bad    bool
}

// spliceQuery fences the query of INSERT ... SELECT starting at token i.
func (in *stmtIn) spliceQuery(sel ast.ResultSetNode, i int, d []int, fence string) ([]edit, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in this INSERT ... SELECT (its blocks did " +
		"not match what the parser read); simplify it or report it as a fenceproxy bug"
	qr := &queryReader{in: in, d: d}
	next := qr.queryExpr(i)
	if qr.bad {
		return nil, mismatch
	}
	// The query ends the statement or ON DUPLICATE KEY UPDATE follows.
	if next != len(in.toks) && !(in.kw(next, "on") && in.kw(next+1, "duplicate")) {
		return nil, mismatch
	}
	var leaves []*ast.SelectStmt
	if !collectLeaves(sel, &leaves) || len(leaves) != len(qr.blocks) {
		return nil, mismatch
	}
	var edits []edit
	for k, b := range qr.blocks {
		es, why := in.fenceBlock(b, leaves[k], fence)
		if why != "" {
			return nil, why
		}
		edits = append(edits, es...)
	}
	return edits, ""
}

// collectLeaves lists the leaf SELECT blocks of a query in text order.
func collectLeaves(n ast.Node, out *[]*ast.SelectStmt) bool {
	switch x := n.(type) {
	case *ast.SelectStmt:
		*out = append(*out, x)
		return true
	case *ast.SetOprStmt:
		if x.SelectList == nil {
			return false
		}
		for _, s := range x.SelectList.Selects {
			if !collectLeaves(s, out) {
				return false
			}
		}
		return true
	case *ast.SetOprSelectList:
		for _, s := range x.Selects {
			if !collectLeaves(s, out) {
				return false
			}
		}
		return true
	}
	return false
}

// queryExpr: [WITH ...] body [ORDER BY ...] [LIMIT ...]; returns the index
// after it.
func (qr *queryReader) queryExpr(i int) int {
	in := qr.in
	if in.kw(i, "with") {
		i++
		if in.kw(i, "recursive") {
			i++
		}
		for {
			if i >= len(in.toks) || in.toks[i].kind != tkWord && in.toks[i].kind != tkQuotedIdent {
				qr.bad = true
				return i
			}
			i++
			if in.op(i, "(") {
				i = in.closeParen(i) + 1
			}
			if !in.kw(i, "as") || !in.op(i+1, "(") {
				qr.bad = true
				return i
			}
			i = in.closeParen(i+1) + 1
			if i == 0 {
				qr.bad = true
				return i
			}
			if in.op(i, ",") {
				i++
				continue
			}
			break
		}
	}
	depth := -1
	if i < len(in.toks) {
		depth = qr.d[i]
	}
	i = qr.queryBody(i)
	// ORDER BY / LIMIT / locking of a parenthesized or set-operation query:
	// skip to the end of this query expression.
	for i < len(in.toks) && !qr.bad {
		if qr.d[i] < depth || in.op(i, ")") && qr.d[i] == depth-1 {
			break
		}
		if qr.d[i] == depth && (in.kw(i, "on") && in.kw(i+1, "duplicate")) {
			break
		}
		if qr.d[i] == depth && (in.kw(i, "union") || in.kw(i, "except") || in.kw(i, "intersect")) {
			qr.bad = true
			break
		}
		i++
	}
	return i
}

// queryBody: primary { UNION|EXCEPT|INTERSECT [ALL|DISTINCT] primary }.
func (qr *queryReader) queryBody(i int) int {
	in := qr.in
	for {
		i = qr.primary(i)
		if qr.bad {
			return i
		}
		if in.kw(i, "union") || in.kw(i, "except") || in.kw(i, "intersect") {
			i++
			if in.kw(i, "all") || in.kw(i, "distinct") {
				i++
			}
			continue
		}
		return i
	}
}

// primary: ( query ) | SELECT block | TABLE block.
func (qr *queryReader) primary(i int) int {
	in := qr.in
	switch {
	case in.op(i, "("):
		c := in.closeParen(i)
		if c < 0 {
			qr.bad = true
			return i
		}
		if next := qr.queryExpr(i + 1); next != c {
			qr.bad = true
			return i
		}
		return c + 1
	case in.kw(i, "select"), in.kw(i, "table"):
		depth := qr.d[i]
		j := i + 1
		for ; j < len(in.toks); j++ {
			if qr.d[j] < depth {
				break
			}
			if qr.d[j] == depth && (in.kw(j, "union") || in.kw(j, "except") || in.kw(j, "intersect") ||
				in.kw(j, "on") && in.kw(j+1, "duplicate")) {
				break
			}
		}
		qr.blocks = append(qr.blocks, qblock{start: i, end: j - 1, table: in.kw(i, "table")})
		return j
	}
	qr.bad = true
	return i
}

// aggregates finds aggregate functions outside subqueries.
type aggregates struct{ found bool }

func (v *aggregates) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.SubqueryExpr:
		return n, true
	case *ast.AggregateFuncExpr:
		v.found = true
	}
	return n, v.found
}

func (v *aggregates) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// aggregatesWithoutGroup: the block returns one row even when its WHERE
// is false.
func aggregatesWithoutGroup(sel *ast.SelectStmt) bool {
	if sel.GroupBy != nil {
		return false
	}
	var v aggregates
	if sel.Fields != nil {
		for _, f := range sel.Fields.Fields {
			if f.Expr != nil {
				f.Expr.Accept(&v)
			}
		}
	}
	if sel.Having != nil && sel.Having.Expr != nil {
		sel.Having.Expr.Accept(&v)
	}
	if sel.OrderBy != nil {
		for _, it := range sel.OrderBy.Items {
			it.Expr.Accept(&v)
		}
	}
	return v.found
}

// clause words of a SELECT block, in their grammatical order.
var blockClauses = []string{"from", "where", "group", "having", "window", "order", "limit", "into", "for", "lock"}

// fenceBlock places the fence in one SELECT (or TABLE) block.
func (in *stmtIn) fenceBlock(b qblock, sel *ast.SelectStmt, fence string) ([]edit, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in a SELECT block of this INSERT ... SELECT; " +
		"simplify it or report it as a fenceproxy bug"
	d := in.depths()
	depth := d[b.start]
	if b.table {
		if sel.Kind != ast.SelectStmtKindTable {
			return nil, mismatch
		}
		next, ok := in.skipName(b.start + 1)
		if !ok || next-1 > b.end {
			return nil, mismatch
		}
		if next <= b.end && !in.kw(next, "order") && !in.kw(next, "limit") {
			return nil, mismatch
		}
		return []edit{
			{pos: in.toks[b.start].start, end: in.toks[b.start].end, text: "SELECT * FROM"},
			{pos: in.toks[next-1].end, end: in.toks[next-1].end, text: " WHERE " + fence},
		}, ""
	}
	if sel.Kind != ast.SelectStmtKindSelect {
		return nil, mismatch
	}
	// Clause keywords at the block's depth, in order.
	pos := make(map[string]int, len(blockClauses))
	last := -1
	for j := b.start + 1; j <= b.end; j++ {
		if d[j] != depth || in.toks[j].kind != tkWord {
			continue
		}
		for k, w := range blockClauses {
			if !in.kw(j, w) {
				continue
			}
			if (w == "group" || w == "order") && !in.kw(j+1, "by") {
				continue
			}
			if w == "for" && in.kw(j-1, "lock") {
				continue
			}
			if _, dup := pos[w]; dup || k < last {
				return nil, mismatch
			}
			pos[w] = j
			last = k
		}
	}
	has := func(w string) bool { _, ok := pos[w]; return ok }
	fromDual := has("from") && in.kw(pos["from"]+1, "dual") && sel.From == nil
	if has("from") != (sel.From != nil || fromDual) || has("where") != (sel.Where != nil) ||
		has("group") != (sel.GroupBy != nil) || has("having") != (sel.Having != nil) ||
		has("window") != (len(sel.WindowSpecs) > 0) {
		return nil, mismatch
	}
	// before returns the token that ends the part before the first of the
	// given clauses (or the block's last token).
	before := func(ws ...string) int {
		end := b.end
		for _, w := range ws {
			if j, ok := pos[w]; ok && j-1 < end {
				end = j - 1
			}
		}
		return end
	}
	at := func(j int, text string) edit { return edit{pos: in.toks[j].end, end: in.toks[j].end, text: text} }
	open := func(j int) edit { return edit{pos: in.toks[j+1].start, end: in.toks[j+1].start, text: "("} }
	var edits []edit
	prefix := ""
	if !has("from") {
		// A block without FROM: FROM DUAL right after the select list.
		prefix = " FROM DUAL"
		if pos := before(blockClauses...); pos > b.start {
			if has("where") {
				edits = append(edits, at(pos, prefix))
				prefix = ""
			}
		} else {
			return nil, mismatch
		}
	}
	if !aggregatesWithoutGroup(sel) {
		if has("where") {
			end := before("group", "having", "window", "order", "limit", "into", "for", "lock")
			if end <= pos["where"] {
				return nil, mismatch
			}
			edits = append(edits, open(pos["where"]), at(end, ") AND "+fence))
		} else {
			end := before("group", "having", "window", "order", "limit", "into", "for", "lock")
			edits = append(edits, at(end, prefix+" WHERE "+fence))
		}
		return edits, ""
	}
	if prefix != "" {
		end := before(blockClauses...)
		edits = append(edits, at(end, prefix))
	}
	if has("having") {
		end := before("window", "order", "limit", "into", "for", "lock")
		if end <= pos["having"] {
			return nil, mismatch
		}
		edits = append(edits, open(pos["having"]), at(end, ") AND "+fence))
	} else {
		end := before("window", "order", "limit", "into", "for", "lock")
		edits = append(edits, at(end, " HAVING "+fence))
	}
	return edits, ""
}
