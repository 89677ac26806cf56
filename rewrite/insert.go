package rewrite

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// INSERT and REPLACE. VALUES rows and SET lists have no WHERE to hold the
// fence, so they become a SELECT of the same expressions:
//
//	INSERT INTO t (a, b) VALUES (1, 2), (3, 4) ON DUPLICATE KEY UPDATE ...
//	INSERT INTO t (a, b) SELECT 1, 2 FROM DUAL WHERE F UNION ALL SELECT 3, 4 FROM DUAL WHERE F ON DUPLICATE KEY UPDATE ...
//
// A bare DEFAULT becomes DEFAULT(fence_d.col), and that row selects
// FROM (SELECT 1) AS fence_dual LEFT JOIN t AS fence_d ON FALSE: DEFAULT()
// needs the table in scope, and the outer join yields exactly one row
// without reading any. INSERT ... SELECT gets the fence in every SELECT
// block of its query (in HAVING for a block that aggregates without GROUP
// BY: it returns a row even when its WHERE is false).

// spliceInsert places the fence in an INSERT or REPLACE.
func (in *stmtIn) spliceInsert(x *ast.InsertStmt, fence string, keys []fenceKey) ([]edit, bool, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in this INSERT (its clauses did not match " +
		"what the parser read); simplify it or report it as a fenceproxy bug"
	if !in.balanced() {
		return nil, false, mismatch
	}
	d := in.depths()
	kwName := "insert"
	if x.IsReplace {
		kwName = "replace"
	}
	i := in.firstKw(d, 0, kwName)
	if i < 0 {
		return nil, false, mismatch
	}
	i++
	for in.kw(i, "low_priority") || in.kw(i, "delayed") || in.kw(i, "high_priority") || in.kw(i, "ignore") {
		i++
	}
	if in.kw(i, "into") {
		i++
	}
	nameStart := i
	i, ok := in.skipName(i)
	if !ok {
		return nil, false, mismatch
	}
	table := in.writtenName(nameStart, i)
	if in.kw(i, "partition") && in.op(i+1, "(") {
		c := in.closeParen(i + 1)
		if c < 0 {
			return nil, false, mismatch
		}
		i = c + 1
	}
	if in.op(i, "(") && !in.startsQuery(i+1) {
		c := in.closeParen(i)
		if c < 0 {
			return nil, false, mismatch
		}
		i = c + 1
	}
	switch {
	case in.kw(i, "values") || in.kw(i, "value"):
		rows := x.Lists
		if rows == nil {
			sel, ok := x.Select.(*ast.SelectStmt)
			if !ok || sel.Kind != ast.SelectStmtKindValues {
				return nil, false, mismatch
			}
			for _, r := range sel.Lists {
				rows = append(rows, r.Values)
			}
		}
		return in.spliceValues(x, rows, i, table, fence)
	case in.kw(i, "set"):
		if !x.Setlist || len(x.Lists) != 1 {
			return nil, false, mismatch
		}
		return in.spliceSetList(x, i, table, fence)
	}
	if x.Select == nil || x.Setlist || len(x.Lists) > 0 {
		return nil, false, mismatch
	}
	edits, why := in.spliceQuery(x.Select, i, d, fence)
	return edits, false, why
}

// skipName passes a [schema.]table name at token i.
func (in *stmtIn) skipName(i int) (int, bool) {
	isName := func(j int) bool {
		return j < len(in.toks) && (in.toks[j].kind == tkWord || in.toks[j].kind == tkQuotedIdent)
	}
	if !isName(i) {
		return i, false
	}
	i++
	if in.op(i, ".") && isName(i+1) {
		i += 2
	}
	return i, true
}

// writtenName returns the table named by tokens [from, to) as
// `schema`.`table`, the schema resolved against the session.
func (in *stmtIn) writtenName(from, to int) string {
	var parts []string
	for j := from; j < to; j++ {
		if in.op(j, ".") {
			continue
		}
		name, _ := in.identAt(j)
		parts = append(parts, name)
	}
	if len(parts) == 1 {
		parts = []string{in.st.schema, parts[0]}
	}
	return quoteIdent(parts[0]) + "." + quoteIdent(parts[len(parts)-1])
}

// startsQuery: token i begins a query (after an opening parenthesis).
func (in *stmtIn) startsQuery(i int) bool {
	return in.kw(i, "select") || in.kw(i, "with") || in.kw(i, "values") || in.kw(i, "table") || in.op(i, "(")
}

// isDefault: a bare DEFAULT value.
func isDefault(e ast.ExprNode) bool {
	d, ok := e.(*ast.DefaultExpr)
	return ok && d.Name == nil
}

// spliceValues turns VALUES rows into SELECT blocks.
func (in *stmtIn) spliceValues(x *ast.InsertStmt, rows [][]ast.ExprNode, i int, table, fence string) ([]edit, bool, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in this INSERT ... VALUES; " +
		"simplify it or report it as a fenceproxy bug"
	valuesKw := i
	type row struct{ rowKw, open, close int }
	var rs []row
	var seps []int
	j := i + 1
	for {
		r := row{rowKw: -1}
		if in.kw(j, "row") {
			r.rowKw = j
			j++
		}
		if !in.op(j, "(") {
			return nil, false, mismatch
		}
		r.open = j
		r.close = in.closeParen(j)
		if r.close < 0 {
			return nil, false, mismatch
		}
		rs = append(rs, r)
		j = r.close + 1
		if in.op(j, ",") {
			seps = append(seps, j)
			j++
			continue
		}
		break
	}
	odku := false
	switch {
	case j == len(in.toks):
	case in.kw(j, "on") && in.kw(j+1, "duplicate"):
		odku = true
	case in.kw(j, "as"):
		return nil, false, "fenceproxy cannot fence INSERT ... VALUES ... AS alias (a row alias); " +
			"write ON DUPLICATE KEY UPDATE c = VALUES(c) instead of the alias"
	default:
		return nil, false, mismatch
	}
	if len(rs) != len(rows) || odku != (len(x.OnDuplicate) > 0) {
		return nil, false, mismatch
	}
	for k, r := range rs {
		if len(rows[k]) == 0 {
			return nil, false, "an empty VALUES () row cannot be fenced; list the columns and give their values " +
				"(DEFAULT where you want the default)"
		}
		vals := in.splitTopLevel(r.open+1, r.close)
		if len(vals) != len(rows[k]) {
			return nil, false, mismatch
		}
	}
	if why := checkRowValues(rows); why != "" {
		return nil, false, why
	}
	if len(rows) > 1 {
		if why := checkRowTypes(rows); why != "" {
			return nil, false, why
		}
	}
	var edits []edit
	rep := func(t int, text string) {
		edits = append(edits, edit{pos: in.toks[t].start, end: in.toks[t].end, text: text})
	}
	rep(valuesKw, "SELECT")
	for k, r := range rs {
		// The row's start ("(" or "ROW (") becomes the start of a SELECT
		// block: nothing for the first row (VALUES itself became SELECT),
		// "SELECT" for the others, with a space wherever the neighbours
		// would otherwise touch.
		first := r.open
		if r.rowKw >= 0 {
			first = r.rowKw
		}
		prev := valuesKw
		if k > 0 {
			rep(seps[k-1], " UNION ALL")
			prev = seps[k-1]
		}
		kw := ""
		if k > 0 {
			kw = "SELECT"
		}
		rs, re := in.toks[first].start, in.toks[r.open].end
		touchPrev := in.toks[prev].end == rs
		touchNext := r.open+1 < len(in.toks) && in.toks[r.open+1].start == re
		if bytesEqual(in.pc.src[rs:re], in.norm[rs:re]) {
			text := kw
			if kw == "" && touchPrev && touchNext {
				text = " "
			} else if kw != "" {
				if touchPrev {
					text = " " + text
				}
				if touchNext {
					text += " "
				}
			}
			edits = append(edits, edit{pos: rs, end: re, text: text})
		} else {
			// A comment inside "ROW /* c */ (": keep it.
			if r.rowKw >= 0 {
				rep(r.rowKw, " "+kw+" ")
			}
			rep(r.open, " ")
		}
		hasDefault := false
		vals := in.splitTopLevel(r.open+1, r.close)
		if k == 0 && odku {
			in.aliasValues(&edits, vals)
		}
		for v, e := range rows[k] {
			if !isDefault(e) {
				continue
			}
			if len(x.Columns) != len(rows[k]) {
				return nil, false, "a bare DEFAULT in VALUES cannot be fenced without a column list; " +
					"list the columns: INSERT INTO t (a, b) VALUES (1, DEFAULT)"
			}
			if vals[v][0] != vals[v][1] || !in.kw(vals[v][0], "default") {
				return nil, false, mismatch
			}
			hasDefault = true
			rep(vals[v][0], "DEFAULT(fence_d."+quoteIdent(x.Columns[v].Name.O)+")")
		}
		from := " FROM DUAL WHERE "
		if hasDefault {
			if len(x.OnDuplicate) > 0 {
				return nil, false, "fenceproxy cannot fence a bare DEFAULT value together with ON DUPLICATE KEY UPDATE; " +
					"write the value itself, or leave the column out of the column list"
			}
			from = " FROM (SELECT 1) AS fence_dual LEFT JOIN " + table + " AS fence_d ON FALSE WHERE "
		}
		rep(r.close, from+fence)
	}
	return edits, len(rows) == 1, ""
}

// aliasValues names the values of the first SELECT block fence_c1,
// fence_c2, ...: with ON DUPLICATE KEY UPDATE, an unqualified name there
// must not find a select-list column named like a literal ('note' is named
// note), only the table's column, as it did with VALUES.
func (in *stmtIn) aliasValues(edits *[]edit, vals [][2]int) {
	for v, p := range vals {
		end := in.toks[p[1]].end
		*edits = append(*edits, edit{pos: end, end: end, text: " AS fence_c" + itoa(v+1)})
	}
}

// splitTopLevel splits tokens [from, to) at depth-0 commas; it returns the
// first and last token index of each part.
func (in *stmtIn) splitTopLevel(from, to int) [][2]int {
	var parts [][2]int
	depth := 0
	start := from
	for j := from; j < to; j++ {
		t := in.toks[j]
		if t.kind == tkOp && t.end-t.start == 1 {
			switch in.pc.src[t.start] {
			case '(':
				depth++
			case ')':
				depth--
			case ',':
				if depth == 0 {
					parts = append(parts, [2]int{start, j - 1})
					start = j + 1
				}
			}
		}
	}
	if start < to || len(parts) > 0 {
		parts = append(parts, [2]int{start, to - 1})
	}
	return parts
}

// columnRefs finds column references outside subqueries: in VALUES a row
// may read the columns set so far, which a SELECT cannot.
type columnRefs struct{ found bool }

func (v *columnRefs) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.SubqueryExpr:
		return n, true
	case *ast.ColumnNameExpr:
		v.found = true
	case *ast.DefaultExpr:
		if x.Name != nil {
			v.found = true
		}
	}
	return n, v.found
}

func (v *columnRefs) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func checkRowValues(rows [][]ast.ExprNode) string {
	for _, r := range rows {
		for _, e := range r {
			var v columnRefs
			e.Accept(&v)
			if v.found {
				return "a VALUES row that refers to a column (or DEFAULT(col)) cannot be turned into a fenced " +
					"INSERT ... SELECT; compute the value in the application or use INSERT ... SELECT yourself"
			}
		}
	}
	return ""
}

// valueClass is the type family a UNION ALL of the rows would mix.
func valueClass(e ast.ExprNode) string {
	switch x := e.(type) {
	case *test_driver.ParamMarkerExpr:
		return "?"
	case *ast.DefaultExpr:
		return "default"
	case *test_driver.ValueExpr:
		switch x.Kind() {
		case test_driver.KindNull:
			return ""
		case test_driver.KindInt64, test_driver.KindUint64, test_driver.KindMysqlDecimal:
			return "exact"
		case test_driver.KindFloat32, test_driver.KindFloat64:
			return "approx"
		case test_driver.KindString, test_driver.KindBytes:
			return "string:" + x.Type.GetCharset()
		case test_driver.KindBinaryLiteral, test_driver.KindMysqlBit:
			return "binary"
		}
		return "value"
	case *ast.UnaryOperationExpr:
		return valueClass(x.V)
	case *ast.FuncCallExpr:
		return "func:" + x.FnName.L
	case *ast.FuncCastExpr:
		return "cast:" + x.Tp.String()
	}
	return "expr"
}

// checkRowTypes: UNION ALL gives each column one type for all rows, where
// VALUES converts each value to the column on its own. Mixing families
// (1 and '1', 0.1 and 1e0) could change a stored value, so such rows are
// refused; NULL, DEFAULT and placeholders mix with anything.
func checkRowTypes(rows [][]ast.ExprNode) string {
	for c := range rows[0] {
		class := ""
		for _, r := range rows {
			if c >= len(r) {
				return "the rows of this INSERT have different numbers of values"
			}
			k := valueClass(r[c])
			if k == "" || k == "?" || k == "default" {
				continue
			}
			if class == "" {
				class = k
				continue
			}
			if k != class {
				return "the rows of this multi-row INSERT mix value types in column " + itoa(c+1) +
					" (" + className(class) + " and " + className(k) + "); the fenced form " +
					"(SELECT ... UNION ALL SELECT ...) would give them one type. Use the same type in every row, " +
					"or insert such rows one by one"
			}
		}
	}
	return ""
}

// spliceSetList turns INSERT ... SET a = 1, b = 2 into
// INSERT ... (a, b) SELECT 1, 2 FROM DUAL WHERE F.
func (in *stmtIn) spliceSetList(x *ast.InsertStmt, setKw int, table, fence string) ([]edit, bool, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in this INSERT ... SET; " +
		"simplify it or report it as a fenceproxy bug"
	values := x.Lists[0]
	if len(values) != len(x.Columns) || len(values) == 0 {
		return nil, false, mismatch
	}
	d := in.depths()
	end := len(in.toks)
	for j := setKw + 1; j < len(in.toks); j++ {
		if d[j] == 0 && in.kw(j, "on") && in.kw(j+1, "duplicate") {
			end = j
			break
		}
		if d[j] == 0 && in.kw(j, "as") {
			return nil, false, "fenceproxy cannot fence INSERT ... SET ... AS alias (a row alias); " +
				"write ON DUPLICATE KEY UPDATE c = VALUES(c) instead of the alias"
		}
	}
	if (end < len(in.toks)) != (len(x.OnDuplicate) > 0) {
		return nil, false, mismatch
	}
	parts := in.splitTopLevel(setKw+1, end)
	if len(parts) != len(values) {
		return nil, false, mismatch
	}
	if why := checkRowValues([][]ast.ExprNode{values}); why != "" {
		return nil, false, why
	}
	var edits []edit
	rep := func(t int, text string) {
		edits = append(edits, edit{pos: in.toks[t].start, end: in.toks[t].end, text: text})
	}
	cols := make([]string, len(x.Columns))
	for k, c := range x.Columns {
		cols[k] = quoteIdent(c.Name.O)
	}
	sel := ") SELECT"
	if in.toks[setKw].end == in.toks[setKw+1].start {
		sel += " " // SET`a`=1
	}
	rep(setKw, "("+strings.Join(cols, ", ")+sel)
	if len(x.OnDuplicate) > 0 {
		vals := make([][2]int, len(parts))
		for k, p := range parts {
			vals[k] = [2]int{p[1], p[1]}
		}
		in.aliasValues(&edits, vals)
	}
	hasDefault := false
	for k, p := range parts {
		// column [. column [. column]] = value
		eq := -1
		for j := p[0]; j <= p[1]; j++ {
			if in.op(j, "=") || in.op(j, ":=") {
				eq = j
				break
			}
		}
		if eq < 0 || eq == p[0] || eq == p[1] || eq-p[0] > 5 {
			return nil, false, mismatch
		}
		// Remove "col =" and the spaces after it, unless a comment lies
		// in between (comments stay).
		from, to := in.toks[p[0]].start, in.toks[eq+1].start
		if bytesEqual(in.pc.src[from:to], in.norm[from:to]) {
			edits = append(edits, edit{pos: from, end: to})
		} else {
			for j := p[0]; j <= eq; j++ {
				rep(j, "")
			}
		}
		if isDefault(values[k]) {
			if eq+1 != p[1] || !in.kw(p[1], "default") {
				return nil, false, mismatch
			}
			hasDefault = true
			rep(p[1], "DEFAULT(fence_d."+cols[k]+")")
		}
	}
	from := " FROM DUAL WHERE "
	if hasDefault {
		if len(x.OnDuplicate) > 0 {
			return nil, false, "fenceproxy cannot fence a bare DEFAULT value together with ON DUPLICATE KEY UPDATE; " +
				"write the value itself, or leave the column out"
		}
		from = " FROM (SELECT 1) AS fence_dual LEFT JOIN " + table + " AS fence_d ON FALSE WHERE "
	}
	last := parts[len(parts)-1][1]
	edits = append(edits, edit{pos: in.toks[last].end, end: in.toks[last].end, text: from + fence})
	return edits, true, ""
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// className names a value class for messages.
func className(k string) string {
	switch {
	case k == "exact":
		return "an exact number"
	case k == "approx":
		return "a floating-point number"
	case k == "binary":
		return "a hexadecimal or bit literal"
	case strings.HasPrefix(k, "string:"):
		if cs := strings.TrimPrefix(k, "string:"); cs != "" && cs != "utf8mb4" {
			return "a " + cs + " string"
		}
		return "a string"
	case strings.HasPrefix(k, "func:"):
		return strings.TrimPrefix(k, "func:") + "()"
	case strings.HasPrefix(k, "cast:"):
		return "a CAST"
	}
	return "an expression"
}
