package rewrite

// Compound statements (MariaDB's BEGIN NOT ATOMIC ... END, Oracle-mode
// blocks) and stored program definitions (CREATE PROCEDURE / FUNCTION /
// TRIGGER / EVENT, ALTER EVENT ... DO) hold statements of their own,
// separated by ';' that the server reads as part of the program. fenceproxy
// does not parse programs; it lets one through only when its text cannot
// contain anything that matters: no protected table name, no lease
// function, no dynamic SQL, nothing that changes the schema, sql_mode or
// character set, no DROP DATABASE.

// programWords, as whole words, make a program's text suspicious.
var programWords = []string{"use", "prepare", "immediate", "names", "charset", "character", "database", "schema"}

// isCompound: a statement that opens a compound statement.
func (in *stmtIn) isCompound() bool {
	switch {
	case in.kw(0, "begin"):
		// BEGIN and BEGIN WORK start a transaction.
		return !(len(in.toks) == 1 || len(in.toks) == 2 && in.kw(1, "work"))
	case in.kw(0, "declare"), in.kw(0, "if"), in.kw(0, "while"), in.kw(0, "loop"),
		in.kw(0, "repeat"), in.kw(0, "for"), in.kw(0, "case"):
		return true
	case (in.toks[0].kind == tkWord || in.toks[0].kind == tkQuotedIdent) && in.op(1, ":"):
		return true // a label
	}
	return false
}

// isStoredProgram: CREATE or ALTER of a procedure, function, trigger,
// event or package.
func (in *stmtIn) isStoredProgram() bool {
	if !in.kw(0, "create") && !in.kw(0, "alter") {
		return false
	}
	for i := 1; i < len(in.toks) && i < 24; i++ {
		if in.kw(i, "procedure") || in.kw(i, "function") || in.kw(i, "trigger") || in.kw(i, "event") ||
			in.kw(i, "package") {
			return true
		}
		if in.op(i, "(") && !in.kw(i-1, "current_user") {
			return false
		}
	}
	return false
}

// programBody takes the rest of the packet as one program.
func (in *stmtIn) programBody(what string) stmtRes {
	e := in.pc.e
	rest := in.pc.src[in.start:]
	if e.hasTables() {
		if t := mentionsTable(e, rest); t != "" {
			return in.refuse(t, what+" mentions the protected table; fenceproxy cannot fence the statements inside it. "+
				"Run them as separate statements")
		}
		if e.needles.find(rest) {
			return in.refuse("", what+" mentions a lease function, sql_mode or character_set_client; "+
				"fenceproxy cannot check what it does. Run its statements one by one")
		}
		// A program that sets the fence variables could run inside a
		// protected write (a stored function in its WHERE) and move the
		// fence. Programs never take the fast path, so configured names
		// need no needle of their own (a short one would slow every
		// statement down).
		v := e.pol.Vars
		for _, name := range []string{v.Lease, v.Owner, v.Token} {
			if name != "" && containsFold(rest, lowerASCII(name)) {
				return in.refuse("", what+" mentions the fence variable @"+name+"; fenceproxy cannot check what it "+
					"does with it. Run its statements one by one")
			}
		}
		for _, w := range programWords {
			if containsWordFold(rest, w) {
				return in.refuse("", what+" contains "+upperASCII(w)+"; fenceproxy cannot check what it does "+
					"(dynamic SQL, schema, sql_mode or character set changes). Run its statements one by one")
			}
		}
	}
	return stmtRes{stmt: Stmt{Kind: Other}, rest: true}
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
