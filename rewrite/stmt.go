package rewrite

import (
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Token helpers over one statement.

// kw reports whether token i is the keyword kw (lower case): a bare word
// that does not follow "ident.".
func (in *stmtIn) kw(i int, kw string) bool {
	if i < 0 || i >= len(in.toks) {
		return false
	}
	t := in.toks[i]
	return t.Kind == sqlread.Word && !t.AfterDot && eqFold(in.pc.src[t.Start:t.End], kw)
}

// op reports whether token i is the operator op.
func (in *stmtIn) op(i int, op string) bool {
	if i < 0 || i >= len(in.toks) {
		return false
	}
	t := in.toks[i]
	return t.Kind == sqlread.Op && string(in.pc.src[t.Start:t.End]) == op
}

func (in *stmtIn) text(i int) []byte {
	t := in.toks[i]
	return in.pc.src[t.Start:t.End]
}

// raw is the statement's text as the client sent it.
func (in *stmtIn) raw() []byte { return in.pc.src[in.start:in.end] }

// normText is the statement's normalized text (comments blanked).
func (in *stmtIn) normText() string { return string(in.norm[in.start:in.end]) }

// closeParen returns the index of the ')' matching the '(' at i, or -1.
func (in *stmtIn) closeParen(i int) int {
	depth := 0
	for j := i; j < len(in.toks); j++ {
		if in.toks[j].Kind != sqlread.Op {
			continue
		}
		switch in.pc.src[in.toks[j].Start] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

func (in *stmtIn) refuse(table, reason string) stmtRes {
	return stmtRes{refusal: &Refusal{Table: table, Reason: reason}}
}

// decide is the verdict on one statement with at least one token.
func (in *stmtIn) decide() stmtRes {
	res := in.decideStmt()
	if res.refusal != nil || res.call != nil {
		return res
	}
	if r := in.leaseLockRefusal(); r != nil {
		return *r
	}
	if res.stmt.Locks == LocksKept {
		locks, r := in.lockEffect(res.stmt.Kind)
		if r != nil {
			return *r
		}
		res.stmt.Locks = locks
	}
	if res.stmt.Locks != LocksKept {
		res.matters = true
	}
	return res
}

// decideStmt is decide without the checks every statement gets.
func (in *stmtIn) decideStmt() stmtRes {
	e := in.pc.e
	// The closed list of statement kinds (kinds.go).
	if r, ok := in.kindRefusal(); ok {
		return r
	}
	if r, ok := in.systemSchemaRefusal(); ok {
		return r
	}
	// Lease functions: only the exact SELECT fence_xxx(...) shape.
	if i := in.leaseMention(); i >= 0 {
		return in.leaseCall(i)
	}
	// Statements whose extent the server's block structure decides, and
	// statements that hold a statement: each reads its own tokens.
	switch {
	case in.isCompound() && !in.inBlock:
		return in.compound()
	case in.isStoredProgram():
		return in.definition()
	case in.kw(0, "set") && in.kw(1, "statement"):
		return in.setStatement()
	}
	if r, ok := in.catalogRefusal(); ok {
		return r
	}
	if r, ok := in.guardTriggerDDL(); ok {
		return r
	}
	if e.hasTables() {
		if r, ok := in.forwardTokens(); ok {
			return r
		}
	}
	switch {
	case in.kw(0, "prepare"):
		return in.prepareStmt()
	case in.kw(0, "execute"):
		if in.kw(1, "immediate") {
			return in.executeImmediate()
		}
		return in.executeStmt()
	case in.kw(0, "deallocate") || in.kw(0, "drop") && in.kw(1, "prepare"):
		return in.deallocateStmt()
	case in.kw(0, "use"):
		return in.useStmt()
	case in.kw(0, "lock"):
		return in.lockTablesStmt()
	case in.kw(0, "binlog") && e.hasTables():
		return in.refuse("", "BINLOG events cannot be checked for writes to protected tables")
	case in.kw(0, "xa") && (in.kw(1, "start") || in.kw(1, "begin")):
		return stmtRes{stmt: Stmt{Kind: XAStart}, matters: true}
	case in.kw(0, "call"):
		// A procedure's response is any number of result sets and one OK.
		// The verdict looks at nothing else.
		return stmtRes{stmt: Stmt{Kind: Call}, valueBlind: true}
	}
	// A name that is not valid UTF-8 makes the verdict depend on whether
	// the raw text, literals included, mentions a protected table.
	invalidName := e.hasTables() && in.hasInvalidUTF8Name()
	if invalidName && !in.readOnlyHead() {
		if t := in.mentions(); t != "" {
			return in.refuse(t, "this statement has a name that is not valid UTF-8 and mentions a protected table; "+
				"the server may read that name as the protected table (character set conversion, case folding). "+
				"Send names in UTF-8")
		}
	}
	if r, ok := in.withReturning(); ok {
		return r
	}
	if r, ok := in.mariaAnalyze(); ok {
		return r
	}
	stmt, err := parseOne(in.normText(), in.st.mode)
	if err != nil {
		return in.unparsed()
	}
	switch n := stmt.(type) {
	case *ast.ProcedureInfo:
		return in.definition()
	case *ast.SetStmt:
		return in.setStmt(n)
	case *ast.UseStmt:
		return stmtRes{stmt: Stmt{Kind: Use, Schema: n.DBName}, matters: true}
	case *ast.UpdateStmt, *ast.DeleteStmt, *ast.InsertStmt:
		res := in.writeStmt(n, nil)
		res.valueBlind = !invalidName && res.refusal == nil && in.writeIgnoresValues(n, &res)
		return res
	case *ast.ExplainStmt:
		switch inner := n.Stmt.(type) {
		case *ast.UpdateStmt, *ast.DeleteStmt, *ast.InsertStmt:
			// EXPLAIN ANALYZE runs the statement; plain EXPLAIN does not,
			// but a fence there is harmless.
			return in.writeStmt(inner, n)
		}
		return in.readOrRefuse(stmt)
	case *ast.SelectStmt, *ast.SetOprStmt, *ast.BeginStmt, *ast.CommitStmt, *ast.RollbackStmt:
		// Reads and transaction control are relayed whatever they say, as
		// long as the parser reads them (readOrRefuse would also say Other);
		// the same shape parses whatever its literals' values.
		return stmtRes{stmt: Stmt{Kind: Other}, valueBlind: !invalidName && in.literalsAreValues(n)}
	}
	if !e.hasTables() {
		return stmtRes{stmt: Stmt{Kind: Other}}
	}
	return in.readOrRefuse(stmt)
}

// unparsed: the parser cannot read the statement. It is relayed unless it
// may touch a protected table or the session.
func (in *stmtIn) unparsed() stmtRes {
	if t := in.mentions(); t != "" && !in.readOnlyHead() {
		if a := in.rowAliasAt(); a >= 0 {
			return in.rowAliasInsert(t, a)
		}
		if in.returning() {
			return in.refuse(t, "fenceproxy cannot fence statements with RETURNING yet; "+
				"run the write, then SELECT the rows")
		}
		return in.refuse(t, "fenceproxy cannot parse this statement, and it mentions the protected table; "+
			"rewrite it in plain MySQL syntax (fenceproxy fences UPDATE, DELETE, INSERT and REPLACE)")
	}
	if in.kw(0, "set") {
		return in.setUnparsed()
	}
	return stmtRes{stmt: Stmt{Kind: Other}}
}

// readOnlyHead: the statement starts with words that make it one that
// cannot write a table (SELECT, SHOW, CHECK TABLE, CHECKSUM TABLE,
// ANALYZE TABLE): relayed even if the parser cannot read it.
func (in *stmtIn) readOnlyHead() bool {
	return in.kw(0, "select") || in.kw(0, "show") || in.kw(0, "check") && in.kw(1, "table") ||
		in.kw(0, "checksum") && in.kw(1, "table") || in.kw(0, "analyze") && in.kw(1, "table")
}

// hasInvalidUTF8Name: an identifier that is not valid UTF-8. The parser
// turns such bytes into '?', so its names would not be the server's.
func (in *stmtIn) hasInvalidUTF8Name() bool {
	for _, t := range in.toks {
		if t.Kind == sqlread.Word || t.Kind == sqlread.QuotedIdent || t.Kind == sqlread.UserVar || t.Kind == sqlread.SysVar {
			if !utf8.Valid(in.pc.src[t.Start:t.End]) {
				return true
			}
		}
	}
	return false
}

// rowAliasAt: INSERT/REPLACE ... VALUES|SET ... AS alias (MySQL 8.0.19+),
// which the parser does not read; the index of its AS, or -1.
func (in *stmtIn) rowAliasAt() int {
	if !in.kw(0, "insert") && !in.kw(0, "replace") {
		return -1
	}
	d := in.depths()
	values := false
	for i := range in.toks {
		if d[i] != 0 {
			continue
		}
		if in.kw(i, "values") || in.kw(i, "value") || in.kw(i, "set") {
			values = true
		}
		if values && in.kw(i, "as") {
			return i
		}
	}
	return -1
}

// rowAliasInsert decides on an INSERT with a row alias (AS at token a):
// the statement goes out verbatim after a guard, so the proxy needs only
// its target, which the statement without `AS name [(col, ...)]` names as
// well. Only names, commas and one pair of parentheses are left out.
func (in *stmtIn) rowAliasInsert(table string, a int) stmtRes {
	refuse := func() stmtRes {
		return in.refuse(table, "fenceproxy cannot read this INSERT ... AS alias (a row alias); "+
			"write it as AS name [(col, ...)] right after the VALUES rows or the SET list")
	}
	isName := func(j int) bool {
		return j < len(in.toks) && (in.toks[j].Kind == sqlread.Word || in.toks[j].Kind == sqlread.QuotedIdent)
	}
	end := a + 1
	if !isName(end) {
		return refuse()
	}
	end++
	if in.op(end, "(") {
		c := in.closeParen(end)
		if c < 0 {
			return refuse()
		}
		for j := end + 1; j < c; j++ {
			if !(isName(j) && (j-end)%2 == 1 || in.op(j, ",") && (j-end)%2 == 0) {
				return refuse()
			}
		}
		end = c + 1
	}
	if end < len(in.toks) && !(in.kw(end, "on") && in.kw(end+1, "duplicate")) {
		return refuse()
	}
	from := in.toks[a].Start - in.start
	to := len(in.norm[in.start:in.end])
	if end < len(in.toks) {
		to = in.toks[end].Start - in.start
	}
	norm := in.normText()
	n, err := parseOne(norm[:from]+" "+norm[to:], in.st.mode)
	if err != nil {
		return refuse()
	}
	x, ok := n.(*ast.InsertStmt)
	if !ok {
		return refuse()
	}
	return in.writeStmt(x, nil)
}

// returning: MariaDB's DELETE / INSERT / REPLACE ... RETURNING.
func (in *stmtIn) returning() bool { return in.returningAt() >= 0 }

// returningAt returns the index of a top-level RETURNING, or -1.
func (in *stmtIn) returningAt() int {
	d := in.depths()
	for i := range in.toks {
		if d[i] == 0 && in.kw(i, "returning") {
			return i
		}
	}
	return -1
}

// withReturning handles MariaDB's DELETE / INSERT / REPLACE ... RETURNING
// (RETURNING is a reserved word there, so a top-level one is the clause):
// the parser does not read the clause, so the statement is decided
// without it; the fence goes before it, and the clause stays as written.
func (in *stmtIn) withReturning() (stmtRes, bool) {
	if in.st.mode.server.Flavor != MariaDB ||
		!(in.kw(0, "delete") || in.kw(0, "insert") || in.kw(0, "replace")) {
		return stmtRes{}, false
	}
	r := in.returningAt()
	if r <= 0 {
		return stmtRes{}, false
	}
	head := *in
	head.toks = in.toks[:r]
	head.end = in.toks[r].Start
	head.noTrap = true
	n, err := parseOne(head.normText(), in.st.mode)
	if err != nil {
		return stmtRes{}, false
	}
	switch x := n.(type) {
	case *ast.DeleteStmt, *ast.InsertStmt:
		res := head.writeStmt(x, nil)
		markRows(&res)
		return res, true
	}
	return stmtRes{}, false
}

// mentions returns the first protected table whose name occurs anywhere in
// the statement's raw text (comments and strings included), or "".
func (in *stmtIn) mentions() string { return mentionsTable(in.pc.e, in.raw()) }

// mariaAnalyze handles MariaDB's ANALYZE [FORMAT=JSON] UPDATE | DELETE |
// INSERT | REPLACE ...: the statement runs (and its plan is returned), so
// it is fenced like the statement itself. The parser does not read the
// ANALYZE prefix; the statement is decided from its own first keyword on.
func (in *stmtIn) mariaAnalyze() (stmtRes, bool) {
	if in.st.mode.server.Flavor != MariaDB || !in.kw(0, "analyze") {
		return stmtRes{}, false
	}
	i := 1
	if in.kw(1, "format") && in.op(2, "=") && in.kw(3, "json") {
		i = 4
	}
	if in.kw(i, "select") || in.kw(i, "with") || in.op(i, "(") {
		return stmtRes{stmt: Stmt{Kind: Other}}, true // a read
	}
	if !(in.kw(i, "update") || in.kw(i, "delete") || in.kw(i, "insert") || in.kw(i, "replace")) {
		return stmtRes{}, false
	}
	inner := *in
	inner.toks = in.toks[i:]
	inner.start = in.toks[i].Start
	inner.noTrap = true
	if r, ok := inner.withReturning(); ok {
		return r, true
	}
	n, err := parseOne(inner.normText(), in.st.mode)
	if err != nil {
		return stmtRes{}, false
	}
	switch x := n.(type) {
	case *ast.UpdateStmt, *ast.DeleteStmt, *ast.InsertStmt:
		res := inner.writeStmt(x, nil)
		markRows(&res)
		return res, true
	}
	return stmtRes{}, false
}

// markRows records that a write answers with a result set (RETURNING,
// ANALYZE): the proxy cannot make up an empty one for a rejected write.
func markRows(res *stmtRes) {
	if res.stmt.Kind == Write && res.stmt.Fence != nil {
		f := *res.stmt.Fence
		f.Rows = true
		res.stmt.Fence = &f
	}
}
