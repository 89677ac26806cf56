package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// Compound statements (MariaDB's BEGIN NOT ATOMIC ... END, IF, CASE, LOOP,
// WHILE, REPEAT, FOR, labelled ones, sql_mode=ORACLE blocks) and stored
// program definitions (CREATE PROCEDURE / FUNCTION / TRIGGER / EVENT,
// ALTER EVENT ... DO) hold statements of their own, separated by ';' that
// the server reads as part of the program. fenceproxy reads their block
// structure as the server's grammar does (blockScanner), to find where the
// server ends the statement (a single-statement body ends at its first
// ';', a block at its END: whatever follows in the packet is a statement of
// its own), and decides every statement inside:
//
//   - a compound statement runs now. Each simple statement in it is decided
//     as if it stood alone, and must be one of the kinds innerKinds allows:
//     reads, writes of unprotected tables, SET of variables that change no
//     reading, CALL of routines the catalog lets through, transaction
//     control and the control statements of a block. A write to a protected
//     table, dynamic SQL (PREPARE, EXECUTE, EXECUTE IMMEDIATE), SET NAMES /
//     sql_mode / character sets, USE and DDL are refused: their effect
//     inside a block is not something the proxy can fence or follow.
//     Every name of the block, conditions included, is checked against the
//     catalog with the server's name rules (catalogRefusal).
//   - a definition runs nothing until it is called, and the catalog reads
//     the stored body then; the definition's own text must not mention a
//     protected table, a lease function, sql_mode, a fence variable or the
//     words of programWords (programText).

// programWords, as whole words, make a definition's text suspicious.
var programWords = []string{"use", "prepare", "immediate", "execute", "names", "charset", "character", "database", "schema"}

// isCompound: a statement that opens a compound statement.
func (in *stmtIn) isCompound() bool {
	if len(in.toks) == 0 {
		return false
	}
	switch {
	case in.kw(0, "begin"):
		// BEGIN and BEGIN WORK start a transaction; so do TiDB's BEGIN
		// OPTIMISTIC and BEGIN PESSIMISTIC (on MariaDB and MySQL they are
		// syntax errors, which the compound reading refuses).
		if len(in.toks) == 1 || len(in.toks) == 2 && in.kw(1, "work") {
			return false
		}
		tidbMode := len(in.toks) == 2 && (in.kw(1, "optimistic") || in.kw(1, "pessimistic"))
		return !(tidbMode && in.st.mode.server.Flavor == TiDB)
	case in.kw(0, "declare"), in.kw(0, "if"), in.kw(0, "while"), in.kw(0, "loop"),
		in.kw(0, "repeat"), in.kw(0, "for"), in.kw(0, "case"), in.op(0, "<<"):
		return true
	case (in.toks[0].Kind == sqlread.Word || in.toks[0].Kind == sqlread.QuotedIdent) && in.op(1, ":"):
		return true // a label
	}
	return false
}

// isStoredProgram: CREATE or ALTER of a procedure, function, trigger,
// event or package.
func (in *stmtIn) isStoredProgram() bool {
	return in.programKeyword() > 0
}

// programKeyword returns the index of the PROCEDURE / FUNCTION / TRIGGER /
// EVENT / PACKAGE word of a CREATE or ALTER, or -1.
func (in *stmtIn) programKeyword() int {
	if !in.kw(0, "create") && !in.kw(0, "alter") {
		return -1
	}
	for i := 1; i < len(in.toks) && i < 24; i++ {
		if in.kw(i, "procedure") || in.kw(i, "function") || in.kw(i, "trigger") || in.kw(i, "event") ||
			in.kw(i, "package") {
			return i
		}
		if in.op(i, "(") && !in.kw(i-1, "current_user") {
			return -1
		}
	}
	return -1
}

// lexWhole lexes the packet from the statement's start to its end, ';'
// tokens included, for statements whose extent the block structure
// decides. The lexer also blanks the comments of norm as it goes.
func (in *stmtIn) lexWhole() (*stmtIn, string, int) {
	w := *in
	w.toks = nil
	lx := sqlread.NewLexer(in.pc.src, in.start, in.st.mode.lex(), in.norm)
	for {
		t, ok := lx.Next()
		if !ok {
			break
		}
		w.toks = append(w.toks, t)
	}
	w.end = len(in.pc.src)
	w.whole = true
	return &w, lx.Issue(), lx.IssuePos()
}

// cut returns w limited to the tokens [0, n): the statement up to the
// token that ends it.
func (w *stmtIn) cut(n int) *stmtIn {
	c := *w
	c.toks = w.toks[:n]
	if n < len(w.toks) {
		c.end = w.toks[n].Start
	} else {
		c.end = len(w.pc.src)
	}
	c.final = n >= len(w.toks) || w.toks[n].End >= len(w.pc.src)
	return &c
}

// piece returns the simple statement of w's tokens [from, to).
func (w *stmtIn) piece(from, to int) *stmtIn {
	p := *w
	p.toks = w.toks[from:to]
	p.start = w.toks[from].Start
	p.end = w.toks[to-1].End
	p.whole = false
	p.inBlock = true
	return &p
}

// compound decides on a compound statement: it ends where the server's
// grammar ends it, and every statement inside is decided. While the
// session's sql_mode may or may not be ORACLE, both readings must agree;
// if they do not, the refusal says so and the proxy learns sql_mode.
func (in *stmtIn) compound() stmtRes {
	e := in.pc.e
	if r, over := in.wholeOverLimit(); over {
		return r
	}
	w, issue, issuePos := in.lexWhole()
	var reads []blockResult
	for _, oracle := range oracleReadings(in.st.oracle) {
		sc := blockScanner{w: w, oracle: oracle}
		reads = append(reads, sc.topStatement())
	}
	r := reads[0]
	if len(reads) == 2 && (reads[1].end != r.end || (reads[1].why == "") != (r.why == "")) {
		if !e.hasTables() {
			return stmtRes{stmt: Stmt{Kind: Call}, endAt: len(in.pc.src)}
		}
		res := in.refuse("", "this compound statement reads differently with and without sql_mode=ORACLE, which "+
			"fenceproxy does not know for this session; set sql_mode explicitly first")
		res.refusal.SQLModeUnknown = true
		return res
	}
	if r.why != "" {
		if e.hasTables() {
			return in.refuse("", "fenceproxy cannot read the block structure of this compound statement ("+r.why+
				"); run its statements one by one")
		}
		return stmtRes{stmt: Stmt{Kind: Call}, endAt: len(in.pc.src)}
	}
	blk := w.cut(r.end)
	if e.hasTables() {
		if issue != "" && issuePos < blk.end {
			return in.refuse("", "fenceproxy cannot be sure how the server reads this statement ("+issue+
				" at byte "+itoa(issuePos)+"); write it without that construct")
		}
		for i, read := range reads {
			if res, bad := blk.blockChecks(read, i == 1 || in.st.oracle == On); bad {
				return res
			}
		}
	}
	// It may return any number of result sets, as a CALL does.
	return stmtRes{stmt: Stmt{Kind: Call}, endAt: blk.end}
}

// oracleReadings lists the sql_mode=ORACLE settings a session may have.
func oracleReadings(t Tri) []bool {
	switch t {
	case On:
		return readOn
	case Off:
		return readOff
	}
	return readBoth
}

// blockChecks decides on the statements inside a compound statement.
func (blk *stmtIn) blockChecks(r blockResult, oracle bool) (stmtRes, bool) {
	// Names anywhere in the block, conditions included: stored functions,
	// procedures (in sql_mode=ORACLE called without CALL), views whose
	// reading calls a refused function.
	if res, ok := blk.catalogRefusal(); ok {
		return res, true
	}
	if res, ok := blk.forwardTokens(); ok {
		return res, true
	}
	if res, bad := blk.programText("a compound statement (BEGIN NOT ATOMIC ... END)"); bad {
		return res, true
	}
	for _, p := range r.pieces {
		in := blk.piece(p.from, p.to)
		if res, bad := in.innerStatement(p.call); bad {
			return res, true
		}
	}
	return stmtRes{}, false
}

// innerKinds are the first words of the simple statements a compound
// statement may hold (see innerStatement); anything else is refused.
var innerKinds = map[string]bool{
	"select": true, "values": true, "with": true, "(": true, "do": true, "set": true,
	"insert": true, "replace": true, "update": true, "delete": true, "call": true,
	"show": true, "describe": true, "desc": true, "explain": true, "help": true, "check": true, "checksum": true,
	"signal": true, "resignal": true, "get": true, "raise": true,
	"start": true, "commit": true, "rollback": true, "savepoint": true, "release": true,
	// Control statements of a block.
	"declare": true, "leave": true, "iterate": true, "return": true, "open": true, "fetch": true, "close": true,
	"exit": true, "continue": true, "goto": true, "null": true,
}

// innerStatement decides on one simple statement inside a compound
// statement, as if it stood alone. call: sql_mode=ORACLE's procedure call
// without CALL (name; or name(args);).
func (in *stmtIn) innerStatement(call bool) (stmtRes, bool) {
	lead := lowerASCII(string(in.text(0)))
	what := func(why string) (stmtRes, bool) {
		return in.refuse("", "a compound statement (BEGIN NOT ATOMIC ... END, IF, CASE, LOOP, WHILE, REPEAT, FOR) "+
			why+"; run the statement on its own"), true
	}
	if call || in.toks[0].Kind == sqlread.Word && in.op(1, ":=") {
		return stmtRes{}, false // checked against the catalog with the block's names
	}
	if in.toks[0].Kind != sqlread.Word && lead != "(" || !innerKinds[lead] {
		return what("holds a statement fenceproxy does not run inside one (" + quoteForMessage(string(in.text(0))) +
			"): only reads, writes of unprotected tables, SET of variables, CALL, transaction control and " +
			"the block's own control statements")
	}
	switch lead {
	case "declare", "leave", "iterate", "return", "open", "fetch", "close", "exit", "continue", "goto", "null",
		"signal", "resignal", "get", "raise":
		return stmtRes{}, false
	case "start":
		if !in.kw(1, "transaction") {
			return what("holds START " + upperASCII(string(in.text(1))))
		}
		return stmtRes{}, false
	case "set":
		if in.kw(1, "statement") {
			return what("holds SET STATEMENT ... FOR")
		}
		if in.kw(1, "transaction") || in.kw(1, "session") && in.kw(2, "transaction") {
			return stmtRes{}, false
		}
	}
	res := in.decide()
	if res.refusal != nil {
		r := *res.refusal
		r.Reason = "in a compound statement: " + r.Reason
		return stmtRes{refusal: &r}, true
	}
	switch res.stmt.Kind {
	case Write:
		t := res.stmt.Fence.Targets[0]
		return in.refuse(t.Schema+"."+t.Table, "this compound statement writes the protected table; fenceproxy "+
			"fences writes that stand alone, not inside compound statements. Run the write on its own"), true
	case Use, SetSQLMode, SetCharset, Prepare, Execute, Deallocate:
		return what("changes the session (schema, sql_mode, character set or prepared statements) in a way " +
			"fenceproxy cannot follow")
	}
	if len(res.edits) > 0 || res.call != nil || res.endAt != 0 || res.stmt.Locks == LocksTaken {
		return what("holds a statement fenceproxy would have to change")
	}
	return stmtRes{}, false
}

// definition decides on a stored program definition: it ends where the
// server ends it (a single-statement body at its first ';'), and its text
// is checked; the body runs only when called, and the catalog reads it then.
func (in *stmtIn) definition() stmtRes {
	e := in.pc.e
	if r, over := in.wholeOverLimit(); over {
		return r
	}
	w, issue, issuePos := in.lexWhole()
	end := -1
	why := ""
	if k := in.programKeyword(); k > 0 && in.kw(k, "package") {
		why = "a package"
	} else if k > 0 {
		for _, oracle := range oracleReadings(in.st.oracle) {
			sc := blockScanner{w: w, oracle: oracle}
			r := sc.definition(k)
			if r.why != "" {
				why = r.why
				break
			}
			if end >= 0 && r.end != end {
				why = "it reads differently with and without sql_mode=ORACLE"
				break
			}
			end = r.end
		}
	}
	if why != "" {
		// The extent is not certain: the definition must be the last
		// statement of the packet, so that nothing can hide after it.
		if e.hasTables() && len(in.toks) < len(w.toks) {
			return in.refuse("", "fenceproxy cannot tell where the server ends this stored program definition ("+why+
				"), and more follows it in the query; send the definition in a query of its own")
		}
		end = len(w.toks)
	}
	def := w.cut(end)
	if e.hasTables() {
		if issue != "" && issuePos < def.end {
			return in.refuse("", "fenceproxy cannot be sure how the server reads this statement ("+issue+
				" at byte "+itoa(issuePos)+"); write it without that construct")
		}
		if res, ok := def.catalogRefusal(); ok {
			return res
		}
		if res, ok := def.forwardTokens(); ok {
			return res
		}
		if res, bad := def.programText("a stored program definition"); bad {
			return res
		}
		if def.udf() {
			return in.refuse("", "CREATE FUNCTION ... SONAME loads server code (a UDF) that fenceproxy cannot read; "+
				"run it directly on the server")
		}
	}
	return stmtRes{stmt: Stmt{Kind: Other}, endAt: def.end}
}

// udf: CREATE [AGGREGATE] FUNCTION ... SONAME.
func (in *stmtIn) udf() bool {
	for i := range in.toks {
		if in.kw(i, "soname") {
			return true
		}
	}
	return false
}

// programText refuses a program whose text mentions what fenceproxy cannot
// follow inside a program.
func (in *stmtIn) programText(what string) (stmtRes, bool) {
	e := in.pc.e
	if !e.hasTables() {
		return stmtRes{}, false
	}
	text := in.raw()
	if t := mentionsTable(e, text); t != "" {
		return in.refuse(t, what+" mentions the protected table; fenceproxy cannot fence the statements inside it. "+
			"Run them as separate statements"), true
	}
	if e.programNeedles.find(text) {
		return in.refuse("", what+" mentions a lease function, sql_mode or character_set_client; "+
			"fenceproxy cannot check what it does. Run its statements one by one"), true
	}
	// A program that sets the fence variables could run inside a
	// protected write (a stored function in its WHERE) and move the
	// fence. Programs never take the fast path, so configured names
	// need no needle of their own (a short one would slow every
	// statement down).
	v := e.pol.Vars
	for _, name := range []string{v.Lease, v.Owner, v.Token} {
		if name != "" && containsFold(text, lowerASCII(name)) {
			return in.refuse("", what+" mentions the fence variable @"+name+"; fenceproxy cannot check what it "+
				"does with it. Run its statements one by one"), true
		}
	}
	for _, w := range programWords {
		if containsWordFold(text, w) {
			return in.refuse("", what+" contains "+upperASCII(w)+"; fenceproxy cannot check what it does "+
				"(dynamic SQL, schema, sql_mode or character set changes). Run its statements one by one"), true
		}
	}
	return stmtRes{}, false
}

// mentionsTable returns the first protected table whose name occurs in
// text, or "".
func mentionsTable(e *Engine, text []byte) string {
	for i := range e.pol.Tables {
		t := &e.pol.Tables[i]
		if containsFold(text, lowerASCII(t.Table)) {
			return t.Schema + "." + t.Table
		}
	}
	for _, t := range e.leaseList {
		if containsFold(text, lowerASCII(t.Table)) {
			return t.Schema + "." + t.Table
		}
	}
	return mentionsDerived(e, text)
}

func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
