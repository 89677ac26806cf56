package rewrite

import "github.com/fenceproxy/fenceproxy/internal/sqlread"

// WarningsQuery is a statement the proxy may answer itself from the
// warnings it kept of the client's last statement (the server's list then
// holds those of the proxy's own statements).
type WarningsQuery uint8

const (
	NotWarnings   WarningsQuery = iota
	ShowWarnings                // SHOW WARNINGS
	CountWarnings               // SHOW COUNT(*) WARNINGS
)

// ReadWarningsQuery reads whether sql is exactly one SHOW WARNINGS or SHOW
// COUNT(*) WARNINGS, as the server reads it: any case, comments and
// executable comments anywhere, trailing ';'. Other forms (LIMIT, more
// statements, a text the server may read otherwise) go to the server.
// Its words hold no quote, so the session's sql_mode does not change the
// answer (a text it would change is no such statement under either
// reading).
func ReadWarningsQuery(sql []byte, srv Server, sess *Session) WarningsQuery {
	var m lexMode
	m.server = srv
	if sess != nil {
		m.ansiQuotes, m.noBackslash = sess.ANSIQuotes == On, sess.NoBackslashEscapes == On
	}
	lx := newLexer(sql, m, nil)
	var toks [7]sqlread.Token
	n := 0
	for {
		t, ok := lx.Next()
		if !ok {
			break
		}
		if t.IsOp(sql, ';') {
			// Only trailing ones: the server strips them.
			for {
				t, ok := lx.Next()
				if !ok {
					break
				}
				if !t.IsOp(sql, ';') {
					return NotWarnings
				}
			}
			break
		}
		if n == len(toks) {
			return NotWarnings
		}
		toks[n] = t
		n++
	}
	if lx.Issue() != "" {
		return NotWarnings
	}
	word := func(i int, w string) bool {
		return toks[i].Kind == sqlread.Word && !toks[i].AfterDot && eqFold(sql[toks[i].Start:toks[i].End], w)
	}
	switch {
	case n == 2 && word(0, "show") && word(1, "warnings"):
		return ShowWarnings
	case n == 6 && word(0, "show") && word(1, "count") && toks[2].IsOp(sql, '(') && toks[3].IsOp(sql, '*') &&
		toks[4].IsOp(sql, ')') && word(5, "warnings") && toks[1].End == toks[2].Start:
		// COUNT is a keyword only directly before '(' (without
		// IGNORE_SPACE): "COUNT (*)" is a syntax error.
		return CountWarnings
	}
	return NotWarnings
}
