package rewrite

import (
	"strings"
	"sync"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// Every fenced statement is checked before it is sent: the rewritten text
// is lexed and parsed again, and its AST must be the original's with
// exactly the fence added where it belongs: the fence conditions ANDed at
// the top of the WHERE (or HAVING) of every place that selects the rows to
// write, the original condition intact under them, every other part of the
// statement unchanged, the same tables written, the same number of '?'
// placeholders. Any difference means the splice went wrong: the statement
// is refused, never sent.

const verifyFailed = "fenceproxy could not verify the fenced statement (report this as a fenceproxy bug, with the statement); " +
	"it was not sent"

// fenceTexts caches the parsed-and-restored form of each fence condition.
type fenceTexts struct {
	mu sync.Mutex
	m  map[fenceCacheKey]string
}

type fenceCacheKey struct {
	key    fenceKey
	flavor Flavor
}

// canonical returns the restored text of the fence condition for k.
func (e *Engine) canonical(k fenceKey, mode lexMode) (string, bool) {
	ck := fenceCacheKey{k, mode.server.Flavor}
	e.fences.mu.Lock()
	s, ok := e.fences.m[ck]
	e.fences.mu.Unlock()
	if ok {
		return s, true
	}
	text := "SELECT 1 FROM DUAL WHERE " + e.fenceSQL([]fenceKey{k}, mode.server.Flavor)
	n, err := parseOne(text, lexMode{server: mode.server})
	if err != nil {
		return "", false
	}
	sel, ok := n.(*ast.SelectStmt)
	if !ok || sel.Where == nil {
		return "", false
	}
	s, ok = restore(sel.Where)
	if !ok {
		return "", false
	}
	e.fences.mu.Lock()
	if e.fences.m == nil {
		e.fences.m = make(map[fenceCacheKey]string)
	}
	e.fences.m[ck] = s
	e.fences.mu.Unlock()
	return s, true
}

func restore(n ast.Node) (string, bool) {
	var sb strings.Builder
	if err := n.Restore(format.NewRestoreCtx(format.DefaultRestoreFlags, &sb)); err != nil {
		return "", false
	}
	return sb.String(), true
}

// verify re-reads the statement with the edits applied; it returns "" if
// the result is exactly the original plus the fence.
func (in *stmtIn) verify(orig ast.StmtNode, explained bool, edits []edit, targets []Target) string {
	e := in.pc.e
	// The rewritten statement alone, in its own coordinates.
	local := make([]edit, len(edits))
	for i, ed := range edits {
		if ed.pos < in.start || ed.end > in.end {
			return verifyFailed
		}
		local[i] = edit{pos: ed.pos - in.start, end: ed.end - in.start, text: ed.text}
	}
	text := applyEdits(in.raw(), local)
	norm := make([]byte, len(text))
	copy(norm, text)
	lx := newLexer(text, in.st.mode, norm)
	params := 0
	for {
		t, ok := lx.next()
		if !ok {
			break
		}
		if t.kind == tkParam {
			params++
		}
		if t.kind == tkOp && text[t.start] == ';' {
			return verifyFailed
		}
	}
	if lx.issue != "" || params != in.params() {
		return verifyFailed
	}
	n, err := parseOne(string(norm), in.st.mode)
	if err != nil {
		return verifyFailed
	}
	// The same statement kind, inside EXPLAIN or not.
	if y, ok := n.(*ast.ExplainStmt); ok != explained {
		return verifyFailed
	} else if ok {
		n = y.Stmt
	}
	keys := e.fenceKeys(targets)
	var fences []string
	for _, k := range keys {
		f, ok := e.canonical(k, in.st.mode)
		if !ok {
			return verifyFailed
		}
		fences = append(fences, f)
	}
	sub := &stmtIn{pc: in.pc, st: in.st}
	switch o := orig.(type) {
	case *ast.UpdateStmt:
		x, ok := n.(*ast.UpdateStmt)
		if !ok || !peelFence(&x.Where, o.Where, fences) {
			return verifyFailed
		}
		ts, r := sub.updateTargets(x)
		if r != nil || !sameTargets(ts, targets) {
			return verifyFailed
		}
	case *ast.DeleteStmt:
		x, ok := n.(*ast.DeleteStmt)
		if !ok || !peelFence(&x.Where, o.Where, fences) {
			return verifyFailed
		}
		ts, r := sub.deleteTargets(x)
		if r != nil || !sameTargets(ts, targets) {
			return verifyFailed
		}
	case *ast.InsertStmt:
		x, ok := n.(*ast.InsertStmt)
		if !ok || !sameTargets(sub.insertTarget(x), targets) || !verifyInsert(o, x, fences) {
			return verifyFailed
		}
	default:
		return verifyFailed
	}
	// With the fence taken out, the statement restores exactly as the
	// original did.
	a, ok1 := restore(orig)
	b, ok2 := restore(n)
	if !ok1 || !ok2 || a != b {
		return verifyFailed
	}
	return ""
}

// params counts the statement's placeholders.
func (in *stmtIn) params() int {
	n := 0
	for _, t := range in.toks {
		if t.kind == tkParam {
			n++
		}
	}
	return n
}

func sameTargets(a, b []Target) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range a {
		found := false
		for _, u := range b {
			if strings.EqualFold(t.Schema, u.Schema) && strings.EqualFold(t.Table, u.Table) && t.Lease == u.Lease {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// peelFence checks that *cond is orig (parenthesized, if present) ANDed
// with the fences in order, and puts orig back in its place.
func peelFence(cond *ast.ExprNode, orig ast.ExprNode, fences []string) bool {
	w := *cond
	if w == nil {
		return false
	}
	for k := len(fences) - 1; k >= 0; k-- {
		if k == 0 && orig == nil {
			if s, ok := restore(w); !ok || s != fences[0] {
				return false
			}
			w = nil
			break
		}
		b, ok := w.(*ast.BinaryOperationExpr)
		if !ok || b.Op != opcode.LogicAnd || b.L == nil || b.R == nil {
			return false
		}
		if s, ok := restore(b.R); !ok || s != fences[k] {
			return false
		}
		w = b.L
	}
	if orig != nil {
		p, ok := w.(*ast.ParenthesesExpr)
		if !ok || p.Expr == nil {
			return false
		}
		a, ok1 := restore(p.Expr)
		b, ok2 := restore(orig)
		if !ok1 || !ok2 || a != b {
			return false
		}
	}
	*cond = orig
	return true
}

// verifyInsert checks the fenced INSERT / REPLACE x against the original o
// and rewrites x back into o's form for the final comparison.
func verifyInsert(o, x *ast.InsertStmt, fences []string) bool {
	var rows [][]ast.ExprNode
	switch {
	case len(o.Lists) > 0:
		rows = o.Lists
	case o.Select != nil:
		if sel, ok := o.Select.(*ast.SelectStmt); ok && sel.Kind == ast.SelectStmtKindValues {
			for _, r := range sel.Lists {
				rows = append(rows, r.Values)
			}
		}
	}
	if rows == nil {
		// INSERT ... SELECT: the same query with each leaf fenced.
		var ol, xl []*ast.SelectStmt
		if o.Select == nil || x.Select == nil || !collectLeaves(o.Select, &ol) || !collectLeaves(x.Select, &xl) ||
			len(ol) != len(xl) {
			return false
		}
		for k := range ol {
			if !verifyLeaf(ol[k], xl[k], fences) {
				return false
			}
		}
		return true
	}
	// VALUES / SET: a SELECT ... FROM DUAL per row, UNION ALL.
	var xl []*ast.SelectStmt
	if x.Select == nil || len(x.Lists) > 0 || x.Setlist || !collectLeaves(x.Select, &xl) || len(xl) != len(rows) {
		return false
	}
	if u, ok := x.Select.(*ast.SetOprStmt); ok {
		if u.OrderBy != nil || u.Limit != nil || u.With != nil {
			return false
		}
		for k, s := range u.SelectList.Selects {
			sel, ok := s.(*ast.SelectStmt)
			if !ok || k > 0 && (sel.AfterSetOperator == nil || *sel.AfterSetOperator != ast.UnionAll) {
				return false
			}
		}
	}
	if len(x.Columns) != len(rows[0]) && len(o.Columns) != 0 {
		return false
	}
	for k, sel := range xl {
		if sel.Fields == nil || len(sel.Fields.Fields) != len(rows[k]) || sel.GroupBy != nil || sel.Having != nil ||
			sel.OrderBy != nil || sel.Limit != nil || sel.Distinct || len(sel.WindowSpecs) > 0 {
			return false
		}
		hasDefault := false
		for v, f := range sel.Fields.Fields {
			if f.WildCard != nil || f.AsName.L != "" && !(k == 0 && len(o.OnDuplicate) > 0 && f.AsName.L == "fence_c"+itoa(v+1)) {
				return false
			}
			if k == 0 && len(o.OnDuplicate) > 0 && f.AsName.L != "fence_c"+itoa(v+1) {
				return false
			}
			if isDefault(rows[k][v]) {
				d, ok := f.Expr.(*ast.DefaultExpr)
				if !ok || d.Name == nil || d.Name.Table.L != "fence_d" || !strings.EqualFold(d.Name.Name.O, x.Columns[v].Name.O) {
					return false
				}
				hasDefault = true
				continue
			}
			a, ok1 := restore(f.Expr)
			b, ok2 := restore(rows[k][v])
			if !ok1 || !ok2 || a != b {
				return false
			}
		}
		if hasDefault != (sel.From != nil) || hasDefault && !defaultJoin(sel.From, x) {
			return false
		}
		w := sel.Where
		if !peelFence(&w, nil, fences) {
			return false
		}
	}
	x.Select = o.Select
	x.Lists = o.Lists
	x.Setlist = o.Setlist
	if o.Setlist || len(o.Columns) > 0 {
		if len(x.Columns) != len(o.Columns) {
			return false
		}
		for k := range o.Columns {
			if !strings.EqualFold(x.Columns[k].Name.O, o.Columns[k].Name.O) {
				return false
			}
		}
	}
	x.Columns = o.Columns
	return true
}

// defaultJoin: FROM (SELECT 1) AS fence_dual LEFT JOIN <target> AS fence_d ON FALSE.
func defaultJoin(from *ast.TableRefsClause, x *ast.InsertStmt) bool {
	j := from.TableRefs
	if j == nil || j.Tp != ast.LeftJoin || j.On == nil {
		return false
	}
	l, ok := j.Left.(*ast.TableSource)
	if !ok || l.AsName.L != "fence_dual" {
		return false
	}
	r, ok := j.Right.(*ast.TableSource)
	if !ok || r.AsName.L != "fence_d" {
		return false
	}
	tn, ok := r.Source.(*ast.TableName)
	if !ok || x.Table == nil || x.Table.TableRefs == nil {
		return false
	}
	target, ok := x.Table.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return false
	}
	ttn, ok := target.Source.(*ast.TableName)
	if !ok || !strings.EqualFold(ttn.Name.O, tn.Name.O) ||
		ttn.Schema.O != "" && !strings.EqualFold(ttn.Schema.O, tn.Schema.O) {
		return false
	}
	on, ok := restore(j.On.Expr)
	return ok && on == "FALSE"
}

// verifyLeaf checks one fenced SELECT block against the original and puts
// the original condition (and FROM) back.
func verifyLeaf(o, x *ast.SelectStmt, fences []string) bool {
	if o.Kind == ast.SelectStmtKindTable {
		// TABLE t became SELECT * FROM t WHERE F.
		if x.Kind != ast.SelectStmtKindSelect || x.Where == nil || !peelFence(&x.Where, nil, fences) {
			return false
		}
		if x.Fields == nil || len(x.Fields.Fields) != 1 || x.Fields.Fields[0].WildCard == nil ||
			x.Fields.Fields[0].WildCard.Table.L != "" {
			return false
		}
		x.Kind = ast.SelectStmtKindTable
		x.Fields = o.Fields
		return true
	}
	if aggregatesWithoutGroup(o) {
		var oh, xh ast.ExprNode
		if o.Having != nil {
			oh = o.Having.Expr
		}
		if x.Having == nil {
			return false
		}
		xh = x.Having.Expr
		if !peelFence(&xh, oh, fences) {
			return false
		}
		x.Having = o.Having
	} else if !peelFence(&x.Where, o.Where, fences) {
		return false
	}
	return true
}
