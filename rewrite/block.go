package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// blockScanner reads the block structure of a compound statement or a
// stored program body the way MariaDB's grammar does (sql_yacc.yy:
// sp_proc_stmt and the rules under it, default and ORACLE), over the
// tokens of the rest of the packet (';' included). It finds where the
// statement ends and lists the simple statements inside; it does not
// parse expressions, only finds where they end. Measured on MariaDB 10.11:
// every statement inside a block ends with ';'; a block ends with END [label],
// IF with END IF, CASE with END CASE (a CASE expression with END), LOOP,
// WHILE, REPEAT and FOR with END LOOP / WHILE / REPEAT / FOR (ORACLE: WHILE
// ... LOOP and FOR ... LOOP end with END LOOP); a single-statement body
// ends at its first ';'; `SELECT 1 END` takes END as an alias. Where the
// reading is not certain (an END that may be a name, tokens the grammar
// does not expect), why is set and the caller refuses.
type blockScanner struct {
	w      *stmtIn
	oracle bool
	pieces []blockPiece
	why    string
	// pendingSection: routineBody stopped after ORACLE's AS / IS, where a
	// declaration section and a block follow.
	pendingSection bool
}

// blockPiece is a simple statement of a block: tokens [from, to).
type blockPiece struct {
	from, to int
	call     bool // sql_mode=ORACLE: a procedure called without CALL
}

type blockResult struct {
	end    int // index of the token that ends the statement (';'), or len(toks)
	pieces []blockPiece
	why    string
}

func (sc *blockScanner) n() int                  { return len(sc.w.toks) }
func (sc *blockScanner) kw(i int, w string) bool { return sc.w.kw(i, w) }
func (sc *blockScanner) semi(i int) bool         { return sc.w.op(i, ";") }

func (sc *blockScanner) fail(i int, why string) int {
	if sc.why == "" {
		sc.why = why
	}
	return sc.n()
}

func (sc *blockScanner) result(end int) blockResult {
	return blockResult{end: end, pieces: sc.pieces, why: sc.why}
}

// topStatement reads a compound statement at token 0.
func (sc *blockScanner) topStatement() blockResult {
	i := sc.stmt(0)
	if sc.why == "" && i < sc.n() && !sc.semi(i) {
		sc.fail(i, "tokens after the end of the compound statement")
	}
	return sc.result(i)
}

// terminator: a word that ends the statement list of a block.
func (sc *blockScanner) terminator(i int) bool {
	return sc.kw(i, "end") || sc.kw(i, "else") || sc.kw(i, "elseif") || sc.kw(i, "elsif") ||
		sc.kw(i, "when") || sc.kw(i, "until") || sc.kw(i, "exception")
}

// stmt reads one statement of a block at i and returns the index after it.
func (sc *blockScanner) stmt(i int) int {
	if sc.why != "" {
		return sc.n()
	}
	if i >= sc.n() {
		return sc.fail(i, "the text ends inside a block")
	}
	if sc.w.isName(i) && sc.w.op(i+1, ":") {
		i += 2 // a label
	} else if sc.w.op(i, "<<") && sc.w.isName(i+1) && sc.w.op(i+2, ">>") {
		i += 3 // an ORACLE label
	}
	switch {
	case sc.kw(i, "begin"):
		return sc.block(i + 1)
	case sc.kw(i, "declare") && sc.oracle:
		return sc.declareSection(i + 1)
	case sc.kw(i, "declare"):
		return sc.declaration(i+1, i)
	case sc.kw(i, "if"):
		return sc.ifStmt(i + 1)
	case sc.kw(i, "case"):
		return sc.caseStmt(i + 1)
	case sc.kw(i, "loop"):
		return sc.endWith(sc.stmts(i+1), "loop")
	case sc.kw(i, "while"):
		do := "do"
		end := "while"
		if sc.oracle {
			do, end = "loop", "loop"
		}
		j := sc.expr(i+1, do)
		return sc.endWith(sc.stmts(j+1), end)
	case sc.kw(i, "repeat"):
		j := sc.stmts(i + 1)
		if !sc.kw(j, "until") {
			return sc.fail(j, "REPEAT without UNTIL")
		}
		j = sc.expr(j+1, "end")
		return sc.endWith(j, "repeat")
	case sc.kw(i, "for"):
		do, end := "do", "for"
		if sc.oracle {
			do, end = "loop", "loop"
		}
		j := sc.expr(i+1, do)
		return sc.endWith(sc.stmts(j+1), end)
	}
	return sc.simple(i, i)
}

// stmts reads statements, each ending with ';', up to a terminator.
func (sc *blockScanner) stmts(i int) int {
	for sc.why == "" {
		if i >= sc.n() {
			return sc.fail(i, "the text ends inside a block")
		}
		if sc.terminator(i) {
			return i
		}
		j := sc.stmt(i)
		if sc.why != "" {
			break
		}
		if !sc.semi(j) {
			return sc.fail(j, "a statement inside a block does not end with ';'")
		}
		i = j + 1
	}
	return sc.n()
}

// block reads BEGIN [NOT ATOMIC] statements [EXCEPTION handlers] END [label]
// from i, after BEGIN.
func (sc *blockScanner) block(i int) int {
	if sc.kw(i, "not") && sc.kw(i+1, "atomic") {
		i += 2
	}
	j := sc.stmts(i)
	if sc.oracle && sc.kw(j, "exception") {
		j = sc.handlers(j + 1)
	}
	if !sc.kw(j, "end") {
		return sc.fail(j, "a block without END")
	}
	return sc.label(j + 1)
}

// handlers reads ORACLE's WHEN cond [OR cond] THEN statements ... up to END.
func (sc *blockScanner) handlers(i int) int {
	for sc.why == "" && sc.kw(i, "when") {
		j := sc.expr(i+1, "then")
		i = sc.stmts(j + 1)
	}
	return i
}

// label skips an optional label after END ... at i.
func (sc *blockScanner) label(i int) int {
	if i < sc.n() && sc.w.isName(i) && !sc.terminator(i) && (i+1 >= sc.n() || sc.semi(i+1)) {
		return i + 1
	}
	return i
}

// endWith expects END word [label] at j.
func (sc *blockScanner) endWith(j int, word string) int {
	if sc.why != "" {
		return sc.n()
	}
	if !sc.kw(j, "end") || !sc.kw(j+1, word) {
		return sc.fail(j, "a "+upperASCII(word)+" without END "+upperASCII(word))
	}
	return sc.label(j + 2)
}

func (sc *blockScanner) ifStmt(i int) int {
	j := sc.expr(i, "then")
	j = sc.stmts(j + 1)
	for sc.why == "" && (sc.kw(j, "elseif") || sc.kw(j, "elsif")) {
		j = sc.expr(j+1, "then")
		j = sc.stmts(j + 1)
	}
	if sc.kw(j, "else") {
		j = sc.stmts(j + 1)
	}
	return sc.endWith(j, "if")
}

func (sc *blockScanner) caseStmt(i int) int {
	if !sc.kw(i, "when") {
		i = sc.expr(i, "when")
	}
	for sc.why == "" && sc.kw(i, "when") {
		j := sc.expr(i+1, "then")
		i = sc.stmts(j + 1)
	}
	if sc.kw(i, "else") {
		i = sc.stmts(i + 1)
	}
	return sc.endWith(i, "case")
}

// declareSection reads ORACLE's DECLARE declarations; BEGIN ... END.
func (sc *blockScanner) declareSection(i int) int {
	for sc.why == "" {
		if i >= sc.n() {
			return sc.fail(i, "DECLARE without BEGIN")
		}
		if sc.kw(i, "begin") {
			return sc.block(i + 1)
		}
		j := sc.declaration(i, -1)
		if !sc.semi(j) {
			return sc.fail(j, "a declaration does not end with ';'")
		}
		i = j + 1
	}
	return sc.n()
}

// declaration reads one declaration at i (after DECLARE in the default
// grammar): a handler's statement is a statement of the block; anything
// else ends at ';'. piece is the index of the DECLARE word, or -1 when the
// declaration is no statement of its own (ORACLE's DECLARE section).
func (sc *blockScanner) declaration(i, piece int) int {
	if (sc.kw(i, "continue") || sc.kw(i, "exit") || sc.kw(i, "undo")) && sc.kw(i+1, "handler") && sc.kw(i+2, "for") {
		j := sc.conditions(i + 3)
		return sc.stmt(j)
	}
	if piece < 0 {
		return sc.scanTo(i, false)
	}
	return sc.simple(piece, i)
}

// conditions skips a handler's condition list.
func (sc *blockScanner) conditions(i int) int {
	for sc.why == "" {
		switch {
		case sc.kw(i, "sqlstate"):
			i++
			if sc.kw(i, "value") {
				i++
			}
			if i >= sc.n() || sc.w.toks[i].Kind != sqlread.String {
				return sc.fail(i, "SQLSTATE without a string")
			}
			i++
		case sc.kw(i, "not") && sc.kw(i+1, "found"):
			i += 2
		case i < sc.n() && (sc.w.toks[i].Kind == sqlread.Number || sc.w.isName(i)):
			i++
		default:
			return sc.fail(i, "a handler condition fenceproxy cannot read")
		}
		if !sc.w.op(i, ",") {
			return i
		}
		i++
	}
	return sc.n()
}

// expr skips an expression up to the word stop at parenthesis depth 0
// and returns stop's index. CASE ... END inside it are skipped whole.
func (sc *blockScanner) expr(i int, stop string) int {
	depth, cases := 0, 0
	for ; i < sc.n() && sc.why == ""; i++ {
		switch {
		case sc.w.op(i, "("):
			depth++
		case sc.w.op(i, ")"):
			depth--
		case sc.semi(i):
			return sc.fail(i, "';' before "+upperASCII(stop))
		case sc.kw(i, "case"):
			cases++
		case sc.kw(i, "end"):
			if cases == 0 {
				if stop == "end" && depth == 0 {
					return i
				}
				return sc.fail(i, "END before "+upperASCII(stop))
			}
			cases--
		case depth == 0 && cases == 0 && sc.kw(i, stop):
			return i
		}
	}
	return sc.fail(i, "no "+upperASCII(stop))
}

// simple reads a simple statement that starts at from (its first word at
// word) up to its ';', and records it.
func (sc *blockScanner) simple(from, word int) int {
	j := sc.scanTo(word, true)
	if sc.why != "" {
		return sc.n()
	}
	if j == from {
		return sc.fail(j, "an empty statement")
	}
	p := blockPiece{from: from, to: j}
	if sc.oracle {
		p.call = sc.bareCall(from, j)
	}
	sc.pieces = append(sc.pieces, p)
	return j
}

// scanTo returns the index of the ';' (or the end) that ends a simple
// statement starting at i. An END there must close a CASE expression;
// any other END may be a name (SELECT 1 END is an alias) or the end of a
// block the statement forgot its ';' before: not certain.
func (sc *blockScanner) scanTo(i int, _ bool) int {
	cases := 0
	for ; i < sc.n(); i++ {
		switch {
		case sc.semi(i):
			return i
		case sc.kw(i, "case"):
			cases++
		case sc.kw(i, "end"):
			if cases == 0 {
				return sc.fail(i, "an END fenceproxy cannot place (a name, or a missing ';')")
			}
			cases--
		}
	}
	return i
}

// bareCall: ORACLE's procedure call without CALL: name [. name] [(...)].
func (sc *blockScanner) bareCall(from, to int) bool {
	i := from
	if !sc.w.isName(i) || sc.w.toks[i].Kind == sqlread.Word && innerKinds[lowerASCII(string(sc.w.text(i)))] {
		return false
	}
	i++
	for sc.w.op(i, ".") && sc.w.isName(i+1) {
		i += 2
	}
	if i == to {
		return true
	}
	if sc.w.op(i, "(") {
		c := sc.w.closeParen(i)
		return c == to-1
	}
	return false
}

// definition reads a stored program definition whose PROCEDURE /
// FUNCTION / TRIGGER / EVENT word is at k: where its body starts, and
// where the body, and with it the statement, ends.
func (sc *blockScanner) definition(k int) blockResult {
	w := sc.w
	alter := w.kw(0, "alter")
	var body int
	switch {
	case w.kw(k, "procedure") || w.kw(k, "function"):
		if alter {
			// ALTER PROCEDURE / FUNCTION change characteristics only.
			return sc.result(sc.scanTo(0, false))
		}
		body = sc.routineBody(k + 1)
	case w.kw(k, "trigger"):
		body = -1
		for i := k + 1; i < sc.n() && !sc.semi(i); i++ {
			if w.kw(i, "for") && w.kw(i+1, "each") && w.kw(i+2, "row") {
				body = i + 3
				if w.kw(body, "follows") || w.kw(body, "precedes") {
					body += 2
				}
				break
			}
		}
		if body < 0 {
			sc.fail(k, "no FOR EACH ROW")
		}
	case w.kw(k, "event"):
		body = -1
		depth := 0
		for i := k + 1; i < sc.n() && !sc.semi(i); i++ {
			switch {
			case w.op(i, "("):
				depth++
			case w.op(i, ")"):
				depth--
			case depth == 0 && w.kw(i, "do"):
				body = i + 1
			}
			if body >= 0 {
				break
			}
		}
		if body < 0 {
			// ALTER EVENT without DO: no body.
			if alter {
				return sc.result(sc.scanTo(0, false))
			}
			sc.fail(k, "no DO")
		}
	default:
		sc.fail(k, "an unknown program kind")
	}
	if sc.why != "" {
		return sc.result(sc.n())
	}
	if body >= sc.n() || !(w.isName(body) || w.op(body, "(") || w.op(body, "<<")) {
		sc.fail(body, "a body fenceproxy cannot find")
		return sc.result(sc.n())
	}
	var i int
	if sc.pendingSection {
		i = sc.declareSection(body)
	} else {
		i = sc.stmt(body)
	}
	if sc.why == "" && i < sc.n() && !sc.semi(i) {
		sc.fail(i, "tokens after the body")
	}
	return sc.result(i)
}

// routineBody returns where a procedure's or function's body starts,
// after [IF NOT EXISTS] name [(params)] [RETURNS type] characteristics.
func (sc *blockScanner) routineBody(i int) int {
	w := sc.w
	if w.kw(i, "if") && w.kw(i+1, "not") && w.kw(i+2, "exists") {
		i += 3
	}
	if !w.isName(i) {
		return sc.fail(i, "no routine name")
	}
	i++
	for w.op(i, ".") && w.isName(i+1) {
		i += 2
	}
	if w.op(i, "(") {
		c := w.closeParen(i)
		if c < 0 {
			return sc.fail(i, "unbalanced parameters")
		}
		i = c + 1
	}
	if w.kw(i, "returns") || sc.oracle && w.kw(i, "return") {
		i = sc.skipType(i + 1)
	}
	for sc.why == "" {
		switch {
		case w.kw(i, "comment") && i+1 < sc.n() && w.toks[i+1].Kind == sqlread.String:
			i += 2
		case w.kw(i, "language") && w.kw(i+1, "sql"):
			i += 2
		case w.kw(i, "not") && w.kw(i+1, "deterministic"):
			i += 2
		case w.kw(i, "deterministic"):
			i++
		case w.kw(i, "contains") && w.kw(i+1, "sql"), w.kw(i, "no") && w.kw(i+1, "sql"):
			i += 2
		case (w.kw(i, "reads") || w.kw(i, "modifies")) && w.kw(i+1, "sql") && w.kw(i+2, "data"):
			i += 3
		case w.kw(i, "sql") && w.kw(i+1, "security"):
			i += 3
		case sc.oracle && (w.kw(i, "as") || w.kw(i, "is")):
			// ORACLE: AS|IS declarations BEGIN ... END.
			sc.pendingSection = true
			return i + 1
		default:
			return i
		}
	}
	return sc.n()
}

// skipType skips a data type (after RETURNS).
func (sc *blockScanner) skipType(i int) int {
	w := sc.w
	if !w.isName(i) {
		return sc.fail(i, "no return type")
	}
	i++
	for sc.why == "" {
		switch {
		case w.op(i, "("):
			c := w.closeParen(i)
			if c < 0 {
				return sc.fail(i, "unbalanced type")
			}
			i = c + 1
		case w.kw(i, "character") && w.kw(i+1, "set"):
			i += 3
		case w.kw(i, "charset") || w.kw(i, "collate"):
			i += 2
		case w.kw(i, "type") && w.kw(i+1, "of"):
			i += 3
			for w.op(i, ".") && w.isName(i+1) {
				i += 2
			}
		case w.op(i, "%") && w.isName(i+1):
			i += 2
		case w.kw(i, "unsigned") || w.kw(i, "signed") || w.kw(i, "zerofill") || w.kw(i, "binary") ||
			w.kw(i, "ascii") || w.kw(i, "unicode") || w.kw(i, "byte") || w.kw(i, "varying") ||
			w.kw(i, "precision") || w.kw(i, "varchar") || w.kw(i, "char"):
			i++
		default:
			return i
		}
	}
	return sc.n()
}
