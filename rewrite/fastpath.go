package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// The fast path decides, without parsing and without allocating, that a
// packet cannot matter to the proxy: it names no protected table, calls no
// lease function, has no identifier that is a catalog object's name, and
// no statement in it starts with a word that changes the session or needs
// a closer look. Anything else goes to the slow path, which may still
// relay it untouched.

// fastForward reports whether the packet can be relayed as it is.
func (e *Engine) fastForward(sql []byte, mode lexMode, unsafeCharset bool) bool {
	// 1. Raw scan, comments and strings included.
	if e.needles.find(sql) {
		return false
	}
	if unsafeCharset && hasTrailPair(sql) {
		return false
	}
	// 2. The first live token of every statement.
	lx := newLexer(sql, mode, nil)
	atStart := true
	cat := e.catSet.any
	high := cat && hasHigh(sql)
	// While the catalog cannot be read, any name followed by '(' may call
	// a function created since: the slow path judges it (stalecall.go).
	// Built-in names (IN, VALUES, COUNT, NOW ...) spelled as the server
	// takes them for built-ins stay on the fast path.
	stale := e.staleCalls(mode.server)
	fresh := e.fresh
	var fs freshScan
	var prev sqlread.Token
	for {
		t, ok := lx.Next()
		if !ok {
			break
		}
		if fresh {
			if t.Kind == sqlread.Word || t.Kind == sqlread.QuotedIdent || t.Kind == sqlread.Op && t.End-t.Start == 1 &&
				(sql[t.Start] == '(' || sql[t.Start] == ',' || sql[t.Start] == '.') {
				if !fs.ok(e, sql, t) {
					return false
				}
			} else {
				fs.state, fs.prevName = fsNone, false
			}
		}
		if cat && (t.Kind == sqlread.Word || t.Kind == sqlread.QuotedIdent) && e.catSet.identMatters(sql, t, high) {
			return false
		}
		if stale {
			if t.Kind == sqlread.Op && sql[t.Start] == '(' && (prev.Kind == sqlread.Word || prev.Kind == sqlread.QuotedIdent) &&
				(prev.Kind == sqlread.QuotedIdent || prev.AfterDot || !builtinCall(sql[prev.Start:prev.End], false, prev.End == t.Start)) {
				return false
			}
			prev = t
		}
		if atStart {
			if !fastLeading(sql, t) {
				return false
			}
			atStart = false
			if t.Kind == sqlread.Word && eqFold(sql[t.Start:t.End], "start") {
				// START TRANSACTION; START SLAVE and the like are refused.
				n, ok := lx.Next()
				if !ok || !(n.Kind == sqlread.Word && eqFold(sql[n.Start:n.End], "transaction")) {
					return false
				}
				continue
			}
			if t.Kind == sqlread.Word && eqFold(sql[t.Start:t.End], "begin") {
				// BEGIN and BEGIN WORK start a transaction; BEGIN NOT
				// ATOMIC (and, in Oracle mode, BEGIN ...) a compound
				// statement the slow path must see.
				n, ok := lx.Next()
				if ok && !(n.Kind == sqlread.Op && sql[n.Start] == ';') &&
					!(n.Kind == sqlread.Word && eqFold(sql[n.Start:n.End], "work")) {
					return false
				}
				if ok && n.Kind == sqlread.Op && sql[n.Start] == ';' {
					atStart = true
				}
			}
			continue
		}
		if t.Kind == sqlread.Op && t.End-t.Start == 1 && sql[t.Start] == ';' {
			atStart = true
			fs = freshScan{}
		}
	}
	// The server might read the text differently: let the slow path judge.
	return lx.Issue() == ""
}

// fastLeading reports whether a statement that starts with t can take the
// fast path (when it names nothing protected). Statements that change the
// session (USE, SET, PREPARE, EXECUTE, DEALLOCATE), DROP (DATABASE, PREPARE),
// CREATE and ALTER (stored programs may hide dynamic SQL), LOCK and FLUSH
// (the proxy tracks table locks), compound statements and anything unusual
// go to the slow path.
func fastLeading(sql []byte, t sqlread.Token) bool {
	switch t.Kind {
	case sqlread.Op:
		return sql[t.Start] == '('
	case sqlread.Word:
	default:
		return false
	}
	w := sql[t.Start:t.End]
	switch len(w) {
	case 2:
		return eqFold(w, "do")
	case 3:
		return eqFold(w, "get")
	case 4:
		return eqFold(w, "with") || eqFold(w, "show") || eqFold(w, "call") || eqFold(w, "desc") || eqFold(w, "kill") || eqFold(w, "help")
	case 5:
		return eqFold(w, "start") || eqFold(w, "begin") || eqFold(w, "check") || eqFold(w, "table")
	case 6:
		return eqFold(w, "select") || eqFold(w, "insert") || eqFold(w, "update") || eqFold(w, "delete") ||
			eqFold(w, "commit") || eqFold(w, "unlock") || eqFold(w, "values") || eqFold(w, "signal")
	case 7:
		return eqFold(w, "replace") || eqFold(w, "explain") || eqFold(w, "release") || eqFold(w, "analyze")
	case 8:
		return eqFold(w, "rollback") || eqFold(w, "describe") || eqFold(w, "optimize") || eqFold(w, "resignal") ||
			eqFold(w, "checksum")
	case 9:
		return eqFold(w, "savepoint")
	}
	return false
}

// hasTrailPair reports whether text holds a byte >= 0x80 directly followed
// by an ASCII byte in 0x40-0x7E that is not an identifier byte (@ [ \ ] ^ `
// { | } ~). In big5, cp932, gbk, sjis and gb18030 such a pair may be one
// character, so that, say, the backslash does not escape and the backquote
// does not quote. Without such a pair those character sets read the text
// exactly as UTF-8 does: quotes, semicolons, comment markers, line breaks
// and spaces are never the second byte of a character (all are < 0x40).
func hasTrailPair(text []byte) bool {
	for i := 0; i+1 < len(text); i++ {
		if text[i] >= 0x80 {
			switch text[i+1] {
			case '@', '[', '\\', ']', '^', '`', '{', '|', '}', '~':
				return true
			}
		}
	}
	return false
}
