package rewrite

import (
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/sqlread"
	"github.com/fenceproxy/fenceproxy/lease"
)

// A statement may carry its own fence, for connection pools and ORMs: a
// sqlcommenter comment (key='value' pairs, URL-encoded values, separated by
// commas) at the start or the end of the statement with the keys
// fence_lease, fence_owner and fence_token:
//
//	UPDATE jobs SET state = 'done' WHERE id = 7 /*fence_lease='invoice%3Aacme',fence_owner='a1b2',fence_token='42'*/
//
// The fence of that statement is then the comment's (Fence.Presented): the
// fence condition or guard compares the lease row with the comment's
// values as literals and neither reads nor changes the session's fence
// variables. The three keys are removed from the text the server receives
// (other keys, such as traceparent, stay byte for byte; a comment left
// with no key goes whole).
//
// Fail closed: on a statement that writes a protected table (or prepares,
// executes or calls something that may), a fence comment that is malformed
// or partial, two of them, or a fence key anywhere else in the statement
// (in a comment in the middle, a version comment, a string such as the
// text of PREPARE or EXECUTE IMMEDIATE, a statement inside a compound
// statement) is refused with an error that says what is wrong. Every other
// statement runs, and no fence key reaches the server in its comments: a
// well-formed fence comment has its fence keys removed, and any other
// plain comment that mentions a fence key (malformed, partial, a line
// comment) is removed whole, since the proxy cannot tell where a malformed
// owner value ends (stripKeyComments). Hints, executable comments and
// strings stay as written.

// stmtFenceKeys are the sqlcommenter keys of a statement's own fence.
var stmtFenceKeys = [3]string{"fence_lease", "fence_owner", "fence_token"}

// hasFenceKey reports whether b mentions a fence key, ASCII
// case-insensitively, other than as a user variable (@fence_owner,
// @`fence_owner`: the session fence, which keeps the fast path and the
// caches). Packets that do not take none of this file's paths.
func hasFenceKey(b []byte) bool {
	for i := 0; i+len("fence_lease") <= len(b); i++ {
		if b[i]|0x20 != 'f' {
			continue
		}
		if i > 0 && b[i-1] == '@' || i > 1 && b[i-2] == '@' && (b[i-1] == '`' || b[i-1] == '\'' || b[i-1] == '"') {
			continue
		}
		if fenceKeyAt(b, i) >= 0 {
			return true
		}
	}
	return false
}

// fenceKeyAt returns the index of the fence key spelled (in any case) at
// b[i:], or -1.
func fenceKeyAt(b []byte, i int) int {
	for k, key := range stmtFenceKeys {
		if i+len(key) <= len(b) && eqFold(b[i:i+len(key)], key) {
			return k
		}
	}
	return -1
}

// fenceComment is a fence comment found at the start or end of a
// statement.
type fenceComment struct {
	start, end int    // the whole comment, /* to */, in the packet
	repl       string // what the server receives instead ("": nothing)
	presented  lease.Presented
	malformed  string // why the comment cannot be applied; "" = it can
}

// findFenceComment looks for a fence comment in the statement's leading
// and trailing comments. It returns nil when there is none.
func (in *stmtIn) findFenceComment() *fenceComment {
	if len(in.toks) == 0 || in.pc.depth > 0 {
		return nil
	}
	src := in.pc.src
	var found []*fenceComment
	gaps := [][2]int{{in.start, in.toks[0].Start}}
	if last := in.toks[len(in.toks)-1].End; last <= in.end {
		gaps = append(gaps, [2]int{last, in.end})
	}
	for _, g := range gaps {
		for _, c := range plainComments(src, g[0], g[1]) {
			if !hasFenceKey(src[c[0]+2 : c[1]-2]) {
				continue
			}
			found = append(found, parseFenceComment(src, c[0], c[1]))
		}
	}
	switch len(found) {
	case 0:
		return nil
	case 1:
		return found[0]
	}
	return &fenceComment{start: -1, malformed: "it has two fence comments; put one, at its start or its end"}
}

// plainComments lists the plain block comments (/* ... */, not /*! /*M!
// /*+) in src[from:to], a stretch the lexer skipped (whitespace, comments
// and the markers of executable comments). A stretch holding anything
// else yields none.
func plainComments(src []byte, from, to int) [][2]int {
	var out [][2]int
	i := from
	for i < to {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			i++
		case c == '/' && i+1 < to && src[i+1] == '*':
			if i+2 < to && (src[i+2] == '!' || src[i+2] == '+' || src[i+2] == 'M' && i+3 < to && src[i+3] == '!') {
				return nil // an executable comment or a hint: not a fence comment's place
			}
			e := indexAt(src[:to], i+2, "*/")
			if e < 0 {
				return nil
			}
			out = append(out, [2]int{i, e + 2})
			i = e + 2
		case c == '#' || c == '-' && i+2 < to && src[i+1] == '-':
			e := indexAt(src[:to], i, "\n")
			if e < 0 {
				return out
			}
			i = e + 1
		default:
			return nil
		}
	}
	return out
}

func indexAt(b []byte, from int, s string) int {
	if from > len(b) {
		return -1
	}
	if j := strings.Index(string(b[from:]), s); j >= 0 {
		return from + j
	}
	return -1
}

// parseFenceComment reads the sqlcommenter comment src[start:end] (/* and
// */ included).
func parseFenceComment(src []byte, start, end int) *fenceComment {
	fc := &fenceComment{start: start, end: end}
	bad := func(why string) *fenceComment {
		fc.malformed = why
		return fc
	}
	body := string(src[start+2 : end-2])
	lead := len(body) - len(strings.TrimLeft(body, " \t\r\n"))
	trail := len(body) - len(strings.TrimRight(body, " \t\r\n"))
	if lead == len(body) {
		return bad("its fence comment is empty")
	}
	inner := body[lead : len(body)-trail]
	var kept []string
	var vals [3]string
	var have [3]bool
	for p := 0; p < len(inner); {
		// key='value'
		eq := strings.IndexByte(inner[p:], '=')
		if eq <= 0 {
			return bad("its fence comment is not in sqlcommenter form (key='value' pairs separated by commas)")
		}
		key := strings.TrimSpace(inner[p : p+eq])
		q := p + eq + 1
		for q < len(inner) && (inner[q] == ' ' || inner[q] == '\t') {
			q++
		}
		if q >= len(inner) || inner[q] != '\'' {
			return bad("its fence comment is not in sqlcommenter form (every value is quoted: key='value')")
		}
		v := q + 1
		closed := -1
		for j := v; j < len(inner); j++ {
			if inner[j] == '\\' {
				j++
				continue
			}
			if inner[j] == '\'' {
				closed = j
				break
			}
		}
		if closed < 0 {
			return bad("its fence comment has a value without its closing quote")
		}
		pair := inner[p : closed+1]
		next := closed + 1
		for next < len(inner) && (inner[next] == ' ' || inner[next] == '\t') {
			next++
		}
		if next < len(inner) {
			if inner[next] != ',' {
				return bad("its fence comment is not in sqlcommenter form (key='value' pairs separated by commas)")
			}
			next++
			for next < len(inner) && (inner[next] == ' ' || inner[next] == '\t') {
				next++
			}
			if next == len(inner) {
				return bad("its fence comment ends with a comma")
			}
		}
		p = next
		k := keyIndex(key)
		switch {
		case k >= 0:
			if have[k] {
				return bad("its fence comment has " + stmtFenceKeys[k] + " twice")
			}
			have[k], vals[k] = true, inner[v:closed]
		case mentionsFenceKey(key):
			return bad("its fence comment has a key that is a fence key spelled differently (" +
				"write fence_lease, fence_owner and fence_token, in lower case, unencoded)")
		default:
			kept = append(kept, pair)
		}
	}
	for k := range have {
		if !have[k] {
			return bad("its fence comment lacks " + stmtFenceKeys[k] + " (a statement's fence needs fence_lease, fence_owner and fence_token)")
		}
	}
	var dec [3]string
	for k, raw := range vals {
		d, why := urlDecode(raw)
		if why != "" {
			return bad("the value of " + stmtFenceKeys[k] + " in its fence comment " + why)
		}
		dec[k] = d
	}
	tok, why := parseFenceToken(dec[2])
	if why != "" {
		return bad("the value of fence_token in its fence comment " + why)
	}
	fc.presented = lease.Presented{Lease: dec[0], Owner: dec[1], Token: tok}
	if err := lease.ValidateName(fc.presented.Lease); err != nil {
		return bad("the value of fence_lease in its fence comment is not a lease name (" + nameProblem(err) + ")")
	}
	if err := lease.ValidateOwner(fc.presented.Owner); err != nil {
		return bad("the value of fence_owner in its fence comment is not an owner token (1 to 64 bytes)")
	}
	if len(kept) > 0 {
		fc.repl = "/*" + body[:lead] + strings.Join(kept, ",") + body[len(body)-trail:] + "*/"
	}
	return fc
}

// nameProblem is a lease name error without the name (it may be anything
// a client wrote).
func nameProblem(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "empty"):
		return "empty"
	case strings.Contains(s, "limit"):
		return "too long"
	case strings.Contains(s, "UTF-8"):
		return "not valid UTF-8"
	case strings.Contains(s, "space"):
		return "ends with a space"
	case strings.Contains(s, "control"):
		return "has a control character"
	}
	return "invalid"
}

func keyIndex(key string) int {
	for k, f := range stmtFenceKeys {
		if key == f {
			return k
		}
	}
	return -1
}

// mentionsFenceKey: the key is, or decodes to, a fence key in some other
// spelling (FENCE_OWNER, fence%5Fowner).
func mentionsFenceKey(key string) bool {
	if d, why := urlDecode(key); why == "" {
		key = d
	}
	return hasFenceKey([]byte(key))
}

// urlDecode decodes a fence value: %XX escapes; every other byte must be
// printable ASCII other than a quote or a backslash (a fence value is
// URL-encoded; sqlcommenter's backslash escape of a quote is for other
// keys). '+' is a plus sign, not a space.
func urlDecode(s string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", "has a % that does not start a %XX escape"
			}
			n, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(n))
			i += 2
		case c <= 0x20 || c >= 0x7f || c == '\'' || c == '\\' || c == '"' || c == '`':
			return "", "has a byte that must be URL-encoded"
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), ""
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// parseFenceToken reads a fence token: decimal digits, as fence_acquire
// returns it.
func parseFenceToken(s string) (uint64, string) {
	if s == "" || len(s) > 20 {
		return 0, "is not a fence token (decimal digits)"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "is not a fence token (decimal digits)"
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, "is not a fence token (too large)"
	}
	return n, ""
}

// trailingFence handles a fence comment after the packet's last ';'
// (`UPDATE ...; /*fence_...*/`), which belongs to no statement: refused
// when the statement before it is one a fence comment matters to (the
// comment's fence would silently not apply), else its fence keys leave the
// text (stripKeyComments). fl: the server's flavor.
func (pc *packetCtx) trailingFence(pos int, fl Flavor, out *restResult) *Refusal {
	if pc.depth > 0 || !hasFenceKey(pc.src[pos:]) {
		return nil
	}
	relevant := false
	if n := len(out.stmts); n > 0 {
		st := &out.stmts[n-1]
		relevant = st.Kind == Write || st.Kind == Execute || st.Kind == Call || st.Kind == Prepare && st.Fence != nil
	}
	if relevant && pc.e.hasTables() {
		return &Refusal{Reason: "a fence comment follows the statement's ';' and so belongs to no statement; " +
			"put it before the ';' (at the end of the statement) or at the statement's start"}
	}
	out.edits = stripKeyComments(pc.src, pos, len(pc.src), false, fl, out.edits)
	return nil
}

// strayFenceKey reports whether the statement src[from:to] mentions a fence
// key outside the fence comment skip (start, end; -1 for none): in a
// comment, or as key= in a string. A fence key as a name (a column
// fence_token, the variable @fence_owner) is SQL, not a fence.
func (in *stmtIn) strayFenceKey(from, to int, skip *fenceComment) bool {
	src := in.pc.src
	if to > len(src) {
		to = len(src)
	}
	for i := from; i < to; i++ {
		if src[i]|0x20 != 'f' || fenceKeyAt(src[:to], i) < 0 {
			continue
		}
		if skip != nil && skip.start >= 0 && i >= skip.start && i < skip.end {
			continue
		}
		t, inTok := in.tokenAt(i)
		if !inTok {
			return true // in a comment (or what the lexer skipped)
		}
		switch t.Kind {
		case sqlread.String, sqlread.NString:
			j := i + len("fence_lease")
			for j < t.End && (src[j] == ' ' || src[j] == '\t') {
				j++
			}
			if j < t.End && src[j] == '=' || j+2 < t.End && src[j] == '%' && src[j+1] == '3' && src[j+2]|0x20 == 'd' {
				return true
			}
		}
	}
	return false
}

// tokenAt finds the live token holding byte i.
func (in *stmtIn) tokenAt(i int) (sqlread.Token, bool) {
	lo, hi := 0, len(in.toks)
	for lo < hi {
		m := (lo + hi) / 2
		switch t := in.toks[m]; {
		case i < t.Start:
			hi = m
		case i >= t.End:
			lo = m + 1
		default:
			return t, true
		}
	}
	return sqlread.Token{}, false
}

// fenceRelevant: the statement writes a protected table, or prepares,
// executes or calls what may; a fence comment there must apply exactly,
// or the statement is refused.
func fenceRelevant(res *stmtRes) bool {
	switch res.stmt.Kind {
	case Write, Execute, Call:
		return true
	case Prepare:
		return res.stmt.Fence != nil
	}
	return res.endAt > 0 && res.matters
}

// applyStmtFence finishes the verdict on a statement of a packet that
// mentions a fence key: the fence comment fc (nil: none) either became the
// statement's fence (Fence.Presented, set by writeStmt) and leaves the
// text, or the statement is refused, or (a statement that writes nothing
// protected) every comment that mentions a fence key loses its keys, a
// malformed one whole (stripFenceComments). end is the statement's end as
// the server reads it.
func (in *stmtIn) applyStmtFence(res *stmtRes, fc *fenceComment, end int) {
	if res.refusal != nil || res.call != nil {
		return
	}
	e := in.pc.e
	relevant := e.hasTables() && fenceRelevant(res)
	table := ""
	if res.stmt.Fence != nil && len(res.stmt.Fence.Targets) > 0 {
		table = res.stmt.Fence.Targets[0].Schema + "." + res.stmt.Fence.Targets[0].Table
	}
	refuse := func(why string) {
		*res = in.refuse(table, why)
	}
	if fc != nil && fc.malformed != "" {
		if relevant {
			refuse("this statement's fence comment cannot be applied: " + fc.malformed +
				"; write /*fence_lease='...',fence_owner='...',fence_token='...'*/ with URL-encoded values")
			return
		}
		in.stripFenceComments(res, end)
		return
	}
	if !relevant {
		in.stripFenceComments(res, end)
		return
	}
	if relevant && in.strayFenceKey(in.start, end, fc) {
		refuse("a fence key (fence_lease, fence_owner, fence_token) appears in this statement outside a fence " +
			"comment at its start or end (in a comment in the middle, a string, or a statement inside it); " +
			"a statement's fence is one sqlcommenter comment at the start or end of the write itself")
		return
	}
	if fc == nil {
		return
	}
	if relevant {
		f := res.stmt.Fence
		switch {
		case res.stmt.Kind != Write || f == nil:
			refuse("a fence comment applies to one UPDATE, DELETE, INSERT or REPLACE (or the text of a prepared " +
				"statement), not to PREPARE, EXECUTE, CALL or a compound statement; put it on the write itself")
			return
		case f.Presented == nil || *f.Presented != fc.presented:
			refuse("fenceproxy could not apply this statement's fence comment to the write; it was not sent")
			return
		}
	}
	res.edits = append(res.edits, edit{pos: fc.start, end: fc.end, text: fc.repl, strip: true})
}

// stripFenceComments removes the fence keys from a statement that a fence
// comment does not apply to (a read, a write to an unprotected table), so
// that the owner token never reaches the server (general log,
// PROCESSLIST). Found by red team 3: SELECT /*fence...*/ 1 and SELECT 1
// /*fence...*/ /*fence...*/ went to the server with the owner in clear.
// Every comment the lexer skipped between, before or after the
// statement's tokens is looked at (stripKeyComments).
func (in *stmtIn) stripFenceComments(res *stmtRes, end int) {
	src := in.pc.src
	if end > len(src) {
		end = len(src)
	}
	toks := in.toks
	if end > in.end {
		// A compound statement or a stored program definition, which the
		// block structure ends past its first ';': what follows in.toks
		// is statements, strings among them, not a stretch the lexer
		// skipped (read as one, BEGIN NOT ATOMIC SELECT 1; SELECT '-- a';
		// END lost everything from the -- on).
		var issue string
		if toks, issue = in.lexTo(end); issue != "" && in.pc.e.mustRead() {
			res.refusal = &Refusal{Reason: "fenceproxy cannot be sure how the server reads this statement (" + issue +
				"), so it cannot take the fence keys out of its comments; write it without that construct"}
			return
		}
	}
	fl := in.st.mode.server.Flavor
	prev := in.start
	for i := 0; i <= len(toks); i++ {
		to, inner := end, i > 0 && i < len(toks)
		if i < len(toks) {
			to = toks[i].Start
		}
		if prev < to {
			res.edits = stripKeyComments(src, prev, to, inner, fl, res.edits)
		}
		if i < len(toks) {
			prev = toks[i].End
		}
	}
}

// lexTo lexes the packet from the statement's start up to end, ';' tokens
// included, and returns the first lexing issue before end.
func (in *stmtIn) lexTo(end int) ([]sqlread.Token, string) {
	lx := sqlread.NewLexer(in.pc.src, in.start, in.st.mode.lex(), nil)
	var toks []sqlread.Token
	for {
		t, ok := lx.Next()
		if !ok || t.Start >= end {
			break
		}
		toks = append(toks, t)
	}
	if lx.Issue() != "" && lx.IssuePos() < end {
		return toks, lx.Issue()
	}
	return toks, ""
}

// stripKeyComments appends to edits what takes the fence keys out of the
// plain comments of src[from:to], a stretch the lexer skipped; inner: the
// stretch lies between two tokens. A well-formed fence comment loses its
// three keys (the comment goes whole when no other key is left). Any other
// plain comment that mentions a fence key goes whole: one that does not
// parse (a missing quote, a partial comment, a bad escape or token, a key
// twice, a line comment) holds an owner token whose end the proxy cannot
// tell, and the statement still runs (only protected writes are refused
// for it). A comment removed whole between two tokens leaves one space, so
// that they stay apart; an unterminated one leaves its "/*", so that the
// server still reports the syntax error it would have (measured on
// MariaDB 10.11: SELECT 1 /*fence_owner='x' and SELECT 1 /* both fail
// with error 1064). Optimizer hints and executable comments stay byte for
// byte, and so does anything in a string (data).
func stripKeyComments(src []byte, from, to int, inner bool, fl Flavor, edits []edit) []edit {
	for _, c := range gapComments(src, from, to, fl) {
		if !hasFenceKey(src[c.start:c.end]) {
			continue
		}
		text := ""
		switch c.kind {
		case blockComment:
			if fc := parseFenceComment(src, c.start, c.end); fc.malformed == "" {
				text = fc.repl
			}
			if text == "" && inner {
				text = " "
			}
		case openComment:
			text = "/*"
		case lineComment:
			// Its newline stays and keeps the tokens around it apart.
		}
		edits = append(edits, edit{pos: c.start, end: c.end, text: text, strip: true})
	}
	return edits
}

// Kinds of skippedComment.
const (
	blockComment = iota // a plain /* ... */
	openComment         // a plain /* without its */: it runs to the end of the stretch
	lineComment         // # or -- up to its newline, the newline excluded
)

// skippedComment is a plain comment in a stretch the lexer skipped.
type skippedComment struct {
	start, end int
	kind       int
}

// gapComments lists the plain comments in src[from:to], a stretch the
// lexer skipped (whitespace, comments, the markers of executable
// comments), reading it as the lexer does (sqlread's skip): optimizer
// hints /*+ and executable comments /*! (/*M! on MariaDB, /*T! on TiDB)
// are passed over, a dead version comment with the one level of nested
// comment it may hold; a live one's content is tokens and so ends the
// stretch, and its closing */ is passed over. Unlike plainComments, a hint
// or an executable comment does not hide the comments after it.
func gapComments(src []byte, from, to int, fl Flavor) []skippedComment {
	var out []skippedComment
	i := from
	for i < to {
		c := src[i]
		switch {
		case c == '#' || c == '-' && i+1 < to && src[i+1] == '-':
			e := indexAt(src[:to], i, "\n")
			if e < 0 {
				e = to
			}
			out = append(out, skippedComment{start: i, end: e, kind: lineComment})
			i = e
		case c == '/' && i+1 < to && src[i+1] == '*':
			p := i + 2
			bang := p < to && src[p] == '!' || p+1 < to && src[p] == 'M' && src[p+1] == '!' && fl == MariaDB
			if bang || p < to && src[p] == '+' || p+1 < to && src[p] == 'T' && src[p+1] == '!' && fl == TiDB {
				i = skipExec(src, p, to, bang)
				continue
			}
			e := indexAt(src[:to], p, "*/")
			if e < 0 {
				out = append(out, skippedComment{start: i, end: to, kind: openComment})
				return out
			}
			out = append(out, skippedComment{start: i, end: e + 2, kind: blockComment})
			i = e + 2
		case c == '*' && i+1 < to && src[i+1] == '/':
			i += 2 // the end of a live executable comment
		default:
			i++ // whitespace
		}
	}
	return out
}

// skipExec returns the end of a hint or an executable comment whose
// content starts at p: past its */, with one level of nested /* */ when
// nest (a dead version comment may hold one), or to.
func skipExec(src []byte, p, to int, nest bool) int {
	depth := 0
	for p < to {
		switch {
		case nest && depth == 0 && src[p] == '/' && p+1 < to && src[p+1] == '*':
			depth, p = 1, p+2
		case src[p] == '*' && p+1 < to && src[p+1] == '/':
			p += 2
			if depth == 0 {
				return p
			}
			depth = 0
		default:
			p++
		}
	}
	return to
}
