package rewrite

import (
	"sort"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// Row-bound leases: a protected table whose lease is a template over its
// own columns ("invoice:{customer_id}", policy.Template) is fenced per row.
// The session's fence (the lease it names, its owner, token and expiry) is
// checked as for any table that takes its lease from the session; on top
// of that each row written must belong to that lease:
//
//   - UPDATE and DELETE carry rowLeaseCond in their WHERE, next to the
//     fence (or alone where the engine's fence is a guard): a row whose
//     lease, CONCAT of the template's literal text and the row's columns,
//     is not the session's lease is not changed. The WHERE reads the row
//     before the change; an UPDATE that assigns a template column (which
//     would move the row to another lease) is refused, so the row after
//     the change has the same lease.
//   - INSERT and REPLACE: the proxy computes each inserted row's lease from
//     its literal values, exactly as the server stores them (the column
//     types come from the start-up check), and the guard checks that the
//     session's lease is that one (Target.RowLease). Values it cannot
//     compute are refused.

// rowLeaseRefusal is the start of every refusal of this file.
// RowLeaseNote begins every refusal of a write to a table whose lease is a
// template, the proxy's own included.
const RowLeaseNote = "this table's lease is a template over its columns, so each row is fenced under its own lease"

// fenceLeaseSQL names, in SQL, the lease the statement is fenced under:
// its own fence comment's (a literal of lease_name's type), else the
// session's lease variable.
func (in *stmtIn) fenceLeaseSQL() (string, bool) {
	if p := in.presented; p != nil {
		lit, err := lease.NameLiteral(p.Lease)
		return lit, err == nil
	}
	return userVarSQL(in.pc.e.pol.Vars.Lease), true
}

// userVarSQL writes @name, backquoted unless it is a plain name.
func userVarSQL(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "@`" + strings.ReplaceAll(name, "`", "``") + "`"
		}
	}
	return "@" + name
}

// rowLeaseCond is the per-row condition of a template table written by a
// single-table UPDATE or DELETE (its columns unqualified: they can only be
// the written table's at the top of its WHERE):
//
//	(CONVERT(CONCAT('invoice:', `customer_id`) USING utf8mb4) COLLATE utf8mb4_bin = @fence_lease
//	 AND CHARSET(@fence_lease) <> 'binary')
//
// utf8mb4_bin is the lease table's lease_name collation: the row's lease
// is the session's exactly when both name the same lease row. A NULL
// column makes the lease NULL: the row is in no lease, and never written.
// The session's lease must be a string: a number (SET @fence_lease = 0)
// compares numerically, with the lease row's name in the fence and with
// every row's lease here ('invoice:beta' = 0), and let a worker holding
// invoice:acme change beta's rows (measured on MariaDB:
// TestRowLeaseAttacks "session lease a number"). CHARSET() of a number,
// NULL or a binary string is 'binary'; fence_acquire sets a utf8mb4 one,
// and a fence comment's lease is a utf8mb4 literal.
//
// A CHAR column is read through RTRIM: under sql_mode
// PAD_CHAR_TO_FULL_LENGTH the server reads a CHAR value with its padding,
// and a CHAR column before the template's end ("r:{region}:{customer_id}",
// region CHAR(4)) made the row 'eu', 'acme' read as lease 'r:eu  :acme',
// another lease name that a worker can hold (measured on MariaDB:
// TestRedteam3RowLeaseEngine "PAD_CHAR_TO_FULL_LENGTH update"). Stored CHAR
// values have no trailing spaces (the INSERT row lease trims them too), so
// RTRIM reads them as the server does without that mode. Columns whose
// types were not read (no start-up check) may be CHAR: the condition
// then holds only outside PAD_CHAR_TO_FULL_LENGTH.
func rowLeaseCond(tpl *policy.Template, leaseSQL string) string {
	var b strings.Builder
	sch := tpl.Schema()
	b.WriteString("CONVERT(CONCAT(")
	for i, p := range tpl.Parts {
		if i > 0 {
			b.WriteString(", ")
		}
		if p.Column != "" {
			if col, ok := templateColumn(sch, p.Column); ok && col.Padded {
				b.WriteString("RTRIM(" + quoteIdent(p.Column) + ")")
			} else {
				b.WriteString(quoteIdent(p.Column))
			}
		} else {
			b.WriteString("'" + p.Lit + "'")
		}
	}
	b.WriteString(") USING utf8mb4) COLLATE utf8mb4_bin = ")
	b.WriteString(leaseSQL)
	b.WriteString(" AND CHARSET(")
	b.WriteString(leaseSQL)
	b.WriteString(") <> 'binary'")
	// Under MariaDB's sql_mode ORACLE, CONCAT reads NULL as '': a row
	// whose template column is NULL, in no lease, read as lease "n:"
	// (measured: TestRedteam3RowLeaseNullUnderOracle). The columns must
	// not be NULL, whatever the mode.
	for _, p := range tpl.Parts {
		if p.Column != "" {
			b.WriteString(" AND " + quoteIdent(p.Column) + " IS NOT NULL")
		}
	}
	if sch == nil {
		b.WriteString(" AND FIND_IN_SET('PAD_CHAR_TO_FULL_LENGTH', @@SESSION.sql_mode) = 0")
	}
	b.WriteString(")")
	return "(" + b.String()
}

// templateOf returns the template of a protected table, or nil.
func (e *Engine) templateOf(schema, table string) *policy.Template {
	if t := e.lookup(schema, table); t != nil {
		return t.Template
	}
	return nil
}

// rowLease checks a write to template tables and returns the per-row
// conditions to add to an UPDATE's or DELETE's WHERE; for an INSERT or
// REPLACE it sets each template target's RowLease. A refusal says what the
// proxy cannot fence per row.
func (in *stmtIn) rowLease(n ast.StmtNode, targets []Target, explain *ast.ExplainStmt) ([]string, *Trap, *stmtRes) {
	var tpls []int
	for i, t := range targets {
		if t.Template != nil {
			tpls = append(tpls, i)
		}
	}
	if len(tpls) == 0 {
		return nil, nil, nil
	}
	first := targets[tpls[0]]
	name := first.Schema + "." + first.Table
	refuse := func(why string) ([]string, *Trap, *stmtRes) {
		r := in.refuse(name, RowLeaseNote+"; "+why)
		return nil, nil, &r
	}
	if len(targets) > 1 {
		return refuse("this statement writes it together with other protected tables; write it in a statement of its own")
	}
	tpl := first.Template
	leaseSQL, ok := in.fenceLeaseSQL()
	if !ok {
		return refuse("the statement's fence comment names a lease fenceproxy cannot write into SQL")
	}
	switch x := n.(type) {
	case *ast.UpdateStmt:
		if x.TableRefs == nil || x.TableRefs.TableRefs == nil || x.MultipleTable ||
			len(in.collectRefs(x.TableRefs.TableRefs, cteNames(x.With), nil)) != 1 {
			return refuse("fenceproxy fences it per row in single-table UPDATEs only; write it with UPDATE " + first.Table + " SET ... WHERE ...")
		}
		if !in.directRef(x.TableRefs.TableRefs, first) {
			return refuse("this UPDATE writes it through a view, trigger or foreign key; write the table itself")
		}
		for _, a := range x.List {
			if a.Column != nil && tpl.HasColumn(a.Column.Name.O) {
				return refuse("this UPDATE sets " + a.Column.Name.O + ", a column of the lease template, and would move rows to " +
					"another lease; move a row by deleting it under its lease and inserting it under the new one")
			}
		}
		// Under zero_rows a trapped write is sent again: what it sets and
		// how it orders must be free of effects that outlive the rollback
		// of the first (a variable assigned, LAST_INSERT_ID(expr),
		// NEXTVAL, a stored function).
		return in.updateDeleteCond(x, x.Where, x.Order != nil, x.Limit != nil, "update", &targets[tpls[0]], leaseSQL,
			explain, rerunSafe(x.List, x.Order))
	case *ast.DeleteStmt:
		if x.TableRefs == nil || x.TableRefs.TableRefs == nil || x.IsMultiTable ||
			len(in.collectRefs(x.TableRefs.TableRefs, cteNames(x.With), nil)) != 1 {
			return refuse("fenceproxy fences it per row in single-table DELETEs only; write it with DELETE FROM " + first.Table + " WHERE ...")
		}
		if !in.directRef(x.TableRefs.TableRefs, first) {
			return refuse("this DELETE writes it through a view, trigger or foreign key; write the table itself")
		}
		return in.updateDeleteCond(x, x.Where, x.Order != nil, x.Limit != nil, "delete", &targets[tpls[0]], leaseSQL,
			explain, rerunSafe(nil, x.Order))
	case *ast.InsertStmt:
		if x.Table == nil || x.Table.TableRefs == nil || !in.directRef(x.Table.TableRefs, first) {
			return refuse("this statement writes it through a view, trigger or foreign key; write the table itself")
		}
		lease, params, why := in.insertRowLease(x, tpl)
		if why != "" {
			return refuse(why)
		}
		targets[tpls[0]].RowLease, targets[tpls[0]].RowParams = lease, params
		return nil, nil, nil
	}
	return refuse("fenceproxy cannot fence this kind of write per row")
}

// updateDeleteCond is the per-row condition of an UPDATE or DELETE of
// template table t: with a trap when its WHERE pins no lease. A write that
// runs, pins no lease and cannot carry the trap (rowLeaseTrap says why; a
// SET or ORDER BY that is not rerunSafe) is refused: the plain condition
// alone would skip the rows of other leases with no record and no
// on_stale, so the proxy relays only the writes whose every skipped row it
// can answer for. Only an EXPLAIN that does not run the write keeps the
// plain condition.
func (in *stmtIn) updateDeleteCond(n ast.StmtNode, where ast.ExprNode, ordered, limited bool, kw string, t *Target, leaseSQL string,
	explain *ast.ExplainStmt, rerun bool) ([]string, *Trap, *stmtRes) {
	t.RowLease, t.RowParams = in.pinnedLease(n, where, t.Template)
	cond := rowLeaseCond(t.Template, leaseSQL)
	if explain != nil && !explain.Analyze || t.RowLease != "" || t.RowParams != nil {
		return []string{cond}, nil, nil
	}
	var trap *Trap
	why := ""
	switch {
	case explain != nil:
		why = "EXPLAIN ANALYZE answers with its plan, in place of the error by which fenceproxy learns of such rows"
	case !rerun:
		why = "its SET or ORDER BY has an effect that a second run would repeat (a variable assigned, LAST_INSERT_ID(expr), " +
			"NEXTVAL, RAND(), a stored function, a subquery)"
	default:
		trap, why = in.rowLeaseTrap(where, ordered, limited, t.Template, cond, kw, trapTableRef(n, t))
	}
	if trap == nil {
		r := in.refuse(t.Schema+"."+t.Table, UnpinnedRefusal(t.Template, strings.ToUpper(kw), why))
		return nil, nil, &r
	}
	if trap.Prepared {
		// The client's statement is prepared with the plain condition;
		// the proxy prepares the trapped one beside it (Trap.Trapped).
		return []string{cond}, trap, nil
	}
	return []string{trap.Cond}, trap, nil
}

// directRef reports whether the table list names t itself (not a view or
// another table whose triggers or foreign keys reach it).
func (in *stmtIn) directRef(n ast.ResultSetNode, t Target) bool {
	refs := in.collectRefs(n, nil, nil)
	for i := range refs {
		if p := refs[i].prot; p != nil && !refs[i].cte && strings.EqualFold(p.Schema, t.Schema) && strings.EqualFold(p.Table, t.Table) {
			return true
		}
	}
	return false
}

// insertRowLease computes the lease of every row an INSERT or REPLACE
// writes; all must be one lease (the statement is fenced under one).
func (in *stmtIn) insertRowLease(x *ast.InsertStmt, tpl *policy.Template) (string, *RowParams, string) {
	sch := tpl.Schema()
	if sch == nil {
		return "", nil, "its columns were not checked against the backend (the proxy's start-up check with backend.user reads their types), " +
			"so fenceproxy cannot compute the lease of inserted rows"
	}
	verb := "INSERT"
	if x.IsReplace {
		verb = "REPLACE"
		if !sch.KeysCovered {
			return "", nil, "REPLACE deletes the rows whose unique key the new row repeats, and a unique key of this table does not hold " +
				"every template column compared byte for byte (binary collation), so it may delete a row of another lease; " +
				"use DELETE and INSERT, each under its lease"
		}
	}
	if len(x.OnDuplicate) > 0 {
		if !sch.KeysCovered {
			return "", nil, "ON DUPLICATE KEY UPDATE changes the row whose unique key the new row repeats, and a unique key of this table " +
				"does not hold every template column compared byte for byte (binary collation), so it may change a row of another " +
				"lease; use INSERT, or UPDATE ... WHERE, each fenced per row"
		}
		for _, a := range x.OnDuplicate {
			if a.Column != nil && tpl.HasColumn(a.Column.Name.O) {
				return "", nil, "ON DUPLICATE KEY UPDATE sets " + a.Column.Name.O + ", a column of the lease template, and would move " +
					"the row to another lease; move a row by deleting it under its lease and inserting it under the new one"
			}
		}
	}
	if x.Select != nil {
		return "", nil, verb + " ... SELECT (or TABLE) takes its values from a query the proxy cannot compute; insert " +
			"literal values (VALUES or SET), so that the proxy computes each row's lease"
	}
	// The columns and the rows of values.
	var cols []string
	var rows [][]ast.ExprNode
	// INSERT ... SET c = v reads as one row of Columns and Lists.
	if len(x.Columns) == 0 {
		return "", nil, verb + " without a column list: name the columns (" + verb + " INTO t (col, ...) VALUES ...), so that the " +
			"proxy knows which values are the template's columns"
	}
	for _, c := range x.Columns {
		cols = append(cols, c.Name.O)
	}
	rows = x.Lists
	if len(rows) == 0 {
		return "", nil, verb + " of no row values"
	}
	rp := &RowParams{verb: verb, params: paramOrdinals(x)}
	for _, row := range rows {
		var parts []rowPart
		for _, p := range tpl.Parts {
			if p.Column == "" {
				parts = append(parts, rowPart{text: p.Lit, param: -1})
				continue
			}
			idx := -1
			for j, c := range cols {
				if strings.EqualFold(c, p.Column) {
					if idx >= 0 {
						return "", nil, "the column " + p.Column + " is given twice"
					}
					idx = j
				}
			}
			if idx < 0 {
				return "", nil, "the column " + p.Column + " of the lease template is not given, so it takes its default; " +
					"give its value in the statement, so that the proxy computes the row's lease"
			}
			if idx >= len(row) {
				return "", nil, "a row has fewer values than columns"
			}
			col, ok := sch.Column(p.Column)
			if !ok {
				return "", nil, "the column " + p.Column + " was not checked against the backend"
			}
			if m, ok := row[idx].(*test_driver.ParamMarkerExpr); ok {
				if !in.pc.prepare {
					return "", nil, "the value of " + p.Column + " is a placeholder outside a prepared statement"
				}
				if in.pc.depth > 0 {
					// SQL PREPARE ... EXECUTE USING @v: the values are user
					// variables, which the proxy does not read.
					return "", nil, "the value of " + p.Column + " is a placeholder of a statement prepared with SQL PREPARE: " +
						"EXECUTE ... USING binds user variables, which fenceproxy does not read; use your driver's " +
						"server-side prepared statements (COM_STMT_PREPARE), whose bound values the proxy reads, or literal values"
				}
				ord, ok := rp.params[m.Offset]
				if !ok {
					return "", nil, "the value of " + p.Column + " is a placeholder fenceproxy cannot number"
				}
				parts = append(parts, rowPart{param: ord, col: col, name: p.Column})
				rp.bound = true
				continue
			}
			v, why := templateValue(row[idx], col)
			if why != "" {
				return "", nil, "the value of " + p.Column + " " + why
			}
			parts = append(parts, rowPart{text: v, param: -1})
		}
		rp.rows = append(rp.rows, parts)
	}
	if rp.bound {
		return "", rp, ""
	}
	lease, why := rp.Lease(nil)
	return lease, nil, why
}

// RowParams is how the lease of the rows of a prepared INSERT or REPLACE
// (COM_STMT_PREPARE) follows from the values bound to the placeholders in
// its template columns: the proxy computes it at each execution
// (RowParams.Lease), with the rules of literal values (storedAs).
type RowParams struct {
	verb   string
	rows   [][]rowPart
	params map[int]int // placeholder byte offset -> its ordinal in the statement
	bound  bool        // some part is a placeholder
	pinned bool        // UPDATE, DELETE: the lease the WHERE aims at (Pinned)
}

// Pinned: the lease is the one an UPDATE's or DELETE's WHERE aims at, for
// the verdict on a write that changed no row; the per-row condition in
// the statement's text fences the rows. An execution whose lease cannot
// be computed goes on without it (no refusal). Otherwise (INSERT,
// REPLACE) the lease is the rows' own, and an execution without it is
// refused.
func (rp *RowParams) Pinned() bool { return rp.pinned }

// rowPart is one part of a row's lease: text (the template's literal text,
// or a literal value as the column stores it), or the value bound to
// placeholder param (its ordinal) for column col.
type rowPart struct {
	text  string
	param int // -1: text
	col   policy.TemplateColumn
	name  string
}

// Placeholders is the number of placeholders in the statement, as the
// proxy counted them: the execution must bind as many.
func (rp *RowParams) Placeholders() int { return len(rp.params) }

// Uses reports whether the placeholder with ordinal i is a template
// column's value.
func (rp *RowParams) Uses(i int) bool {
	for _, row := range rp.rows {
		for _, p := range row {
			if p.param == i {
				return true
			}
		}
	}
	return false
}

// BoundValue is a value bound to a placeholder at an execution, as the
// proxy decoded it from COM_STMT_EXECUTE.
type BoundValue struct {
	Null bool
	// Int: an integer type (TINY .. LONGLONG, signed or unsigned); Text is
	// its decimal form. Otherwise Text is a string's bytes.
	Int  bool
	Text string
	// Other names a type whose stored form the proxy does not compute
	// (floating point, decimal, dates, ...); "" for Int and strings.
	Other string
	// Long: sent with COM_STMT_SEND_LONG_DATA, not in the packet.
	Long bool
}

// Lease computes the lease of every row from vals (by placeholder
// ordinal); all must be one lease. why says what the proxy cannot compute.
func (rp *RowParams) Lease(vals []BoundValue) (string, string) {
	lease := ""
	for ri, row := range rp.rows {
		var b strings.Builder
		for _, p := range row {
			if p.param < 0 {
				b.WriteString(p.text)
				continue
			}
			if p.param >= len(vals) {
				return "", "the value of " + p.name + " was not bound"
			}
			v, why := boundValue(vals[p.param], p.col, rp.pinned)
			if why != "" {
				return "", "the value bound to " + p.name + " " + why
			}
			b.WriteString(v)
		}
		l := strings.TrimRight(b.String(), " ") // utf8mb4_bin ignores trailing spaces
		if len(l) > 191 {
			return "", "a row's lease would be longer than a lease name may be (191 bytes)"
		}
		if l == "" {
			// No lease has an empty name; and a guard without a row lease
			// would accept the session's, whichever it is.
			return "", "a row's lease would be empty (a template of columns only, with empty values): the row would be in no lease"
		}
		if ri > 0 && l != lease {
			return "", "this " + rp.verb + " writes rows of several leases; one statement is fenced under one lease, so insert " +
				"the rows of each lease in a statement of their own"
		}
		lease = l
	}
	return lease, ""
}

// boundValue reads a value bound to a template column as the server
// stores it, with the rules of a literal (storedAs): an integer type as
// an integer literal, a string type as a string literal. pin: the value is
// compared with the column in a WHERE, where an integer meets a string
// column as a number.
func boundValue(v BoundValue, col policy.TemplateColumn, pin bool) (string, string) {
	switch {
	case pin && v.Int && col.Kind == policy.KindString:
		return "", "is an integer, which the server compares with a string column as a number (7 meets '07' and '7.0', " +
			"rows of other leases); bind it as a string"
	case v.Long:
		return "", "was sent with COM_STMT_SEND_LONG_DATA, which fenceproxy does not read; bind it in the execution itself"
	case v.Null:
		return "", "is NULL: the row would be in no lease"
	case v.Other != "":
		return "", "is of type " + v.Other + ": fenceproxy computes a row's lease from integer and string values only; bind an integer or a string"
	}
	return storedAs(v.Text, !v.Int, col)
}

// paramOrdinals numbers the placeholders of a statement in text order (as
// the server numbers the values of COM_STMT_EXECUTE), by byte offset.
func paramOrdinals(n ast.Node) map[int]int {
	var v paramCollector
	n.Accept(&v)
	sort.Ints(v.offsets)
	m := make(map[int]int, len(v.offsets))
	for i, o := range v.offsets {
		m[o] = i
	}
	return m
}

type paramCollector struct{ offsets []int }

func (v *paramCollector) Enter(n ast.Node) (ast.Node, bool) {
	if m, ok := n.(*test_driver.ParamMarkerExpr); ok {
		v.offsets = append(v.offsets, m.Offset)
	}
	return n, false
}

func (v *paramCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// templateValue reads an inserted value of a template column as the
// server stores it, as CONCAT would write it; why says what the proxy
// cannot compute.
func templateValue(x ast.ExprNode, col policy.TemplateColumn) (string, string) {
	neg := false
	if u, ok := x.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		neg, x = true, u.V
	}
	switch v := x.(type) {
	case *test_driver.ParamMarkerExpr:
		return "", "is a placeholder: fenceproxy computes a row's lease from literal values only (it does not read the " +
			"values bound at execution); write the value as a literal"
	case *ast.DefaultExpr:
		return "", "is DEFAULT; give the value itself"
	case *test_driver.ValueExpr:
		var s string
		switch v.Kind() {
		case test_driver.KindInt64:
			s = strconv.FormatInt(v.GetInt64(), 10)
		case test_driver.KindUint64:
			s = strconv.FormatUint(v.GetUint64(), 10)
		case test_driver.KindString:
			s = v.GetString()
		case test_driver.KindNull:
			return "", "is NULL: the row would be in no lease"
		default:
			return "", "is not a plain string or integer literal"
		}
		if neg {
			if v.Kind() == test_driver.KindString {
				return "", "is an expression (-'...')"
			}
			if s == "0" {
				return "", "is -0"
			}
			s = "-" + s
		}
		return storedAs(s, v.Kind() == test_driver.KindString, col)
	}
	return "", "is an expression: fenceproxy computes a row's lease from literal values only; write the value as a literal"
}

// storedAs returns literal s as the column stores it, when the proxy can
// tell exactly.
func storedAs(s string, quoted bool, col policy.TemplateColumn) (string, string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return "", "is not printable ASCII (a lease name computed from it would depend on the character sets)"
		}
	}
	switch col.Kind {
	case policy.KindInteger:
		// The canonical decimal form only: '007', '7abc', ' 7' or 1e3
		// would be stored as another number than they read.
		if !canonicalInt(s) {
			return "", "is not an integer written in its plain decimal form"
		}
		if col.Unsigned {
			u, err := strconv.ParseUint(s, 10, 64)
			if err != nil || u > col.UMax {
				return "", "is out of the column's range"
			}
		} else {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < col.Min || n > col.Max {
				return "", "is out of the column's range"
			}
		}
		return s, ""
	case policy.KindString:
		if int64(len(s)) > col.Length {
			return "", "is longer than the column (it would be cut or refused)"
		}
		if col.Padded {
			s = strings.TrimRight(s, " ")
		}
		_ = quoted
		return s, ""
	}
	return "", "has a type fenceproxy cannot compute"
}

// canonicalInt: -?(0|[1-9][0-9]*).
func canonicalInt(s string) bool {
	if strings.HasPrefix(s, "-") {
		s = s[1:]
		if s == "0" {
			return false
		}
	}
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// pinnedLease returns the lease of the rows an UPDATE or DELETE may change
// when its WHERE pins every template column to a literal (`customer_id =
// 'acme' AND ...` at its top level), or "". The per-row condition decides
// which rows change; this lease lets the proxy say why a statement aimed
// at another lease's rows changed none (the guard on Galera and TiDB, the
// check after a 0-row write elsewhere: row_lease_mismatch), and apply
// on_stale to it. In a statement prepared with COM_STMT_PREPARE a pin may
// be a placeholder: then the lease is computed at each execution from the
// bound values (RowParams, Pinned), and an execution whose lease cannot be
// computed goes on without it, as a WHERE that pins nothing.
func (in *stmtIn) pinnedLease(n ast.StmtNode, where ast.ExprNode, tpl *policy.Template) (string, *RowParams) {
	sch := tpl.Schema()
	if sch == nil || where == nil {
		return "", nil
	}
	pins := map[string]ast.ExprNode{}
	var walk func(x ast.ExprNode)
	walk = func(x ast.ExprNode) {
		switch b := x.(type) {
		case *ast.ParenthesesExpr:
			walk(b.Expr)
		case *ast.BinaryOperationExpr:
			switch b.Op {
			case opcode.LogicAnd:
				walk(b.L)
				walk(b.R)
			case opcode.EQ:
				col, val := b.L, b.R
				if _, ok := col.(*ast.ColumnNameExpr); !ok {
					col, val = val, col
				}
				if c, ok := col.(*ast.ColumnNameExpr); ok && c.Name != nil && tpl.HasColumn(c.Name.Name.O) {
					name := strings.ToLower(c.Name.Name.O)
					if _, dup := pins[name]; dup {
						pins[name] = nil // two pins: leave it to the rows
					} else {
						pins[name] = val
					}
				}
			}
		}
	}
	walk(where)
	rp := &RowParams{verb: "statement", pinned: true}
	var parts []rowPart
	for _, p := range tpl.Parts {
		if p.Column == "" {
			parts = append(parts, rowPart{text: p.Lit, param: -1})
			continue
		}
		val := pins[strings.ToLower(p.Column)]
		col, ok := sch.Column(p.Column)
		if val == nil || !ok || !col.Exact {
			// Under a _ci collation the pin meets rows of other leases
			// ('ACME' for 'acme'): the trap must see them.
			return "", nil
		}
		if m, ok := val.(*test_driver.ParamMarkerExpr); ok {
			if !in.pc.prepare || in.pc.depth > 0 {
				return "", nil
			}
			if rp.params == nil {
				rp.params = paramOrdinals(n)
			}
			ord, ok := rp.params[m.Offset]
			if !ok {
				return "", nil
			}
			parts = append(parts, rowPart{param: ord, col: col, name: p.Column})
			rp.bound = true
			continue
		}
		if lit, ok := val.(*test_driver.ValueExpr); col.Kind == policy.KindString && (!ok || lit.Kind() != test_driver.KindString) {
			// A number meets a string column as a number: customer_id = 7
			// also matches '07' and '7.0', rows of other leases.
			return "", nil
		}
		v, why := templateValue(val, col)
		if why != "" {
			return "", nil
		}
		parts = append(parts, rowPart{text: v, param: -1})
	}
	rp.rows = [][]rowPart{parts}
	if rp.bound {
		return "", rp
	}
	l, why := rp.Lease(nil)
	if why != "" {
		return "", nil
	}
	return l, nil
}

// templateColumn is sch's column name; ok is false when the schema was not
// read.
func templateColumn(sch *policy.TemplateSchema, name string) (policy.TemplateColumn, bool) {
	if sch == nil {
		return policy.TemplateColumn{}, false
	}
	return sch.Column(name)
}

// A row of another lease met by an UPDATE or DELETE whose WHERE pins no
// lease: the per-row condition alone skips it, silently. With a trap the
// statement fails on it instead, before it commits anything:
//
//	((<per-row condition>) OR ((<the client's WHERE>) AND EXP(72101729 + COALESCE(0 * CHAR_LENGTH(`customer_id`), 0)) < 0))
//
// A row of the lease makes the left side true (OR does not read on); a row
// of another lease that the client's WHERE matches reaches the EXP, which
// overflows: ERR 1690 (ER_DATA_OUT_OF_RANGE), and the server rolls the
// statement back (the rows it changed before included; a transaction
// around it stays open). A row the WHERE does not match never reaches it,
// in whatever order the server reads the conditions, because the WHERE is
// repeated inside. So on the valid path nothing runs that the client did
// not send, and no statement of the proxy's follows: affected rows,
// warnings, ROW_COUNT() and insert ids are the server's. The proxy reads
// the error as a rejection (row_lease_mismatch, audited, counted; see
// fencing's Tracker.finishTrapped) and applies on_stale: ERR 1644, or,
// under zero_rows, the statement again with the plain condition, which
// changes the rows of the lease only (Trap.Untrapped).
//
// Measured on MariaDB 10.11 and TiDB v8.4 (1000 rows, 10 leases; by
// primary key, IN lists, ranges, a secondary index on the template
// column, full scans, UPDATE and DELETE): the trap fired in each of the 22
// statements whose WHERE matched a row of another lease and in none of the
// 8 that matched only rows of the lease; with IGNORE and under sql_mode
// '', ORACLE and ANSI it is an error all the same, never a warning; a
// statement that had changed 3 rows before it reached the trap changed
// none. A WHERE that sets the column to a constant (customer_id =
// X'6333' AND id = 999) matched no row and did not fire: neither server
// computes the EXP before a row reaches it. EXPLAIN shows the same plan
// with and without the trap (MariaDB, 8 WHEREs, UPDATE and DELETE).
//
// The EXP reads a column so that the server cannot compute it once for
// the statement. A counter in the same place (`(@n := @n + 1) IS NULL`)
// was measured first: without a column MariaDB counted 2 in each of 22
// statements, whatever the rows; with one (`@n + 1 + COALESCE(0 *
// CHAR_LENGTH(col), 0)`) it counted exactly on both servers, but a TiDB
// pessimistic statement retried after a lock wait counted every row twice
// (256 for 128), and reading it takes a statement after the write, which
// sets ROW_COUNT() to -1 and FOUND_ROWS() to 1 on every write, the valid
// ones too. The trap needs no read and counts nothing.
//
// Only where the repeat is exact and the error can be answered:
//   - the WHERE is deterministic and free of side effects (trapSafe): no
//     subquery, variable assignment, or function outside a list of
//     deterministic built-ins; and its text has no comment, so the copy
//     is read as the original (checked by parsing it), and at most 64 KiB
//     (maxTrapWhere). Placeholders only in a statement to prepare, and
//     only as its last ones (none in ORDER BY or LIMIT): the copy's follow
//     the client's, and the proxy binds them with the same values;
//   - LIMIT only without ORDER BY and on MariaDB: the rows the client's
//     statement would have changed are then the first n the WHERE matches
//     in the order the server reads, and MariaDB reads one row at a time
//     and stops at the n-th row of the lease, so the trap fires exactly
//     when a row of another lease comes before it (measured: LIMIT 99 and
//     100 over 100 rows of the lease on a secondary index did not fire,
//     LIMIT 101 did; 7 more statements agreed). With ORDER BY a filesort
//     reads every row of the WHERE first (891 rows of other leases read
//     for LIMIT 3), so the trap would fire for rows the statement would
//     never have reached; TiDB's index lookups read table rows in no fixed
//     order (keep order:false: LIMIT 50 over a range whose first 100
//     index entries were the lease's fired), so the n rows a LIMIT reaches
//     there are no fixed ones. ORDER BY without LIMIT changes every row
//     of the WHERE, and the trap is exact (measured, 5 statements on each
//     server);
//   - MariaDB (and Galera) or TiDB, where it was measured, and an InnoDB
//     table (TemplateSchema.Transactional: the start-up check read its
//     engine), whose failed statement leaves no row changed;
//   - a statement of the client's text (COM_QUERY) or one to prepare
//     (COM_STMT_PREPARE), not inside SQL PREPARE, a compound statement,
//     EXPLAIN, ANALYZE or RETURNING: the proxy must be able to send it
//     again without the trap, and to answer an error in place of the
//     server's. A statement to prepare is sent with the plain condition
//     (Trap.Prepared): the client's statement, which the proxy executes
//     again under zero_rows; the proxy prepares the trapped one beside it
//     and executes that in its place (proxy/preptrap.go).
//
// Elsewhere the per-row condition is plain, as before.

// maxTrapWhere: a longer WHERE (an IN list of thousands of keys) is not
// repeated: the statement the server parses would double, and could pass
// max_allowed_packet where the client's did not.
const maxTrapWhere = 64 << 10

// trapConst is the EXP argument's constant: the needle by which the proxy
// tells the trap's error from any other (IsTrapError). trapDigits are its
// digits as both servers print it, whole or as a double (7.2101729e+07).
const (
	trapConst  = "72101729"
	trapDigits = "2101729"
	trapErrno  = 1690
)

// UnpinnedRefusal is the reason a write of a template table whose WHERE
// pins no lease (what: UPDATE, DELETE, or statement) is refused: why it
// cannot carry the trap, and how to pin the lease instead. The proxy
// gives it for an execution of a prepared one too.
func UnpinnedRefusal(tpl *policy.Template, what, why string) string {
	var cols []string
	if tpl != nil {
		cols = tpl.Columns()
	}
	pin := make([]string, len(cols))
	for i, c := range cols {
		pin[i] = c + " = ..."
	}
	return RowLeaseNote + "; this " + what + " does not name the lease of the rows it changes in its WHERE, " +
		"and fenceproxy cannot check each row it meets because " + why + ", so rows of other leases would be skipped " +
		"without a record; pin the lease in the WHERE (WHERE " + strings.Join(pin, " AND ") + " AND ..., with " +
		"literals or placeholders naming the fence's lease)"
}

// rowLeaseTrap returns the per-row condition plain (rowLeaseCond's) with
// the trap for the WHERE where, or nil and why the statement cannot carry
// one. kw is the statement's first keyword (update or delete).
func (in *stmtIn) rowLeaseTrap(where ast.ExprNode, ordered, limited bool, tpl *policy.Template, plain, kw, ref string) (*Trap, string) {
	flavor := in.st.mode.server.Flavor
	switch {
	case flavor != MariaDB && flavor != TiDB:
		return nil, "the check of each row was measured on MariaDB, Galera and TiDB, and not on MySQL"
	case limited && ordered:
		return nil, "it has ORDER BY with LIMIT, where the server reads rows past those the write would change"
	case limited && flavor == TiDB:
		return nil, "it has LIMIT, and TiDB reads the rows of an index lookup in no fixed order"
	case in.pc.depth > 0:
		return nil, "it is inside SQL PREPARE, which fenceproxy does not execute itself (prepare it with COM_STMT_PREPARE, as drivers do)"
	case in.inBlock || in.whole:
		return nil, "it is inside a compound statement or a definition"
	case in.noTrap:
		return nil, "it answers with rows (RETURNING, ANALYZE), which may come before the error by which fenceproxy learns of such rows"
	}
	if sch := tpl.Schema(); sch == nil || !sch.Transactional {
		// The rows changed before the error would stay, and the write
		// sent again under zero_rows would change them twice.
		return nil, "the table is not InnoDB (or its engine was not read at start), and a failed statement there keeps the rows it changed"
	}
	col := ""
	for _, p := range tpl.Parts {
		if p.Column != "" {
			col = p.Column
			break
		}
	}
	if col == "" {
		return nil, "its template has no column"
	}
	trap := "EXP(" + trapConst + " + COALESCE(0 * CHAR_LENGTH(" + quoteIdent(col) + "), 0)) < 0"
	if where == nil {
		return &Trap{Cond: "(" + plain + " OR " + trap + ")", Plain: plain, Prepared: in.pc.prepare,
			Confirm: trapConfirm(ref, "", plain)}, ""
	}
	var v trapSafe
	where.Accept(&v)
	if v.bad {
		return nil, "its WHERE has a subquery, a variable assignment or a function other than deterministic built-ins, " +
			"which a second reading could answer otherwise"
	}
	copyText, params, why := in.whereText(kw)
	if why != "" {
		return nil, why
	}
	if len(copyText) > maxTrapWhere {
		return nil, "its WHERE is longer than fenceproxy repeats (64 KiB)"
	}
	// The copy must read as the WHERE did.
	n, err := parseOne("SELECT 1 FROM DUAL WHERE "+copyText, in.st.mode)
	sel, ok := n.(*ast.SelectStmt)
	if err != nil || !ok || sel.Where == nil || !sameRestore(where, sel.Where) {
		return nil, "its WHERE does not read the same on its own"
	}
	return &Trap{Cond: "(" + plain + " OR ((" + copyText + ") AND " + trap + "))", Plain: plain, Prepared: in.pc.prepare,
		Params: params, Confirm: trapConfirm(ref, copyText, plain)}, ""
}

// trapConfirm is Trap.Confirm: a locking read of one row of table ref
// that the WHERE (copy; "" for none) matches and the per-row condition
// plain does not hold for, the row the trap fires on. Locking, it waits
// for a transaction that holds such a row, and reads the row as that
// transaction left it.
func trapConfirm(ref, copyText, plain string) string {
	if ref == "" {
		return ""
	}
	where := "(" + plain + ") IS NOT TRUE"
	if copyText != "" {
		where = "(" + copyText + ") AND " + where
	}
	return "SELECT 1 FROM " + ref + " WHERE " + where + " LIMIT 1 FOR UPDATE"
}

// trapTableRef is the single-table UPDATE's or DELETE's table as a FROM
// names it for the WHERE copy: t, with the statement's alias and
// partitions; "" when the proxy cannot tell.
func trapTableRef(n ast.StmtNode, t *Target) string {
	var refs *ast.TableRefsClause
	switch x := n.(type) {
	case *ast.UpdateStmt:
		refs = x.TableRefs
	case *ast.DeleteStmt:
		refs = x.TableRefs
	}
	if refs == nil || refs.TableRefs == nil || refs.TableRefs.Right != nil {
		return ""
	}
	ts, ok := refs.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return ""
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok {
		return ""
	}
	ref := quoteIdent(t.Schema) + "." + quoteIdent(t.Table)
	if len(tn.PartitionNames) > 0 {
		parts := make([]string, len(tn.PartitionNames))
		for i, p := range tn.PartitionNames {
			parts[i] = quoteIdent(p.O)
		}
		ref += " PARTITION (" + strings.Join(parts, ", ") + ")"
	}
	if ts.AsName.O != "" {
		ref += " AS " + quoteIdent(ts.AsName.O)
	}
	return ref
}

// whereText returns the text of the statement's top-level WHERE
// condition, which runs to ORDER BY, LIMIT or the last token, when only
// spaces separate its tokens (no comment, whose reading the copy could
// change), and the placeholders in it: none outside a statement to
// prepare, and there the statement's last ones (none in ORDER BY or
// LIMIT), so that the copy's placeholders follow all of the client's in
// the trapped statement (the proxy binds them after the client's values);
// otherwise why it cannot be repeated.
func (in *stmtIn) whereText(kw string) (string, int, string) {
	const unread = "fenceproxy did not find its WHERE's text"
	d := in.depths()
	k := in.firstKw(d, 0, kw)
	if k < 0 {
		return "", 0, unread
	}
	if kw == "update" {
		if k = in.firstKw(d, k+1, "set"); k < 0 {
			return "", 0, unread
		}
	}
	w := in.firstKw(d, k+1, "where")
	if w < 0 {
		return "", 0, unread
	}
	last := len(in.toks) - 1
	for i := w + 1; i < len(in.toks); i++ {
		if d[i] == 0 && (in.kw(i, "order") && in.kw(i+1, "by") || in.kw(i, "limit")) {
			last = i - 1
			break
		}
	}
	if w >= last {
		return "", 0, unread
	}
	for i := last + 1; i < len(in.toks); i++ {
		if in.toks[i].Kind == sqlread.Param {
			return "", 0, "it has a placeholder in ORDER BY or LIMIT (the copy of the WHERE's must be the statement's last)"
		}
	}
	src := in.pc.src
	params := 0
	for i := w + 1; i <= last; i++ {
		if in.toks[i].Kind == sqlread.Param {
			if !in.pc.prepare {
				return "", 0, "it has a placeholder outside a prepared statement"
			}
			params++
		}
		if i > w+1 {
			for _, c := range src[in.toks[i-1].End:in.toks[i].Start] {
				if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
					return "", 0, "its WHERE holds a comment, whose reading a copy could change"
				}
			}
		}
	}
	return string(src[in.toks[w+1].Start:in.toks[last].End]), params, ""
}

// trapSafe finds what makes a WHERE unfit to be read twice: anything but
// columns, literals, variables read, operators and deterministic
// built-ins.
type trapSafe struct{ bad bool }

func (v *trapSafe) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.ColumnNameExpr, *ast.ColumnName, *ast.ParenthesesExpr, *ast.BinaryOperationExpr, *ast.UnaryOperationExpr,
		*ast.BetweenExpr, *ast.IsNullExpr, *ast.IsTruthExpr, *ast.PatternLikeOrIlikeExpr, *ast.PatternRegexpExpr,
		*ast.CaseExpr, *ast.WhenClause, *ast.RowExpr, *ast.FuncCastExpr, *ast.TimeUnitExpr, *ast.TrimDirectionExpr,
		*ast.SetCollationExpr, *test_driver.ValueExpr, *test_driver.ParamMarkerExpr:
	case *ast.PatternInExpr:
		v.bad = v.bad || x.Sel != nil
	case *ast.FuncCallExpr:
		v.bad = v.bad || !trapFuncs[x.FnName.L]
	case *ast.VariableExpr:
		// Read, a variable is one value for the whole statement.
		v.bad = v.bad || x.Value != nil
	default:
		v.bad = true
	}
	return n, v.bad
}

func (v *trapSafe) Leave(n ast.Node) (ast.Node, bool) { return n, !v.bad }

// rerunSafe: an UPDATE's assignments and a statement's ORDER BY read as
// trapSafe (DEFAULT allowed as a value), so that running the statement a
// second time after a trapped first run leaves nothing of the first.
func rerunSafe(set []*ast.Assignment, order *ast.OrderByClause) bool {
	var v trapSafe
	for _, a := range set {
		if _, ok := a.Expr.(*ast.DefaultExpr); ok {
			continue
		}
		a.Expr.Accept(&v)
	}
	if order != nil {
		for _, it := range order.Items {
			it.Expr.Accept(&v)
		}
	}
	return !v.bad
}

// trapFuncs are built-ins whose value follows from their arguments (NOW()
// and its kind are the statement's start on MariaDB and TiDB), with no
// effect beyond it.
var trapFuncs = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`lower upper lcase ucase concat concat_ws coalesce ifnull nullif if isnull abs
		length char_length character_length octet_length substring substr left right trim ltrim rtrim replace
		round truncate floor ceil ceiling mod sign greatest least field find_in_set instr locate lpad rpad
		date year month day dayofmonth hour minute second now current_timestamp curdate current_date curtime
		current_time utc_timestamp utc_date date_add date_sub adddate subdate datediff timestampdiff timestampadd
		from_unixtime str_to_date date_format convert`) {
		m[f] = true
	}
	return m
}()
