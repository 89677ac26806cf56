package rewrite

// Shadow mode (fencing.mode: shadow) sends every statement unfenced and
// audits what enforcing mode would refuse. A statement's own fence keys
// must still not reach the server (general log, PROCESSLIST): a refused
// statement may hold a malformed fence comment, or a fence key where a
// fence comment does not belong (a comment in the middle, a line
// comment), and went as the client sent it. Shadow says what is sent
// instead; the proxy audits and sends it.

// Shadow returns the decision shadow mode acts on in place of d, this
// engine's decision on sql (a COM_QUERY text, or a COM_STMT_PREPARE one
// when prepare) under srv and sess. A Send or a Refuse becomes a Forward
// (d's statements kept, for the session's bookkeeping) whose SQL is the
// text with every plain comment that mentions a fence key treated as on a
// statement that writes nothing protected (stripKeyComments: a
// well-formed fence comment loses its fence keys and keeps its other keys
// byte for byte, any other such comment goes whole); SQL is nil when no
// comment mentions one, and the client's text goes byte for byte. A
// Forward or an Answer is d.
//
// When sql mentions a fence key and cannot be read with certainty under
// sess (a construct the lexer is unsure of, a character set that may hide
// quotes, a limit passed, an unknown sql_mode under which it reads
// differently), the decision is Refuse: the text may hold an owner token
// where the proxy cannot find it, so nothing is sent.
//
// Strings stay as written, fence keys in them included: they are data.
// The text of PREPARE name FROM 'literal' and of EXECUTE IMMEDIATE is
// read as a statement and its comments treated as above; one from an
// expression or a variable that mentions a fence key is refused.
func (e *Engine) Shadow(d Decision, sql []byte, srv Server, sess *Session, prepare bool) Decision {
	if d.Action != Send && d.Action != Refuse {
		return d
	}
	if !hasFenceKey(sql) {
		return Decision{Action: Forward, Stmts: d.Stmts}
	}
	r := e.bare.entry(sql, srv, sess, prepare)
	switch r.Action {
	case Forward:
		// No comment mentions a fence key (a column fence_token, a
		// string): nothing to take out.
		return Decision{Action: Forward, Stmts: d.Stmts}
	case Send:
		// Nothing is protected for the bare engine: its only edits take
		// fence keys out.
		return Decision{Action: Forward, Stmts: d.Stmts, SQL: r.SQL}
	}
	why := "it calls a lease function"
	if r.Action == Refuse {
		why = r.Refusal.Reason
	}
	table, would := "", "it would be sent unfenced"
	if d.Refusal != nil {
		table, would = d.Refusal.Table, "enforcing mode refuses it: "+d.Refusal.Reason
	}
	return Decision{Action: Refuse, Refusal: &Refusal{Table: table, Reason: "shadow mode runs this statement unfenced (" +
		would + "), but it mentions a fence key and fenceproxy cannot find every comment that holds one (" + why +
		"), so it was not sent: an owner token must not reach the server"}}
}
