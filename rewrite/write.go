package rewrite

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// writeStmt fences an UPDATE, DELETE, INSERT or REPLACE that writes a
// protected table. explainOnly: the statement is only explained, not run
// (the fence is still added; it is harmless).
func (in *stmtIn) writeStmt(n ast.StmtNode, explain *ast.ExplainStmt) stmtRes {
	explainOnly := explain != nil && !explain.Analyze
	var targets []Target
	var r *stmtRes
	switch x := n.(type) {
	case *ast.UpdateStmt:
		targets, r = in.updateTargets(x)
	case *ast.DeleteStmt:
		targets, r = in.deleteTargets(x)
	case *ast.InsertStmt:
		targets, r = in.insertTarget(x)
	}
	if r != nil {
		return *r
	}
	if len(targets) == 0 {
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	e := in.pc.e
	for _, t := range targets {
		if e.isLease(e.lookup(t.Schema, t.Table)) {
			return in.refuse(t.Schema+"."+t.Table, "this is a lease table: only fenceproxy's lease functions "+
				"(SELECT fence_acquire(...), fence_renew, fence_release) change it")
		}
	}
	if what, ok := in.assignsFenceVar(); ok {
		return in.refuse(targets[0].Schema+"."+targets[0].Table, "this statement assigns "+what+
			" while it writes a protected table, and the fence reads the fence variables (@"+e.pol.Vars.Lease+", @"+
			e.pol.Vars.Owner+", @"+e.pol.Vars.Token+") during the statement; set them in a statement of their own "+
			"(SET @"+e.pol.Vars.Token+" = ..., or SELECT fence_acquire(...)) before the write")
	}
	for _, t := range targets {
		if t.Lease != "" && !safeLease(t.Lease) {
			return in.refuse(t.Schema+"."+t.Table, "the policy's fixed lease name for this table cannot be written into SQL "+
				"safely (it must be printable ASCII without quotes, backslashes or '?')")
		}
	}
	if hasHighWord(in) && e.hasTables() {
		return in.refuse(targets[0].Schema+"."+targets[0].Table, "this statement has non-ASCII bytes outside quotes; "+
			"fenceproxy fences only statements whose unquoted names are ASCII (quote such names with backquotes)")
	}
	rowConds, trap, rr := in.rowLease(n, targets, explain)
	if rr != nil {
		return *rr
	}
	fc := &Fence{Targets: targets, Digest: in.digest(), Presented: in.presented, Trap: trap}
	var edits []edit
	_, isInsert := n.(*ast.InsertStmt)
	tidb := in.st.mode.server.Flavor == TiDB
	galera := in.st.mode.server.Galera
	if isInsert || tidb || galera {
		if name := in.readsGuardState(); name != "" {
			what, save := "an INSERT or REPLACE", "SELECT "+name+" INTO @v"
			switch {
			case tidb:
				// TiDB has no SELECT ... INTO @var.
				what, save = "a write on TiDB", "SET @v = "+name
			case galera && !isInsert:
				what = "a write on Galera"
			}
			return in.refuse(targets[0].Schema+"."+targets[0].Table, "fenceproxy checks the lease of "+what+
				" with a statement of its own just before it, so "+name+" inside it would describe that check; "+
				"read it in a statement before the write ("+save+") and use @v")
		}
		// An INSERT or REPLACE goes out exactly as written, after a guard
		// statement that checks the lease in the same transaction (see
		// Fence.Guard): no fence placed in its text can leave every server
		// rule of the statement as it was. On TiDB every fenced write is
		// guarded: measured on a real tidb-server
		// (integration/tidb_race_test.go), a FOR UPDATE read inside the
		// statement locks nothing in an autocommit statement, and inside
		// EXISTS with the lease name in a variable it is folded at plan
		// time; only a guard in an explicit transaction had no stale
		// commit. On Galera every write is guarded too: only a guard that
		// changes the lease row is ordered against a takeover on another
		// node (integration/galera_race_test.go).
		fc.Guard = true
	}
	if !fc.Guard || len(rowConds) > 0 {
		var conds []string
		if !fc.Guard {
			conds = append(conds, e.fenceSQL(in.fenceKeys(targets), in.st.mode.server.Flavor))
		}
		conds = append(conds, rowConds...)
		fence := strings.Join(conds, " AND ")
		var why string
		switch x := n.(type) {
		case *ast.UpdateStmt:
			edits, why = in.spliceUpdateDelete(x.Where != nil, x.Order != nil, x.Limit != nil, true, fence)
		case *ast.DeleteStmt:
			edits, why = in.spliceUpdateDelete(x.Where != nil, x.Order != nil, x.Limit != nil, false, fence)
		}
		if why != "" {
			return in.refuse(targets[0].Schema+"."+targets[0].Table, why)
		}
		if why := in.verify(n, explain != nil, edits, targets, !fc.Guard, rowConds); why != "" {
			return in.refuse(targets[0].Schema+"."+targets[0].Table, why)
		}
	}
	st := Stmt{Kind: Write, Fence: fc}
	if explainOnly {
		st = Stmt{Kind: Other}
	}
	return stmtRes{stmt: st, matters: !explainOnly, edits: edits}
}

// hasHighWord: a bare word with a byte >= 0x80. Which bytes of a non-ASCII
// name are letters, spaces or punctuation depends on the client character
// set; quoted names and strings are safe.
func hasHighWord(in *stmtIn) bool {
	for _, t := range in.toks {
		if t.Kind != sqlread.Word {
			continue
		}
		for _, c := range in.pc.src[t.Start:t.End] {
			if c >= 0x80 {
				return true
			}
		}
	}
	return false
}

// depths returns the parenthesis depth of each token (before it).
func (in *stmtIn) depths() []int {
	d := make([]int, len(in.toks))
	depth := 0
	for i, t := range in.toks {
		if t.Kind == sqlread.Op && t.End-t.Start == 1 && in.pc.src[t.Start] == ')' {
			depth--
		}
		d[i] = depth
		if t.Kind == sqlread.Op && t.End-t.Start == 1 && in.pc.src[t.Start] == '(' {
			depth++
		}
	}
	return d
}

// firstKw returns the first depth-0 token at or after from that is kw.
func (in *stmtIn) firstKw(d []int, from int, kw string) int {
	for i := from; i < len(in.toks); i++ {
		if d[i] == 0 && in.kw(i, kw) {
			return i
		}
	}
	return -1
}

// suspicious words must not appear at depth 0 in the clauses after WHERE
// of an UPDATE or DELETE: they would mean the statement has a clause the
// splice does not expect.
var suspicious = []string{"returning", "group", "having", "window", "union", "except", "intersect",
	"into", "offset", "fetch", "for", "lock", "select", "values", "procedure"}

// spliceUpdateDelete places the fence in an UPDATE or DELETE: inside the
// top-level WHERE, or as a new WHERE before ORDER BY / LIMIT / the end.
func (in *stmtIn) spliceUpdateDelete(hasWhere, hasOrder, hasLimit, isUpdate bool, fence string) ([]edit, string) {
	const mismatch = "fenceproxy could not place the fence with certainty in this statement (its clauses did not " +
		"match what the parser read); simplify it or report it as a fenceproxy bug"
	if paren := in.balanced(); !paren {
		return nil, mismatch
	}
	d := in.depths()
	kwName := "delete"
	if isUpdate {
		kwName = "update"
	}
	k := in.firstKw(d, 0, kwName)
	if k < 0 {
		return nil, mismatch
	}
	from := k + 1
	if isUpdate {
		s := in.firstKw(d, from, "set")
		if s < 0 {
			return nil, mismatch
		}
		from = s + 1
	}
	where, order, limit := -1, -1, -1
	for i := from; i < len(in.toks); i++ {
		if d[i] != 0 || in.toks[i].Kind != sqlread.Word {
			continue
		}
		switch {
		case in.kw(i, "where"):
			if where >= 0 || order >= 0 || limit >= 0 {
				return nil, mismatch
			}
			where = i
		case in.kw(i, "order") && in.kw(i+1, "by"):
			if order >= 0 || limit >= 0 {
				return nil, mismatch
			}
			order = i
		case in.kw(i, "limit"):
			if limit >= 0 {
				return nil, mismatch
			}
			limit = i
		default:
			if where >= 0 || isUpdate {
				for _, w := range suspicious {
					if in.kw(i, w) {
						return nil, mismatch
					}
				}
			}
		}
	}
	if (where >= 0) != hasWhere || (order >= 0) != hasOrder || (limit >= 0) != hasLimit {
		return nil, mismatch
	}
	last := len(in.toks) - 1
	if order >= 0 {
		last = order - 1
	} else if limit >= 0 {
		last = limit - 1
	}
	if where >= 0 {
		if last <= where {
			return nil, mismatch
		}
		return []edit{
			{pos: in.toks[where+1].Start, end: in.toks[where+1].Start, text: "("},
			{pos: in.toks[last].End, end: in.toks[last].End, text: ") AND " + fence},
		}, ""
	}
	if last < from {
		return nil, mismatch
	}
	return []edit{{pos: in.toks[last].End, end: in.toks[last].End, text: " WHERE " + fence}}, ""
}

// balanced reports whether the statement's parentheses balance.
func (in *stmtIn) balanced() bool {
	depth := 0
	for _, t := range in.toks {
		if t.Kind != sqlread.Op || t.End-t.Start != 1 {
			continue
		}
		switch in.pc.src[t.Start] {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}

// readsGuardState returns the first session value a guarded write could
// read that the guard statement before it changes (ROW_COUNT(),
// FOUND_ROWS(), @@warning_count, @@error_count), or "".
func (in *stmtIn) readsGuardState() string {
	for i, t := range in.toks {
		switch t.Kind {
		case sqlread.Word:
			if (in.kw(i, "row_count") || in.kw(i, "found_rows")) && in.op(i+1, "(") {
				return upperASCII(string(in.text(i))) + "()"
			}
		case sqlread.SysVar:
			w := lowerASCII(string(in.text(i)))
			if strings.HasSuffix(w, "warning_count") || strings.HasSuffix(w, "error_count") {
				return string(in.text(i))
			}
		}
	}
	return ""
}
